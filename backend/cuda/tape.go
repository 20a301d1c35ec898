package cuda

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"unsafe"
)

// A deferred stream records its work on a tape instead of queueing it, and
// plays the tape when the host must wait for the stream (Synchronize, a copy
// to the host, an event's Synchronize, Close). A tape played before, launch
// for launch with the same arguments, is played as a CUDA graph captured the
// second time it was seen: a decode step's few hundred small kernels then
// cost one launch, not a few hundred (each a purego call into the driver,
// about as long as the small kernels themselves).
//
// The replay is exact by construction: a graph is launched only for a tape
// whose every operation (kernel, grid, block, shared memory, argument
// bytes; copy, memset and upload addresses and sizes; cuBLAS call) is the
// same as the one captured. Uploads are the one input that changes from
// step to step (tokens, positions): a deferred stream's Upload copies the
// bytes into pinned staging memory at once and records a copy from there,
// so that a replayed graph copies this step's bytes. Work the tape cannot
// hold (a large upload) plays the tape first and then runs at once.

// tapeStagingBytes bounds the uploads of one tape.
const tapeStagingBytes = 8 << 20

// tapeGraphs bounds the graphs a tape keeps (the least recently played
// goes first): a few batch sizes of decode and verify steps.
const tapeGraphs = 32

// tapeMinGraph is the fewest operations a tape must hold to be captured: a
// graph launch costs about as much as a few kernel launches.
const tapeMinGraph = 16

// tapeMaxGraph is the most operations a captured tape may hold: a long
// prompt's token-by-token pass is not worth a graph's instantiation and
// memory. tapeMaxOps bounds a tape's memory: a longer pass is played in
// pieces of that many operations.
const (
	tapeMaxGraph = 1 << 14
	tapeMaxOps   = 1 << 16
)

// Operation kinds on a tape.
const (
	tapeKernel = iota + 1
	tapeMemset
	tapeCopy
	tapeUpload
	tapeRecord
	tapeWait
	tapeGemm
)

// tapeOp is one recorded operation. Its identity (everything that decides
// what it does on the device) is also encoded in the tape's key.
type tapeOp struct {
	kind        uint8
	s           *Stream
	fn          *Function
	grid, block [3]uint32
	smem        uint32
	nargs       int // kernel arguments: how many, their bytes, and where
	argSize     int // their data and offsets start in the tape's argData
	argsAt      int // and argOff
	offAt       int
	dst, src    Buffer
	value       uint32
	stage       int // upload: offset in the staging memory
	ev          *Event
	blas        *BLAS
	gemm        gemmQueued
}

// tape is a deferred stream's recording and its graphs; side streams
// (Stream.NewSide) record into their primary's tape.
type tape struct {
	s       *Stream // the primary stream
	on      bool
	playing bool // operations run at once while the tape plays
	ops     []tapeOp
	key     []byte // the encoding of ops, compared and hashed
	opKey   []int  // where each op's encoding starts in key
	// missed, when set (tests), sees each tape played op by op: too short,
	// too long or timed, or seen for the first time (to find what differs
	// between passes that should repeat).
	missed   func(t *tape)
	argData  []byte
	argOff   []uint16
	a        Args    // a kernel's arguments while the tape plays
	staging  uintptr // pinned host memory, tapeStagingBytes long
	stageOff int
	// stageDone is recorded after a tape that uploaded has been played;
	// the staging memory is reused once it has completed.
	stageDone  *Event
	stageDirty bool

	seed     maphash.Seed
	graphs   map[uint64]*tapeGraph
	seen     map[uint64]bool // keys played once without a graph
	clock    uint64
	noGraph  error // why capturing failed, after which tapes play op by op
	deferred error // a piece's failure, reported when the tape next plays
	// timed: the tape records a timing event, which a graph would turn
	// into an edge that records no time; such a tape plays op by op.
	timed bool
	stats TapeStats
}

// tapeGraph is a captured tape, keyed by its encoding.
type tapeGraph struct {
	key  []byte
	exec *GraphExec
	used uint64
}

// TapeStats counts how a deferred stream's tapes were played.
type TapeStats struct {
	Tapes    int // tapes played
	Graphed  int // of them, launched as a graph
	Captured int // graphs captured
	Ops      int // operations recorded
	// GraphedOps counts the operations that ran inside graphs: the share
	// of launches a graph saved, which short passes (a sampling step's
	// copy, too few operations to capture) do not dilute.
	GraphedOps int
}

// Defer turns deferred queueing on or off (see tape above); turning it off
// plays what was recorded. Side streams follow their primary.
func (s *Stream) Defer(on bool) error {
	if s.primary != nil {
		return errors.New("cuda: a side stream follows its primary's Defer")
	}
	if !on {
		if s.t == nil {
			return nil
		}
		err := s.flush()
		s.t.on = false
		return err
	}
	if s.t == nil {
		t := &tape{s: s, seed: maphash.MakeSeed(), graphs: map[uint64]*tapeGraph{}, seen: map[uint64]bool{}}
		var err error
		if t.stageDone, err = s.d.NewSyncEvent(); err != nil {
			return err
		}
		err = s.d.cold(func() error {
			return s.d.drv.check(call(s.d.drv.memHostAlloc, uintptr(unsafe.Pointer(&t.staging)), tapeStagingBytes, 0), "cuMemHostAlloc(%d bytes)", tapeStagingBytes)
		})
		if err != nil {
			t.stageDone.Close()
			return err
		}
		s.t = t
	}
	s.t.on = true
	return nil
}

// TapeStats returns how the stream's tapes were played so far.
func (s *Stream) TapeStats() TapeStats {
	if s.t == nil {
		return TapeStats{}
	}
	return s.t.stats
}

// NewSide creates a stream of the device's greatest priority that forks
// from and joins s through events, recording into s's tape while s is
// deferred, so that a captured graph holds both streams' work.
func (s *Stream) NewSide() (*Stream, error) {
	side, err := s.d.NewPriorityStream()
	if err != nil {
		return nil, err
	}
	side.primary = s
	return side, nil
}

// root is the stream whose tape s records into: its primary, or itself.
func (s *Stream) root() *Stream {
	if s.primary != nil {
		return s.primary
	}
	return s
}

// recorder returns the tape s records into, or nil when s queues at once.
func (s *Stream) recorder() *tape {
	if s == nil {
		return nil
	}
	if t := s.root().t; t != nil && t.on && !t.playing {
		return t
	}
	return nil
}

// flush plays the tape s (or its primary) holds.
func (s *Stream) flush() error {
	t := s.root().t
	if t == nil {
		return nil
	}
	var err error
	if len(t.ops) > 0 {
		err = t.play()
	}
	if t.deferred != nil {
		err, t.deferred = errors.Join(t.deferred, err), nil
	}
	return err
}

// addKernel records a kernel launch.
func (t *tape) addKernel(s *Stream, fn *Function, grid, block [3]uint32, smem uint32, a *Args) {
	t.makeRoom()
	op := tapeOp{kind: tapeKernel, s: s, fn: fn, grid: grid, block: block, smem: smem,
		nargs: a.n, argSize: a.size, argsAt: len(t.argData), offAt: len(t.argOff)}
	t.argData = append(t.argData, a.data[:a.size]...)
	t.argOff = append(t.argOff, a.off[:a.n]...)
	t.add(op)
}

// makeRoom plays a tape that holds tapeMaxOps operations, before anything
// of the next operation (its arguments, its staged bytes) is recorded.
func (t *tape) makeRoom() {
	if len(t.ops) >= tapeMaxOps {
		if err := t.play(); err != nil {
			t.deferred = errors.Join(t.deferred, err)
		}
	}
}

// add records op and its identity.
func (t *tape) add(op tapeOp) {
	t.makeRoom()
	t.opKey = append(t.opKey, len(t.key))
	var k [96]byte
	b := k[:0]
	b = append(b, op.kind)
	b = binary.LittleEndian.AppendUint64(b, uint64(op.s.h))
	switch op.kind {
	case tapeKernel:
		b = binary.LittleEndian.AppendUint64(b, uint64(op.fn.h))
		for _, v := range [7]uint32{op.grid[0], op.grid[1], op.grid[2], op.block[0], op.block[1], op.block[2], op.smem} {
			b = binary.LittleEndian.AppendUint32(b, v)
		}
		b = binary.LittleEndian.AppendUint32(b, uint32(op.nargs)|uint32(op.argSize)<<16)
		t.key = append(t.key, b...)
		for _, o := range t.argOff[op.offAt : op.offAt+op.nargs] {
			t.key = binary.LittleEndian.AppendUint16(t.key, o)
		}
		t.key = append(t.key, t.argData[op.argsAt:op.argsAt+op.argSize]...)
	case tapeMemset, tapeCopy, tapeUpload:
		for _, v := range [5]uint64{op.dst.ptr, uint64(op.dst.bytes), op.src.ptr, uint64(op.src.bytes), uint64(op.value) | uint64(op.stage)<<32} {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
		t.key = append(t.key, b...)
	case tapeRecord, tapeWait:
		t.timed = t.timed || op.kind == tapeRecord && op.ev.timing
		b = binary.LittleEndian.AppendUint64(b, uint64(op.ev.h))
		t.key = append(t.key, b...)
	case tapeGemm:
		b = binary.LittleEndian.AppendUint64(b, uint64(op.blas.h))
		t.key = append(t.key, b...)
		t.key = op.gemm.appendKey(t.key)
	}
	t.ops = append(t.ops, op)
	t.stats.Ops++
}

// stage copies src into the staging memory and returns its offset there,
// or false when it does not fit (the caller plays the tape and uploads at
// once).
func (t *tape) stage(src []byte) (int, bool, error) {
	t.makeRoom()
	n := (len(src) + 15) &^ 15
	if t.stageOff+n > tapeStagingBytes {
		return 0, false, nil
	}
	if t.stageOff == 0 && t.stageDirty {
		// The last played tape's copies may still read the staging memory.
		if err := t.stageDone.Synchronize(); err != nil {
			return 0, false, err
		}
		t.stageDirty = false
	}
	at := t.stageOff
	copy(unsafe.Slice((*byte)(cptr(t.staging+uintptr(at))), len(src)), src)
	t.stageOff += n
	return at, true, nil
}

// play runs the tape: as the graph captured from the same tape if there
// is one, else by capturing it if it was seen before, else op by op.
func (t *tape) play() (err error) {
	t.playing = true
	defer func() {
		if t.stageOff > 0 {
			err = errors.Join(err, t.stageDone.Record(t.s))
			t.stageDirty = true
		}
		t.ops, t.key, t.opKey, t.argData, t.argOff, t.stageOff = t.ops[:0], t.key[:0], t.opKey[:0], t.argData[:0], t.argOff[:0], 0
		t.timed = false
		t.playing = false
	}()
	t.stats.Tapes++
	if t.noGraph != nil || t.timed || len(t.ops) < tapeMinGraph || len(t.ops) > tapeMaxGraph {
		if t.missed != nil {
			t.missed(t)
		}
		return t.run()
	}
	t.clock++
	h := maphash.Bytes(t.seed, t.key)
	if g := t.graphs[h]; g != nil && bytes.Equal(g.key, t.key) {
		g.used = t.clock
		t.stats.Graphed++
		t.stats.GraphedOps += len(t.ops)
		return g.exec.Launch(t.s)
	}
	if !t.seen[h] {
		if len(t.seen) >= 4096 {
			clear(t.seen)
		}
		t.seen[h] = true
		if t.missed != nil {
			t.missed(t)
		}
		return t.run()
	}
	x, err := t.capture()
	if err != nil {
		// Capturing failed (the driver refused an operation): play this
		// tape and every later one op by op.
		t.noGraph = err
		return t.run()
	}
	t.keep(h, x)
	t.stats.Captured++
	t.stats.Graphed++
	t.stats.GraphedOps += len(t.ops)
	return x.Launch(t.s)
}

// capture records the tape's operations into a graph and instantiates it.
func (t *tape) capture() (*GraphExec, error) {
	s := t.s
	if err := s.BeginCapture(); err != nil {
		return nil, err
	}
	runErr := t.run()
	g, err := s.EndCapture()
	if err = errors.Join(runErr, err); err != nil {
		g.Close()
		return nil, fmt.Errorf("cuda: capturing a tape of %d operations: %w", len(t.ops), err)
	}
	defer g.Close()
	return g.Instantiate()
}

// keep stores x under key h, dropping the least recently played graph when
// the tape holds tapeGraphs.
func (t *tape) keep(h uint64, x *GraphExec) {
	if len(t.graphs) >= tapeGraphs {
		var oldest uint64
		var at uint64
		for k, g := range t.graphs {
			if oldest == 0 || g.used < at {
				oldest, at = k, g.used
			}
		}
		t.graphs[oldest].exec.Close()
		delete(t.graphs, oldest)
	}
	if old := t.graphs[h]; old != nil {
		old.exec.Close()
	}
	t.graphs[h] = &tapeGraph{key: bytes.Clone(t.key), exec: x, used: t.clock}
}

// run queues the tape's operations one by one.
func (t *tape) run() error {
	for i := range t.ops {
		op := &t.ops[i]
		var err error
		switch op.kind {
		case tapeKernel:
			a := &t.a
			a.n, a.size, a.err = op.nargs, op.argSize, nil
			copy(a.off[:op.nargs], t.argOff[op.offAt:])
			copy(a.data[:op.argSize], t.argData[op.argsAt:])
			err = op.s.d.Launch(op.fn, op.grid, op.block, op.smem, op.s, a)
		case tapeMemset:
			err = op.s.Memset32(op.dst, op.value)
		case tapeCopy:
			err = op.s.CopyDevice(op.dst, op.src)
		case tapeUpload:
			err = op.s.uploadPinned(op.dst, t.staging+uintptr(op.stage), op.src.bytes)
		case tapeRecord:
			err = op.ev.Record(op.s)
		case tapeWait:
			err = op.s.Wait(op.ev)
		case tapeGemm:
			err = op.blas.gemmNow(&op.gemm)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// close plays what the tape holds and frees its graphs and memory.
func (t *tape) close() error {
	var errs []error
	if len(t.ops) > 0 {
		errs = append(errs, t.play())
	}
	// The played copies may still read the staging memory.
	errs = append(errs, t.s.Synchronize())
	for _, g := range t.graphs {
		errs = append(errs, g.exec.Close())
	}
	t.graphs = nil
	errs = append(errs, t.stageDone.Close())
	d := t.s.d
	errs = append(errs, d.cold(func() error { return d.drv.check(call(d.drv.memFreeHost, t.staging), "cuMemFreeHost") }))
	return errors.Join(errs...)
}

// uploadPinned queues a copy of n bytes of pinned host memory at src into
// dst (capturable, unlike a copy from Go memory).
func (s *Stream) uploadPinned(dst Buffer, src uintptr, n int) error {
	d := s.d
	if !d.enterHot() {
		return d.hotError()
	}
	d.scratch[0], d.scratch[1], d.scratch[2], d.scratch[3] = uintptr(dst.ptr), src, uintptr(n), s.h
	r := d.callHot(d.drv.memcpyHtoDAsync, 4)
	d.leaveHot()
	if r != 0 {
		return d.drv.check(uintptr(r), "cuMemcpyHtoDAsync_v2(%d bytes, pinned)", n)
	}
	return nil
}

// gemmQueued is a cuBLAS GemmEx call's arguments but for the scalars'
// addresses: the scalars themselves.
type gemmQueued struct {
	args        [19]uintptr // alpha and beta (6 and 13) unset
	alpha, beta float32
}

func (c *gemmQueued) appendKey(b []byte) []byte {
	for i, v := range c.args {
		if i != 6 && i != 13 {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
	}
	b = binary.LittleEndian.AppendUint32(b, math.Float32bits(c.alpha))
	return binary.LittleEndian.AppendUint32(b, math.Float32bits(c.beta))
}
