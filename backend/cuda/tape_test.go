package cuda

import (
	"math"
	"testing"
)

// tapePass queues one pass for TestTape on a deferred stream: for each of
// the k inputs, an upload of this pass's values and a saxpy into y; then a
// snapshot of y taken on the side stream between a fork and a join, and a
// memset of z.
func tapePass(t *testing.T, s, side *Stream, fork, join *Event, fn *Function, y, snap, z Buffer, xs []Buffer, host [][]float32, n int) {
	t.Helper()
	d := s.d
	grid, block := [3]uint32{d.gridFor(uint64(n)), 1, 1}, [3]uint32{256, 1, 1}
	for i, xb := range xs {
		must(t, s.Upload(xb, f32Bytes(host[i])))
		var a Args
		a.Ptr(y)
		a.Ptr(xb)
		a.F32(0.5)
		a.U64(uint64(n))
		must(t, d.Launch(fn, grid, block, 0, s, &a))
	}
	must(t, fork.Record(s))
	must(t, side.Wait(fork))
	must(t, side.CopyDevice(snap, y))
	must(t, join.Record(side))
	must(t, s.Wait(join))
	must(t, s.Memset32(z, 7))
}

// TestTape runs passes of fresh inputs through a deferred stream and checks
// each against float64 arithmetic: nothing runs before the host waits, the
// first pass plays op by op, the second is captured, later ones launch
// the graph; a pass of another shape plays op by op; an upload larger than
// the staging memory plays the tape first.
func TestTape(t *testing.T) {
	d := gpu(t)
	rng := newRand(t)
	s := stream(t, d)
	must(t, s.Defer(true))
	side, err := s.NewSide()
	must(t, err)
	t.Cleanup(func() { must(t, side.Close()) })
	fork, join := syncEvent(t, d), syncEvent(t, d)
	fn := kernel(t, d, "saxpy.cu", "saxpy_f32")
	const n, k = 4099, 12
	y, snap, z := alloc(t, d, 4*n), alloc(t, d, 4*n), alloc(t, d, 4*n)
	xs := make([]Buffer, k)
	for i := range xs {
		xs[i] = alloc(t, d, 4*n)
	}
	y0 := randF32(rng, n)
	must(t, d.CopyToDeviceF32(y, y0))
	want := make([]float64, n)
	for i, v := range y0 {
		want[i] = float64(v)
	}
	check := func(pass int) {
		t.Helper()
		got, gotSnap, gotZ := make([]float32, n), make([]float32, n), make([]float32, n)
		must(t, s.CopyFromDevice(f32Bytes(got), y)) // plays the tape
		must(t, s.CopyFromDevice(f32Bytes(gotSnap), snap))
		must(t, s.CopyFromDevice(f32Bytes(gotZ), z))
		for i := range n {
			// 12 fused steps a pass of values below 2: rounding stays
			// far below 1e-4 after a few passes.
			if math.Abs(float64(got[i])-want[i]) > 1e-4 || gotSnap[i] != got[i] || math.Float32bits(gotZ[i]) != 7 {
				t.Fatalf("pass %d, element %d: y %v (snapshot %v, z bits %#x), want %v", pass, i, got[i], gotSnap[i], math.Float32bits(gotZ[i]), want[i])
			}
		}
	}
	for pass := range 6 {
		must(t, d.Memset32(snap, poisonF32))
		must(t, d.Memset32(z, poisonF32))
		host := make([][]float32, k)
		for i := range host {
			host[i] = randF32(rng, n)
			for j, v := range host[i] {
				want[j] += 0.5 * float64(v)
			}
		}
		before := make([]float32, n)
		must(t, d.CopyFromDeviceF32(before, y)) // not on s: the tape does not play
		tapePass(t, s, side, fork, join, fn, y, snap, z, xs, host, n)
		after := make([]float32, n)
		must(t, d.CopyFromDeviceF32(after, y))
		for i := range n {
			if after[i] != before[i] {
				t.Fatalf("pass %d: recorded work ran before the host waited (y[%d] %v -> %v)", pass, i, before[i], after[i])
			}
		}
		check(pass)
		st := s.TapeStats()
		wantGraphed := max(0, pass)
		if st.Tapes != pass+1 || st.Graphed != wantGraphed || st.Captured != min(pass, 1) {
			t.Fatalf("after pass %d: %+v, want %d graphed of which 1 captured", pass, st, wantGraphed)
		}
	}

	// Another shape: fewer inputs (18 operations), played op by op, then
	// captured.
	before := s.TapeStats()
	for pass := range 3 {
		host := [][]float32{randF32(rng, n), randF32(rng, n), randF32(rng, n), randF32(rng, n), randF32(rng, n), randF32(rng, n)}
		for _, h := range host {
			for j, v := range h {
				want[j] += 0.5 * float64(v)
			}
		}
		tapePass(t, s, side, fork, join, fn, y, snap, z, xs[:6], host, n)
		check(100 + pass)
	}
	if got := s.TapeStats(); got.Captured != before.Captured+1 || got.Graphed != before.Graphed+2 {
		t.Fatalf("a second shape: %+v after %+v, want one more capture and two more graphs", got, before)
	}

	// An upload larger than the staging memory plays what was recorded,
	// then copies at once.
	big := tapeStagingBytes/4 + 1024
	bb := alloc(t, d, 4*big)
	host := [][]float32{randF32(rng, n)}
	for j, v := range host[0] {
		want[j] += 0.5 * float64(v)
	}
	tapePass(t, s, side, fork, join, fn, y, snap, z, xs[:1], host, n)
	bigHost := randF32(rng, big)
	must(t, s.Upload(bb, f32Bytes(bigHost)))
	check(200)
	back := make([]float32, big)
	must(t, s.CopyFromDevice(f32Bytes(back), bb))
	for i := range big {
		if back[i] != bigHost[i] {
			t.Fatalf("large upload, element %d: %v, want %v", i, back[i], bigHost[i])
		}
	}

	// Timing events keep a tape out of graphs: a captured record is an
	// edge, not a timestamp. The same pass, timed, plays op by op and the
	// events measure it.
	start, stop := mustEvent(t, d), mustEvent(t, d)
	before = s.TapeStats()
	for pass := range 3 {
		host := make([][]float32, k)
		for i := range host {
			host[i] = randF32(rng, n)
			for j, v := range host[i] {
				want[j] += 0.5 * float64(v)
			}
		}
		must(t, start.Record(s))
		tapePass(t, s, side, fork, join, fn, y, snap, z, xs, host, n)
		must(t, stop.Record(s))
		must(t, stop.Synchronize())
		el, err := stop.Since(start)
		must(t, err)
		if el <= 0 {
			t.Fatalf("timed pass %d: the events measured %v", pass, el)
		}
		check(300 + pass)
	}
	if got := s.TapeStats(); got.Graphed != before.Graphed || got.Tapes != before.Tapes+3 {
		t.Fatalf("timed passes: %+v after %+v, want three tapes played op by op", got, before)
	}

	// A pass longer than a tape holds plays in pieces, in order: 70,000
	// increments of one, exact in float32.
	before = s.TapeStats()
	const m, steps = 256, tapeMaxOps + 4464
	ones, acc := alloc(t, d, 4*m), alloc(t, d, 4*m)
	must(t, d.Memset32(acc, 0))
	one := make([]float32, m)
	for i := range one {
		one[i] = 1
	}
	must(t, s.Upload(ones, f32Bytes(one)))
	var a Args
	a.Ptr(acc)
	a.Ptr(ones)
	a.F32(1)
	a.U64(m)
	for range steps - 1 {
		must(t, d.Launch(fn, [3]uint32{1, 1, 1}, [3]uint32{256, 1, 1}, 0, s, &a))
	}
	got := make([]float32, m)
	must(t, s.CopyFromDevice(f32Bytes(got), acc))
	for i, v := range got {
		if v != steps-1 {
			t.Fatalf("long pass, element %d: %v, want %d", i, v, steps-1)
		}
	}
	if st := s.TapeStats(); st.Tapes != before.Tapes+2 || st.Graphed != before.Graphed {
		t.Fatalf("a pass of %d operations: %+v after %+v, want two pieces played op by op", steps, st, before)
	}
	must(t, s.Defer(false))
}

func syncEvent(t *testing.T, d *Device) *Event {
	e, err := d.NewSyncEvent()
	must(t, err)
	t.Cleanup(func() { e.Close() })
	return e
}
