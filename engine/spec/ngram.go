package spec

import "context"

// NGram is prompt-lookup drafting: it finds the most recent earlier
// occurrence of the sequence's last n tokens in its own history (n from MaxN
// down to MinN) and proposes the tokens that followed it. It needs no model
// and keeps no state, and it wins on repetitive text (code edits, quoting,
// summaries, and the loops small models fall into).
type NGram struct {
	MaxN, MinN int // match lengths tried, longest first; zero values mean 3 and 1
}

// Propose fills each request's drafts from its history.
func (g *NGram) Propose(ctx context.Context, reqs []Request) error {
	maxN, minN := g.MaxN, g.MinN
	if maxN <= 0 {
		maxN = 3
	}
	if minN <= 0 {
		minN = 1
	}
	for i := range reqs {
		if err := ctx.Err(); err != nil {
			return err
		}
		r := &reqs[i]
		r.Drafts, r.Probs = r.Drafts[:0], nil
		if r.Max <= 0 {
			continue
		}
		r.Drafts = lookup(r.History, maxN, minN, r.Max, r.Drafts)
	}
	return nil
}

// lookup appends to dst up to max tokens that followed the latest earlier
// occurrence of the last n tokens of h, for the longest n in [minN, maxN]
// that occurs. The continuation may run past the end of h: a match that ends
// at h[e] continues with h[e:] and then with its own drafts, which extends a
// repeating cycle (the drafts then repeat the period).
func lookup(h []int, maxN, minN, max int, dst []int) []int {
	L := len(h)
	for n := min(maxN, L-1); n >= minN; n-- {
		suffix := h[L-n:]
		// Latest start i < L−n with h[i:i+n] == suffix.
		for i := L - n - 1; i >= 0; i-- {
			if !equal(h[i:i+n], suffix) {
				continue
			}
			e := i + n // first continuation index, e ≤ L−1
			for j := 0; j < max; j++ {
				k := e + j
				if k < L {
					dst = append(dst, h[k])
				} else {
					dst = append(dst, dst[k-L])
				}
			}
			return dst
		}
	}
	return dst
}

func equal(a, b []int) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Release does nothing: NGram keeps no state.
func (g *NGram) Release(int) {}

// Close does nothing.
func (g *NGram) Close() {}
