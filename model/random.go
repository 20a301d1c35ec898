package model

import (
	"fmt"
	"hash/fnv"
	"math"
	"runtime"
	"strings"
	"sync"

	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/tensor"
)

// LoadRandom builds cfg's Decoder with seeded random weights instead of a
// checkpoint's, so that a model is timed at its true shapes without its
// weights. layers > 0 keeps only the first layers of the pattern (models
// too large for one device are timed per layer). Weights are drawn so that
// activations keep their scale: projections N(0, 1/in), norms near 1, the
// SSM parameters in their usual ranges; the same seed gives the same
// weights. The product weights are made in format dt, drawn in float32 and
// rounded one at a time, so that a bfloat16 model never takes float32
// memory and matches the float32 one rounded.
func LoadRandom(cfg *hfconfig.Config, seed uint64, layers int, dt tensor.DType) (*nn.Decoder, error) {
	if layers > 0 && layers < len(cfg.Layers) {
		c := *cfg
		c.Layers = cfg.Layers[:layers]
		c.NumLayers = layers
		cfg = &c
	}
	a, err := arch(cfg)
	if err != nil {
		return nil, err
	}
	src := &randomSource{seed: seed, tied: cfg.TieWordEmbeddings, dtype: dt}
	d, err := a(cfg, nn.NewSourceLoader(src))
	if err != nil {
		return nil, fmt.Errorf("random weights: %w", err)
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("random weights: %w", err)
	}
	return d, nil
}

// randomSource answers every tensor an architecture asks for with random
// values of the asked shape. It has every name but an untied model's
// absent LM head and an MTP head's, so the binders take their usual paths.
type randomSource struct {
	seed  uint64
	tied  bool
	dtype tensor.DType // the product weights' (Matrix)
}

func (r *randomSource) Has(name string) bool {
	switch {
	case name == "lm_head.weight":
		return !r.tied
	case strings.HasPrefix(name, "mtp.") || strings.Contains(name, ".mtp."):
		return false
	}
	return true
}

func (r *randomSource) Float32(name string, shape ...int) ([]float32, error) {
	n, seed, err := r.draw(name, shape)
	if err != nil {
		return nil, err
	}
	v := make([]float32, n)
	fill(v, seed, values(name, shape), func(x float64) float32 { return float32(x) })
	return v, nil
}

// Matrix draws product weights as Float32 does, in r's format.
func (r *randomSource) Matrix(name string, shape ...int) (tensor.Weights, error) {
	if r.dtype != tensor.BFloat16 {
		v, err := r.Float32(name, shape...)
		return tensor.Weights{F32: v}, err
	}
	n, seed, err := r.draw(name, shape)
	if err != nil {
		return tensor.Weights{}, err
	}
	v := make([]uint16, n)
	fill(v, seed, values(name, shape), func(x float64) uint16 { return numeric.BF16FromF32(float32(x)) })
	return tensor.Weights{BF16: v}, nil
}

// draw returns the number of values of a tensor of shape and the seed its
// values are drawn from.
func (r *randomSource) draw(name string, shape []int) (int, uint64, error) {
	n := 1
	for _, s := range shape {
		if s <= 0 {
			return 0, 0, fmt.Errorf("random weights: %s: shape %v", name, shape)
		}
		n *= s
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	return n, h.Sum64() ^ r.seed, nil
}

// values is the distribution of tensor name's values, as a function of a
// uniform u in [0, 1) and a standard normal g.
func values(name string, shape []int) func(u, g float64) float64 {
	switch {
	case strings.HasSuffix(name, "A_log"):
		return func(u, _ float64) float64 { return math.Log(1 + 15*u) } // A in [1, 16]
	case strings.HasSuffix(name, "dt_bias"):
		return func(u, _ float64) float64 { return math.Log(math.Expm1(0.001 + 0.099*u)) } // Δ in [0.001, 0.1]
	case strings.HasSuffix(name, ".D"):
		return func(u, _ float64) float64 { return 0.5 + u }
	case strings.Contains(name, "norm"):
		return func(_, g float64) float64 { return 1 + 0.05*g }
	case strings.HasSuffix(name, "bias"):
		return func(_, g float64) float64 { return 0.02 * g }
	}
	// matrices and conv kernels: N(0, 1/fan-in), fan-in the last dimension
	sd := 1 / math.Sqrt(float64(shape[len(shape)-1]))
	return func(_, g float64) float64 { return sd * g }
}

// fill sets v[i] = conv(f(u, g)) with u uniform in [0, 1) and g of mean 0 and
// variance 1, from a counter-based generator of seed and i, in parallel.
// g is the sum of four 16-bit uniforms, centred and scaled (Irwin–Hall: a
// bell within ±3.5): close enough to normal for weights that only have to
// keep activations at their scale, and several times faster to draw than
// Box–Muller, which matters for a model of billions of weights.
func fill[T float32 | uint16](v []T, seed uint64, f func(u, g float64) float64, conv func(float64) T) {
	const chunk = 1 << 16
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for lo := 0; lo < len(v); lo += chunk {
		wg.Add(1)
		sem <- struct{}{}
		go func(lo, hi int) {
			defer func() { <-sem; wg.Done() }()
			for i := lo; i < hi; i++ {
				a := mix(seed + uint64(i)*0x9e3779b97f4a7c15)
				b := mix(a)
				u := float64(b>>11) / (1 << 53)
				sum := float64(a&0xffff+a>>16&0xffff+a>>32&0xffff+a>>48) / (1 << 16)
				g := (sum - 2) * math.Sqrt(3) // variance 4/12 scaled to 1
				v[i] = conv(f(u, g))
			}
		}(lo, min(lo+chunk, len(v)))
	}
	wg.Wait()
}

// mix is SplitMix64's finaliser.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}
