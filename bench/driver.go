package bench

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/replayssm/replayssm/replay"
)

// Driver runs one layer's CPU cache on a few fixed sets of random inputs:
// what the kernel and speculation benchmarks time, for either layer kind.
// A call on n slots takes the first n rows of input set set (n·T for a
// verify of T drafts).
type Driver interface {
	Admit() (replay.Slot, error)
	// Conv and ConvVerify run the layer's convolution on the set's conv
	// inputs (a Driver built with conv weights only).
	Conv(slots []replay.Slot, set int) error
	ConvVerify(slots []replay.Slot, set, T int) error
	Step(slots []replay.Slot, set int) error
	Verify(slots []replay.Slot, set, T int) error
	Commit(slots []replay.Slot, accepted []int) error
	Stats() replay.Stats
	Close() error
}

// NewDriver builds a CPU cache of the shape with capacity slots and options
// opt, random constants drawn from r (randomMamba2Params, randomGDNParams),
// conv weights of convKernel taps over the layer's conv channels when
// convKernel > 0, and InputSets sets of rows random input rows: standard
// normal, Mamba-2's B and C scaled by 1/√N.
func NewDriver(sh LayerShape, capacity, rows int, opt replay.Options, convKernel int, r *rand.Rand) (Driver, error) {
	switch sh.Layer {
	case "mamba2":
		s := sh.Mamba2
		H, P, N, G := s.Heads, s.HeadDim, s.StateSize, s.Groups
		prm := randomMamba2Params(r, H)
		conv := randomConv(r, H*P+2*G*N, convKernel)
		c, err := replay.NewMamba2(s, prm, conv, capacity, opt)
		if err != nil {
			return nil, err
		}
		d := &driver[replay.Mamba2Input]{c: c, width: H * P, channels: conv.Channels,
			rows: func(in replay.Mamba2Input, n int) replay.Mamba2Input {
				return replay.Mamba2Input{X: in.X[:n*H*P], B: in.B[:n*G*N], C: in.C[:n*G*N], Dt: in.Dt[:n*H]}
			}}
		sn := float32(1 / math.Sqrt(float64(N)))
		d.sets(r, rows, func() replay.Mamba2Input {
			in := replay.Mamba2Input{X: make([]float32, rows*H*P), B: make([]float32, rows*G*N), C: make([]float32, rows*G*N), Dt: make([]float32, rows*H)}
			fill(r, in.X, 1, 0)
			fill(r, in.B, sn, 0)
			fill(r, in.C, sn, 0)
			fill(r, in.Dt, 1, 0)
			return in
		})
		return d, nil
	case "gdn":
		s := sh.GDN
		Hk, Hv, dk, dv := s.KeyHeads, s.ValueHeads, s.KeyDim, s.ValueDim
		prm := randomGDNParams(r, Hv)
		conv := randomConv(r, 2*Hk*dk+Hv*dv, convKernel)
		c, err := replay.NewGDN(s, prm, conv, capacity, opt)
		if err != nil {
			return nil, err
		}
		d := &driver[replay.GDNInput]{c: c, width: Hv * dv, channels: conv.Channels,
			rows: func(in replay.GDNInput, n int) replay.GDNInput {
				return replay.GDNInput{Q: in.Q[:n*Hk*dk], K: in.K[:n*Hk*dk], V: in.V[:n*Hv*dv], A: in.A[:n*Hv], B: in.B[:n*Hv]}
			}}
		d.sets(r, rows, func() replay.GDNInput {
			in := replay.GDNInput{Q: make([]float32, rows*Hk*dk), K: make([]float32, rows*Hk*dk), V: make([]float32, rows*Hv*dv), A: make([]float32, rows*Hv), B: make([]float32, rows*Hv)}
			for _, f := range [][]float32{in.Q, in.K, in.V, in.A, in.B} {
				fill(r, f, 1, 0)
			}
			return in
		})
		return d, nil
	}
	return nil, fmt.Errorf("unknown layer kind %q", sh.Layer)
}

// InputSets is the number of input sets a Driver holds: callers rotate
// through them, so that successive calls do not find their inputs in the
// cache.
const InputSets = inputSets

// randomConv draws a depthwise convolution's weights (sd 0.5) and bias
// (sd 0.1); none when kernel is 0.
func randomConv(r *rand.Rand, channels, kernel int) replay.ConvWeights {
	if kernel == 0 {
		return replay.ConvWeights{}
	}
	w := replay.ConvWeights{Channels: channels, Kernel: kernel, Weight: make([]float32, channels*kernel), Bias: make([]float32, channels)}
	fill(r, w.Weight, 0.5, 0)
	fill(r, w.Bias, 0.1, 0)
	return w
}

var errNoConv = errors.New("bench: a driver built without conv weights")

// driver is a Driver of a cache with input batches of type In.
type driver[In any] struct {
	c    replay.Cache[[]float32, In]
	rows func(in In, n int) In // the first n rows of a batch
	in   []In
	// conv holds the conv input sets, cout and y the outputs.
	conv            [][]float32
	cout, y         []float32
	width, channels int // output values and conv channels per row
}

// sets draws the input sets of rows rows: each set's conv inputs, then its
// layer inputs from draw.
func (d *driver[In]) sets(r *rand.Rand, rows int, draw func() In) {
	for range InputSets {
		if d.channels > 0 {
			x := make([]float32, rows*d.channels)
			fill(r, x, 1, 0)
			d.conv = append(d.conv, x)
		}
		d.in = append(d.in, draw())
	}
	d.cout = make([]float32, rows*d.channels)
	d.y = make([]float32, rows*d.width)
}

func (d *driver[In]) Admit() (replay.Slot, error) { return d.c.Admit() }
func (d *driver[In]) Stats() replay.Stats         { return d.c.Stats() }
func (d *driver[In]) Close() error                { return d.c.Close() }

func (d *driver[In]) Commit(slots []replay.Slot, accepted []int) error {
	return d.c.Commit(slots, accepted)
}

func (d *driver[In]) Conv(slots []replay.Slot, set int) error {
	if d.conv == nil {
		return errNoConv
	}
	n := len(slots) * d.channels
	return d.c.Conv(slots, d.conv[set][:n], d.cout[:n])
}

func (d *driver[In]) ConvVerify(slots []replay.Slot, set, T int) error {
	if d.conv == nil {
		return errNoConv
	}
	n := len(slots) * T * d.channels
	return d.c.ConvVerify(slots, T, d.conv[set][:n], d.cout[:n])
}

func (d *driver[In]) Step(slots []replay.Slot, set int) error {
	n := len(slots)
	return d.c.Step(slots, d.rows(d.in[set], n), d.y[:n*d.width])
}

func (d *driver[In]) Verify(slots []replay.Slot, set, T int) error {
	n := len(slots) * T
	return d.c.Verify(slots, T, nil, d.rows(d.in[set], n), d.y[:n*d.width])
}
