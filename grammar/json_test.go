package grammar

import (
	"encoding/json"
	"strings"
	"testing"
)

// feed runs s through a fresh automaton: whether every byte was taken and
// whether the text is complete.
func feed(s string, objectOnly bool) (bool, bool) {
	j := JSON{ObjectOnly: objectOnly}
	for i := range len(s) {
		if !j.Feed(s[i]) {
			return false, false
		}
	}
	return true, j.Complete()
}

func TestJSON(t *testing.T) {
	for _, tt := range []struct {
		in               string
		prefix, complete bool
	}{
		{`{}`, true, true},
		{`{"a": [1, -2.5e+3, 0, true, false, null, "x\\n\u00e9\"", {"b": {}}]} `, true, true},
		{`{"a":`, true, false},
		{`{"a":1`, true, false},
		{`{"a":1,`, true, false},
		{`{"a":1,}`, false, false},
		{`{"a" 1}`, false, false},
		{`{1:2}`, false, false},
		{`{"a":01}`, false, false},
		{`{"a":1.}`, false, false},
		{`{"a":-}`, false, false},
		{`{"a":tru}`, false, false},
		{`{"a":"\x"}`, false, false},
		{`{"a":"\u12g4"}`, false, false},
		{"{\"a\":\"\x01\"}", false, false},
		{`{"a":[1,2]]`, false, false},
		{`{}{}`, false, false},
		{` {}`, false, false},                                            // an object starts at once
		{`{"a":"` + strings.Repeat(" ", 100) + `"}`, true, true},         // spaces inside strings are text
		{`{` + strings.Repeat(" ", maxWhitespace+1) + `}`, false, false}, // a whitespace run is bounded
	} {
		prefix, complete := feed(tt.in, true)
		if prefix != tt.prefix || complete != tt.complete {
			t.Errorf("%q: prefix %v complete %v, want %v %v", tt.in, prefix, complete, tt.prefix, tt.complete)
		}
	}
	if ok, _ := feed(`[1]`, true); ok {
		t.Error("an array accepted where an object is required")
	}
	if ok, complete := feed(`12`, false); !ok || !complete {
		t.Error("a top-level number is a complete JSON text")
	}
}

// FuzzJSON compares the automaton with encoding/json: a text it takes whole
// and calls complete is valid JSON; a valid JSON text (without long
// whitespace runs) is taken whole and complete, and so is each of its
// prefixes taken.
func FuzzJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":null}]}`, `[1, -0.5e-7]`, `"\ud83d\ude00"`, `true`, `{"x":"y"`, `01`, `{,}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.Contains(s, strings.Repeat(" ", maxWhitespace+1)) || strings.ContainsAny(s, "\t\r\n") || longNumber(s) {
			// (runs of more than one line break are refused on purpose)
			return
		}
		ok, complete := feed(s, false)
		valid := json.Valid([]byte(s))
		if ok && complete && !valid {
			t.Fatalf("%q: the automaton calls it complete; encoding/json says invalid", s)
		}
		if valid && !(ok && complete) {
			t.Fatalf("%q: valid JSON, the automaton took it %v, complete %v", s, ok, complete)
		}
		if valid {
			for i := range len(s) {
				if ok, _ := feed(s[:i], false); !ok {
					t.Fatalf("%q: the prefix %q was refused", s, s[:i])
				}
			}
		}
	})
}

// TestConstraint masks a toy vocabulary step by step: the tokens allowed
// are exactly those that keep the text a prefix of an object, and once it
// is complete only the end token.
func TestConstraint(t *testing.T) {
	toks := []string{"{", "}", `"a"`, ":", "1", "x", `{"`, `":`, " ", "", "<eos>"}
	const eos = 10
	v := NewVocab(len(toks), func(id int) ([]byte, bool) {
		if id == eos {
			return nil, false
		}
		return []byte(toks[id]), true
	}, []int{eos})
	c := NewJSONObject(v)
	allowed := func() string {
		logits := make([]float32, len(toks))
		c.Mask(logits)
		var out []string
		for id, l := range logits {
			if l == 0 {
				out = append(out, toks[id])
			}
		}
		return strings.Join(out, "|")
	}
	steps := []struct {
		take int
		want string
	}{
		{0, `{|{"`},            // start: '{' or '{"', no whitespace
		{2, `}|"a"|":| `},      // after "{": a key (even one starting with ":"), "}" or whitespace
		{3, `:| `},             // after a key
		{4, `{|"a"|1|{"|":| `}, // a value (a string may start with ":")
		{1, `}|1| `},           // after 1: more digits, '}' or whitespace ("," is not a token)
		{eos, `<eos>`},         // complete: only the end token
	}
	for i, st := range steps {
		if got := allowed(); got != st.want {
			t.Fatalf("step %d: allowed %s, want %s", i, got, st.want)
		}
		c.Accept(st.take)
	}
	if !c.Complete() {
		t.Error("not complete after {\"a\":1}")
	}
}

// longNumber reports a run of number bytes longer than the automaton takes.
func longNumber(s string) bool {
	n := 0
	for i := range len(s) {
		if strings.IndexByte("0123456789+-.eE", s[i]) >= 0 {
			if n++; n > maxNumberBytes {
				return true
			}
		} else {
			n = 0
		}
	}
	return false
}
