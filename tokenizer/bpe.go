package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
)

// bpe is a byte-pair-encoding model. Merges are keyed by the pair of
// symbol ids, so encoding a word never builds strings.
type bpe struct {
	vocab  map[string]int
	merges map[uint64]mergeInfo

	byteLevel bool             // words are raw bytes; symbols start as byteIDs
	byteIDs   [256]int32       // id of each byte's byte-level rune, -1 if absent
	rawVocab  map[string]int32 // ignore_merges lookup by raw bytes (byte-level)

	ignoreMerges bool
	byteFallback bool
	fallbackIDs  [256]int32 // ids of "<0xXX>" tokens, -1 if absent
	fuseUnk      bool
	unk          int32 // -1 when the model has no unk token

	cache wordCache
}

// mergeInfo is what a pair of adjacent symbols becomes: rank is the
// merge's position in the merges list (lower merges first).
type mergeInfo struct {
	rank, id int32
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// modelJSON is tokenizer.json's "model" object.
type modelJSON struct {
	Type                    string          `json:"type"`
	Vocab                   map[string]int  `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Dropout                 *float64        `json:"dropout"`
}

// parseMerges accepts both spellings found in the wild: "a b" strings
// (tokenizers < 0.20) and ["a", "b"] pairs (newer files).
func parseMerges(raw json.RawMessage) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var asStrings []string
	if err := json.Unmarshal(raw, &asStrings); err == nil {
		out := make([][2]string, len(asStrings))
		for i, m := range asStrings {
			a, b, ok := strings.Cut(m, " ")
			if !ok || a == "" || b == "" {
				return nil, fmt.Errorf("merge %d %q: want two tokens separated by a space", i, m)
			}
			out[i] = [2]string{a, b}
		}
		return out, nil
	}
	var asPairs [][]string
	if err := json.Unmarshal(raw, &asPairs); err != nil {
		return nil, fmt.Errorf("merges: neither strings nor pairs: %w", err)
	}
	out := make([][2]string, len(asPairs))
	for i, m := range asPairs {
		if len(m) != 2 {
			return nil, fmt.Errorf("merge %d: want a pair, got %d tokens", i, len(m))
		}
		out[i] = [2]string{m[0], m[1]}
	}
	return out, nil
}

func newBPE(m *modelJSON, byteLevel bool, bl *byteLevel) (*bpe, error) {
	if m.Type != "" && m.Type != "BPE" {
		return nil, fmt.Errorf("model: unsupported type %q (only BPE)", m.Type)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, fmt.Errorf("model: continuing_subword_prefix is not supported")
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("model: end_of_word_suffix is not supported")
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, fmt.Errorf("model: BPE dropout is not supported")
	}
	for tok, id := range m.Vocab {
		if id < 0 || id > 1<<30 {
			return nil, fmt.Errorf("model: token %q has id %d out of range", tok, id)
		}
	}
	p := &bpe{
		vocab:        m.Vocab,
		byteLevel:    byteLevel,
		ignoreMerges: m.IgnoreMerges,
		byteFallback: m.ByteFallback,
		fuseUnk:      m.FuseUnk,
		unk:          -1,
	}
	if m.UnkToken != nil {
		id, ok := m.Vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("model: unk_token %q not in vocab", *m.UnkToken)
		}
		p.unk = int32(id)
	}
	for b := 0; b < 256; b++ {
		p.byteIDs[b], p.fallbackIDs[b] = -1, -1
		if id, ok := m.Vocab[bl.toString[b]]; ok {
			p.byteIDs[b] = int32(id)
		}
		if id, ok := m.Vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			p.fallbackIDs[b] = int32(id)
		}
	}
	merges, err := parseMerges(m.Merges)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	p.merges = make(map[uint64]mergeInfo, len(merges))
	for rank, mg := range merges {
		a, okA := m.Vocab[mg[0]]
		b, okB := m.Vocab[mg[1]]
		c, okC := m.Vocab[mg[0]+mg[1]]
		if !okA || !okB || !okC {
			return nil, fmt.Errorf("model: merge %d (%q %q) uses a token missing from the vocab", rank, mg[0], mg[1])
		}
		p.merges[pairKey(int32(a), int32(b))] = mergeInfo{int32(rank), int32(c)}
	}
	if p.ignoreMerges && byteLevel {
		p.rawVocab = make(map[string]int32, len(m.Vocab))
		for tok, id := range m.Vocab {
			if raw, ok := bl.unmap(tok); ok {
				p.rawVocab[string(raw)] = int32(id)
			}
		}
	}
	return p, nil
}

// symbol is one node of the doubly linked list a word is merged in.
type symbol struct {
	id         int32
	prev, next int32
	gone       bool // merged into its left neighbour
}

// mergeItem is a candidate merge of the symbol at pos with its right
// neighbour.
type mergeItem struct {
	rank, pos, id int32
}

// encodeWord appends the ids of one pre-tokenised piece.
func (p *bpe) encodeWord(dst []int, word string, sc *scratch) []int {
	if word == "" {
		return dst
	}
	if p.ignoreMerges {
		// A word that is itself a token is emitted whole (Llama-3 style).
		if p.byteLevel {
			if id, ok := p.rawVocab[word]; ok {
				return append(dst, int(id))
			}
		} else if id, ok := p.vocab[word]; ok {
			return append(dst, id)
		}
	}
	cacheable := len(word) <= maxCachedWord
	if cacheable {
		if ids, ok := p.cache.get(word); ok {
			for _, id := range ids {
				dst = append(dst, int(id))
			}
			return dst
		}
	}
	syms := p.initialSymbols(sc.syms[:0], word)
	syms = p.mergeAll(syms, sc)
	sc.syms = syms
	start := len(dst)
	for i := int32(0); len(syms) > 0 && i >= 0; i = syms[i].next {
		dst = append(dst, int(syms[i].id))
	}
	if cacheable {
		ids := make([]int32, len(dst)-start)
		for i, id := range dst[start:] {
			ids[i] = int32(id)
		}
		p.cache.put(strings.Clone(word), ids)
	}
	return dst
}

// initialSymbols splits a word into its starting symbols: one per byte for
// byte-level models, one per rune otherwise, with HF's handling of runes
// missing from the vocab (byte fallback, then the unk token, fused if
// asked, else dropped).
func (p *bpe) initialSymbols(syms []symbol, word string) []symbol {
	add := func(id int32) {
		n := int32(len(syms))
		syms = append(syms, symbol{id: id, prev: n - 1, next: n + 1})
	}
	pendingUnk := false
	flushUnk := func() {
		if pendingUnk {
			add(p.unk)
			pendingUnk = false
		}
	}
	unknown := func() {
		if p.unk < 0 {
			return
		}
		if pendingUnk && !p.fuseUnk {
			add(p.unk)
		}
		pendingUnk = true
	}
	if p.byteLevel {
		for i := 0; i < len(word); i++ {
			if id := p.byteIDs[word[i]]; id >= 0 {
				flushUnk()
				add(id)
			} else {
				unknown()
			}
		}
	} else {
		for i := 0; i < len(word); {
			_, w, _ := next(word, i)
			if id, ok := p.vocab[word[i:i+w]]; ok {
				flushUnk()
				add(int32(id))
			} else if p.byteFallback && p.allFallback(word[i:i+w]) {
				// HF adds the byte tokens without first emitting a pending
				// unk; keep that order.
				for k := i; k < i+w; k++ {
					add(p.fallbackIDs[word[k]])
				}
			} else {
				unknown()
			}
			i += w
		}
	}
	flushUnk()
	if len(syms) > 0 {
		syms[len(syms)-1].next = -1
	}
	return syms
}

func (p *bpe) allFallback(s string) bool {
	for k := 0; k < len(s); k++ {
		if p.fallbackIDs[s[k]] < 0 {
			return false
		}
	}
	return true
}

// mergeAll applies merges lowest rank first, leftmost first among equal
// ranks, exactly as HF's Word::merge_all does (including how it discards
// stale queue entries), in O(n log n) with a binary heap.
func (p *bpe) mergeAll(syms []symbol, sc *scratch) []symbol {
	h := sc.heap[:0]
	for i := 0; i+1 < len(syms); i++ {
		if m, ok := p.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h = heapPush(h, mergeItem{m.rank, int32(i), m.id})
		}
	}
	for len(h) > 0 {
		var top mergeItem
		top, h = heapPop(h)
		cur := &syms[top.pos]
		if cur.gone || cur.next < 0 {
			continue
		}
		nextPos := cur.next
		right := syms[nextPos]
		if m, ok := p.merges[pairKey(cur.id, right.id)]; !ok || m.id != top.id {
			continue // stale entry
		}
		cur.id = top.id
		cur.next = right.next
		syms[nextPos].gone = true
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if m, ok := p.merges[pairKey(syms[cur.prev].id, cur.id)]; ok {
				h = heapPush(h, mergeItem{m.rank, cur.prev, m.id})
			}
		}
		if cur.next >= 0 {
			if m, ok := p.merges[pairKey(cur.id, syms[cur.next].id)]; ok {
				h = heapPush(h, mergeItem{m.rank, top.pos, m.id})
			}
		}
	}
	sc.heap = h
	return syms
}

func itemLess(a, b mergeItem) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

func heapPush(h []mergeItem, it mergeItem) []mergeItem {
	h = append(h, it)
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !itemLess(h[i], h[parent]) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
	return h
}

func heapPop(h []mergeItem) (mergeItem, []mergeItem) {
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && itemLess(h[l], h[m]) {
			m = l
		}
		if r < n && itemLess(h[r], h[m]) {
			m = r
		}
		if m == i {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	return top, h
}

// Word cache. Pieces repeat a lot in real text ("Ġthe", "ĠĠĠ"), so the ids
// of each short piece are remembered. The cache is per Tokenizer, safe for
// concurrent use, and bounded: each shard is dropped whole when full, which
// keeps memory fixed without LRU bookkeeping on the hot path.
const (
	maxCachedWord  = 256
	cacheShards    = 16
	cacheShardSize = 4096
)

type wordCache struct {
	shards [cacheShards]cacheShard
}

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]int32
}

func shardOf(s string) int {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return int(h % cacheShards)
}

func (c *wordCache) get(word string) ([]int32, bool) {
	sh := &c.shards[shardOf(word)]
	sh.mu.RLock()
	ids, ok := sh.m[word]
	sh.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(word string, ids []int32) {
	sh := &c.shards[shardOf(word)]
	sh.mu.Lock()
	if sh.m == nil || len(sh.m) >= cacheShardSize {
		sh.m = make(map[string][]int32, 256)
	}
	sh.m[word] = ids
	sh.mu.Unlock()
}
