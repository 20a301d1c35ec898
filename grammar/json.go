// Package grammar constrains generation to a formal language. JSON is a
// byte-level pushdown automaton over RFC 8259 that accepts exactly the
// prefixes of JSON texts; Vocab and Constraint turn it into a mask over a
// tokenizer's vocabulary, so that every completion of a json_object request
// is a prefix of a JSON object, and once the object is complete only an end
// token may follow.
package grammar

// mode is what the automaton expects next.
type mode uint8

const (
	mStart      mode = iota // before the top-level value
	mValue                  // a value (after '[', ',' in an array, ':')
	mKeyOrEnd               // after '{': a key or '}'
	mKey                    // after ',' in an object: a key
	mColon                  // after a key
	mCommaOrEnd             // after a value inside a container
	mValueOrEnd             // after '[': a value or ']'
	mString                 // inside a string
	mEscape                 // after '\' in a string
	mUnicode                // in the hex digits of \uXXXX
	mNumber                 // inside a number (num says where)
	mLiteral                // inside true, false or null
	mDone                   // the top-level value is complete
)

// Number positions: after '-', after a leading 0, in the integer digits,
// after '.', in the fraction, after 'e', after its sign, in the exponent.
const (
	nMinus uint8 = iota
	nZero
	nInt
	nDot
	nFrac
	nE
	nESign
	nExp
)

// maxWhitespace bounds a run of insignificant whitespace, which may also
// hold only one line break, so that a model cannot pad forever between
// tokens (pretty-printed JSON still fits: a line break and indentation).
const maxWhitespace = 8

// maxNumberBytes bounds a number's length: more digits than a float64 or
// an int64 can hold are padding a model could repeat forever.
const maxNumberBytes = 24

// JSON is the automaton's state. The zero value expects any JSON text;
// with ObjectOnly, an object that starts at once (no leading whitespace,
// which a sampler would otherwise pad with).
type JSON struct {
	ObjectOnly bool
	stack      []byte // open containers: '{' or '['
	mode       mode
	key        bool   // the string being read is an object key
	num        uint8  // position in a number
	lit        string // the rest of a literal
	hex        uint8  // hex digits left in \uXXXX
	ws         uint8  // whitespace bytes in the current run
	nl         bool   // the run holds a line break
	numLen     uint8  // bytes of the current number
}

// Clone returns an independent copy.
func (j *JSON) Clone() JSON {
	c := *j
	c.stack = append([]byte(nil), j.stack...)
	return c
}

// Complete reports whether a whole JSON text has been read.
func (j *JSON) Complete() bool {
	return j.mode == mDone || (j.mode == mNumber && len(j.stack) == 0 && numberEnds(j.num))
}

func numberEnds(n uint8) bool { return n == nZero || n == nInt || n == nFrac || n == nExp }

func isWS(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// Feed advances by one byte and reports whether the bytes so far are still
// a prefix of a JSON text; on false the state is unusable (feed a clone).
func (j *JSON) Feed(b byte) bool {
	switch j.mode {
	case mString:
		switch {
		case b == '"':
			j.ws, j.nl = 0, false
			if j.key {
				j.mode = mColon
			} else {
				j.afterValue()
			}
		case b == '\\':
			j.mode = mEscape
		case b < 0x20:
			return false
		}
		return true
	case mEscape:
		switch b {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			j.mode = mString
		case 'u':
			j.mode, j.hex = mUnicode, 4
		default:
			return false
		}
		return true
	case mUnicode:
		if !isHex(b) {
			return false
		}
		if j.hex--; j.hex == 0 {
			j.mode = mString
		}
		return true
	case mLiteral:
		if b != j.lit[0] {
			return false
		}
		if j.lit = j.lit[1:]; j.lit == "" {
			j.afterValue()
		}
		return true
	case mNumber:
		if j.number(b) {
			j.numLen++
			return j.numLen <= maxNumberBytes
		}
		if !numberEnds(j.num) {
			return false
		}
		j.afterValue() // the byte ends the number and belongs to what follows
		return j.Feed(b)
	}
	if isWS(b) {
		if j.ws++; j.ws > maxWhitespace || (j.mode == mStart && j.ObjectOnly) {
			return false
		}
		if b == '\n' || b == '\r' {
			if j.nl {
				return false // one line break a run: indentation, not padding
			}
			j.nl = true
		}
		return true
	}
	j.ws, j.nl = 0, false
	switch j.mode {
	case mStart, mValue, mValueOrEnd:
		if j.mode == mValueOrEnd && b == ']' {
			return j.close('[')
		}
		if j.mode == mStart && j.ObjectOnly && b != '{' {
			return false
		}
		return j.value(b)
	case mKeyOrEnd, mKey:
		switch {
		case b == '"':
			j.mode, j.key = mString, true
			return true
		case b == '}' && j.mode == mKeyOrEnd:
			return j.close('{')
		}
		return false
	case mColon:
		if b != ':' {
			return false
		}
		j.mode = mValue
		return true
	case mCommaOrEnd:
		top := j.stack[len(j.stack)-1]
		switch {
		case b == ',' && top == '{':
			j.mode = mKey
		case b == ',':
			j.mode = mValue
		case b == '}':
			return j.close('{')
		case b == ']':
			return j.close('[')
		default:
			return false
		}
		return true
	}
	return false // mDone: nothing but whitespace
}

// value starts a value with b.
func (j *JSON) value(b byte) bool {
	switch {
	case b == '{':
		j.stack = append(j.stack, '{')
		j.mode = mKeyOrEnd
	case b == '[':
		j.stack = append(j.stack, '[')
		j.mode = mValueOrEnd
	case b == '"':
		j.mode, j.key = mString, false
	case b == '-':
		j.mode, j.num, j.numLen = mNumber, nMinus, 1
	case b == '0':
		j.mode, j.num, j.numLen = mNumber, nZero, 1
	case b >= '1' && b <= '9':
		j.mode, j.num, j.numLen = mNumber, nInt, 1
	case b == 't':
		j.mode, j.lit = mLiteral, "rue"
	case b == 'f':
		j.mode, j.lit = mLiteral, "alse"
	case b == 'n':
		j.mode, j.lit = mLiteral, "ull"
	default:
		return false
	}
	return true
}

// number advances a number by b, or reports false if b is not part of it.
func (j *JSON) number(b byte) bool {
	digit := b >= '0' && b <= '9'
	switch j.num {
	case nMinus:
		switch {
		case b == '0':
			j.num = nZero
		case digit:
			j.num = nInt
		default:
			return false
		}
	case nZero, nInt:
		switch {
		case digit && j.num == nInt:
		case b == '.':
			j.num = nDot
		case b == 'e' || b == 'E':
			j.num = nE
		default:
			return false
		}
	case nDot, nFrac:
		switch {
		case digit:
			j.num = nFrac
		case (b == 'e' || b == 'E') && j.num == nFrac:
			j.num = nE
		default:
			return false
		}
	case nE:
		switch {
		case b == '+' || b == '-':
			j.num = nESign
		case digit:
			j.num = nExp
		default:
			return false
		}
	case nESign, nExp:
		if !digit {
			return false
		}
		j.num = nExp
	}
	return true
}

// close ends the innermost container, which must be open.
func (j *JSON) close(open byte) bool {
	if len(j.stack) == 0 || j.stack[len(j.stack)-1] != open {
		return false
	}
	j.stack = j.stack[:len(j.stack)-1]
	j.afterValue()
	return true
}

// afterValue moves past a finished value.
func (j *JSON) afterValue() {
	if len(j.stack) == 0 {
		j.mode = mDone
		return
	}
	j.mode = mCommaOrEnd
}

func isHex(b byte) bool {
	return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F')
}
