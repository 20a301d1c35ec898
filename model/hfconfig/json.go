package hfconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// object is one JSON object of a config.json, read field by field. Getters
// take the field's accepted spellings (the first one present wins) and a
// default for when none is present; JSON null counts as absent, as it does for
// transformers. The first type error is kept in err and later getters return
// their defaults, so parsing code reads straight through and checks err once.
type object struct {
	path string // "" for the top level, "text_config." for a nested object
	m    map[string]json.RawMessage
	err  *error // shared by an object and the objects nested in it
}

func newObject(data []byte) (*object, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, jsonError(err)
	}
	if m == nil {
		return nil, fmt.Errorf("config is not a JSON object")
	}
	var err error
	return &object{m: m, err: &err}, nil
}

func jsonError(err error) error {
	if se, ok := err.(*json.SyntaxError); ok {
		return fmt.Errorf("invalid JSON at byte %d: %v", se.Offset, se)
	}
	if te, ok := err.(*json.UnmarshalTypeError); ok && te.Field == "" {
		return fmt.Errorf("config is not a JSON object (found %s)", te.Value)
	}
	return fmt.Errorf("invalid JSON: %v", err)
}

func (o *object) fail(key, format string, args ...any) {
	if *o.err == nil {
		*o.err = fmt.Errorf("%s%s: %s", o.path, key, fmt.Sprintf(format, args...))
	}
}

// lookup returns the first of keys that is present and not null.
func (o *object) lookup(keys ...string) (string, json.RawMessage, bool) {
	if o == nil {
		return "", nil, false
	}
	for _, k := range keys {
		if v, ok := o.m[k]; ok && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return k, v, true
		}
	}
	return "", nil, false
}

// isNull reports whether key is present with the value null.
func (o *object) isNull(key string) bool {
	if o == nil {
		return false
	}
	v, ok := o.m[key]
	return ok && bytes.Equal(bytes.TrimSpace(v), []byte("null"))
}

func (o *object) has(keys ...string) bool {
	_, _, ok := o.lookup(keys...)
	return ok
}

// maxInt bounds every integer field: sizes beyond int32 are not plausible,
// and the bound keeps products of two fields far from overflowing int.
const maxInt = math.MaxInt32

func (o *object) int(def int, keys ...string) int {
	k, v, ok := o.lookup(keys...)
	if !ok {
		return def
	}
	n, err := parseInt(v)
	if err != nil {
		o.fail(k, "%v", err)
		return def
	}
	return n
}

func parseInt(v json.RawMessage) (int, error) {
	s := string(bytes.TrimSpace(v))
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		if i > maxInt || i < -maxInt {
			return 0, fmt.Errorf("%d is out of range", i)
		}
		return int(i), nil
	}
	// transformers accepts 4.0 where it expects 4; so do we, but not 4.5.
	var f float64
	if err := json.Unmarshal(v, &f); err != nil {
		return 0, fmt.Errorf("want an integer, got %s", s)
	}
	if f != math.Trunc(f) || math.Abs(f) > maxInt {
		return 0, fmt.Errorf("want an integer, got %s", s)
	}
	return int(f), nil
}

func (o *object) float(def float64, keys ...string) float64 {
	k, v, ok := o.lookup(keys...)
	if !ok {
		return def
	}
	f, err := parseFloat(v)
	if err != nil {
		o.fail(k, "%v", err)
		return def
	}
	return f
}

// parseFloat reads a JSON number or transformers' encoding of the values JSON
// cannot hold: {"__float__": "Infinity" | "-Infinity" | "NaN"}.
func parseFloat(v json.RawMessage) (float64, error) {
	v = bytes.TrimSpace(v)
	if len(v) > 0 && v[0] == '{' {
		var tagged map[string]string
		if err := json.Unmarshal(v, &tagged); err == nil && len(tagged) == 1 {
			switch tagged["__float__"] {
			case "Infinity", "inf":
				return math.Inf(1), nil
			case "-Infinity", "-inf":
				return math.Inf(-1), nil
			case "NaN", "nan":
				return math.NaN(), nil
			}
		}
		return 0, fmt.Errorf("want a number, got %s", v)
	}
	s := string(v)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !isRangeError(err) { // 1e999 is +Inf to Python too
		return 0, fmt.Errorf("want a number, got %s", s)
	}
	if s == "" || s[0] == '"' {
		return 0, fmt.Errorf("want a number, got %s", s)
	}
	return f, nil
}

func isRangeError(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}

func (o *object) bool(def bool, keys ...string) bool {
	k, v, ok := o.lookup(keys...)
	if !ok {
		return def
	}
	var b bool
	if err := json.Unmarshal(v, &b); err != nil {
		o.fail(k, "want true or false, got %s", v)
		return def
	}
	return b
}

func (o *object) str(def string, keys ...string) string {
	k, v, ok := o.lookup(keys...)
	if !ok {
		return def
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		o.fail(k, "want a string, got %s", v)
		return def
	}
	return s
}

func (o *object) strs(keys ...string) []string {
	k, v, ok := o.lookup(keys...)
	if !ok {
		return nil
	}
	var s []string
	if err := json.Unmarshal(v, &s); err != nil {
		o.fail(k, "want a list of strings, got %s", v)
		return nil
	}
	return s
}

func (o *object) ints(keys ...string) []int {
	k, v, ok := o.lookup(keys...)
	if !ok {
		return nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(v, &raw); err != nil {
		// A single integer where a list is allowed (eos_token_id: 2).
		if n, err := parseInt(v); err == nil {
			return []int{n}
		}
		o.fail(k, "want a list of integers, got %s", v)
		return nil
	}
	out := make([]int, len(raw))
	for i, r := range raw {
		n, err := parseInt(r)
		if err != nil {
			o.fail(fmt.Sprintf("%s[%d]", k, i), "%v", err)
			return nil
		}
		out[i] = n
	}
	return out
}

func (o *object) floats(keys ...string) []float64 {
	k, v, ok := o.lookup(keys...)
	if !ok {
		return nil
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(v, &raw); err != nil {
		o.fail(k, "want a list of numbers, got %s", v)
		return nil
	}
	out := make([]float64, len(raw))
	for i, r := range raw {
		f, err := parseFloat(r)
		if err != nil {
			o.fail(fmt.Sprintf("%s[%d]", k, i), "%v", err)
			return nil
		}
		out[i] = f
	}
	return out
}

// object returns the nested object under the first of keys present, or nil
// (whose getters all return defaults) if none is.
func (o *object) object(keys ...string) *object {
	k, v, ok := o.lookup(keys...)
	if !ok {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(v, &m); err != nil {
		o.fail(k, "want an object, got %s", v)
		return nil
	}
	return &object{path: o.path + k + ".", m: m, err: o.err}
}

// replaceNonFinite rewrites the bare NaN, Infinity and -Infinity that Python's
// json module writes (and older transformers saved, e.g. in time_step_limit)
// into the {"__float__": ...} form, so that a standard JSON decoder accepts
// them. Text inside strings is left alone.
func replaceNonFinite(data []byte) []byte {
	var out []byte // allocated on the first replacement only
	last := 0
	inString, escaped := false, false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		if c == '"' {
			inString = true
			continue
		}
		var word, tag string
		switch {
		case bytes.HasPrefix(data[i:], []byte("-Infinity")):
			word, tag = "-Infinity", "-Infinity"
		case bytes.HasPrefix(data[i:], []byte("Infinity")):
			word, tag = "Infinity", "Infinity"
		case bytes.HasPrefix(data[i:], []byte("NaN")):
			word, tag = "NaN", "NaN"
		default:
			continue
		}
		out = append(out, data[last:i]...)
		out = append(out, `{"__float__":"`+tag+`"}`...)
		i += len(word) - 1
		last = i + 1
	}
	if out == nil {
		return data
	}
	return append(out, data[last:]...)
}

// quoteList formats names for error messages: "a", "b", "c".
func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}
