package cuda

import (
	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

// replayThreads picks the block size of the one-block-per-matrix kernels:
// 4 to 8 warps, preferring a count whose rows per pass divide the matrix
// rows, so no warp idles in the last pass.
func replayThreads(rows, cols int, state numeric.Format) int {
	vec := 16 / elemBytes(state)
	lanes := min(8, cols/vec)
	rpw := 32 / lanes
	for w := 8; w >= 4; w-- {
		if rows%(w*rpw) == 0 {
			return 32 * w
		}
	}
	if rows <= 4*rpw {
		return 128
	}
	return 256
}

// moduleThreads is the block size of a module's one-block-per-matrix
// kernels: replayThreads, but in baseline mode with a 2-byte state half of
// it (down to 128) while a block would stream fewer than four passes of its
// matrix. The streaming baselines pay a prologue per block (the token's
// vectors, the decay in float64) before their passes. Measured on the H200
// (B=256, against replayThreads in the same run): Super bf16 (two passes
// at 256 threads) 321 -> 283 us, 78% -> 89% of copy, its per-draft verify
// 1020 -> 1034; 128 threads everywhere took fp32 states 1-2% slower (Nano
// 499 -> 511) and the GDN bf16 per-draft verify 621 -> 934 us
// (Qwen3.5-4B), so the rule stops at the shapes with too few passes.
func moduleThreads(opt replay.Options, rows, cols int) int {
	threads := replayThreads(rows, cols, opt.State)
	if opt.Mode != replay.Baseline || elemBytes(opt.State) != 2 {
		return threads
	}
	rpw := 32 / min(8, cols/8) // rows per warp: 8 bf16 or fp16 elements a lane
	for threads > 128 && rows < 4*(threads/32)*rpw {
		threads /= 2
	}
	return threads
}

// blocksPerSM is how many blocks of threads threads, with r's registers and
// static shared memory plus dyn bytes of dynamic shared memory, one SM
// holds at once (the occupancy calculator's arithmetic for sm_80-sm_90:
// 64K registers allocated per warp in units of 256, about 1 KiB of shared
// memory reserved per block, 2048 threads, or 1536 on sm_86 and sm_89).
func blocksPerSM(p gpuProps, r Resources, threads, dyn int) int {
	warps := (threads + 31) / 32
	regsPerWarp := (r.Registers*32 + 255) / 256 * 256
	byRegs := 65536 / max(1, regsPerWarp*warps)
	bySmem := p.perSM() / (r.StaticSharedBytes + dyn + 1024)
	maxThreads := 2048
	if p.major == 8 && p.minor != 0 {
		maxThreads = 1536
	}
	return max(1, min(byRegs, bySmem, maxThreads/threads, 32))
}

// bounded is n blocks, at most bound where bound is positive (a grid
// bounded for tests).
func bounded(n, bound int) int {
	if bound > 0 {
		return min(n, bound)
	}
	return n
}
