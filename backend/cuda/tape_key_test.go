package cuda

import (
	"bytes"
	"testing"
)

// TestTapeKey checks, without a GPU, that a tape's key holds everything
// that decides what its operations do and nothing else: a graph is
// launched for a tape only when the keys are equal, so a field left out
// would replay the wrong work, and an upload's contents in the key would
// keep every decode step from matching the last.
func TestTapeKey(t *testing.T) {
	s, side := &Stream{h: 11}, &Stream{h: 12}
	fn, fn2 := &Function{h: 21}, &Function{h: 22}
	ev := &Event{h: 31}
	args := func(vals ...uint64) *Args {
		var a Args
		for _, v := range vals {
			a.U64(v)
		}
		return &a
	}
	type rec func(*tape)
	kernel := func(s *Stream, fn *Function, grid, block [3]uint32, smem uint32, a *Args) rec {
		return func(t *tape) { t.addKernel(s, fn, grid, block, smem, a) }
	}
	op := func(o tapeOp) rec { return func(t *tape) { t.add(o) } }
	g1, b1 := [3]uint32{4, 1, 1}, [3]uint32{128, 1, 1}
	base := []rec{
		kernel(s, fn, g1, b1, 0, args(1, 2)),
		op(tapeOp{kind: tapeUpload, s: s, dst: Buffer{ptr: 0x1000, bytes: 64}, src: Buffer{bytes: 64}, stage: 0}),
		op(tapeOp{kind: tapeRecord, s: s, ev: ev}),
		op(tapeOp{kind: tapeWait, s: side, ev: ev}),
		op(tapeOp{kind: tapeMemset, s: s, dst: Buffer{ptr: 0x2000, bytes: 16}, value: 7}),
		op(tapeOp{kind: tapeCopy, s: side, dst: Buffer{ptr: 0x3000, bytes: 8}, src: Buffer{ptr: 0x4000, bytes: 8}}),
		op(tapeOp{kind: tapeGemm, s: s, blas: &BLAS{h: 41}, gemm: gemmQueued{args: [19]uintptr{41, 0, 1, 8, 8, 8}, alpha: 1}}),
	}
	key := func(recs []rec) []byte {
		var t tape
		for _, r := range recs {
			r(&t)
		}
		return t.key
	}
	want := key(base)
	if !bytes.Equal(key(base), want) {
		t.Fatal("the same operations gave two keys")
	}
	with := func(i int, r rec) []rec {
		out := append([]rec(nil), base...)
		out[i] = r
		return out
	}
	for name, recs := range map[string][]rec{
		"function":      with(0, kernel(s, fn2, g1, b1, 0, args(1, 2))),
		"grid":          with(0, kernel(s, fn, [3]uint32{5, 1, 1}, b1, 0, args(1, 2))),
		"block":         with(0, kernel(s, fn, g1, [3]uint32{256, 1, 1}, 0, args(1, 2))),
		"shared memory": with(0, kernel(s, fn, g1, b1, 1024, args(1, 2))),
		"argument":      with(0, kernel(s, fn, g1, b1, 0, args(1, 3))),
		"stream":        with(0, kernel(side, fn, g1, b1, 0, args(1, 2))),
		"upload target": with(1, op(tapeOp{kind: tapeUpload, s: s, dst: Buffer{ptr: 0x1100, bytes: 64}, src: Buffer{bytes: 64}})),
		"upload size":   with(1, op(tapeOp{kind: tapeUpload, s: s, dst: Buffer{ptr: 0x1000, bytes: 64}, src: Buffer{bytes: 32}})),
		"staging":       with(1, op(tapeOp{kind: tapeUpload, s: s, dst: Buffer{ptr: 0x1000, bytes: 64}, src: Buffer{bytes: 64}, stage: 64})),
		"event":         with(2, op(tapeOp{kind: tapeRecord, s: s, ev: &Event{h: 32}})),
		"memset value":  with(4, op(tapeOp{kind: tapeMemset, s: s, dst: Buffer{ptr: 0x2000, bytes: 16}, value: 8})),
		"copy source":   with(5, op(tapeOp{kind: tapeCopy, s: side, dst: Buffer{ptr: 0x3000, bytes: 8}, src: Buffer{ptr: 0x4008, bytes: 8}})),
		"gemm shape":    with(6, op(tapeOp{kind: tapeGemm, s: s, blas: &BLAS{h: 41}, gemm: gemmQueued{args: [19]uintptr{41, 0, 1, 8, 16, 8}, alpha: 1}})),
		"gemm alpha":    with(6, op(tapeOp{kind: tapeGemm, s: s, blas: &BLAS{h: 41}, gemm: gemmQueued{args: [19]uintptr{41, 0, 1, 8, 8, 8}, alpha: 2}})),
		"order":         append(append([]rec{}, base[1:]...), base[0]),
		"one more":      append(append([]rec{}, base...), base[0]),
	} {
		if bytes.Equal(key(recs), want) {
			t.Errorf("a different %s gave the same key", name)
		}
	}
	// The arguments' layout, not only their bytes: two ints against one
	// 64-bit value of the same bytes.
	var a1, a2 Args
	a1.I32(5)
	a1.I32(0)
	a1.U64(9)
	a2.U64(5)
	a2.U64(9)
	if bytes.Equal(key([]rec{kernel(s, fn, g1, b1, 0, &a1)}), key([]rec{kernel(s, fn, g1, b1, 0, &a2)})) {
		t.Error("arguments of another layout gave the same key")
	}
	// Padding between arguments holds no stale bytes of an earlier launch:
	// the same arguments give the same key whatever the Args held before.
	var used, fresh Args
	used.U64(^uint64(0))
	used.U64(^uint64(0))
	used.Reset()
	for _, a := range []*Args{&used, &fresh} {
		a.I32(7)
		a.U64(9)
	}
	if !bytes.Equal(key([]rec{kernel(s, fn, g1, b1, 0, &used)}), key([]rec{kernel(s, fn, g1, b1, 0, &fresh)})) {
		t.Error("stale padding bytes changed the key of the same arguments")
	}
}
