package cuda

import (
	"errors"
	"fmt"
	"time"
	"unsafe"
)

// Stream is an ordered queue of device work (a non-blocking CUstream).
type Stream struct {
	d *Device
	h uintptr
	// t records the stream's work while deferred (Defer); a side stream
	// (NewSide) records into its primary's.
	t       *tape
	primary *Stream
	// work is scratch memory the operations queued on the stream share
	// (Scratch): they run one after another, so one buffer serves them all.
	work Buffer
}

// NewStream creates a stream that does not synchronise with the legacy
// default stream (CU_STREAM_NON_BLOCKING).
func (d *Device) NewStream() (*Stream, error) {
	const nonBlocking = 1
	var h uintptr
	err := d.cold(func() error {
		return d.drv.check(call(d.drv.streamCreate, uintptr(unsafe.Pointer(&h)), nonBlocking), "cuStreamCreate")
	})
	if err != nil {
		return nil, err
	}
	return &Stream{d: d, h: h}, nil
}

// NewPriorityStream creates a non-blocking stream of the device's greatest
// priority: where its kernels and another stream's wait for room on the
// SMs, the block scheduler starts its blocks first.
func (d *Device) NewPriorityStream() (*Stream, error) {
	const nonBlocking = 1
	var h uintptr
	err := d.cold(func() error {
		var least, greatest int32
		if err := d.drv.check(call(d.drv.ctxGetStreamPriorityRange, uintptr(unsafe.Pointer(&least)),
			uintptr(unsafe.Pointer(&greatest))), "cuCtxGetStreamPriorityRange"); err != nil {
			return err
		}
		return d.drv.check(call(d.drv.streamCreateWithPriority, uintptr(unsafe.Pointer(&h)), nonBlocking,
			uintptr(greatest)), "cuStreamCreateWithPriority")
	})
	if err != nil {
		return nil, err
	}
	return &Stream{d: d, h: h}, nil
}

// handle is the CUstream, 0 (the legacy default stream) for a nil Stream.
func (s *Stream) handle() uintptr {
	if s == nil {
		return 0
	}
	return s.h
}

// Synchronize waits until all work queued on s has finished and returns the
// first asynchronous error, if any.
func (s *Stream) Synchronize() error {
	if err := s.flush(); err != nil {
		return err
	}
	return s.d.cold(func() error {
		return s.d.drv.check(call(s.d.drv.streamSynchronize, s.h), "cuStreamSynchronize")
	})
}

// Close waits for the stream's work and destroys it.
func (s *Stream) Close() error {
	if s == nil || s.h == 0 {
		return nil
	}
	var errs []error
	if s.t != nil {
		errs = append(errs, s.t.close())
		s.t = nil
	}
	if s.work.ptr != 0 {
		errs = append(errs, s.Synchronize(), s.d.Free(s.work))
		s.work = Buffer{}
	}
	errs = append(errs, s.d.cold(func() error {
		return s.d.drv.check(call(s.d.drv.streamDestroy, s.h), "cuStreamDestroy_v2")
	}))
	s.h = 0
	return errors.Join(errs...)
}

// Scratch returns at least bytes of device memory for an operation queued
// on s to use while it runs; the next operation may reuse it. Growing it
// waits for the stream, so that nothing queued still uses the memory
// freed. A side stream's scratch is its primary's.
func (s *Stream) Scratch(bytes int) (Buffer, error) {
	if s.primary != nil {
		return s.primary.Scratch(bytes)
	}
	if bytes <= s.work.bytes {
		b, _ := s.work.Slice(0, bytes)
		return b, nil
	}
	if s.work.ptr != 0 {
		if err := s.Synchronize(); err != nil {
			return Buffer{}, err
		}
		if err := s.d.Free(s.work); err != nil {
			return Buffer{}, err
		}
		s.work = Buffer{}
	}
	b, err := s.d.Alloc(bytes)
	if err != nil {
		return Buffer{}, fmt.Errorf("cuda: scratch of %d bytes: %w", bytes, err)
	}
	s.work = b
	return b, nil
}

// Wait makes work queued on s after this call wait until e has completed
// (cuStreamWaitEvent); it does not block the host.
func (s *Stream) Wait(e *Event) error {
	if t := s.recorder(); t != nil {
		t.add(tapeOp{kind: tapeWait, s: s, ev: e})
		return nil
	}
	d := s.d
	if !d.enterHot() {
		return d.hotError()
	}
	d.scratch[0], d.scratch[1], d.scratch[2] = s.h, e.h, 0
	r := d.callHot(d.drv.streamWaitEvent, 3)
	d.leaveHot()
	if r != 0 {
		return d.drv.check(uintptr(r), "cuStreamWaitEvent")
	}
	return nil
}

// CopyDevice queues a device-to-device copy of src into dst on s.
func (s *Stream) CopyDevice(dst, src Buffer) error {
	if src.bytes > dst.bytes {
		return fmt.Errorf("cuda: copy %d bytes into a %d-byte buffer", src.bytes, dst.bytes)
	}
	if src.bytes == 0 {
		return nil
	}
	if t := s.recorder(); t != nil {
		t.add(tapeOp{kind: tapeCopy, s: s, dst: dst, src: src})
		return nil
	}
	d := s.d
	if !d.enterHot() {
		return d.hotError()
	}
	d.scratch[0], d.scratch[1], d.scratch[2], d.scratch[3] = uintptr(dst.ptr), uintptr(src.ptr), uintptr(src.bytes), s.h
	r := d.callHot(d.drv.memcpyDtoDAsync, 4)
	d.leaveHot()
	if r != 0 {
		return d.drv.check(uintptr(r), "cuMemcpyDtoDAsync_v2(%d bytes)", src.bytes)
	}
	return nil
}

// Memset32 queues on s the setting of every 4-byte word of b to value.
func (s *Stream) Memset32(b Buffer, value uint32) error {
	if b.bytes%4 != 0 {
		return fmt.Errorf("cuda: memset32 of %d bytes: not a multiple of 4", b.bytes)
	}
	if b.bytes == 0 {
		return nil
	}
	if t := s.recorder(); t != nil {
		t.add(tapeOp{kind: tapeMemset, s: s, dst: b, value: value})
		return nil
	}
	d := s.d
	if !d.enterHot() {
		return d.hotError()
	}
	d.scratch[0], d.scratch[1], d.scratch[2], d.scratch[3] = uintptr(b.ptr), uintptr(value), uintptr(b.bytes/4), s.h
	r := d.callHot(d.drv.memsetD32Async, 4)
	d.leaveHot()
	if r != 0 {
		return d.drv.check(uintptr(r), "cuMemsetD32Async(%d words)", b.bytes/4)
	}
	return nil
}

// CopyFromDevice copies the start of src into dst after the work queued on s
// and returns when the copy has completed. Unlike Device.CopyFromDevice it is
// ordered after s's work: use it to read results of a step.
func (s *Stream) CopyFromDevice(dst []byte, src Buffer) error {
	if len(dst) > src.bytes {
		return fmt.Errorf("cuda: copy %d bytes out of a %d-byte buffer", len(dst), src.bytes)
	}
	if len(dst) == 0 {
		return nil
	}
	if err := s.flush(); err != nil {
		return err
	}
	return s.d.cold(func() error {
		if err := s.d.drv.check(call(s.d.drv.memcpyDtoHAsync, uintptr(unsafe.Pointer(&dst[0])), uintptr(src.ptr), uintptr(len(dst)), s.h),
			"cuMemcpyDtoHAsync_v2(%d bytes)", len(dst)); err != nil {
			return err
		}
		return s.d.drv.check(call(s.d.drv.streamSynchronize, s.h), "cuStreamSynchronize")
	})
}

// CopyToDevice copies src into the start of dst after the work queued on s
// and returns when the copy has completed (so src may be reused).
func (s *Stream) CopyToDevice(dst Buffer, src []byte) error {
	if len(src) > dst.bytes {
		return fmt.Errorf("cuda: copy %d bytes into a %d-byte buffer", len(src), dst.bytes)
	}
	if len(src) == 0 {
		return nil
	}
	if err := s.flush(); err != nil {
		return err
	}
	return s.d.cold(func() error {
		if err := s.d.drv.check(call(s.d.drv.memcpyHtoDAsync, uintptr(dst.ptr), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)), s.h),
			"cuMemcpyHtoDAsync_v2(%d bytes)", len(src)); err != nil {
			return err
		}
		return s.d.drv.check(call(s.d.drv.streamSynchronize, s.h), "cuStreamSynchronize")
	})
}

// Upload queues on s a copy of src into the start of dst and returns once
// src may be reused: from pageable memory the driver stages the bytes (or
// waits for the stream) before it returns, and the copy lands in dst in
// s's order. A deferred stream copies src into its pinned staging memory
// and records the copy from there, which a graph can hold.
func (s *Stream) Upload(dst Buffer, src []byte) error {
	if len(src) > dst.bytes {
		return fmt.Errorf("cuda: copy %d bytes into a %d-byte buffer", len(src), dst.bytes)
	}
	if len(src) == 0 {
		return nil
	}
	if t := s.recorder(); t != nil {
		at, ok, err := t.stage(src)
		if err != nil {
			return err
		}
		if ok {
			t.add(tapeOp{kind: tapeUpload, s: s, dst: dst, src: Buffer{bytes: len(src)}, stage: at})
			return nil
		}
		if err := s.flush(); err != nil {
			return err
		}
	}
	return s.d.cold(func() error {
		return s.d.drv.check(call(s.d.drv.memcpyHtoDAsync, uintptr(dst.ptr), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)), s.h),
			"cuMemcpyHtoDAsync_v2(%d bytes)", len(src))
	})
}

// Event marks a point in a stream's work, for timing and cross-stream waits.
type Event struct {
	d      *Device
	h      uintptr
	t      *tape // the tape it was last recorded on, until played
	timing bool  // records timestamps (NewEvent)
}

// NewEvent creates an event that records timestamps.
func (d *Device) NewEvent() (*Event, error) {
	const defaultFlags = 0 // CU_EVENT_DEFAULT: timing enabled, spin on sync
	e, err := d.newEvent(defaultFlags)
	if err == nil {
		e.timing = true
	}
	return e, err
}

// NewSyncEvent creates an event without timestamps, for ordering streams
// (cheaper to record).
func (d *Device) NewSyncEvent() (*Event, error) {
	const disableTiming = 2 // CU_EVENT_DISABLE_TIMING
	return d.newEvent(disableTiming)
}

func (d *Device) newEvent(flags uintptr) (*Event, error) {
	var h uintptr
	err := d.cold(func() error {
		return d.drv.check(call(d.drv.eventCreate, uintptr(unsafe.Pointer(&h)), flags), "cuEventCreate")
	})
	if err != nil {
		return nil, err
	}
	return &Event{d: d, h: h}, nil
}

// Record captures the point in s's queue after the work enqueued so far
// (nil s: the legacy default stream). It does not allocate.
func (e *Event) Record(s *Stream) error {
	if t := s.recorder(); t != nil {
		t.add(tapeOp{kind: tapeRecord, s: s, ev: e})
		e.t = t
		return nil
	}
	e.t = nil
	d := e.d
	if !d.enterHot() {
		return d.hotError()
	}
	d.scratch[0], d.scratch[1] = e.h, s.handle()
	r := d.callHot(d.drv.eventRecord, 2)
	d.leaveHot()
	if r != 0 {
		return d.drv.check(uintptr(r), "cuEventRecord")
	}
	return nil
}

// Synchronize waits until the recorded work has completed.
func (e *Event) Synchronize() error {
	if e.t != nil {
		if err := e.t.s.flush(); err != nil {
			return err
		}
		e.t = nil
	}
	return e.d.cold(func() error {
		return e.d.drv.check(call(e.d.drv.eventSynchronize, e.h), "cuEventSynchronize")
	})
}

// Since returns the device time from start to e; both must have been
// recorded and e completed (Synchronize first). The resolution is about
// half a microsecond.
func (e *Event) Since(start *Event) (time.Duration, error) {
	var ms float32
	err := e.d.cold(func() error {
		return e.d.drv.check(call(e.d.drv.eventElapsed, uintptr(unsafe.Pointer(&ms)), start.h, e.h), "cuEventElapsedTime")
	})
	if err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}

// Close destroys the event.
func (e *Event) Close() error {
	if e == nil || e.h == 0 {
		return nil
	}
	err := e.d.cold(func() error {
		return e.d.drv.check(call(e.d.drv.eventDestroy, e.h), "cuEventDestroy_v2")
	})
	e.h = 0
	return err
}

// Graph is work captured from a stream (a CUgraph); instantiate it to run it.
type Graph struct {
	d *Device
	h uintptr
}

// GraphExec is an instantiated graph, launched as one unit: a decode step
// of many small kernels then costs one launch.
type GraphExec struct {
	d *Device
	h uintptr
}

// BeginCapture starts recording the work queued on s into a graph instead of
// running it. The capture is relaxed (CU_STREAM_CAPTURE_MODE_RELAXED): other
// goroutines may keep allocating and copying meanwhile; only work queued on s
// (and streams that wait on it) is captured.
func (s *Stream) BeginCapture() error {
	const relaxed = 2
	return s.d.cold(func() error {
		return s.d.drv.check(call(s.d.drv.streamBeginCapture, s.h, relaxed), "cuStreamBeginCapture_v2")
	})
}

// EndCapture stops the capture begun by BeginCapture and returns the graph.
func (s *Stream) EndCapture() (*Graph, error) {
	var h uintptr
	err := s.d.cold(func() error {
		return s.d.drv.check(call(s.d.drv.streamEndCapture, s.h, uintptr(unsafe.Pointer(&h))), "cuStreamEndCapture")
	})
	if err != nil {
		return nil, err
	}
	return &Graph{d: s.d, h: h}, nil
}

// Instantiate prepares g for launching and uploads it to the device.
func (g *Graph) Instantiate() (*GraphExec, error) {
	var h uintptr
	err := g.d.cold(func() error {
		return g.d.drv.check(call(g.d.drv.graphInstantiate, uintptr(unsafe.Pointer(&h)), g.h, 0), "cuGraphInstantiateWithFlags")
	})
	if err != nil {
		return nil, err
	}
	return &GraphExec{d: g.d, h: h}, nil
}

// Close destroys the graph; executables instantiated from it stay valid.
func (g *Graph) Close() error {
	if g == nil || g.h == 0 {
		return nil
	}
	err := g.d.cold(func() error { return g.d.drv.check(call(g.d.drv.graphDestroy, g.h), "cuGraphDestroy") })
	g.h = 0
	return err
}

// Launch queues the whole graph on s. It does not allocate.
func (x *GraphExec) Launch(s *Stream) error {
	if s.recorder() != nil {
		if err := s.flush(); err != nil {
			return err
		}
	}
	d := x.d
	if !d.enterHot() {
		return d.hotError()
	}
	d.scratch[0], d.scratch[1] = x.h, s.handle()
	r := d.callHot(d.drv.graphLaunch, 2)
	d.leaveHot()
	if r != 0 {
		return d.drv.check(uintptr(r), "cuGraphLaunch")
	}
	return nil
}

// Upload copies the graph's launch data to the device ahead of the first
// Launch, so that the first timed launch is not slower than the rest.
func (x *GraphExec) Upload(s *Stream) error {
	return x.d.cold(func() error {
		return x.d.drv.check(call(x.d.drv.graphUpload, x.h, s.handle()), "cuGraphUpload")
	})
}

// Close destroys the executable graph.
func (x *GraphExec) Close() error {
	if x == nil || x.h == 0 {
		return nil
	}
	err := x.d.cold(func() error { return x.d.drv.check(call(x.d.drv.graphExecDel, x.h), "cuGraphExecDestroy") })
	x.h = 0
	return err
}
