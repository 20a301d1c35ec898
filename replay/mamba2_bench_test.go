package replay

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/ssm"
)

// BenchmarkMamba2Nonflush times the non-flush step of a Nemotron-3-Nano
// (96 heads of 80×128) and a Nemotron-3-Super (128 heads of 64×128) Mamba-2
// layer, 8 groups, at batch 64 on two threads, fp32 or bf16 checkpoint read
// and nvfp4 read copy: every slot's ring is held between 0 and L-2 entries (its
// cursor wraps before the flush), so every step is a non-flush step and a
// CPU profile sees nothing else.
func BenchmarkMamba2Nonflush(b *testing.B) {
	const batch = 64
	for _, sh := range []struct {
		name  string
		shape ssm.Mamba2Shape
	}{
		{"nano", ssm.Mamba2Shape{Heads: 96, HeadDim: 80, StateSize: 128, Groups: 8}},
		{"super", ssm.Mamba2Shape{Heads: 128, HeadDim: 64, StateSize: 128, Groups: 8}},
	} {
		for _, f := range []struct {
			name          string
			state, readCp numeric.Format
		}{{"fp32", numeric.F32, numeric.F32}, {"bf16", numeric.BF16, numeric.F32}, {"nvfp4", numeric.F32, numeric.NVFP4}} {
			benchMamba2Nonflush(b, sh.name+"/"+f.name, sh.shape, Options{Mode: Replay, State: f.state, ReadCopy: f.readCp, Threads: 2}, batch)
		}
	}
}

func benchMamba2Nonflush(b *testing.B, name string, shape ssm.Mamba2Shape, opt Options, batch int) {
	b.Run(name, func(b *testing.B) {
		r := rand.New(rand.NewPCG(1, 2))
		H, P, N, G := shape.Heads, shape.HeadDim, shape.StateSize, shape.Groups
		prm := Mamba2Params{ALog: make([]float32, H), DtBias: make([]float32, H), D: make([]float32, H)}
		for h := range H {
			prm.ALog[h] = float32(math.Log(1 + 15*r.Float64()))
			prm.DtBias[h] = float32(r.NormFloat64()*0.5 - 2)
			prm.D[h] = float32(r.NormFloat64())
		}
		c, err := NewMamba2(shape, prm, ConvWeights{}, batch, opt)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		slots := admitAll(b, c, batch)
		fill := func(n int) []float32 { return normals(r, n) }
		in := Mamba2Input{X: fill(batch * H * P), B: fill(batch * G * N), C: fill(batch * G * N), Dt: fill(batch * H)}
		y := make([]float32, batch*H*P)
		loopSteps(b, &c.core, slots, true, func() error { return c.Step(slots, in, y) })
	})
}
