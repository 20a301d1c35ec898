package cuda

import "fmt"

// Attention over the KV cache (kernels/nn.cu): nn_attend takes a row at a
// time (a decode step's rows); a tiled kernel takes up to a tile's rows of
// consecutive positions of one sequence together (a prompt's rows),
// staging each block of keys and values once for all of them. Tensor
// cores (nn_attend_mma_<hd>) take heads of up to 128 dimensions, a
// multiple of 8; nn_attend_tiles, on the CUDA cores, the rest up to 256,
// where the tensor-core kernel's float32 tiles leave one block per SM and
// lost to it on the H100 (161 against 114 ms for Qwen3.5-4B's 4K prompt).
const (
	// attendTileKeys is both kernels' ATT(S)_KEYS: the positions staged at
	// a time.
	attendTileKeys = 32
	// attendTileMin is the shortest run of a sequence's consecutive
	// positions that goes to a tiled kernel: below it the staging costs
	// more than the rows share.
	attendTileMin = 8
	// maxHeadDim bounds the head dimension of every attention kernel (a
	// lane holds eight of a row's values).
	maxHeadDim = 256
)

// attendKernel is a tiled attention kernel: its name, the rows of its
// tiles, its threads, the largest head dimension it takes and whether it
// needs a multiple of 8.
type attendKernel struct {
	name          string
	rows, threads int
	maxHD         int
	tensorCores   bool
}

// attendKernels are the tiled kernels, tried in order.
var attendKernels = [...]attendKernel{
	{name: "nn_attend_mma_64", rows: 64, threads: 128, maxHD: 64, tensorCores: true},
	{name: "nn_attend_mma_128", rows: 64, threads: 128, maxHD: 128, tensorCores: true},
	{name: "nn_attend_tiles", rows: 32, threads: 256, maxHD: maxHeadDim},
}

// attendTileKernel returns the index in attendKernels of the kernel for
// head dimension hd, or -1 when none takes it.
func attendTileKernel(hd int) int {
	for i, k := range attendKernels {
		if hd <= k.maxHD && (!k.tensorCores || hd%8 == 0) {
			return i
		}
	}
	return -1
}

// smem is the kernel's dynamic shared memory for head dimension hd. The
// tensor-core kernel holds the tile's queries, the keys and values of
// attendTileKeys positions (rows padded against bank conflicts) and each
// of its four warps' 16×attendTileKeys weights; the other holds keys (rows
// padded by one), values and queries.
func (k attendKernel) smem(hd int) int {
	if k.tensorCores {
		return 4 * (k.rows*(hd+4) + attendTileKeys*(hd+4) + attendTileKeys*(hd+8) + 4*16*(attendTileKeys+4))
	}
	return 4 * ((2*attendTileKeys+k.rows)*hd + attendTileKeys)
}

// loadAttendKernels loads the tiled kernels, each allowed the shared
// memory of its largest head dimension.
func loadAttendKernels(load func(name string) (*Function, error)) ([len(attendKernels)]*Function, error) {
	var fs [len(attendKernels)]*Function
	for i, k := range attendKernels {
		f, err := load(k.name)
		if err == nil {
			err = f.SetMaxDynamicSharedMemory(k.smem(k.maxHD))
		}
		if err != nil {
			return fs, fmt.Errorf("%s: %w", k.name, err)
		}
		fs[i] = f
	}
	return fs, nil
}

// attendTiles splits a pass's attention rows (row i: sequence seqs[i] at
// position pos[i]): each run of at least attendTileMin rows of one
// sequence at consecutive positions becomes tiles {first row, rows,
// sequence, first position} of at most rows rows, appended to tiles; every
// other row's index is appended to rest.
func attendTiles(tiles, rest []int32, seqs, pos []int32, rows int) ([]int32, []int32) {
	for i := 0; i < len(seqs); {
		j := i + 1
		for j < len(seqs) && seqs[j] == seqs[i] && pos[j] == pos[j-1]+1 {
			j++
		}
		if j-i < attendTileMin {
			for r := i; r < j; r++ {
				rest = append(rest, int32(r))
			}
		} else {
			for r := i; r < j; r += rows {
				n := min(rows, j-r)
				tiles = append(tiles, int32(r), int32(n), seqs[r], pos[r])
			}
		}
		i = j
	}
	return tiles, rest
}

// Flash-decoding: nn_attend splits each decode row's positions into parts,
// one block of threads (a warp) each, when the (row, head) pairs alone
// are too few to keep the GPU busy (a long context at a small batch);
// nn_attend_combine then merges the parts' partial softmax states.
const (
	// attendSplitMin is the fewest positions a part takes, so that its
	// partial state's write and merge stay small beside its reads.
	attendSplitMin = 256
	// attendMaxSplits bounds the parts of a row (and its partials).
	attendMaxSplits = 64
	// attendWaveWarps is the one-warp blocks counted to a wave on one SM,
	// half of what an H100's SM holds; splitting aims at two waves.
	attendWaveWarps = 16
)

// attendSplits is the number of parts nn_attend splits each of a pass's
// decode rows into, for pairs (row, head) pairs whose longest row reads
// longest positions on a GPU of sms multiprocessors: a power of two,
// doubled while the pairs' blocks fall short of two waves
// (2·attendWaveWarps·sms) and the longest row's parts keep at least
// attendSplitMin positions. A power of two changes only at a few lengths,
// so a decode step's graph is recorded again rarely as its context grows.
func attendSplits(pairs, longest, sms int) int {
	target := 2 * attendWaveWarps * sms
	s := 1
	for s < attendMaxSplits && pairs*s < target && longest >= 2*s*attendSplitMin {
		s *= 2
	}
	return s
}
