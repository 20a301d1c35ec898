package cuda

import (
	"errors"
	"time"
)

// ssmClock times the SSM caches' work on the backend's stream while on: an
// event pair around each cache call, summed when read. It lets a benchmark
// split a decode step into the state kernels and the rest without a
// profiler.
type ssmClock struct {
	on     bool
	events []*Event // start, stop, start, stop, …
	used   int
	total  time.Duration // pairs folded in when the events ran out
	err    error
}

// clockEvents bounds the events kept before the pairs are summed (which
// waits for the stream).
const clockEvents = 1 << 14

// ProfileSSM turns the timing of the SSM caches' kernels on or off (off,
// the default, costs nothing).
func (b *NNBackend) ProfileSSM(on bool) { b.clock.on = on }

// SSMTime returns the device time the SSM caches' kernels took since the
// last call while ProfileSSM was on, waiting for them to finish.
func (b *NNBackend) SSMTime() (time.Duration, error) {
	c := &b.clock
	c.fold()
	t, err := c.total, c.err
	c.total, c.err = 0, nil
	return t, err
}

// timeSSM runs a cache call between two events when the clock is on.
func (b *NNBackend) timeSSM(call func() error) error {
	c := &b.clock
	if !c.on || c.err != nil {
		return call()
	}
	if c.used+2 > clockEvents {
		c.fold()
	}
	for len(c.events) < c.used+2 {
		e, err := b.d.NewEvent()
		if err != nil {
			c.err = err
			return call()
		}
		c.events = append(c.events, e)
	}
	start, stop := c.events[c.used], c.events[c.used+1]
	c.used += 2
	c.err = errors.Join(c.err, start.Record(b.s))
	err := call()
	c.err = errors.Join(c.err, stop.Record(b.s))
	return err
}

// fold adds the recorded pairs to total, waiting for the last.
func (c *ssmClock) fold() {
	if c.used == 0 {
		return
	}
	if err := c.events[c.used-1].Synchronize(); err != nil {
		c.err = errors.Join(c.err, err)
	}
	for i := 0; i+1 < c.used && c.err == nil; i += 2 {
		d, err := c.events[i+1].Since(c.events[i])
		c.err = errors.Join(c.err, err)
		c.total += d
	}
	c.used = 0
}

func (c *ssmClock) close() error {
	var errs []error
	for _, e := range c.events {
		errs = append(errs, e.Close())
	}
	c.events, c.used = nil, 0
	return errors.Join(errs...)
}
