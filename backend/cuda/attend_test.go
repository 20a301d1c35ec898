package cuda

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/model/nn"
)

// TestAttendTiles checks the split of attention rows between the tiled and
// the per-row kernel against a row-by-row account: every row exactly once,
// each tile one sequence at consecutive positions, runs below the minimum
// left to the per-row kernel.
func TestAttendTiles(t *testing.T) {
	run := func(seq, from, n int32) (s, p []int32) {
		for k := range n {
			s, p = append(s, seq), append(p, from+k)
		}
		return s, p
	}
	cat := func(parts ...[2][]int32) (s, p []int32) {
		for _, x := range parts {
			s, p = append(s, x[0]...), append(p, x[1]...)
		}
		return s, p
	}
	r := func(seq, from, n int32) [2][]int32 { s, p := run(seq, from, n); return [2][]int32{s, p} }
	for _, tc := range []struct {
		name      string
		seqs, pos []int32
		tiles     []int32
		rest      []int32
	}{
		{name: "decode rows", seqs: []int32{0, 1, 2}, pos: []int32{7, 3, 9}, rest: []int32{0, 1, 2}},
		{name: "empty"},
		{name: "short prompt", seqs: []int32{4, 4, 4, 4, 4, 4, 4}, pos: []int32{0, 1, 2, 3, 4, 5, 6}, rest: []int32{0, 1, 2, 3, 4, 5, 6}},
		{name: "one tile", seqs: []int32{2, 2, 2, 2, 2, 2, 2, 2}, pos: []int32{5, 6, 7, 8, 9, 10, 11, 12}, tiles: []int32{0, 8, 2, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tiles, rest := attendTiles(nil, nil, tc.seqs, tc.pos, 32)
			if !slices.Equal(tiles, tc.tiles) || !slices.Equal(rest, tc.rest) {
				t.Errorf("tiles %v rest %v, want %v and %v", tiles, rest, tc.tiles, tc.rest)
			}
		})
	}
	// A chunked-prefill pass: decode rows, a 75-row prompt, a prompt that
	// restarts its positions (two sequences in a row), a gap.
	seqs, pos := cat(r(0, 40, 1), r(1, 0, 75), r(2, 3, 1), r(3, 0, 9), r(4, 0, 12), r(4, 20, 8), r(5, 2, 3))
	const rows = 32
	tiles, rest := attendTiles(nil, nil, seqs, pos, rows)
	seen := make([]int, len(seqs))
	for k := 0; k < len(tiles); k += 4 {
		r0, n, s, p0 := tiles[k], tiles[k+1], tiles[k+2], tiles[k+3]
		if n <= 0 || n > rows {
			t.Fatalf("tile %v: %d rows", tiles[k:k+4], n)
		}
		for j := range n {
			if seqs[r0+j] != s || pos[r0+j] != p0+j {
				t.Fatalf("tile %v: row %d is sequence %d position %d", tiles[k:k+4], r0+j, seqs[r0+j], pos[r0+j])
			}
			seen[r0+j]++
		}
	}
	for _, i := range rest {
		seen[i]++
	}
	for i, c := range seen {
		if c != 1 {
			t.Errorf("row %d taken %d times", i, c)
		}
	}
	if want := 4 * ((75+rows-1)/rows + 3); len(tiles) != want {
		t.Errorf("%d tiles, want %d (75 rows in tiles of %d; 9, 12 and 8 in one each)", len(tiles)/4, want/4, rows)
	}
	if want := []int32{0, 76, 106, 107, 108}; !slices.Equal(rest, want) {
		t.Errorf("rest %v, want %v", rest, want)
	}
	// Scratch is reused without allocating.
	if a := testing.AllocsPerRun(10, func() { tiles, rest = attendTiles(tiles[:0], rest[:0], seqs, pos, rows) }); a != 0 {
		t.Errorf("%v allocations per split with scratch", a)
	}
}

// TestAttendTileKernel checks which tiled kernel takes each head dimension
// and that each fits an SM's shared memory at its largest.
func TestAttendTileKernel(t *testing.T) {
	for _, tc := range []struct{ hd, want int }{
		{8, 0}, {16, 0}, {20, 2}, {64, 0}, {72, 1}, {128, 1}, {132, 2}, {192, 2}, {256, 2}, {257, -1},
	} {
		if got := attendTileKernel(tc.hd); got != tc.want {
			t.Errorf("head dimension %d: kernel %d, want %d", tc.hd, got, tc.want)
		}
	}
	for _, k := range attendKernels {
		if s := k.smem(k.maxHD); s > 227<<10 {
			t.Errorf("%s: %d bytes of shared memory at head dimension %d, more than an SM's 227 KiB", k.name, s, k.maxHD)
		}
	}
}

// TestAttendSplits checks the flash-decoding split count: one part while
// the (row, head) pairs fill two waves or a row is short, otherwise a
// power of two that stops at two waves, at attendMaxSplits, or where a
// part would fall below attendSplitMin positions.
func TestAttendSplits(t *testing.T) {
	const h100 = 132 // two waves: 2·16·132 = 4,224 one-warp blocks
	for _, tc := range []struct {
		pairs, longest, sms, want int
	}{
		{1 * 32, 100, h100, 1},     // short: one part
		{1 * 32, 511, h100, 1},     // two parts would hold < 256 each
		{1 * 32, 512, h100, 2},     // two of 256
		{1 * 4, 3000, h100, 8},     // 375 positions a part; 16 would hold 187
		{1 * 32, 40000, h100, 64},  // capped at attendMaxSplits
		{64 * 32, 40000, h100, 4},  // 2,048 pairs: ×2 still short of 4,224, ×4 reaches it
		{256 * 32, 40000, h100, 1}, // the pairs alone fill two waves
		{4224, 40000, h100, 1},     // exactly two waves
		{4223, 40000, h100, 2},     // just short
		{1 * 32, 1 << 20, 1, 1},    // one SM: 32 pairs fill two waves of 16
		{1 * 8, 1 << 20, 1, 4},     // 8·4 = 32
		{1, attendSplitMin * 2 * 64, h100, 64},
	} {
		if got := attendSplits(tc.pairs, tc.longest, tc.sms); got != tc.want {
			t.Errorf("attendSplits(%d pairs, %d positions, %d SMs) = %d, want %d", tc.pairs, tc.longest, tc.sms, got, tc.want)
		}
	}
	for pairs := 1; pairs <= 1<<14; pairs *= 3 {
		for longest := 1; longest <= 1<<17; longest = longest*2 + 1 {
			s := attendSplits(pairs, longest, h100)
			if s < 1 || s > attendMaxSplits || s&(s-1) != 0 {
				t.Fatalf("attendSplits(%d, %d) = %d: not a power of two in [1, %d]", pairs, longest, s, attendMaxSplits)
			}
			if s > 1 && longest/s < attendSplitMin {
				t.Fatalf("attendSplits(%d, %d) = %d: parts of %d positions", pairs, longest, s, longest/s)
			}
		}
	}
}

// TestKVLayoutConstants checks that the kernels address the paged KV cache
// with the block and chunk sizes the host books it by.
func TestKVLayoutConstants(t *testing.T) {
	src, err := KernelSource("nn.cu")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		v    int
	}{{"KV_BLOCK", nn.KVBlock}, {"KV_CHUNK_BLOCKS", nn.KVChunkBlocks}} {
		if def := fmt.Sprintf("#define %s %d\n", c.name, c.v); !strings.Contains(src, def) {
			t.Errorf("kernels/nn.cu lacks %q", strings.TrimSpace(def))
		}
	}
}
