package nn_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
)

// mlaRef is MLA in float64: plain softmax attention of every head over
// keys and values rebuilt from each cached position's latent, from the
// definition (DeepSeek-V2's MLA, the rope parts unrotated as in Kimi).
type mlaRef struct {
	a   *nn.MLA
	lat [][][]float64 // [seq][position] the normalised latent and the rope part
}

func (r *mlaRef) step(seq int, x []float64) []float64 {
	a := r.a
	H, dn, dr, dv, R := a.Heads, a.NopeDim, a.RopeDim, a.VDim, a.Rank
	qin := x
	if a.QA != nil {
		qin = rmsnorm64(apply64(*a.QA, x), a.QNorm.W, float64(a.QNorm.Eps))
	}
	q := apply64(a.Q, qin)
	ckv := apply64(a.KVA, x)
	c := rmsnorm64(ckv[:R], a.KVNorm.W, float64(a.KVNorm.Eps))
	r.lat[seq] = append(r.lat[seq], append(c, ckv[R:]...))
	T := len(r.lat[seq])
	kv := make([][]float64, T) // per position, per head [kn ; v]
	for t, l := range r.lat[seq] {
		kv[t] = apply64(a.KVB, l[:R])
	}
	scale := 1 / math.Sqrt(float64(dn+dr))
	o := make([]float64, H*dv)
	for h := range H {
		qh := q[h*(dn+dr) : (h+1)*(dn+dr)]
		s := make([]float64, T)
		mx := math.Inf(-1)
		for t := range T {
			kn := kv[t][h*(dn+dv) : h*(dn+dv)+dn]
			kr := r.lat[seq][t][R:]
			for i := range dn {
				s[t] += qh[i] * kn[i]
			}
			for i := range dr {
				s[t] += qh[dn+i] * kr[i]
			}
			s[t] *= scale
			mx = max(mx, s[t])
		}
		var sum float64
		for t := range s {
			s[t] = math.Exp(s[t] - mx)
			sum += s[t]
		}
		for t := range T {
			v := kv[t][h*(dn+dv)+dn : (h+1)*(dn+dv)]
			for i := range dv {
				o[h*dv+i] += s[t] / sum * v[i]
			}
		}
	}
	return apply64(a.O, o)
}

func (r *mlaRef) save(seq int) any { return slices.Clone(r.lat[seq]) }

func (r *mlaRef) restore(seq int, s any) { r.lat[seq] = slices.Clone(s.([][]float64)) }

func randomMLA(rng *rand.Rand, hidden, heads, dn, dr, dv, rank, qRank int) *nn.MLA {
	a := &nn.MLA{Heads: heads, NopeDim: dn, RopeDim: dr, VDim: dv, Rank: rank,
		KVA:    linear(rng, rank+dr, hidden),
		KVNorm: nn.RMSNorm{W: normals(rng, rank, 0.3, 1), Eps: 1e-6},
		KVB:    linear(rng, heads*(dn+dv), rank),
		O:      linear(rng, hidden, heads*dv),
	}
	if qRank > 0 {
		qa := linear(rng, qRank, hidden)
		a.QA = &qa
		a.QNorm = &nn.RMSNorm{W: normals(rng, qRank, 0.3, 1), Eps: 1e-6}
		a.Q = linear(rng, heads*(dn+dr), qRank)
	} else {
		a.Q = linear(rng, heads*(dn+dr), hidden)
	}
	// Larger queries sharpen the softmax, so that a wrong key shows.
	for i := range a.Q.W.F32 {
		a.Q.W.F32[i] *= 3
	}
	return a
}

// TestMLA holds latent attention to plain float64 attention over keys and
// values rebuilt from the latents: two sequences' prompts in one pass,
// batched decode steps, and verifies whose rejected rows Commit must take
// out of the latent cache. The shapes pad the heads both ways (keys wider
// than values, and values wider), with and without a query LoRA, and
// with no rope part.
func TestMLA(t *testing.T) {
	shapes := []struct {
		heads, dn, dr, dv, rank, qRank int
	}{
		{3, 8, 4, 6, 10, 0},   // Kimi-Linear's form: keys wider than values
		{2, 4, 2, 10, 7, 5},   // values wider than keys, DeepSeek's query LoRA
		{1, 6, 0, 6, 4, 0},    // no rope part
		{4, 16, 8, 12, 24, 0}, // the kimi_linear fixture's sizes
	}
	for _, s := range shapes {
		t.Run(fmt.Sprintf("h%d-nope%d-rope%d-v%d-r%d-q%d", s.heads, s.dn, s.dr, s.dv, s.rank, s.qRank), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, uint64(s.dv)))
			const hidden = 16
			a := randomMLA(rng, hidden, s.heads, s.dn, s.dr, s.dv, s.rank, s.qRank)
			ref := &mlaRef{a: a, lat: make([][][]float64, 2)}
			h := newBlockHarness(t, rng, hidden, 40, a, ref, replay.Options{MaxDraft: 4}, 2, 2e-5)
			h.script(rng)
			t.Logf("worst error %.2e of the row's largest", h.worst)
		})
	}
}
