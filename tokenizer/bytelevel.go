package tokenizer

import "unicode/utf8"

// byteLevel holds GPT-2's bytes_to_unicode table: every byte is shown as a
// printable rune so that a byte-level vocabulary can be stored as text.
// Printable Latin-1 bytes map to themselves; the other 68 bytes map, in
// order, to U+0100 and up.
type byteLevel struct {
	toRune   [256]rune
	toString [256]string
	fromRune map[rune]byte
}

// newByteLevel builds the table; it is pure data, built once per Tokenizer.
func newByteLevel() *byteLevel {
	bl := &byteLevel{fromRune: make(map[rune]byte, 256)}
	n := 0
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		r := rune(b)
		if !printable {
			r = rune(256 + n)
			n++
		}
		bl.toRune[b] = r
		bl.toString[b] = string(r)
		bl.fromRune[r] = byte(b)
	}
	return bl
}

// unmap turns a byte-level token back into raw bytes. ok is false when a
// rune of tok is outside the table; HF's ByteLevel decoder then keeps the
// token's own UTF-8 bytes, and so do we.
func (bl *byteLevel) unmap(tok string) (raw []byte, ok bool) {
	raw = make([]byte, 0, len(tok))
	for _, r := range tok {
		b, found := bl.fromRune[r]
		if !found {
			return nil, false
		}
		raw = append(raw, b)
	}
	return raw, true
}

// mapString returns the byte-level spelling of raw bytes s.
func (bl *byteLevel) mapString(s string) string {
	buf := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		buf = utf8.AppendRune(buf, bl.toRune[s[i]])
	}
	return string(buf)
}

// appendLossy appends src to dst as valid UTF-8, replacing each maximal
// ill-formed subsequence by one U+FFFD (Unicode 15 §3.9 "substitution of
// maximal subparts", what Rust's String::from_utf8_lossy and Python's
// errors="replace" do; Go's strings.ToValidUTF8 differs).
//
// When final is false a trailing incomplete-but-valid prefix of a multi-byte
// sequence is not consumed: consumed tells how many bytes of src were used,
// so a streaming decoder can keep the rest for the next token.
func appendLossy(dst, src []byte, final bool) (out []byte, consumed int) {
	i := 0
	for i < len(src) {
		c := src[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		need, lo, hi := seqShape(c)
		if need == 0 { // not a lead byte
			dst = append(dst, "\uFFFD"...)
			i++
			continue
		}
		k := 1 // bytes of the maximal valid prefix
		for k < need && i+k < len(src) {
			b := src[i+k]
			if k == 1 {
				if b < lo || b > hi {
					break
				}
			} else if b < 0x80 || b > 0xBF {
				break
			}
			k++
		}
		switch {
		case k == need:
			dst = append(dst, src[i:i+k]...)
		case i+k == len(src) && !final:
			return dst, i
		default:
			dst = append(dst, "\uFFFD"...)
		}
		i += k
	}
	return dst, i
}

// seqShape gives the length of the UTF-8 sequence a lead byte starts and the
// allowed range of its second byte (which excludes overlongs, surrogates and
// code points above U+10FFFF); need is 0 for bytes that cannot lead.
func seqShape(c byte) (need int, lo, hi byte) {
	switch {
	case c >= 0xC2 && c <= 0xDF:
		return 2, 0x80, 0xBF
	case c == 0xE0:
		return 3, 0xA0, 0xBF
	case c == 0xED:
		return 3, 0x80, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		return 3, 0x80, 0xBF
	case c == 0xF0:
		return 4, 0x90, 0xBF
	case c >= 0xF1 && c <= 0xF3:
		return 4, 0x80, 0xBF
	case c == 0xF4:
		return 4, 0x80, 0x8F
	}
	return 0, 0, 0
}
