package tokenizer

import (
	"encoding/json"
	"fmt"
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// TestAppendLossy uses the example of Unicode 15 §3.9, Table 3-8 (U+FFFD
// for each maximal subpart), and cases around the second-byte ranges.
func TestAppendLossy(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64", "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd"},
		{"\xE0\x80\xAF", "\uFFFD\uFFFD\uFFFD"},           // overlong: E0 needs A0..BF
		{"\xED\xA0\x80", "\uFFFD\uFFFD\uFFFD"},           // surrogate: ED needs 80..9F
		{"\xF4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"}, // above U+10FFFF
		{"\xF4\x8F\xBF\xBF", "\U0010FFFF"},
		{"\xF0\x9F\x98", "\uFFFD"}, // truncated emoji: one maximal subpart
		{"ok\xC0\xAF", "ok\uFFFD\uFFFD"},
		{"日本", "日本"},
	}
	for _, tt := range tests {
		got, n := appendLossy(nil, []byte(tt.in), true)
		if string(got) != tt.want || n != len(tt.in) {
			t.Errorf("appendLossy(%q) = %q (%d bytes used), want %q", tt.in, got, n, tt.want)
		}
	}
	// Not final: a valid unfinished tail is kept back.
	got, n := appendLossy(nil, []byte("a\xF0\x9F\x98"), false)
	if string(got) != "a" || n != 1 {
		t.Errorf("appendLossy(partial) = %q, %d; want \"a\", 1", got, n)
	}
}

// TestTinyModel runs a hand-made model where the merge order matters:
// merges are "b c" (rank 0), "a b", "ab c". "abc" merges b+c first and
// then finds no merge for a+bc; with ignore_merges the whole word "abc",
// being in the vocab, is taken as is (Llama-3's rule).
func TestTinyModel(t *testing.T) {
	tests := []struct {
		ignoreMerges bool
		in           string
		want         []int
	}{
		{false, "abc", []int{0, 4}},
		{true, "abc", []int{5}},
		{false, "ab", []int{3}},
		{false, "abab c", []int{3, 3, 6, 2}},
		{false, "abc<eos>", []int{0, 4, 7}},
		{true, "bcabc", []int{4, 0, 4}}, // not a vocab word: merges apply
	}
	for _, tt := range tests {
		js := strings.Replace(tinyJSON, `"ignore_merges": false`, fmt.Sprintf(`"ignore_merges": %v`, tt.ignoreMerges), 1)
		tok, err := FromJSON([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		if got := tok.Encode(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("ignore_merges=%v Encode(%q) = %v, want %v", tt.ignoreMerges, tt.in, got, tt.want)
		}
		if got := tok.Decode(tt.want, false); got != tt.in {
			t.Errorf("Decode(%v) = %q, want %q", tt.want, got, tt.in)
		}
	}
}

// TestIgnoreMergesVocabWords: in the Llama-3-style fixture (ignore_merges
// set), every vocab word that pre-tokenises to itself encodes to its own id.
func TestIgnoreMergesVocabWords(t *testing.T) {
	tok, err := Load(filepath.Join("testdata", "nemotron"))
	if err != nil {
		t.Fatal(err)
	}
	if !tok.model.ignoreMerges {
		t.Fatal("fixture should set ignore_merges")
	}
	bl := newByteLevel()
	checked := 0
	for id := range tok.VocabSize() {
		s, _ := tok.Token(id)
		if tok.ids[id].special {
			continue
		}
		raw, ok := bl.unmap(s)
		if !ok || !utf8.Valid(raw) {
			continue
		}
		if pieces := splitAll(tok.pre, string(raw)); len(pieces) != 1 {
			continue
		}
		checked++
		if got := tok.EncodeRaw(string(raw)); !slices.Equal(got, []int{id}) {
			t.Errorf("EncodeRaw(%q) = %v, want [%d]", raw, got, id)
		}
	}
	if checked < 1000 {
		t.Errorf("only %d vocab words checked", checked)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("Load(empty dir) error = %v, want one naming tokenizer.json", err)
	}
	tests := []struct {
		name, json, want string
	}{
		{"not json", `{`, "parse"},
		{"no model", `{}`, "no model"},
		{"bad merge", `{"model": {"vocab": {"a": 0}, "merges": ["a b"]}}`, "merge 0"},
		{"merge without space", `{"model": {"vocab": {"a": 0}, "merges": ["ab"]}}`, "merge 0"},
		{"wordpiece", `{"model": {"type": "WordPiece", "vocab": {}}}`, "WordPiece"},
		{"bad behavior", `{"pre_tokenizer": {"type": "Split", "pattern": {"String": "x"}, "behavior": "Sideways"}, "model": {"vocab": {}}}`, "Sideways"},
		{"bad regex", `{"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(("}, "behavior": "Isolated"}, "model": {"vocab": {}}}`, "split regex"},
		{"unknown normalizer", `{"normalizer": {"type": "BertNormalizer"}, "model": {"vocab": {}}}`, "BertNormalizer"},
		{"unknown decoder", `{"decoder": {"type": "Metaspace"}, "model": {"vocab": {}}}`, "Metaspace"},
		{"stage after ByteLevel", `{"pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}, {"type": "Digits"}]}, "model": {"vocab": {}}}`, "after ByteLevel"},
		{"template without sequence", `{"post_processor": {"type": "TemplateProcessing", "single": [], "special_tokens": {}}, "model": {"vocab": {}}}`, "no sequence"},
		{"unk not in vocab", `{"model": {"vocab": {"a": 0}, "unk_token": "<unk>"}}`, "unk_token"},
	}
	for _, tt := range tests {
		if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(tt.json), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(dir)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "tokenizer.json") {
			t.Errorf("%s: error %v, want one naming tokenizer.json and containing %q", tt.name, err, tt.want)
		}
	}
	// A broken companion file is named too.
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(tinyJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"eos_token_id": "x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "generation_config.json") {
		t.Errorf("bad generation_config.json: error %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"eos_token": "<nope>"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "<nope>") {
		t.Errorf("unknown eos_token: error %v", err)
	}
}

// TestChatPromptIDs: a rendered chat prompt encoded without post-processor
// specials gives transformers' apply_chat_template(tokenize=True) ids.
func TestChatPromptIDs(t *testing.T) {
	for _, name := range []string{"qwen", "nemotron", "gpt2"} {
		t.Run(name, func(t *testing.T) {
			tok, _ := loadFixture(t, name)
			data, err := os.ReadFile(filepath.Join("testdata", name, "fixtures.json"))
			if err != nil {
				t.Fatal(err)
			}
			var fx struct {
				Chats []struct {
					Rendered *string `json:"rendered"`
					HFIDs    []int   `json:"hf_ids"`
				} `json:"chats"`
			}
			if err := json.Unmarshal(data, &fx); err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, c := range fx.Chats {
				if c.Rendered == nil {
					continue
				}
				n++
				if got := tok.EncodeRaw(*c.Rendered); !slices.Equal(got, c.HFIDs) {
					t.Errorf("EncodeRaw(%q) = %v, want %v", *c.Rendered, got, c.HFIDs)
				}
			}
			if n == 0 {
				t.Error("no rendered chats")
			}
		})
	}
}

// TestConcurrentEncode shares one Tokenizer (and its word cache) between
// goroutines; run with -race.
func TestConcurrentEncode(t *testing.T) {
	tok, fx := loadFixture(t, "qwen")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for k := range 3 {
				for i, c := range fx.Cases {
					if (i+g+k)%3 != 0 {
						continue
					}
					if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
						t.Errorf("goroutine %d: Encode(%q) = %v, want %v", g, c.Text, got, c.IDs)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// benchText is about 300 KB: the fixture strings (prose in several
// scripts, emoji, whitespace runs) once, then Go standard-library source
// (code with little repetition at the word level) until the size is reached.
func benchText(b *testing.B) (*Tokenizer, string) {
	tok, fx := loadFixture(b, "qwen")
	var sb strings.Builder
	for _, c := range fx.Cases {
		sb.WriteString(c.Text)
		sb.WriteString("\n")
	}
	files, _ := filepath.Glob(filepath.Join(build.Default.GOROOT, "src", "strings", "*.go"))
	more, _ := filepath.Glob(filepath.Join(build.Default.GOROOT, "src", "fmt", "*.go"))
	for _, f := range append(files, more...) {
		if sb.Len() >= 300<<10 {
			break
		}
		data, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		sb.Write(data)
	}
	for sb.Len() < 300<<10 { // no GOROOT sources: repeat what we have
		sb.WriteString(sb.String())
	}
	return tok, sb.String()
}

func BenchmarkEncode(b *testing.B) {
	tok, text := benchText(b)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		tok.EncodeRaw(text)
	}
}

// BenchmarkEncodeCold measures the BPE itself: a fresh Tokenizer (empty
// word cache) for every iteration.
func BenchmarkEncodeCold(b *testing.B) {
	_, text := benchText(b)
	data, err := os.ReadFile(filepath.Join("testdata", "qwen", "tokenizer.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		b.StopTimer()
		tok, err := FromJSON(data)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		tok.EncodeRaw(text)
	}
}

func BenchmarkDecode(b *testing.B) {
	tok, text := benchText(b)
	ids := tok.EncodeRaw(text)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Decode(ids, false)
	}
}

// TestBytes: a byte-level tokenizer's text is the concatenation of its
// tokens' Bytes (special tokens have none), even where a character is split
// across tokens.
func TestBytes(t *testing.T) {
	tok, err := Load(filepath.Join("testdata", "nemotron"))
	if err != nil {
		t.Fatal(err)
	}
	text := "In the beginning — 神 créa 🌍 the heaven."
	ids := tok.Encode(text)
	var b []byte
	for _, id := range ids {
		tb, ok := tok.Bytes(id)
		if ok == tok.IsSpecial(id) {
			t.Fatalf("token %d (special %v) has bytes %v", id, tok.IsSpecial(id), ok)
		}
		b = append(b, tb...)
	}
	if string(b) != tok.Decode(ids, true) {
		t.Errorf("bytes %q, decoded %q", b, tok.Decode(ids, true))
	}
	for _, id := range tok.SpecialIDs() {
		if _, ok := tok.Bytes(id); ok {
			t.Errorf("special token %d has bytes", id)
		}
	}
	if _, ok := tok.Bytes(-1); ok {
		t.Error("id -1 has bytes")
	}
}
