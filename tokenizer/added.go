package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json's "added_tokens".
type addedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// addedMatcher finds added tokens in text: leftmost-longest, non-overlapping,
// as HF's aho-corasick (MatchKind::LeftmostLongest) search does, with the
// single_word, lstrip and rstrip rules applied to each match.
type addedMatcher struct {
	nodes []trieNode
	// root is the trie's first level as an array: most text bytes start
	// no token, and this check runs once per byte of input.
	root [256]int32
}

type trieNode struct {
	next map[byte]int32
	tok  *addedToken // token ending here, nil if none
}

func newAddedMatcher(tokens []*addedToken) *addedMatcher {
	if len(tokens) == 0 {
		return nil
	}
	m := &addedMatcher{nodes: []trieNode{{}}}
	for _, t := range tokens {
		if t.Content == "" {
			continue
		}
		n := int32(0)
		for i := 0; i < len(t.Content); i++ {
			c := t.Content[i]
			if m.nodes[n].next == nil {
				m.nodes[n].next = make(map[byte]int32)
			}
			k, ok := m.nodes[n].next[c]
			if !ok {
				k = int32(len(m.nodes))
				m.nodes = append(m.nodes, trieNode{})
				m.nodes[n].next[c] = k
			}
			n = k
		}
		m.nodes[n].tok = t
	}
	for c, k := range m.nodes[0].next {
		m.root[c] = k
	}
	return m
}

// longest returns the longest token that s[i:] starts with.
func (m *addedMatcher) longest(s string, i int) (*addedToken, int) {
	var best *addedToken
	end := i
	n := m.root[s[i]]
	if n == 0 {
		return nil, i
	}
	if t := m.nodes[n].tok; t != nil {
		best, end = t, i+1
	}
	for j := i + 1; j < len(s); j++ {
		k, ok := m.nodes[n].next[s[j]]
		if !ok {
			break
		}
		n = k
		if t := m.nodes[n].tok; t != nil {
			best, end = t, j+1
		}
	}
	return best, end
}

// addedMatch is a found token and the byte range it takes (widened by
// lstrip/rstrip over neighbouring whitespace).
type addedMatch struct {
	start, end int
	tok        *addedToken
}

// find appends the matches in s. skipSpecial drops special tokens (HF's
// encode_special_tokens): their text is then tokenized as ordinary text.
func (m *addedMatcher) find(dst []addedMatch, s string, skipSpecial bool) []addedMatch {
	if m == nil {
		return dst
	}
	prevEnd := 0
	for i := 0; i < len(s); {
		if m.root[s[i]] == 0 {
			i++
			continue
		}
		t, end := m.longest(s, i)
		if t == nil {
			i++
			continue
		}
		start := i
		i = end // the search resumes after the match even if it is discarded
		if skipSpecial && t.Special {
			continue
		}
		if t.SingleWord && (endsWithWordChar(s[:start]) || startsWithWordChar(s[end:])) {
			continue
		}
		if t.LStrip {
			for start > prevEnd {
				r, w := utf8.DecodeLastRuneInString(s[:start])
				if !unicode.IsSpace(r) {
					break
				}
				start -= w
			}
		}
		if t.RStrip {
			for end < len(s) {
				r, w := utf8.DecodeRuneInString(s[end:])
				if !unicode.IsSpace(r) {
					break
				}
				end += w
			}
			i = end
		}
		dst = append(dst, addedMatch{start, end, t})
		prevEnd = end
	}
	return dst
}

// isWordChar is the \w of the single_word check: letters, digits (any
// Unicode N) and underscore.
func isWordChar(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r)
}

func endsWithWordChar(s string) bool {
	if s == "" {
		return false
	}
	r, _ := utf8.DecodeLastRuneInString(s)
	return isWordChar(r)
}

func startsWithWordChar(s string) bool {
	if s == "" {
		return false
	}
	r, _ := utf8.DecodeRuneInString(s)
	return isWordChar(r)
}
