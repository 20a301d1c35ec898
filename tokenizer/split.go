package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
)

// The split patterns of the models we serve use a negative lookahead
// (\s+(?!\S)) that Go's RE2 engine cannot run. Rather than pull a
// backtracking engine into the hot path, each known pattern string is
// recognised exactly and run by a hand-written matcher that reproduces the
// leftmost-first, backtracking semantics of Oniguruma (what HF tokenizers
// uses). Unknown patterns fall back to regexp2 (a .NET-compatible
// backtracking engine); its semantics agree with Oniguruma on the constructs
// these patterns use, and tests cross-check the hand-written matchers
// against it.

// Known split patterns, as they appear in tokenizer.json.
const (
	// PatternGPT2 is GPT-2's (and GPT-NeoX's, Mamba-2's) pre-tokenizer regex,
	// also used implicitly by ByteLevel{use_regex: true}.
	PatternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// PatternLlama3 is the Llama-3 / cl100k pattern (digits in groups of
	// up to three).
	PatternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// PatternQwen2 is the Qwen2 / Qwen3 / Qwen3-Next pattern (single digits).
	PatternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// PatternQwen35 is the Qwen3.5 pattern: like Qwen2 but combining marks
	// (\p{M}) belong to words.
	PatternQwen35 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// matcher finds the non-overlapping matches of a pattern in s, left to
// right, as byte spans.
type matcher interface {
	appendMatches(dst []span, s string) []span
}

// span is a byte range of a string; match tells whether the pattern
// matched it (false for the gaps between matches).
type span struct {
	start, end int
	match      bool
}

// newMatcher compiles a Split pattern: a known regex gets its hand-written
// matcher, a literal string a substring matcher, anything else regexp2.
func newMatcher(pattern string, isRegex bool) (matcher, error) {
	if !isRegex {
		return literalMatcher(pattern), nil
	}
	if k, ok := knownPatterns[pattern]; ok {
		return k, nil
	}
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("split regex %q: %w", pattern, err)
	}
	return &regexMatcher{re: re}, nil
}

// knownPatterns maps each recognised pattern string to its matcher.
var knownPatterns = map[string]*patternMatcher{
	PatternGPT2:   {gpt2: true},
	PatternLlama3: {fold: true, newlines: true, maxDigits: 3},
	PatternQwen2:  {fold: true, newlines: true, maxDigits: 1},
	PatternQwen35: {fold: true, newlines: true, maxDigits: 1, marks: true},
}

// charClass is the Unicode category group a split pattern cares about.
type charClass uint8

const (
	clsOther charClass = iota
	clsLetter
	clsMark
	clsNumber
	clsSpace
)

// asciiClass caches the class of every ASCII byte.
var asciiClass = func() (t [128]charClass) {
	for i := range t {
		t[i] = classOf(rune(i))
	}
	return t
}()

// classOf classifies r; \s is Unicode White_Space, which for every
// assigned code point is what unicode.IsSpace reports.
func classOf(r rune) charClass {
	switch {
	case unicode.IsSpace(r):
		return clsSpace
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsMark(r):
		return clsMark
	case unicode.IsNumber(r):
		return clsNumber
	}
	return clsOther
}

// next decodes the rune at s[i:]; invalid bytes come back as one
// U+FFFD of width 1 (class "other").
func next(s string, i int) (rune, int, charClass) {
	c := s[i]
	if c < utf8.RuneSelf {
		return rune(c), 1, asciiClass[c]
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	return r, w, classOf(r)
}

// patternMatcher runs one of the known patterns. The fields select the
// alternatives that differ between the GPT-2, Llama-3, Qwen2 and Qwen3.5
// patterns; the alternation order is the same in all of them.
type patternMatcher struct {
	gpt2      bool // ' ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+' and no newline rules
	fold      bool // contractions match case-insensitively: (?i:'s|...)
	newlines  bool // ' ?[^...]+[\r\n]*' and '\s*[\r\n]+' alternatives
	marks     bool // \p{M} joins letters in words and leaves "other"
	maxDigits int  // \p{N}{1,maxDigits}; 0 means unbounded
}

func (p *patternMatcher) appendMatches(dst []span, s string) []span {
	for i := 0; i < len(s); {
		e := p.matchAt(s, i)
		dst = append(dst, span{i, e, true})
		i = e
	}
	return dst
}

// matchAt returns the end of the match that starts at i. Every position
// starts a match in these patterns (the last alternatives catch anything),
// so matches tile the string.
func (p *patternMatcher) matchAt(s string, i int) int {
	r0, w0, c0 := next(s, i)
	if r0 == '\'' {
		if n := p.contraction(s, i+1); n > 0 {
			return i + 1 + n
		}
	}
	if p.gpt2 {
		// ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an ASCII space may
		// lead a run of one class.
		for _, in := range [...]classSet{bit(clsLetter), bit(clsNumber), bit(clsOther) | bit(clsMark)} {
			if r0 == ' ' && i+1 < len(s) {
				if _, _, c1 := next(s, i+1); in.has(c1) {
					return runOf(s, i+1, in, 0)
				}
			}
			if in.has(c0) {
				return runOf(s, i, in, 0)
			}
		}
		return p.whitespace(s, i)
	}

	// [^\r\n\p{L}\p{N}]?\p{L}+ (Qwen3.5: [\p{L}\p{M}]+): try with one
	// leading non-letter, non-digit, non-newline rune, then without.
	word, other := bit(clsLetter), bit(clsOther)|bit(clsMark)
	if p.marks {
		word, other = bit(clsLetter)|bit(clsMark), bit(clsOther)
	}
	if r0 != '\r' && r0 != '\n' && c0 != clsLetter && c0 != clsNumber {
		if e := runOf(s, i+w0, word, 0); e > i+w0 {
			return e
		}
	}
	if word.has(c0) {
		return runOf(s, i, word, 0)
	}
	if c0 == clsNumber {
		return runOf(s, i, bit(clsNumber), p.maxDigits)
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*' (Qwen3.5 also excludes \p{M}).
	j := -1
	if r0 == ' ' && i+1 < len(s) {
		if _, _, c1 := next(s, i+1); other.has(c1) {
			j = i + 1
		}
	}
	if j < 0 && other.has(c0) {
		j = i
	}
	if j >= 0 {
		e := runOf(s, j, other, 0)
		for e < len(s) && (s[e] == '\r' || s[e] == '\n') {
			e++
		}
		return e
	}
	return p.whitespace(s, i)
}

// whitespace handles '\s*[\r\n]+' (when present), '\s+(?!\S)' and '\s+' at
// i, or returns i+1 rune if s[i] is not whitespace (cannot happen for the
// known patterns, kept so the loop always advances).
func (p *patternMatcher) whitespace(s string, i int) int {
	end, last, lastNL := i, i, -1
	for end < len(s) {
		r, w, c := next(s, end)
		if c != clsSpace {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = end
		}
		last = end
		end += w
	}
	if end == i {
		_, w, _ := next(s, i)
		return i + w
	}
	if p.newlines && lastNL >= 0 {
		// \s* backtracks to the last newline of the run; [\r\n]+ then
		// takes just that one.
		return lastNL + 1
	}
	if end == len(s) || last == i {
		return end
	}
	// \s+(?!\S): give back the last whitespace rune so that it can lead
	// the next word.
	return last
}

// contraction returns the byte length of the contraction suffix at s[i:]
// ('s 't 're 've 'm 'll 'd after the apostrophe), or 0.
func (p *patternMatcher) contraction(s string, i int) int {
	at := func(k int) (rune, int) {
		if k >= len(s) {
			return 0, 0
		}
		r, w := utf8.DecodeRuneInString(s[k:])
		if p.fold {
			r = foldASCII(r)
		}
		return r, w
	}
	r1, w1 := at(i)
	switch r1 {
	case 's', 't', 'm', 'd':
		return w1
	case 'r', 'v', 'l':
		r2, w2 := at(i + w1)
		if (r1 == 'r' && r2 == 'e') || (r1 == 'v' && r2 == 'e') || (r1 == 'l' && r2 == 'l') {
			return w1 + w2
		}
	}
	return 0
}

// foldASCII maps r to the lower-case ASCII letter it case-folds to, if any
// (Unicode simple case folding also sends U+017F LONG S to 's' and U+212A
// KELVIN SIGN to 'k').
func foldASCII(r rune) rune {
	switch {
	case r >= 'A' && r <= 'Z':
		return r + ('a' - 'A')
	case r == 0x17F:
		return 's'
	case r == 0x212A:
		return 'k'
	}
	return r
}

// classSet is a set of charClass values.
type classSet uint8

func bit(c charClass) classSet { return 1 << c }

func (cs classSet) has(c charClass) bool { return cs&bit(c) != 0 }

// runOf returns the end of the run of runes whose class is in the set,
// starting at j; max > 0 caps the run at max runes.
func runOf(s string, j int, in classSet, max int) int {
	n := 0
	for j < len(s) && (max == 0 || n < max) {
		_, w, c := next(s, j)
		if !in.has(c) {
			break
		}
		j += w
		n++
	}
	return j
}

// literalMatcher matches a fixed string (Split's {"String": ...} pattern).
type literalMatcher string

func (l literalMatcher) appendMatches(dst []span, s string) []span {
	if l == "" {
		return dst
	}
	for i := 0; ; {
		k := strings.Index(s[i:], string(l))
		if k < 0 {
			return dst
		}
		dst = append(dst, span{i + k, i + k + len(l), true})
		i += k + len(l)
	}
}

// regexMatcher runs a pattern we do not know through regexp2. regexp2
// reports rune offsets over []rune(s); converting s to runes maps every
// invalid byte to one U+FFFD, exactly as ranging over s does, so the byte
// offsets below line up even for invalid UTF-8.
type regexMatcher struct {
	re *regexp2.Regexp
}

func (m *regexMatcher) appendMatches(dst []span, s string) []span {
	runes := []rune(s)
	offs := make([]int, 0, len(runes)+1)
	for i := range s {
		offs = append(offs, i)
	}
	offs = append(offs, len(s))
	idx, err := m.re.FindAllRunesIndex(runes, -1)
	if err != nil { // only a match timeout, which we never set
		return dst
	}
	for _, p := range idx {
		if p[1] > p[0] {
			dst = append(dst, span{offs[p[0]], offs[p[1]], true})
		}
	}
	return dst
}

// Behavior says what a Split does with the matches of its pattern
// (HF's SplitDelimiterBehavior).
type behavior uint8

const (
	behaviorRemoved behavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

var behaviorNames = map[string]behavior{
	"Removed": behaviorRemoved, "Isolated": behaviorIsolated,
	"MergedWithPrevious": behaviorMergedWithPrevious, "MergedWithNext": behaviorMergedWithNext,
	"Contiguous": behaviorContiguous,
}

// applyBehavior turns the matches of a pattern over s into pieces, as HF's
// NormalizedString::split does: fill the gaps, optionally invert, then
// remove, isolate or merge the matches; empty pieces are dropped.
func applyBehavior(dst []string, s string, matches []span, b behavior, invert bool, buf []span) ([]string, []span) {
	all := buf[:0]
	prev := 0
	for _, m := range matches {
		if m.start > prev {
			all = append(all, span{prev, m.start, false})
		}
		all = append(all, span{m.start, m.end, true})
		prev = m.end
	}
	if prev < len(s) {
		all = append(all, span{prev, len(s), false})
	}
	if invert {
		for i := range all {
			all[i].match = !all[i].match
		}
	}
	emit := func(sp span) {
		if sp.end > sp.start {
			dst = append(dst, s[sp.start:sp.end])
		}
	}
	switch b {
	case behaviorRemoved:
		for _, sp := range all {
			if !sp.match {
				emit(sp)
			}
		}
	case behaviorIsolated:
		for _, sp := range all {
			emit(sp)
		}
	case behaviorMergedWithPrevious:
		out := all[:0]
		prevMatch := false
		for _, sp := range all {
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
		for _, sp := range out {
			emit(sp)
		}
		all = out
	case behaviorMergedWithNext:
		// Walk backwards: a match is glued to the piece after it.
		var rev []span
		prevMatch := false
		for k := len(all) - 1; k >= 0; k-- {
			sp := all[k]
			if sp.match && !prevMatch && len(rev) > 0 {
				rev[len(rev)-1].start = sp.start
			} else {
				rev = append(rev, sp)
			}
			prevMatch = sp.match
		}
		for k := len(rev) - 1; k >= 0; k-- {
			emit(rev[k])
		}
	case behaviorContiguous:
		out := all[:0]
		prevMatch := false
		for k, sp := range all {
			if k > 0 && sp.match == prevMatch {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
		for _, sp := range out {
			emit(sp)
		}
		all = out
	}
	return dst, all
}
