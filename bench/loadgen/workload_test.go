package loadgen

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestLengthRange(t *testing.T) {
	tests := []struct {
		mean   int
		ratio  float64
		lo, hi int
	}{
		{100, 0, 100, 100},
		{100, 0.1, 90, 110},
		{10, 0.25, 7, 13}, // ⌊7.5⌋, ⌈12.5⌉
		{3, 0.9, 1, 6},    // ⌊0.3⌋ = 0 is raised to 1; ⌈5.7⌉
		{1, 0.5, 1, 2},
	}
	for _, tt := range tests {
		if lo, hi := LengthRange(tt.mean, tt.ratio); lo != tt.lo || hi != tt.hi {
			t.Errorf("LengthRange(%d, %v) = %d, %d; want %d, %d", tt.mean, tt.ratio, lo, hi, tt.lo, tt.hi)
		}
	}
}

// TestRandom: every prompt has its drawn number of words, every length is
// in its range, and a spread reaches both ends of it.
func TestRandom(t *testing.T) {
	tests := []Lengths{
		{Input: 32, Output: 16},
		{Input: 20, Output: 8, RangeRatio: 0.5},
		{Input: 1, Output: 1, RangeRatio: 0.99},
	}
	for _, l := range tests {
		reqs, err := Random(rand.New(rand.NewPCG(3, 4)), 500, l)
		if err != nil {
			t.Fatal(err)
		}
		inLo, inHi := LengthRange(l.Input, l.RangeRatio)
		outLo, outHi := LengthRange(l.Output, l.RangeRatio)
		seen := map[int]bool{}
		for i, r := range reqs {
			if words := len(strings.Fields(r.Prompt)); words != r.InputLen || r.InputLen < inLo || r.InputLen > inHi {
				t.Fatalf("%+v: request %d has %d words, InputLen %d; want equal and in [%d, %d]", l, i, words, r.InputLen, inLo, inHi)
			}
			if r.OutputLen < outLo || r.OutputLen > outHi || r.Prefix != "" {
				t.Fatalf("%+v: request %d: %+v", l, i, r)
			}
			seen[r.InputLen] = true
		}
		if !seen[inLo] || !seen[inHi] {
			t.Errorf("%+v: input lengths never reached an end of [%d, %d]", l, inLo, inHi)
		}
	}
	a, _ := Random(rand.New(rand.NewPCG(9, 9)), 3, tests[0])
	b, _ := Random(rand.New(rand.NewPCG(9, 9)), 3, tests[0])
	if !slices.Equal(a, b) || a[0].Prompt == a[1].Prompt {
		t.Errorf("one seed must give one workload of distinct prompts: %+v", a)
	}
	for _, bad := range []Lengths{{Input: 0, Output: 1}, {Input: 1, Output: 0}, {Input: 1, Output: 1, RangeRatio: 1}, {Input: 1, Output: 1, RangeRatio: -0.1}} {
		if _, err := Random(rand.New(rand.NewPCG(1, 1)), 1, bad); err == nil {
			t.Errorf("Random(%+v) accepted", bad)
		}
	}
}

// TestSharedPrefix: requests i and i+prefixes carry the very same prefix,
// requests of different groups different ones, and each its own question.
func TestSharedPrefix(t *testing.T) {
	const n, prefixLen, groups = 12, 50, 3
	reqs, err := SharedPrefix(rand.New(rand.NewPCG(5, 6)), n, prefixLen, groups, Lengths{Input: 8, Output: 4})
	if err != nil {
		t.Fatal(err)
	}
	questions := map[string]bool{}
	for i, r := range reqs {
		if got := len(strings.Fields(r.Prefix)); got != prefixLen {
			t.Fatalf("request %d: prefix of %d words, want %d", i, got, prefixLen)
		}
		if r.Prefix != reqs[i%groups].Prefix {
			t.Errorf("request %d does not share request %d's prefix", i, i%groups)
		}
		if i < groups && i > 0 && r.Prefix == reqs[0].Prefix {
			t.Errorf("groups 0 and %d share a prefix", i)
		}
		if r.InputLen != prefixLen+len(strings.Fields(r.Prompt)) || r.OutputLen != 4 {
			t.Errorf("request %d: %+v", i, r)
		}
		questions[r.Prompt] = true
	}
	if len(questions) != n {
		t.Errorf("%d distinct questions among %d requests", len(questions), n)
	}
	if _, err := SharedPrefix(rand.New(rand.NewPCG(1, 1)), 1, 0, 1, Lengths{Input: 1, Output: 1}); err == nil {
		t.Error("a prefix of 0 words was accepted")
	}
	if _, err := SharedPrefix(rand.New(rand.NewPCG(1, 1)), 1, 1, 0, Lengths{Input: 1, Output: 1}); err == nil {
		t.Error("0 prefixes were accepted")
	}
}

func TestParseJSONL(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Request // nil: an error holding err
		err  string
	}{
		{"output_len", `{"prompt": "a b c", "output_len": 5}`, []Request{{Prompt: "a b c", InputLen: 3, OutputLen: 5}}, ""},
		{"max_tokens", `{"prompt": "a", "max_tokens": 7}`, []Request{{Prompt: "a", InputLen: 1, OutputLen: 7}}, ""},
		{"default budget", `{"prompt": "x y"}`, []Request{{Prompt: "x y", InputLen: 2, OutputLen: 9}}, ""},
		{"blank lines, CRLF, other fields", "\n{\"prompt\": \"p\", \"id\": 3}\r\n\r\n{\"prompt\": \"q\"}\n",
			[]Request{{Prompt: "p", InputLen: 1, OutputLen: 9}, {Prompt: "q", InputLen: 1, OutputLen: 9}}, ""},
		{"no prompt", `{"output_len": 3}`, nil, `line 1: no "prompt"`},
		{"empty prompt", "\n" + `{"prompt": ""}`, nil, `line 2: no "prompt"`},
		{"prompt not a string", `{"prompt": [1, 2]}`, nil, "line 1: prompt must be a string"},
		{"budget not a number", `{"prompt": "a", "output_len": "5"}`, nil, "line 1: output_len must be an integer"},
		{"zero budget", `{"prompt": "a", "max_tokens": 0}`, nil, "line 1: max_tokens 0"},
		{"not JSON", `{"prompt": "a"} x`, nil, "line 1: not a JSON object"},
		{"an array", `["a"]`, nil, "line 1: not a JSON object"},
		{"empty file", "\n\n", nil, "no prompts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseJSONL(strings.NewReader(tt.in), 9)
			if tt.want == nil {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Errorf("error %v, want one with %q", err, tt.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// TestParseJSONLFile reads the sample workload docs/BENCH_SERVE.md shows.
func TestParseJSONLFile(t *testing.T) {
	f, err := os.Open("testdata/prompts.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reqs, err := ParseJSONL(f, 64)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 3 || reqs[0].OutputLen != 32 || reqs[1].OutputLen != 16 || reqs[2].OutputLen != 64 || reqs[1].InputLen != 7 {
		t.Errorf("testdata/prompts.jsonl: %+v", reqs)
	}
	cycled := Cycle(reqs, 7)
	if len(cycled) != 7 || cycled[3] != reqs[0] || cycled[6] != reqs[0] || cycled[5] != reqs[2] {
		t.Errorf("Cycle(3 prompts, 7) = %+v", cycled)
	}
}

// FuzzParseJSONL: any input parses or is refused without a panic, and
// what parses is a usable workload that reads back the same when written
// out again.
func FuzzParseJSONL(f *testing.F) {
	for _, s := range []string{
		`{"prompt": "a b", "output_len": 3}`,
		"{\"prompt\": \"x\"}\n\n{\"prompt\": \"\\u00e9 y\", \"max_tokens\": 2}",
		`{"prompt": "a", "output_len": -1}`,
		`{"prompt": null}`,
		"{\"prompt\": \"a\"}\r\n",
		`[1]`, `"a"`, `{`, "\x00",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		reqs, err := ParseJSONL(bytes.NewReader(in), 4)
		if err != nil {
			return
		}
		var out bytes.Buffer
		for _, r := range reqs {
			if r.Prompt == "" || r.OutputLen < 1 || r.InputLen != len(strings.Fields(r.Prompt)) || r.Prefix != "" {
				t.Fatalf("parsed a request that is not usable: %+v", r)
			}
			b, err := json.Marshal(map[string]any{"prompt": r.Prompt, "output_len": r.OutputLen})
			if err != nil {
				t.Fatal(err)
			}
			out.Write(append(b, '\n'))
		}
		again, err := ParseJSONL(&out, 4)
		if err != nil {
			t.Fatalf("written back, %q fails: %v", out.String(), err)
		}
		for i := range reqs {
			// json.Marshal replaces invalid UTF-8, so compare what survives it.
			if strings.ToValidUTF8(reqs[i].Prompt, "\uFFFD") != again[i].Prompt || reqs[i].OutputLen != again[i].OutputLen {
				t.Fatalf("round trip: %+v became %+v", reqs[i], again[i])
			}
		}
	})
}
