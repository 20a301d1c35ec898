package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dlclark/regexp2/v2"
)

// The hand-written matchers must split exactly like a backtracking regex
// engine running the pattern itself. regexp2 is that independent engine.

var knownPatternNames = map[string]string{
	"gpt2": PatternGPT2, "llama3": PatternLlama3, "qwen2": PatternQwen2, "qwen35": PatternQwen35,
}

func referenceSplit(t testing.TB, pattern, s string) []string {
	t.Helper()
	re := regexp2.MustCompile(pattern, regexp2.None)
	var out []string
	for _, sp := range (&regexMatcher{re: re}).appendMatches(nil, s) {
		out = append(out, s[sp.start:sp.end])
	}
	return out
}

func handSplit(pattern, s string) []string {
	var out []string
	for _, sp := range knownPatterns[pattern].appendMatches(nil, s) {
		out = append(out, s[sp.start:sp.end])
	}
	return out
}

// splitAlphabet mixes every character class the patterns distinguish.
var splitAlphabet = []string{
	"a", "Z", "é", "日", "ß", "'", "s", "S", "t", "re", "RE", "ve", "m", "ll", "LL", "d", "D",
	"0", "7", "٣", "½", "Ⅻ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028",
	"\u0301", "\u0308", "!", ".", ",", "-", "_", "(", ")", "😀", "\u200d", "$", "\u0085", "\v", "\f",
}

func randomText(r *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(splitAlphabet[r.IntN(len(splitAlphabet))])
	}
	return b.String()
}

func TestKnownPatternsMatchRegexEngine(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	inputs := []string{
		"", "Hello world", "I'M can't 'LL 've", "  x", "a  \n  b", "\r\n\r\n  \n\t \n", "12345678",
		"e\u0301 \u0301x a \u0301\u0302b", "x\u0301\u0301y", "foo   ", "   ", "!!!\n\n", " !\r\n",
	}
	for range 3000 {
		inputs = append(inputs, randomText(r, 1+r.IntN(12)))
	}
	for name, pattern := range knownPatternNames {
		t.Run(name, func(t *testing.T) {
			fails := 0
			for _, s := range inputs {
				want := referenceSplit(t, pattern, s)
				if got := handSplit(pattern, s); !slices.Equal(got, want) {
					t.Errorf("split %q:\n got %q\nwant %q", s, got, want)
					if fails++; fails > 10 {
						t.FailNow()
					}
				}
			}
		})
	}
}

// TestKnownPatternsTable spells out the behaviours that differ between
// the patterns.
func TestKnownPatternsTable(t *testing.T) {
	tests := []struct {
		pattern, in string
		want        []string
	}{
		{PatternGPT2, "I'M here", []string{"I", "'", "M", " here"}},
		{PatternLlama3, "I'M here", []string{"I", "'M", " here"}},
		{PatternLlama3, "1234567", []string{"123", "456", "7"}},
		{PatternQwen2, "1234", []string{"1", "2", "3", "4"}},
		{PatternGPT2, " 1234", []string{" 1234"}},
		{PatternQwen35, "cafe\u0301s", []string{"cafe\u0301s"}},
		{PatternQwen2, "cafe\u0301s", []string{"cafe", "\u0301s"}},
		{PatternLlama3, "a  b", []string{"a", " ", " b"}},
		{PatternLlama3, "a \n\n b", []string{"a", " \n\n", " b"}},
		{PatternGPT2, "a \n\n b", []string{"a", " \n\n", " b"}},
		{PatternLlama3, "x.\r\n\r\ny", []string{"x", ".\r\n\r\n", "y"}},
		{PatternQwen35, "\tfoo", []string{"\tfoo"}},
		{PatternQwen35, "end  ", []string{"end", "  "}},
	}
	for _, tt := range tests {
		if got := handSplit(tt.pattern, tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("%.20s… split %q = %q, want %q", tt.pattern, tt.in, got, tt.want)
		}
		if ref := referenceSplit(t, tt.pattern, tt.in); !slices.Equal(ref, tt.want) {
			t.Errorf("regexp2 disagrees with the table for %q: %q", tt.in, ref)
		}
	}
}

func FuzzKnownPatterns(f *testing.F) {
	for _, s := range []string{"Hello, world!", "I'm 12345 \n\n x", "e\u0301\u0301 ", "\xff\xfe a", "'S 'll\r\n"} {
		f.Add(s)
	}
	res := map[string]*regexp2.Regexp{}
	for _, p := range knownPatternNames {
		res[p] = regexp2.MustCompile(p, regexp2.None)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range knownPatternNames {
			got := handSplit(p, s)
			if strings.Join(got, "") != s {
				t.Fatalf("pieces %q do not tile %q", got, s)
			}
			// regexp2 sees invalid bytes as U+FFFD; compare on valid text.
			if !strings.ContainsRune(s, '\uFFFD') && strings.ToValidUTF8(s, "") == s {
				var want []string
				for _, sp := range (&regexMatcher{re: res[p]}).appendMatches(nil, s) {
					want = append(want, s[sp.start:sp.end])
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%.20s… split %q:\n got %q\nwant %q", p, s, got, want)
				}
			}
		}
	})
}

func TestApplyBehavior(t *testing.T) {
	// Matches of "-" in "a-b--c".
	s := "a-b--c"
	m := literalMatcher("-").appendMatches(nil, s)
	tests := []struct {
		b      behavior
		invert bool
		want   []string
	}{
		{behaviorRemoved, false, []string{"a", "b", "c"}},
		{behaviorIsolated, false, []string{"a", "-", "b", "-", "-", "c"}},
		{behaviorMergedWithPrevious, false, []string{"a-", "b-", "-", "c"}},
		{behaviorMergedWithNext, false, []string{"a", "-b", "-", "-c"}},
		{behaviorContiguous, false, []string{"a", "-", "b", "--", "c"}},
		{behaviorRemoved, true, []string{"-", "-", "-"}},
	}
	for _, tt := range tests {
		got, _ := applyBehavior(nil, s, m, tt.b, tt.invert, nil)
		if !slices.Equal(got, tt.want) {
			t.Errorf("behavior %d invert %v: got %q, want %q", tt.b, tt.invert, got, tt.want)
		}
	}
}
