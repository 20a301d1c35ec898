package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The fixtures under testdata/<name>/ come from tools/tokenizer_fixtures.py:
// tokenizers trained and saved by the HF libraries, plus what those
// libraries return for a fixed list of strings.
var fixtureNames = []string{"qwen", "nemotron", "gpt2", "mixed", "fallback"}

type fixtureCase struct {
	Text            string    `json:"text"`
	IDs             []int     `json:"ids"`
	Tokens          []string  `json:"tokens"`
	IDsRaw          []int     `json:"ids_raw"`
	IDsSplitSpecial []int     `json:"ids_split_special"`
	Normalized      string    `json:"normalized"`
	Pieces          []string  `json:"pieces"`
	Decode          string    `json:"decode"`
	DecodeSkip      string    `json:"decode_skip"`
	HalfIDs         []int     `json:"half_ids"`
	DecodeHalf      string    `json:"decode_half"`
	Stream          []*string `json:"stream"`
}

type fixtureFile struct {
	Meta struct {
		VocabSize   int `json:"vocab_size"`
		AddedTokens []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
	} `json:"meta"`
	Cases   []fixtureCase `json:"cases"`
	Decodes []struct {
		IDs        []int  `json:"ids"`
		Decode     string `json:"decode"`
		DecodeSkip string `json:"decode_skip"`
	} `json:"decodes"`
}

func loadFixture(t testing.TB, name string) (*Tokenizer, *fixtureFile) {
	t.Helper()
	dir := filepath.Join("testdata", name)
	tok, err := Load(dir)
	if err != nil {
		t.Fatalf("Load(%s): %v", dir, err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "fixtures.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx fixtureFile
	if err := json.Unmarshal(data, &fx); err != nil {
		t.Fatalf("%s/fixtures.json: %v", dir, err)
	}
	if len(fx.Cases) == 0 {
		t.Fatalf("%s/fixtures.json has no cases", dir)
	}
	return tok, &fx
}

// tokensOf spells ids for failure messages.
func tokensOf(tok *Tokenizer, ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i], _ = tok.Token(id)
	}
	return out
}

func TestEncodeMatchesHF(t *testing.T) {
	for _, name := range fixtureNames {
		t.Run(name, func(t *testing.T) {
			tok, fx := loadFixture(t, name)
			for _, c := range fx.Cases {
				for _, v := range []struct {
					what string
					want []int
					opts EncodeOptions
				}{
					{"add_special_tokens=True", c.IDs, EncodeOptions{AddSpecialTokens: true}},
					{"add_special_tokens=False", c.IDsRaw, EncodeOptions{}},
					{"encode_special_tokens", c.IDsSplitSpecial, EncodeOptions{SplitSpecialTokens: true}},
				} {
					got := tok.AppendEncode(nil, c.Text, v.opts)
					if !slices.Equal(got, v.want) {
						t.Errorf("%s %q:\n got %v %q\nwant %v %q", v.what, c.Text, got, tokensOf(tok, got), v.want, tokensOf(tok, v.want))
					}
				}
				if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
					t.Errorf("Encode(%q) = %v, want %v", c.Text, got, c.IDs)
				}
				if got := tok.EncodeRaw(c.Text); !slices.Equal(got, c.IDsRaw) {
					t.Errorf("EncodeRaw(%q) = %v, want %v", c.Text, got, c.IDsRaw)
				}
			}
		})
	}
}

// TestPreTokenizeMatchesHF checks the normaliser and the pre-tokenizer on
// their own (HF's normalize_str and pre_tokenize_str), which pins a failure
// of TestEncodeMatchesHF to a stage.
func TestPreTokenizeMatchesHF(t *testing.T) {
	bl := newByteLevel()
	for _, name := range fixtureNames {
		t.Run(name, func(t *testing.T) {
			tok, fx := loadFixture(t, name)
			for _, c := range fx.Cases {
				norm := c.Text
				if tok.normalizer != nil {
					norm = tok.normalizer.normalize(c.Text)
				}
				if norm != c.Normalized {
					t.Errorf("normalize(%q) = %q, want %q", c.Text, norm, c.Normalized)
					continue
				}
				var got []string
				for _, p := range splitAll(tok.pre, norm) {
					if tok.model.byteLevel {
						p = bl.mapString(p)
					}
					got = append(got, p)
				}
				if !slices.Equal(got, c.Pieces) && !(len(got) == 0 && len(c.Pieces) == 0) {
					t.Errorf("pre-tokenize(%q):\n got %q\nwant %q", norm, got, c.Pieces)
				}
			}
		})
	}
}

func TestDecodeMatchesHF(t *testing.T) {
	for _, name := range fixtureNames {
		t.Run(name, func(t *testing.T) {
			tok, fx := loadFixture(t, name)
			check := func(ids []int, skip bool, want string) {
				t.Helper()
				if got := tok.Decode(ids, skip); got != want {
					t.Errorf("Decode(%v, %v) = %q, want %q", ids, skip, got, want)
				}
			}
			for _, c := range fx.Cases {
				check(c.IDs, false, c.Decode)
				check(c.IDs, true, c.DecodeSkip)
				check(c.HalfIDs, false, c.DecodeHalf)
			}
			for _, d := range fx.Decodes {
				check(d.IDs, false, d.Decode)
				check(d.IDs, true, d.DecodeSkip)
			}
		})
	}
}

// TestStreamDecoderMatchesHF feeds ids one at a time. HF's DecodeStream
// holds a whole token back while it ends in an unfinished character; ours
// emits every complete character at once. So after every step our text so
// far must extend HF's text so far, and both must end equal to Decode.
func TestStreamDecoderMatchesHF(t *testing.T) {
	for _, name := range fixtureNames {
		t.Run(name, func(t *testing.T) {
			tok, fx := loadFixture(t, name)
			for _, c := range fx.Cases {
				if len(c.Stream) != len(c.IDs) {
					t.Fatalf("%q: fixture has %d stream steps for %d ids", c.Text, len(c.Stream), len(c.IDs))
				}
				d := tok.NewStreamDecoder()
				var ours, hf strings.Builder
				for k, id := range c.IDs {
					ours.WriteString(d.Add(id))
					if c.Stream[k] != nil {
						hf.WriteString(*c.Stream[k])
					}
					if !strings.HasPrefix(ours.String(), hf.String()) {
						t.Errorf("%q step %d: ours %q does not extend HF %q", c.Text, k, ours.String(), hf.String())
						break
					}
				}
				ours.WriteString(d.Flush())
				if ours.String() != c.Decode {
					t.Errorf("stream of %q = %q, want %q", c.Text, ours.String(), c.Decode)
				}
			}
		})
	}
}

func TestVocabAndSpecials(t *testing.T) {
	for _, name := range fixtureNames {
		t.Run(name, func(t *testing.T) {
			tok, fx := loadFixture(t, name)
			if tok.VocabSize() != fx.Meta.VocabSize {
				t.Errorf("VocabSize = %d, HF get_vocab_size(with_added_tokens=True) = %d", tok.VocabSize(), fx.Meta.VocabSize)
			}
			var special []int
			for _, a := range fx.Meta.AddedTokens {
				id, ok := tok.TokenID(a.Content)
				if !ok || id != a.ID {
					t.Errorf("TokenID(%q) = %d, %v; want %d", a.Content, id, ok, a.ID)
				}
				if got, _ := tok.Token(a.ID); got != a.Content {
					t.Errorf("Token(%d) = %q, want %q", a.ID, got, a.Content)
				}
				if tok.IsSpecial(a.ID) != a.Special {
					t.Errorf("IsSpecial(%d) = %v, want %v", a.ID, tok.IsSpecial(a.ID), a.Special)
				}
				if a.Special {
					special = append(special, a.ID)
				}
			}
			slices.Sort(special)
			if !slices.Equal(tok.SpecialIDs(), special) {
				t.Errorf("SpecialIDs = %v, want %v", tok.SpecialIDs(), special)
			}
		})
	}
}

// TestEOSAndBOS checks the ids read from the config files each fixture
// directory carries (see tools/tokenizer_fixtures.py).
func TestEOSAndBOS(t *testing.T) {
	tests := []struct {
		name     string
		eos      []string // in order: generation_config, tokenizer_config, config
		bos, pad string
	}{
		{"qwen", []string{"<|im_end|>", "<|endoftext|>"}, "", "<|endoftext|>"},
		{"nemotron", []string{"<|im_end|>", "</s>"}, "<s>", ""},
		{"gpt2", []string{"<|endoftext|>"}, "<|endoftext|>", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := Load(filepath.Join("testdata", tt.name))
			if err != nil {
				t.Fatal(err)
			}
			var want []int
			for _, s := range tt.eos {
				id, ok := tok.TokenID(s)
				if !ok {
					t.Fatalf("no token %q", s)
				}
				want = append(want, id)
			}
			if got := tok.EOSIDs(); !slices.Equal(got, want) {
				t.Errorf("EOSIDs = %v, want %v (%q)", got, want, tt.eos)
			}
			for _, id := range want {
				if !tok.IsEOS(id) {
					t.Errorf("IsEOS(%d) = false", id)
				}
			}
			for _, f := range []struct {
				what string
				get  func() (int, bool)
				tok  string
			}{{"BOS", tok.BOS, tt.bos}, {"Pad", tok.Pad, tt.pad}} {
				id, ok := f.get()
				if f.tok == "" {
					if ok {
						t.Errorf("%s = %d, want none", f.what, id)
					}
					continue
				}
				if want, _ := tok.TokenID(f.tok); !ok || id != want {
					t.Errorf("%s = %d, %v; want %d (%q)", f.what, id, ok, want, f.tok)
				}
			}
		})
	}
}
