package cuda

import (
	"errors"
	"time"
)

// OpTime is one operation's share of the device time while the backend's
// profile was on: how many calls, and the device time between an event
// recorded before and one after each.
type OpTime struct {
	Op    string
	Calls int
	Time  time.Duration
}

// The operations the profile names. Every ssm… operation is a state kernel
// (the caches' conv and state update); the rest is everything else a step
// runs.
const (
	opEmbed      = "embed"
	opGemv       = "gemv"       // one-row bf16 products (nn_gemv_bf16)
	opGemm       = "gemm"       // cuBLAS products, with the activations' rounding
	opBias       = "bias"       // bias rows after a product
	opRMSNorm    = "rmsnorm"    // RMSNorm, grouped or not
	opRows       = "add-copy"   // Add and Copy
	opMoveRows   = "gather"     // Gather, Scatter, AxpyRows (the MoE's row moves)
	opElementwis = "activation" // SiLU, ReLU², the gates, dt's clamp
	opRope       = "rope"
	opKVAppend   = "kv-append"
	opAttend     = "attention"
	opArgmax     = "argmax" // with the ids' copy to the host
	opTransfer   = "transfer"
	opSSMConv    = "ssm-conv"
	opSSMStep    = "ssm-step"
)

// IsStateOp reports whether op is one of the SSM caches' state kernels.
func IsStateOp(op string) bool { return op == opSSMConv || op == opSSMStep }

// opClock times the backend's operations on its stream while on: an event
// pair around each call, summed per operation when read. It splits a decode
// step into its operations without a profiler; the events themselves add
// host time, so the step's wall time is measured with it off.
type opClock struct {
	on     bool
	events []*Event // start, stop, start, stop, …
	ops    []string // the operation of each pair
	used   int
	total  map[string]*OpTime // pairs folded in when the events ran out
	order  []string           // operations in order of first call
	err    error
}

// clockEvents bounds the events kept before the pairs are summed (which
// waits for the stream).
const clockEvents = 1 << 14

// Profile turns the timing of every operation on or off (off, the default,
// costs nothing). While on, operations are queued at once, not recorded
// for graphs: the events between them would split every graph.
func (b *NNBackend) Profile(on bool) {
	b.clock.on = on
	b.fail(b.s.Defer(!on && !b.opt.Eager))
}

// Graphs reports how the backend's passes were played: op by op, or as
// CUDA graphs.
func (b *NNBackend) Graphs() TapeStats { return b.s.TapeStats() }

// OpTimes returns the device time of each operation since the last call
// while Profile was on, in order of first call, waiting for them to finish.
func (b *NNBackend) OpTimes() ([]OpTime, error) {
	c := &b.clock
	c.fold()
	out := make([]OpTime, 0, len(c.order))
	for _, op := range c.order {
		out = append(out, *c.total[op])
	}
	err := c.err
	c.total, c.order, c.err = nil, nil, nil
	return out, err
}

// span records the start of op when the clock is on and returns what
// records its end (defer b.span(op)()).
func (b *NNBackend) span(op string) func() {
	c := &b.clock
	if !c.on || c.err != nil {
		return noSpan
	}
	if c.used+2 > clockEvents {
		c.fold()
	}
	for len(c.events) < c.used+2 {
		e, err := b.d.NewEvent()
		if err != nil {
			c.err = err
			return noSpan
		}
		c.events = append(c.events, e)
	}
	start, stop := c.events[c.used], c.events[c.used+1]
	c.ops = append(c.ops[:c.used/2], op)
	c.used += 2
	c.err = errors.Join(c.err, start.Record(b.s))
	return func() { c.err = errors.Join(c.err, stop.Record(b.s)) }
}

func noSpan() {}

// fold adds the recorded pairs to the totals, waiting for the last.
func (c *opClock) fold() {
	if c.used == 0 {
		return
	}
	if err := c.events[c.used-1].Synchronize(); err != nil {
		c.err = errors.Join(c.err, err)
	}
	if c.total == nil {
		c.total = make(map[string]*OpTime)
	}
	for i := 0; i+1 < c.used && c.err == nil; i += 2 {
		d, err := c.events[i+1].Since(c.events[i])
		c.err = errors.Join(c.err, err)
		op := c.ops[i/2]
		t := c.total[op]
		if t == nil {
			t = &OpTime{Op: op}
			c.total[op] = t
			c.order = append(c.order, op)
		}
		t.Calls++
		t.Time += d
	}
	c.used = 0
}

func (c *opClock) close() error {
	var errs []error
	for _, e := range c.events {
		errs = append(errs, e.Close())
	}
	c.events, c.used = nil, 0
	return errors.Join(errs...)
}
