package replay

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/ssm"
)

// BenchmarkGDNNonflush times the non-flush step of a Qwen3.5-4B GDN layer
// (Hk 16, Hv 32, dk = dv = 128) at batch 64 on two threads, fp32 checkpoint
// read and nvfp4 read copy: every slot's ring is held between 0 and L-2
// entries (its cursor wraps before the flush), so every step is a non-flush
// step and a CPU profile sees nothing else.
func BenchmarkGDNNonflush(b *testing.B) {
	shape := ssm.GDNShape{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128}
	const batch = 64
	for _, rc := range []numeric.Format{numeric.F32, numeric.NVFP4} {
		b.Run(map[numeric.Format]string{numeric.F32: "fp32", numeric.NVFP4: "nvfp4"}[rc], func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			Hk, Hv, dk, dv := shape.KeyHeads, shape.ValueHeads, shape.KeyDim, shape.ValueDim
			prm := GDNParams{ALog: make([]float32, Hv), DtBias: make([]float32, Hv)}
			for j := range Hv {
				prm.ALog[j] = float32(math.Log(1 + 15*r.Float64()))
				prm.DtBias[j] = float32(r.NormFloat64()*0.5 - 2)
			}
			opt := Options{Mode: Replay, ReadCopy: rc, Threads: 2}
			c, err := NewGDN(shape, prm, ConvWeights{}, batch, opt)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			slots := admitAll(b, c, batch)
			fill := func(n int) []float32 { return normals(r, n) }
			in := GDNInput{Q: fill(batch * Hk * dk), K: fill(batch * Hk * dk), V: fill(batch * Hv * dv), A: fill(batch * Hv), B: fill(batch * Hv)}
			o := make([]float32, batch*Hv*dv)
			loopSteps(b, &c.core, slots, true, func() error { return c.Step(slots, in, o) })
		})
	}
}
