// Package tokenizer encodes text to token ids and back for the byte-level
// BPE tokenizers that HF tokenizer.json files describe (Qwen3.5, Qwen3-Next,
// Nemotron-H, GPT-NeoX/Mamba-2), matching the HF tokenizers library id for id.
//
// The pipeline is HF's: added/special tokens are cut out first, the rest is
// normalised (NFC, ...), split by the pre-tokenizer (known split regexes run
// by hand-written matchers, see split.go), and each piece is BPE-merged over
// its bytes. Decoding maps ids back to bytes and repairs invalid UTF-8 the
// way the reference does; StreamDecoder emits text token by token.
package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// Tokenizer is a loaded tokenizer. It is immutable after loading and safe
// for concurrent use.
type Tokenizer struct {
	model      *bpe
	normalizer normalizer
	pre        preTokenizer
	post       *postProcessor

	added           []*addedToken
	rawAdded        *addedMatcher // normalized=false: matched on the input
	normAdded       *addedMatcher // normalized=true: matched after normalisation
	decodeByteLevel bool

	ids     []idInfo // by id
	tokenID map[string]int

	bos     int // -1 if none
	eos     []int
	pad     int // -1 if none
	scratch sync.Pool
}

// idInfo is what decoding needs to know about one id.
type idInfo struct {
	token   string // as spelled in the vocab (byte-level runes)
	raw     string // bytes the decoder produces
	present bool
	special bool
}

// scratch holds per-call buffers, pooled so Encode allocates little.
type scratch struct {
	levels []*levelBuf // per pre-tokenizer stage
	syms   []symbol
	heap   []mergeItem
	added  []addedMatch
	added2 []addedMatch
}

// fileJSON is the part of tokenizer.json we read.
type fileJSON struct {
	AddedTokens   []*addedToken   `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         *modelJSON      `json:"model"`
}

// FromJSON builds a Tokenizer from the contents of a tokenizer.json file.
// Special-token ids (BOS, EOS, pad) are only known when the companion
// config files are read, which Load does.
func FromJSON(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if f.Model == nil {
		return nil, errors.New("no model")
	}
	t := &Tokenizer{bos: -1, pad: -1}
	var err error
	if t.normalizer, err = parseNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	var byteLevel bool
	if t.pre, byteLevel, err = parsePreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if t.post, err = parsePostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	if t.decodeByteLevel, err = parseDecoder(f.Decoder); err != nil {
		return nil, err
	}
	bl := newByteLevel()
	if t.model, err = newBPE(f.Model, byteLevel, bl); err != nil {
		return nil, err
	}

	// Id table: the model's vocab, then added tokens (which may reuse or
	// extend it).
	maxID := -1
	for _, id := range f.Model.Vocab {
		maxID = max(maxID, id)
	}
	for i, a := range f.AddedTokens {
		if a == nil || a.ID < 0 || a.ID > 1<<30 {
			return nil, fmt.Errorf("added_tokens[%d]: bad entry", i)
		}
		maxID = max(maxID, a.ID)
	}
	t.ids = make([]idInfo, maxID+1)
	t.tokenID = make(map[string]int, len(f.Model.Vocab)+len(f.AddedTokens))
	for tok, id := range f.Model.Vocab {
		t.ids[id] = idInfo{token: tok, present: true}
		t.tokenID[tok] = id
	}
	var rawList, normList []*addedToken
	for _, a := range f.AddedTokens {
		t.ids[a.ID] = idInfo{token: a.Content, present: true, special: a.Special}
		t.tokenID[a.Content] = a.ID
		t.added = append(t.added, a)
		// HF never normalises special tokens' text.
		if a.Normalized && !a.Special {
			normList = append(normList, a)
		} else {
			rawList = append(rawList, a)
		}
	}
	t.rawAdded = newAddedMatcher(rawList)
	t.normAdded = newAddedMatcher(normList)
	for id := range t.ids {
		info := &t.ids[id]
		if !info.present {
			continue
		}
		// HF's ByteLevel decoder: a token whose runes all come from the
		// byte table becomes those bytes, any other keeps its own UTF-8.
		info.raw = info.token
		if t.decodeByteLevel {
			if raw, ok := bl.unmap(info.token); ok {
				info.raw = string(raw)
			}
		}
	}
	t.scratch.New = func() any { return new(scratch) }
	return t, nil
}

// Load reads a model directory: tokenizer.json (required), and when present
// tokenizer_config.json (bos/eos/pad token strings), generation_config.json
// and config.json (eos_token_id, bos_token_id).
func Load(dir string) (*Tokenizer, error) {
	path := filepath.Join(dir, "tokenizer.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := FromJSON(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	if err := t.loadSpecialIDs(dir); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return t, nil
}

// tokenString reads a tokenizer_config.json token field: a string, null,
// or an AddedToken object {"content": ...}.
func tokenString(raw json.RawMessage) string {
	if isNull(raw) {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var obj struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil {
		return obj.Content
	}
	return ""
}

// idList reads an eos_token_id field: an int, a list of ints, or null.
func idList(raw json.RawMessage) ([]int, error) {
	if isNull(raw) {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int{one}, nil
	}
	var many []int
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("want an id or a list of ids, got %s", raw)
	}
	return many, nil
}

// readOptionalJSON decodes path into v; a missing file is not an error.
func readOptionalJSON(path string, v any) (bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}

// loadSpecialIDs fills BOS, EOS and pad. EOS collects, in order and without
// repeats, generation_config.json's eos_token_id (what generation stops on
// in transformers), tokenizer_config.json's eos_token and config.json's
// eos_token_id.
func (t *Tokenizer) loadSpecialIDs(dir string) error {
	var tc struct {
		BOS json.RawMessage `json:"bos_token"`
		EOS json.RawMessage `json:"eos_token"`
		Pad json.RawMessage `json:"pad_token"`
	}
	type ids struct {
		BOS json.RawMessage `json:"bos_token_id"`
		EOS json.RawMessage `json:"eos_token_id"`
		Pad json.RawMessage `json:"pad_token_id"`
	}
	var gen, cfg ids
	if _, err := readOptionalJSON(filepath.Join(dir, "tokenizer_config.json"), &tc); err != nil {
		return err
	}
	if _, err := readOptionalJSON(filepath.Join(dir, "generation_config.json"), &gen); err != nil {
		return err
	}
	if _, err := readOptionalJSON(filepath.Join(dir, "config.json"), &cfg); err != nil {
		return err
	}
	lookup := func(file, field string, raw json.RawMessage) ([]int, error) {
		s := tokenString(raw)
		if s == "" {
			return nil, nil
		}
		id, ok := t.TokenID(s)
		if !ok {
			return nil, fmt.Errorf("%s: %s %q is not a token", filepath.Join(dir, file), field, s)
		}
		return []int{id}, nil
	}
	var eos []int
	for _, src := range []struct {
		file, field string
		raw         json.RawMessage
		isToken     bool
	}{
		{"generation_config.json", "eos_token_id", gen.EOS, false},
		{"tokenizer_config.json", "eos_token", tc.EOS, true},
		{"config.json", "eos_token_id", cfg.EOS, false},
	} {
		var got []int
		var err error
		if src.isToken {
			got, err = lookup(src.file, src.field, src.raw)
		} else if got, err = idList(src.raw); err != nil {
			err = fmt.Errorf("%s: %s: %w", filepath.Join(dir, src.file), src.field, err)
		}
		if err != nil {
			return err
		}
		for _, id := range got {
			if !slices.Contains(eos, id) {
				eos = append(eos, id)
			}
		}
	}
	t.eos = eos
	first := func(file, field string, tokRaw json.RawMessage, idRaws ...json.RawMessage) (int, error) {
		if got, err := lookup(file, field, tokRaw); err != nil || len(got) > 0 {
			if err != nil {
				return -1, err
			}
			return got[0], nil
		}
		for _, r := range idRaws {
			got, err := idList(r)
			if err == nil && len(got) > 0 {
				return got[0], nil
			}
		}
		return -1, nil
	}
	var err error
	if t.bos, err = first("tokenizer_config.json", "bos_token", tc.BOS, gen.BOS, cfg.BOS); err != nil {
		return err
	}
	if t.pad, err = first("tokenizer_config.json", "pad_token", tc.Pad, gen.Pad, cfg.Pad); err != nil {
		return err
	}
	return nil
}

// EncodeOptions select HF's encode flags.
type EncodeOptions struct {
	// AddSpecialTokens applies the post-processor (HF add_special_tokens):
	// e.g. a TemplateProcessing "<s> $A" prepends <s>. Chat prompts rendered
	// from a template already hold their special tokens: encode them
	// without (transformers' apply_chat_template does the same).
	AddSpecialTokens bool
	// SplitSpecialTokens treats special tokens written in the text as plain
	// text (HF encode_special_tokens / split_special_tokens), so user input
	// cannot inject "<|im_end|>". Non-special added tokens still match.
	SplitSpecialTokens bool
}

// Encode returns the ids of text as HF's tokenizer.encode(text) does with
// add_special_tokens=True: special tokens written in the text are
// recognised, and the post-processor's tokens (a BOS for Llama-3-style
// templates, nothing for Qwen's ByteLevel processor) are added.
func (t *Tokenizer) Encode(text string) []int {
	return t.AppendEncode(nil, text, EncodeOptions{AddSpecialTokens: true})
}

// EncodeRaw is Encode without the post-processor's tokens
// (add_special_tokens=False): the right call for rendered chat prompts.
func (t *Tokenizer) EncodeRaw(text string) []int {
	return t.AppendEncode(nil, text, EncodeOptions{})
}

// AppendEncode appends the ids of text to dst. Invalid UTF-8 is accepted:
// each invalid byte is split like a symbol and encoded by its byte token.
func (t *Tokenizer) AppendEncode(dst []int, text string, opts EncodeOptions) []int {
	sc := t.scratch.Get().(*scratch)
	defer t.scratch.Put(sc)
	// Byte-level BPE gives roughly one id per 3-4 bytes of text: grow once
	// instead of doubling through a long document.
	dst = slices.Grow(dst, len(text)/4+len(t.post.prefix)+len(t.post.suffix))
	if opts.AddSpecialTokens {
		dst = append(dst, t.post.prefix...)
	}
	sc.added = t.rawAdded.find(sc.added[:0], text, opts.SplitSpecialTokens)
	prev := 0
	// Iterate by index: the nested step reuses sc.added2, not sc.added.
	for k := 0; k <= len(sc.added); k++ {
		end := len(text)
		if k < len(sc.added) {
			end = sc.added[k].start
		}
		if end > prev {
			dst = t.encodeNormalized(dst, text[prev:end], opts, sc)
		}
		if k < len(sc.added) {
			dst = append(dst, sc.added[k].tok.ID)
			prev = sc.added[k].end
		}
	}
	if opts.AddSpecialTokens {
		dst = append(dst, t.post.suffix...)
	}
	return dst
}

// encodeNormalized normalises a stretch of text free of raw added tokens,
// cuts out normalised added tokens, and BPE-encodes the rest.
func (t *Tokenizer) encodeNormalized(dst []int, seg string, opts EncodeOptions, sc *scratch) []int {
	if t.normalizer != nil {
		seg = t.normalizer.normalize(seg)
	}
	if t.normAdded == nil {
		return t.encodeModel(dst, seg, sc)
	}
	sc.added2 = t.normAdded.find(sc.added2[:0], seg, opts.SplitSpecialTokens)
	prev := 0
	matches := sc.added2
	for _, m := range matches {
		if m.start > prev {
			dst = t.encodeModel(dst, seg[prev:m.start], sc)
		}
		dst = append(dst, m.tok.ID)
		prev = m.end
	}
	if prev < len(seg) {
		dst = t.encodeModel(dst, seg[prev:], sc)
	}
	return dst
}

// encodeModel pre-tokenises normalised text and BPE-encodes each piece.
func (t *Tokenizer) encodeModel(dst []int, s string, sc *scratch) []int {
	if t.pre == nil {
		return t.model.encodeWord(dst, s, sc)
	}
	t.pre.split(s, sc, 0, func(piece string) {
		dst = t.model.encodeWord(dst, piece, sc)
	})
	return dst
}

// TokenID returns the id of a token given as spelled in the vocabulary
// ("<|im_end|>", or "Ġthe" for a byte-level word token).
func (t *Tokenizer) TokenID(token string) (int, bool) {
	id, ok := t.tokenID[token]
	return id, ok
}

// Token returns the vocabulary spelling of id.
func (t *Tokenizer) Token(id int) (string, bool) {
	if id < 0 || id >= len(t.ids) || !t.ids[id].present {
		return "", false
	}
	return t.ids[id].token, true
}

// Bytes returns the bytes id adds to decoded text (a byte-level token's
// raw bytes, possibly part of a UTF-8 character), or false for an unknown
// id or a special token, which decodes to no text a grammar can read.
// Tokenizers whose decoder joins tokens with spaces give the token's text
// without the space.
func (t *Tokenizer) Bytes(id int) ([]byte, bool) {
	if id < 0 || id >= len(t.ids) || !t.ids[id].present || t.ids[id].special {
		return nil, false
	}
	return []byte(t.ids[id].raw), true
}

// VocabSize is one more than the largest id (model vocab and added tokens):
// the number of rows an embedding table needs. HF's
// get_vocab_size(with_added_tokens=True) agrees when ids have no holes.
func (t *Tokenizer) VocabSize() int { return len(t.ids) }

// IsSpecial reports whether id is a special added token (skipped by
// Decode with skipSpecial).
func (t *Tokenizer) IsSpecial(id int) bool {
	return id >= 0 && id < len(t.ids) && t.ids[id].special
}

// SpecialIDs returns the ids of all special added tokens, ascending.
func (t *Tokenizer) SpecialIDs() []int {
	var out []int
	for _, a := range t.added {
		if a.Special {
			out = append(out, a.ID)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// BOS returns the beginning-of-sequence id named by tokenizer_config.json
// (or config files), if any.
func (t *Tokenizer) BOS() (int, bool) { return t.bos, t.bos >= 0 }

// Pad returns the padding id, if any.
func (t *Tokenizer) Pad() (int, bool) { return t.pad, t.pad >= 0 }

// EOSIDs returns the ids that end generation (see Load for the sources).
func (t *Tokenizer) EOSIDs() []int { return slices.Clone(t.eos) }

// IsEOS reports whether id ends generation.
func (t *Tokenizer) IsEOS(id int) bool { return slices.Contains(t.eos, id) }
