package cuda

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// traceOpt is the trace tests' cache: a window of 4, drafts of 2.
var traceOpt = replay.Options{Mode: replay.Replay, Window: 4, MaxDraft: 2}

// traceWindow builds layer l's cache for batch slots with -DTRACE=1 (the
// group kernels at every batch, the split kernels), lets ready check (or
// skip on) which kernels it runs, admits the slots and runs one window of
// decode steps on fresh inputs drawn from seed. For each step it checks
// that no record was dropped and every record ends after it starts on a
// real SM, then calls check with the step's items and blocks by kernel.
func traceWindow(t *testing.T, d *Device, l gpuLayer, batch int, seed uint64, ready func(c *gpuCache),
	check func(k int, c *gpuCache, items, blocks map[TraceKind]int)) {
	t.Helper()
	tn := envTuning(os.Getenv)
	tn.groupAll = true
	tn.defines = append(slices.Clip(tn.defines), "-DTRACE=1")
	c, err := l.buildWith(d, traceOpt, batch, tn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { must(t, c.close()) }()
	ready(c)
	c.setSmallBatch(0)
	rc := c.common()
	s := stream(t, d)
	st := newStaging(t, d, l, batch, batch)
	var slots []replay.Slot
	for range batch {
		sl, err := c.admit(s)
		must(t, err)
		slots = append(slots, sl)
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	for k := range traceOpt.Window {
		must(t, rc.ResetTrace(s))
		st.upload(t, d, s, slots, l.draw(rng, batch))
		must(t, c.step(s, batch, st.slots, st.in, st.y))
		recs, dropped, err := rc.ReadTrace(s)
		must(t, err)
		if dropped != 0 {
			t.Fatalf("step %d: %d records dropped", k, dropped)
		}
		items, blocks := map[TraceKind]int{}, map[TraceKind]int{}
		for _, r := range recs {
			if r.End < r.Start || r.SM >= d.Multiprocessors() {
				t.Fatalf("step %d: %+v: end before start or no such SM (%d SMs)", k, r, d.Multiprocessors())
			}
			items[r.Kind] += r.Items
			blocks[r.Kind]++
		}
		check(k, c, items, blocks)
	}
}

// TestReplayTraceRecordsBlocks runs a window of GDN decode steps through
// the split kernels (the group step, the streamed flush beside it) built
// with -DTRACE=1 and checks each step's trace: every block's record has
// its end after its start on a real SM, the group step's blocks took every
// (key head, batch row) item exactly once between them, and the flush's
// blocks took no item until the step where every slot's ring is full, then
// every item of every slot. A module built without TRACE says so.
func TestReplayTraceRecordsBlocks(t *testing.T) {
	d := streamGPU(t, "flush")
	// largeLayers' GDN shape: the target models' heads of 128 x 128.
	shape := ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 128, ValueDim: 128}
	l := gdnTestLayer(14, shape)
	const batch = 8
	traceWindow(t, d, l, batch, 5, func(c *gpuCache) {
		if !c.streamFlush() {
			t.Fatalf("the trace test wants gdn_flush_stream: this cache flushes with another kernel")
		}
	}, func(k int, c *gpuCache, items, _ map[TraceKind]int) {
		if got, want := items[TraceGroupStep], batch*shape.KeyHeads; got != want {
			t.Errorf("step %d: the group step's blocks took %d items, want %d", k, got, want)
		}
		// A flushing slot's items: its value heads' rows in strips of 16 a warp.
		perSlot := shape.ValueHeads * shape.ValueDim / (16 * c.common().group.flushThreads / 32)
		want := 0
		if k == traceOpt.Window-1 {
			want = batch * perSlot
		}
		if got := items[TraceFlushStream]; got != want {
			t.Errorf("step %d: the flush's blocks took %d items, want %d", k, got, want)
		}
	})
	plain, err := l.buildWith(d, traceOpt, batch, envTuning(os.Getenv))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { must(t, plain.close()) }()
	if _, _, err := plain.common().ReadTrace(stream(t, d)); err == nil || !strings.Contains(err.Error(), "-DTRACE=1") {
		t.Errorf("ReadTrace of a module without TRACE: %v, want an error naming -DTRACE=1", err)
	}
}

// TestReplayTraceMamba2 runs a window of Mamba-2 decode steps through the
// split kernels built with -DTRACE=1: every step's group-step blocks took
// every (group, batch row) item once, and the pipelined flush's blocks
// (mamba2_flush_pipe, before the group step) recorded themselves and
// folded every (head, slot) item at the step where the windows fill, none
// before.
func TestReplayTraceMamba2(t *testing.T) {
	d := gpu(t)
	// largeLayers' Mamba-2 shape: rows of 128, 80 rows a head.
	shape := ssm.Mamba2Shape{Heads: 4, HeadDim: 80, StateSize: 128, Groups: 2}
	const batch = 8
	flushes := 0
	traceWindow(t, d, mamba2TestLayer(13, shape), batch, 6, func(c *gpuCache) {
		if k, why := c.foldKernel(); k != "v7" {
			t.Skipf("the Mamba-2 flush is not the pipelined fold here (%s): %s", k, why)
		}
	}, func(k int, _ *gpuCache, items, blocks map[TraceKind]int) {
		flushes += blocks[TraceM2FlushPipe]
		if got, want := items[TraceM2GroupStep], batch*shape.Groups; got != want {
			t.Errorf("step %d: the group step's blocks took %d items, want %d", k, got, want)
		}
		// Every (head, slot) of the step whose windows fill, none before.
		want := 0
		if k == traceOpt.Window-1 {
			want = batch * shape.Heads
		}
		if got := items[TraceM2FlushPipe]; got != want {
			t.Errorf("step %d: the pipelined flush's blocks folded %d items, want %d", k, got, want)
		}
	})
	if flushes == 0 {
		t.Errorf("no mamba2_flush_pipe block recorded in a window of %d steps", traceOpt.Window)
	}
}

// TestDecodeTrace checks the record layout read back from a TRACE module
// against records packed as TRACE_STOP packs them (kind << 24 | items,
// sm | block << 8), a partial record at the end left out.
func TestDecodeTrace(t *testing.T) {
	want := []TraceRecord{
		{Start: 1_000_000_123, End: 1_000_045_678, Kind: TraceGroupStep, Items: 3, SM: 131, Block: 1055},
		{Start: 7, End: 9, Kind: TraceFlushStream, Items: 0xffffff, SM: 0, Block: 1 << 23},
		{Start: 1 << 40, End: 1<<40 + 1, Kind: TraceGroupVerify, Items: 0, SM: 255, Block: 0},
	}
	var raw []byte
	for _, r := range want {
		b := make([]byte, traceRecBytes)
		binary.LittleEndian.PutUint64(b, r.Start)
		binary.LittleEndian.PutUint64(b[8:], r.End)
		binary.LittleEndian.PutUint32(b[16:], uint32(r.Kind)<<24|uint32(r.Items))
		binary.LittleEndian.PutUint32(b[20:], uint32(r.SM)|uint32(r.Block)<<8)
		raw = append(raw, b...)
	}
	raw = append(raw, 1, 2, 3) // a partial record
	got := decodeTrace(raw)
	if !slices.Equal(got, want) {
		t.Errorf("decodeTrace = %+v, want %+v", got, want)
	}
	for k, name := range map[TraceKind]string{TraceGroupStep: "group_step", TraceFlushStream: "flush_stream",
		TraceFoldStream: "fold_stream", TraceGroupVerify: "group_verify", TraceM2GroupStep: "m2_group_step",
		TraceM2FlushPipe: "m2_flush_pipe", TraceM2FoldPipe: "m2_fold_pipe", TraceM2GroupVerify: "m2_group_verify", 9: "kind9"} {
		if k.String() != name {
			t.Errorf("TraceKind(%d) = %q, want %q", k, k.String(), name)
		}
	}
}
