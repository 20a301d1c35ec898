package nn

import (
	"errors"
	"slices"
	"testing"
)

// TestBlockTable follows a paged cache's bookkeeping through appends that
// cross block boundaries, truncation mid-block and at a boundary, an
// eviction whose blocks another sequence takes, a refused row and a
// failed grow, checking each sequence's blocks and the pool's counts.
func TestBlockTable(t *testing.T) {
	bt := NewBlockTable(3)
	grows := 0
	grow := func(chunks int) error { grows += chunks; return nil }
	assign := func(seqs []int32) []int32 {
		t.Helper()
		pos := make([]int32, len(seqs))
		after := map[int32]int{}
		for i, q := range seqs {
			pos[i] = int32(bt.Len(int(q)) + after[q])
			after[q]++
		}
		got, err := bt.Assign(nil, seqs, pos, grow)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	rows := func(seq int32, n int) []int32 { return slices.Repeat([]int32{seq}, n) }
	expect := func(what string, seq int, blocks []int32, used, held int) {
		t.Helper()
		if got := bt.Table(seq); !slices.Equal(got, blocks) {
			t.Errorf("%s: sequence %d has blocks %v, want %v", what, seq, got, blocks)
		}
		if u, h := bt.Blocks(); u != used || h != held {
			t.Errorf("%s: %d blocks used of %d held, want %d of %d", what, u, h, used, held)
		}
	}

	// A 17-position prompt takes blocks 0 and 1 (the lowest first); its
	// rows report the block of their position.
	got := assign(rows(0, 17))
	if want := append(rows(0, KVBlock), 1); !slices.Equal(got, want) {
		t.Fatalf("prompt rows' blocks %v, want %v", got, want)
	}
	expect("prompt", 0, []int32{0, 1}, 2, KVChunkBlocks)
	if grows != 1 {
		t.Fatalf("%d chunks grown, want 1", grows)
	}
	// Two sequences decoding side by side interleave their blocks.
	for range KVBlock + 8 {
		assign([]int32{1, 2})
	}
	expect("interleaved", 1, []int32{2, 4}, 6, KVChunkBlocks)
	expect("interleaved", 2, []int32{3, 5}, 6, KVChunkBlocks)

	// Mid-block truncation keeps the block; the next row lands in it.
	bt.Truncate(1, KVBlock+3)
	expect("truncated mid-block", 1, []int32{2, 4}, 6, KVChunkBlocks)
	if got := assign([]int32{1}); got[0] != 4 || bt.Len(1) != KVBlock+4 {
		t.Fatalf("row after a mid-block truncation in block %d at length %d, want block 4 at %d", got[0], bt.Len(1), KVBlock+4)
	}
	// Truncation to a boundary frees the block past it; the next row
	// takes it back.
	bt.Truncate(2, KVBlock)
	expect("truncated to a boundary", 2, []int32{3}, 5, KVChunkBlocks)
	if got := assign([]int32{2}); got[0] != 5 {
		t.Fatalf("row after a boundary truncation in block %d, want the freed block 5", got[0])
	}
	// Truncating to a length past the sequence's changes nothing.
	bt.Truncate(2, 100)
	expect("truncated past the end", 2, []int32{3, 5}, 6, KVChunkBlocks)

	// Eviction: sequence 0's blocks go back and sequence 2's next ones
	// come from them before any never used.
	bt.Truncate(0, 0)
	expect("evicted", 0, nil, 4, KVChunkBlocks)
	for range 2 * KVBlock { // positions 17..48
		assign([]int32{2})
	}
	expect("after reuse", 2, []int32{3, 5, 0, 1}, 6, KVChunkBlocks)

	// A refused row and a failed grow change nothing.
	if _, err := bt.Assign(nil, []int32{1}, []int32{7}, grow); err == nil {
		t.Fatal("a row past the next position was accepted")
	}
	oom := errors.New("out of memory")
	big := rows(0, KVBlock*(KVChunkBlocks+1))
	pos := make([]int32, len(big))
	for i := range pos {
		pos[i] = int32(i)
	}
	if _, err := bt.Assign(nil, big, pos, func(int) error { return oom }); !errors.Is(err, oom) {
		t.Fatalf("failed grow: %v, want %v", err, oom)
	}
	expect("after refusals", 0, nil, 6, KVChunkBlocks)
	if bt.Len(0) != 0 || bt.Len(1) != KVBlock+4 {
		t.Fatalf("lengths %d and %d after refusals, want 0 and %d", bt.Len(0), bt.Len(1), KVBlock+4)
	}
	// The same prompt with room to grow takes the 58 free blocks and a
	// chunk more.
	grows = 0
	if _, err := bt.Assign(nil, big, pos, grow); err != nil {
		t.Fatal(err)
	}
	if used, held := bt.Blocks(); grows != 1 || held != 2*KVChunkBlocks || used != 6+KVChunkBlocks+1 {
		t.Fatalf("a %d-block prompt: %d chunks grown, %d blocks used of %d held", KVChunkBlocks+1, grows, used, held)
	}
	if bt.Longest() != KVChunkBlocks+1 {
		t.Fatalf("longest table %d blocks, want %d", bt.Longest(), KVChunkBlocks+1)
	}
}

// TestBlockTableDecodeAllocs requires that booking a decode step's rows
// allocates nothing once a sequence's blocks are in place.
func TestBlockTableDecodeAllocs(t *testing.T) {
	bt := NewBlockTable(4)
	seqs := []int32{0, 1, 2, 3}
	pos := make([]int32, len(seqs))
	grow := func(int) error { return nil }
	dst, err := bt.Assign(nil, seqs, pos, grow)
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(KVBlock-2, func() {
		for i := range pos {
			pos[i]++
		}
		dst, err = bt.Assign(dst[:0], seqs, pos, grow)
	})
	if err != nil || allocs != 0 {
		t.Fatalf("a decode step's booking: %v allocations, error %v", allocs, err)
	}
}
