// Package tensor is the CPU linear algebra of the forward pass: float32
// matrix products in PyTorch's weight layout (y = x·Wᵀ, W stored [out][in])
// over float32 or bfloat16 weights (Weights; bfloat16 widened exactly as it
// is used), RMS normalisation, activations, softmax and rotary position
// embeddings.
//
// The matrix products split their output columns over goroutines and run
// AVX2+FMA kernels where the machine has them (plain-Go kernels elsewhere,
// or with the noasm build tag); both kernel sets are tested against each
// other. Everything else is plain Go: it is a small part of a decode step.
package tensor

import (
	"runtime"
	"sync"
)

// minParallelWork is the number of multiply-adds below which a product runs
// on the calling goroutine: starting goroutines costs about a microsecond,
// the time of some 10⁴ multiply-adds.
const minParallelWork = 1 << 15

// Parallel calls fn over a partition of [0, n) into contiguous ranges whose
// bounds are multiples of align (except n itself), one range per goroutine,
// using up to GOMAXPROCS goroutines, and returns when all calls have returned.
// work is the total cost in multiply-adds; below minParallelWork fn runs once
// on the caller's goroutine.
func Parallel(n, align int, work int64, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if align < 1 {
		align = 1
	}
	threads := runtime.GOMAXPROCS(0)
	blocks := (n + align - 1) / align
	threads = min(threads, blocks, int(max(1, work/minParallelWork)))
	if threads <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	for t := range threads {
		lo := blocks * t / threads * align
		hi := min(n, blocks*(t+1)/threads*align)
		if lo >= hi {
			continue
		}
		if t == threads-1 {
			fn(lo, hi)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}
