package tokenizer

import (
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// FuzzFromJSON feeds the loader mutated tokenizer.json files: it may
// reject them but must never panic, and what it accepts must encode.
func FuzzFromJSON(f *testing.F) {
	f.Add([]byte(tinyJSON))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "a"]]}}`))
	f.Add([]byte(`{"model": {"vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}, "added_tokens": [{"id": 5, "content": "<x>", "special": true}]}`))
	f.Add([]byte(`{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(?=a)"}, "behavior": "Isolated"}, "model": {"vocab": {}}}`))
	f.Add([]byte(`{"normalizer": {"type": "Sequence", "normalizers": [null, {"type": "NFKC"}]}, "model": {"vocab": {}}}`))
	f.Add([]byte(`{"post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "x"}}]}, "model": {"vocab": {}}}`))
	f.Add([]byte(`{"model": {"vocab": {"a": -1}}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := FromJSON(data)
		if err != nil {
			return
		}
		ids := tok.Encode("Hello <x> wörld 123 \n\n")
		_ = tok.Decode(ids, false)
		_ = tok.Decode([]int{-1, 0, 1, 1 << 20}, true)
	})
}

// FuzzEncode checks, for any input, that encoding does not panic and that
// decoding gives the text back: NFC-normalised for the Qwen-style fixture,
// byte for byte (invalid UTF-8 repaired) for the GPT-2 one. Texts that
// contain an added token are left out of the round-trip check, because
// normalisation stops at added tokens.
func FuzzEncode(f *testing.F) {
	qwen, err := Load(filepath.Join("testdata", "qwen"))
	if err != nil {
		f.Fatal(err)
	}
	gpt2, err := Load(filepath.Join("testdata", "gpt2"))
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"", "Hello, world!", "e\u0301 cafe\u0301", "\xff\xfe\xfd", "日本語 😀👍🏽", "<|im_start|>x<|im_end|>",
		"I'M 123456 \r\n\t", "\xe2\x82", "a\x00b"} {
		f.Add(s)
	}
	hasAdded := func(tok *Tokenizer, s string) bool {
		for _, a := range tok.added {
			if strings.Contains(s, a.Content) {
				return true
			}
		}
		return false
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, tok := range []*Tokenizer{qwen, gpt2} {
			ids := tok.EncodeRaw(s)
			for _, id := range ids {
				if _, ok := tok.Token(id); !ok {
					t.Fatalf("Encode(%q) gave unknown id %d", s, id)
				}
			}
			if hasAdded(tok, s) {
				continue
			}
			got := tok.Decode(ids, false)
			var want string
			switch {
			case tok == gpt2:
				b, _ := appendLossy(nil, []byte(s), true)
				want = string(b)
			case strings.ToValidUTF8(s, "") == s:
				want = norm.NFC.String(s)
			default:
				continue
			}
			if got != want {
				t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
			}
		}
	})
}

// tinyJSON is a hand-made byte-level tokenizer used by unit tests.
const tinyJSON = `{
 "added_tokens": [{"id": 7, "content": "<eos>", "special": true}],
 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
 "decoder": {"type": "ByteLevel"},
 "model": {"type": "BPE", "ignore_merges": false,
  "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5, "Ġ": 6},
  "merges": ["b c", "a b", "ab c"]}
}`
