package replay

import (
	"math/rand/v2"
	"testing"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/ssm"
)

// BenchmarkKDANonflush times the non-flush step of a Kimi-Linear-48B KDA
// layer (32 heads, dk = dv = 128, a key head per value head) at batch 64 on
// two threads, fp32 checkpoint read and nvfp4 read copy, as
// BenchmarkGDNNonflush: every slot's ring is held between 0 and L-2
// entries, so every step is a non-flush step. "flushing" lets the rings
// run to the flush (one step in L of every slot, at staggered phases), so
// it adds the folds' share to the fp32 step.
func BenchmarkKDANonflush(b *testing.B) {
	shape := ssm.GDNShape{KeyHeads: 32, ValueHeads: 32, KeyDim: 128, ValueDim: 128}
	const batch = 64
	for _, bc := range []struct {
		name     string
		read     numeric.Format
		flushing bool
	}{{"fp32", numeric.F32, false}, {"nvfp4", numeric.NVFP4, false}, {"flushing", numeric.F32, true}} {
		b.Run(bc.name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			Hk, Hv, dk, dv := shape.KeyHeads, shape.ValueHeads, shape.KeyDim, shape.ValueDim
			c, err := NewKDA(shape, ConvWeights{}, batch, Options{Mode: Replay, ReadCopy: bc.read, Threads: 2})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			slots := admitAll(b, c, batch)
			fill := func(n int) []float32 { return normals(r, n) }
			in := KDAInput{Q: fill(batch * Hk * dk), K: fill(batch * Hk * dk), V: fill(batch * Hv * dv),
				G: make([]float32, batch*Hv*dk), B: fill(batch * Hv)}
			for i := range in.G {
				in.G[i] = float32(-3 * r.Float64())
			}
			o := make([]float32, batch*Hv*dv)
			if bc.flushing {
				// Stagger the slots' phases, as a server's are.
				for i, s := range slots {
					c.ledger.slots.hist[s] = int32(i % (c.opt.Window - 1))
				}
			}
			loopSteps(b, &c.core, slots, !bc.flushing, func() error { return c.Step(slots, in, o) })
		})
	}
}
