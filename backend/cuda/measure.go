package cuda

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Timing summarises event-timed runs of the same work.
type Timing struct {
	Median, Min, Max time.Duration
	Runs             int
}

// GBps is bytes moved per median run, in GB/s (10⁹ bytes per second).
func (t Timing) GBps(bytes int64) float64 {
	if t.Median <= 0 {
		return 0
	}
	return float64(bytes) / t.Median.Seconds() / 1e9
}

// Timer times work queued on one stream with device events, so host
// overhead and clocks stay out of the numbers (METHOD.md: time with events,
// warm up, take the median).
type Timer struct {
	d      *Device
	s      *Stream
	events []*Event
}

// NewTimer makes a Timer for work queued on s.
func (d *Device) NewTimer(s *Stream) (*Timer, error) {
	if s == nil {
		return nil, errors.New("cuda: NewTimer: nil stream")
	}
	return &Timer{d: d, s: s}, nil
}

// Median runs enqueue once to warm up (module loads, caches, lazy
// allocation), then runs times back to back with an event recorded between
// consecutive runs, and reports the median, fastest and slowest run.
// enqueue must only queue work on the Timer's stream; back-to-back queuing
// hides launch gaps as a decode loop would. It checks ctx between runs.
func (t *Timer) Median(ctx context.Context, runs int, enqueue func() error) (Timing, error) {
	if runs < 1 {
		return Timing{}, fmt.Errorf("cuda: timer: %d runs", runs)
	}
	if err := enqueue(); err != nil {
		return Timing{}, err
	}
	if err := t.s.Synchronize(); err != nil {
		return Timing{}, err
	}
	for len(t.events) < runs+1 {
		e, err := t.d.NewEvent()
		if err != nil {
			return Timing{}, err
		}
		t.events = append(t.events, e)
	}
	if err := t.events[0].Record(t.s); err != nil {
		return Timing{}, err
	}
	for i := range runs {
		if err := ctx.Err(); err != nil {
			t.s.Synchronize()
			return Timing{}, err
		}
		if err := enqueue(); err != nil {
			t.s.Synchronize()
			return Timing{}, err
		}
		if err := t.events[i+1].Record(t.s); err != nil {
			return Timing{}, err
		}
	}
	if err := t.events[runs].Synchronize(); err != nil {
		return Timing{}, err
	}
	samples := make([]time.Duration, runs)
	for i := range runs {
		dt, err := t.events[i+1].Since(t.events[i])
		if err != nil {
			return Timing{}, err
		}
		samples[i] = dt
	}
	slices.Sort(samples)
	med := samples[runs/2]
	if runs%2 == 0 {
		med = (samples[runs/2-1] + samples[runs/2]) / 2
	}
	return Timing{Median: med, Min: samples[0], Max: samples[runs-1], Runs: runs}, nil
}

// Close destroys the Timer's events.
func (t *Timer) Close() error {
	var errs []error
	for _, e := range t.events {
		if err := e.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	t.events = nil
	return errors.Join(errs...)
}

// copyMeasurement holds both ways of copying measured by measureCopy, and
// the read-only pass over the same source.
type copyMeasurement struct {
	bytes  int    // bytes copied per run (read once, written once)
	driver Timing // cuMemcpyDtoDAsync
	kernel Timing // kernels/copy.cu copy16
	read   Timing // kernels/copy.cu read16: bytes read, nothing written
}

// copyRuns is the number of timed runs of each copy.
const copyRuns = 20

// MeasureCopyBandwidth measures the device's memory bandwidth as a large
// device-to-device copy of bytes (rounded down to 16), counting bytes read
// plus bytes written, in GB/s: the better of cuMemcpyDtoD and the
// vectorised copy.cu kernel, each the median of 20 event-timed runs over
// pseudo-random data. Use a size several times the L2 cache (≥ 1 GiB on an
// H200) so the copy measures memory, not the cache.
func (d *Device) MeasureCopyBandwidth(ctx context.Context, bytes int) (float64, error) {
	c, _, err := d.MeasureBandwidth(ctx, bytes)
	return c, err
}

// MeasureBandwidth is MeasureCopyBandwidth and, in the same run over the
// same source, the read-only bandwidth (copy.cu's read16: bytes read over
// time, nothing written), the ceiling of a step that reads its state and
// does not write it back, such as a replay non-flush step.
func (d *Device) MeasureBandwidth(ctx context.Context, bytes int) (copyGBps, readGBps float64, err error) {
	m, err := d.measureCopy(ctx, bytes)
	if err != nil {
		return 0, 0, err
	}
	moved := int64(2 * m.bytes)
	return max(m.driver.GBps(moved), m.kernel.GBps(moved)), m.read.GBps(int64(m.bytes)), nil
}

func (d *Device) measureCopy(ctx context.Context, bytes int) (m copyMeasurement, err error) {
	bytes &^= 15
	if bytes < 16 {
		return m, fmt.Errorf("cuda: measure copy of %d bytes: too small", bytes)
	}
	m.bytes = bytes
	fn, err := d.Kernel(ctx, "copy.cu", "copy16")
	if err != nil {
		return m, err
	}
	s, err := d.NewStream()
	if err != nil {
		return m, err
	}
	defer s.Close()
	src, err := d.Alloc(bytes)
	if err != nil {
		return m, err
	}
	defer d.Free(src)
	dst, err := d.Alloc(bytes)
	if err != nil {
		return m, err
	}
	defer d.Free(dst)
	if err := d.FillUniform(ctx, s, src, Float32, 0x5eed, -1, 1); err != nil {
		return m, err
	}
	timer, err := d.NewTimer(s)
	if err != nil {
		return m, err
	}
	defer timer.Close()

	if m.driver, err = timer.Median(ctx, copyRuns, func() error { return s.CopyDevice(dst, src) }); err != nil {
		return m, err
	}
	grid, block, a, err := copyLaunch(dst, src, copyUnroll, copyThreads)
	if err != nil {
		return m, err
	}
	if m.kernel, err = timer.Median(ctx, copyRuns, func() error { return d.Launch(fn, grid, block, 0, s, a) }); err != nil {
		return m, err
	}
	read, err := d.Kernel(ctx, "copy.cu", "read16")
	if err != nil {
		return m, err
	}
	// read16 takes copy16's arguments, dst its sink.
	if m.read, err = timer.Median(ctx, copyRuns, func() error { return d.Launch(read, grid, block, 0, s, a) }); err != nil {
		return m, err
	}
	return m, nil
}

// The defaults of COPY_UNROLL and COPY_THREADS in kernels/copy.cu.
const (
	copyUnroll  = 1
	copyThreads = 256
)

// copyLaunch is the launch of copy.cu's copy16, compiled with the given
// COPY_UNROLL and COPY_THREADS, that copies all of src (a multiple of 16
// bytes) into dst.
func copyLaunch(dst, src Buffer, unroll, threads int) (grid, block [3]uint32, a *Args, err error) {
	if src.bytes%16 != 0 || src.bytes > dst.bytes {
		return grid, block, nil, fmt.Errorf("cuda: copy16 of %d bytes into %d", src.bytes, dst.bytes)
	}
	n16 := uint64(src.bytes / 16)
	per := uint64(unroll * threads)
	blocks := (n16 + per - 1) / per
	if blocks > 1<<31-1 {
		return grid, block, nil, fmt.Errorf("cuda: copy16 of %d bytes: too large for one grid", src.bytes)
	}
	a = new(Args)
	a.Ptr(dst)
	a.Ptr(src)
	a.U64(n16)
	return [3]uint32{uint32(blocks), 1, 1}, [3]uint32{uint32(threads), 1, 1}, a, nil
}
