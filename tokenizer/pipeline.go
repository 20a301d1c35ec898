package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
	"golang.org/x/text/unicode/norm"
)

// typed is the "type" tag every tokenizer.json component carries.
type typed struct {
	Type string `json:"type"`
}

// isNull reports whether a JSON value is absent or null.
func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

// patternJSON is a Split/Replace pattern: {"Regex": "..."} or {"String": "..."}.
type patternJSON struct {
	Regex  *string `json:"Regex"`
	String *string `json:"String"`
}

// ---- normalizers -----------------------------------------------------------

// normalizer rewrites a text segment before pre-tokenization.
type normalizer interface {
	normalize(s string) string
}

type normSeq []normalizer

func (q normSeq) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

type unicodeForm struct{ f norm.Form }

func (u unicodeForm) normalize(s string) string { return u.f.String(s) }

// lowercase follows Rust's char::to_lowercase, rune by rune: the simple
// mappings Go's unicode.ToLower also has, plus the one unconditional
// multi-rune mapping, U+0130 → "i\u0307". No final-sigma rule.
type lowercase struct{}

func (lowercase) normalize(s string) string {
	return strings.Map(unicode.ToLower, strings.ReplaceAll(s, "\u0130", "i\u0307"))
}

type strip struct{ left, right bool }

func (st strip) normalize(s string) string {
	if st.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if st.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

type prepend string

func (p prepend) normalize(s string) string {
	if s == "" {
		return s
	}
	return string(p) + s
}

type replaceString struct{ old, new string }

func (r replaceString) normalize(s string) string { return strings.ReplaceAll(s, r.old, r.new) }

type replaceRegex struct {
	re  *regexp2.Regexp
	new string
}

func (r replaceRegex) normalize(s string) string {
	out, err := r.re.Replace(s, r.new, -1, -1)
	if err != nil {
		return s
	}
	return out
}

func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	switch t.Type {
	case "NFC":
		return unicodeForm{norm.NFC}, nil
	case "NFD":
		return unicodeForm{norm.NFD}, nil
	case "NFKC":
		return unicodeForm{norm.NFKC}, nil
	case "NFKD":
		return unicodeForm{norm.NFKD}, nil
	case "Lowercase":
		return lowercase{}, nil
	case "Strip":
		var v struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("normalizer Strip: %w", err)
		}
		return strip{v.Left, v.Right}, nil
	case "Prepend":
		var v struct {
			Prepend string `json:"prepend"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("normalizer Prepend: %w", err)
		}
		return prepend(v.Prepend), nil
	case "Replace":
		var v struct {
			Pattern patternJSON `json:"pattern"`
			Content string      `json:"content"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("normalizer Replace: %w", err)
		}
		switch {
		case v.Pattern.String != nil:
			return replaceString{*v.Pattern.String, v.Content}, nil
		case v.Pattern.Regex != nil:
			re, err := regexp2.Compile(*v.Pattern.Regex, regexp2.None)
			if err != nil {
				return nil, fmt.Errorf("normalizer Replace regex %q: %w", *v.Pattern.Regex, err)
			}
			// regexp2 would read "$1" in content as a group reference; HF
			// inserts content literally.
			return replaceRegex{re, strings.ReplaceAll(v.Content, "$", "$$")}, nil
		}
		return nil, fmt.Errorf("normalizer Replace: pattern has neither Regex nor String")
	case "Sequence":
		var v struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("normalizer Sequence: %w", err)
		}
		var q normSeq
		for i, r := range v.Normalizers {
			n, err := parseNormalizer(r)
			if err != nil {
				return nil, fmt.Errorf("normalizer Sequence[%d]: %w", i, err)
			}
			if n != nil {
				q = append(q, n)
			}
		}
		return q, nil
	}
	return nil, fmt.Errorf("normalizer: unsupported type %q", t.Type)
}

// ---- pre-tokenizers ---------------------------------------------------------

// preTokenizer splits one piece of normalised text into smaller pieces and
// hands each to emit, in order. Pieces stream through the stages of a
// Sequence one at a time instead of being collected in lists: a long
// document would otherwise build (and garbage-collect) one string header
// per word per stage. depth is the stage's index, which selects its own
// scratch buffers so that nested stages do not overwrite them.
type preTokenizer interface {
	split(s string, sc *scratch, depth int, emit func(string))
}

// levelBuf is one stage's scratch space.
type levelBuf struct {
	matches []span
	spans   []span
	pieces  []string
}

func (sc *scratch) level(depth int) *levelBuf {
	for len(sc.levels) <= depth {
		sc.levels = append(sc.levels, new(levelBuf))
	}
	return sc.levels[depth]
}

// splitAll collects the pieces of s (tests and tools; Encode streams).
func splitAll(p preTokenizer, s string) []string {
	var out []string
	p.split(s, new(scratch), 0, func(piece string) { out = append(out, piece) })
	return out
}

type splitPre struct {
	m        matcher
	behavior behavior
	invert   bool
}

func (p *splitPre) split(s string, sc *scratch, depth int, emit func(string)) {
	if pm, ok := p.m.(*patternMatcher); ok && p.behavior == behaviorIsolated && !p.invert {
		// Known patterns tile the string: every match is a piece.
		for i := 0; i < len(s); {
			e := pm.matchAt(s, i)
			emit(s[i:e])
			i = e
		}
		return
	}
	lb := sc.level(depth)
	lb.matches = p.m.appendMatches(lb.matches[:0], s)
	lb.pieces, lb.spans = applyBehavior(lb.pieces[:0], s, lb.matches, p.behavior, p.invert, lb.spans)
	for _, piece := range lb.pieces {
		emit(piece)
	}
}

// digitsPre is HF's Digits pre-tokenizer: digits (Unicode N) isolated one
// by one, or kept as contiguous runs.
type digitsPre struct{ individual bool }

func (p digitsPre) split(s string, sc *scratch, depth int, emit func(string)) {
	lb := sc.level(depth)
	// Each numeric rune is its own match, as in HF's char-predicate pattern.
	lb.matches = lb.matches[:0]
	for i, r := range s {
		if unicode.IsNumber(r) { // never U+FFFD, so the width is exact
			lb.matches = append(lb.matches, span{i, i + utf8.RuneLen(r), true})
		}
	}
	b := behaviorContiguous
	if p.individual {
		b = behaviorIsolated
	}
	lb.pieces, lb.spans = applyBehavior(lb.pieces[:0], s, lb.matches, b, false, lb.spans)
	for _, piece := range lb.pieces {
		emit(piece)
	}
}

// byteLevelPre is the ByteLevel pre-tokenizer: an optional leading space
// on every piece, an optional GPT-2 regex split. The byte-to-rune mapping
// itself is left to the BPE model, which works on raw bytes.
type byteLevelPre struct {
	addPrefixSpace bool
	useRegex       bool
}

var gpt2Matcher = knownPatterns[PatternGPT2]

func (p byteLevelPre) split(s string, _ *scratch, _ int, emit func(string)) {
	if p.addPrefixSpace && !strings.HasPrefix(s, " ") {
		s = " " + s
	}
	if !p.useRegex {
		emit(s)
		return
	}
	for i := 0; i < len(s); {
		e := gpt2Matcher.matchAt(s, i)
		emit(s[i:e])
		i = e
	}
}

// preSeq runs its stages one after the other: each piece of stage k goes
// straight into stage k+1.
type preSeq []preTokenizer

func (q preSeq) split(s string, sc *scratch, depth int, emit func(string)) {
	if len(q) == 0 {
		emit(s)
		return
	}
	chain := make([]func(string), len(q))
	chain[len(q)-1] = emit
	for k := len(q) - 2; k >= 0; k-- {
		next, stage, d := chain[k+1], q[k+1], depth+k+1
		chain[k] = func(piece string) { stage.split(piece, sc, d, next) }
	}
	q[0].split(s, sc, depth, chain[0])
}

// parsePreTokenizer also reports whether the pipeline ends in ByteLevel,
// i.e. whether the model sees byte-level symbols.
func parsePreTokenizer(raw json.RawMessage) (preTokenizer, bool, error) {
	if isNull(raw) {
		return nil, false, nil
	}
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, false, fmt.Errorf("pre_tokenizer: %w", err)
	}
	switch t.Type {
	case "ByteLevel":
		v := struct {
			AddPrefixSpace bool  `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}{}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, false, fmt.Errorf("pre_tokenizer ByteLevel: %w", err)
		}
		useRegex := v.UseRegex == nil || *v.UseRegex // absent in old files: true
		return byteLevelPre{v.AddPrefixSpace, useRegex}, true, nil
	case "Split":
		var v struct {
			Pattern  patternJSON `json:"pattern"`
			Behavior string      `json:"behavior"`
			Invert   bool        `json:"invert"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, false, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		b, ok := behaviorNames[v.Behavior]
		if !ok {
			return nil, false, fmt.Errorf("pre_tokenizer Split: unknown behavior %q", v.Behavior)
		}
		var m matcher
		var err error
		switch {
		case v.Pattern.Regex != nil:
			m, err = newMatcher(*v.Pattern.Regex, true)
		case v.Pattern.String != nil:
			m, err = newMatcher(*v.Pattern.String, false)
		default:
			err = fmt.Errorf("pattern has neither Regex nor String")
		}
		if err != nil {
			return nil, false, fmt.Errorf("pre_tokenizer Split: %w", err)
		}
		return &splitPre{m: m, behavior: b, invert: v.Invert}, false, nil
	case "Digits":
		var v struct {
			Individual bool `json:"individual_digits"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, false, fmt.Errorf("pre_tokenizer Digits: %w", err)
		}
		return digitsPre{v.Individual}, false, nil
	case "Sequence":
		var v struct {
			Pretokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, false, fmt.Errorf("pre_tokenizer Sequence: %w", err)
		}
		var q preSeq
		byteLevel := false
		for i, r := range v.Pretokenizers {
			p, bl, err := parsePreTokenizer(r)
			if err != nil {
				return nil, false, fmt.Errorf("pre_tokenizer Sequence[%d]: %w", i, err)
			}
			if byteLevel {
				// A stage after ByteLevel would see byte-mapped runes; we
				// map bytes in the model instead, so refuse rather than
				// split differently.
				return nil, false, fmt.Errorf("pre_tokenizer Sequence[%d]: stages after ByteLevel are not supported", i)
			}
			if p != nil {
				q = append(q, p)
			}
			byteLevel = bl
		}
		return q, byteLevel, nil
	}
	return nil, false, fmt.Errorf("pre_tokenizer: unsupported type %q", t.Type)
}

// ---- post-processors --------------------------------------------------------

// postProcessor says which ids surround an encoded sequence when special
// tokens are requested (HF's add_special_tokens=True, single sequence).
type postProcessor struct {
	prefix, suffix []int
}

func parsePostProcessor(raw json.RawMessage) (*postProcessor, error) {
	pp := &postProcessor{}
	if isNull(raw) {
		return pp, nil
	}
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}
	switch t.Type {
	case "ByteLevel":
		// Only trims offsets; ids are unchanged.
	case "TemplateProcessing":
		var v struct {
			Single []struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			} `json:"single"`
			SpecialTokens map[string]struct {
				IDs []int `json:"ids"`
			} `json:"special_tokens"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("post_processor TemplateProcessing: %w", err)
		}
		seenA := false
		for _, piece := range v.Single {
			switch {
			case piece.Sequence != nil:
				if seenA {
					return nil, fmt.Errorf("post_processor TemplateProcessing: single template has two sequences")
				}
				seenA = true
			case piece.SpecialToken != nil:
				st, ok := v.SpecialTokens[piece.SpecialToken.ID]
				if !ok {
					return nil, fmt.Errorf("post_processor TemplateProcessing: special token %q not defined", piece.SpecialToken.ID)
				}
				if seenA {
					pp.suffix = append(pp.suffix, st.IDs...)
				} else {
					pp.prefix = append(pp.prefix, st.IDs...)
				}
			}
		}
		if !seenA {
			return nil, fmt.Errorf("post_processor TemplateProcessing: single template has no sequence")
		}
	case "RobertaProcessing", "BertProcessing":
		var v struct {
			Sep [2]json.RawMessage `json:"sep"`
			Cls [2]json.RawMessage `json:"cls"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("post_processor %s: %w", t.Type, err)
		}
		var sep, cls int
		if err := json.Unmarshal(v.Sep[1], &sep); err != nil {
			return nil, fmt.Errorf("post_processor %s sep: %w", t.Type, err)
		}
		if err := json.Unmarshal(v.Cls[1], &cls); err != nil {
			return nil, fmt.Errorf("post_processor %s cls: %w", t.Type, err)
		}
		pp.prefix, pp.suffix = []int{cls}, []int{sep}
	case "Sequence":
		var v struct {
			Processors []json.RawMessage `json:"processors"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("post_processor Sequence: %w", err)
		}
		for i, r := range v.Processors {
			inner, err := parsePostProcessor(r)
			if err != nil {
				return nil, fmt.Errorf("post_processor Sequence[%d]: %w", i, err)
			}
			// Later processors wrap the output of earlier ones.
			pp.prefix = append(append([]int(nil), inner.prefix...), pp.prefix...)
			pp.suffix = append(pp.suffix, inner.suffix...)
		}
	default:
		return nil, fmt.Errorf("post_processor: unsupported type %q", t.Type)
	}
	return pp, nil
}

// ---- decoders ---------------------------------------------------------------

// parseDecoder reports whether tokens are decoded byte-level (true) or
// joined with spaces (HF's behaviour with no decoder).
func parseDecoder(raw json.RawMessage) (byteLevel bool, err error) {
	if isNull(raw) {
		return false, nil
	}
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return false, fmt.Errorf("decoder: %w", err)
	}
	switch t.Type {
	case "ByteLevel":
		return true, nil
	case "Sequence":
		var v struct {
			Decoders []json.RawMessage `json:"decoders"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return false, fmt.Errorf("decoder Sequence: %w", err)
		}
		if len(v.Decoders) == 1 {
			return parseDecoder(v.Decoders[0])
		}
		return false, fmt.Errorf("decoder Sequence: only a single ByteLevel decoder is supported")
	}
	return false, fmt.Errorf("decoder: unsupported type %q", t.Type)
}
