package bench

import (
	"sync"
	"time"
	"unsafe"

	"github.com/replayssm/replayssm/internal/simd"
)

// CopyBandwidth measures this machine's memory bandwidth in GB/s, counting
// bytes read plus bytes written, over buffers of size bytes (far larger than
// the caches) split across threads goroutines. It takes the better of two
// passes, each the best of several runs: a copy (memmove into a second
// buffer) and an in-place read-modify-write of one buffer, which is what a
// state update does. On CPUs the copy also pays for reading the destination
// lines before writing them, so the in-place pass is the higher, honest
// ceiling for in-place kernels.
func CopyBandwidth(size, threads int) float64 {
	c, rmw, _ := MemoryBandwidth(size, threads)
	return max(c, rmw)
}

// CopyAndUpdateBandwidth returns the copy and the in-place update bandwidths
// separately (GB/s, read+write).
func CopyAndUpdateBandwidth(size, threads int) (copyGBps, updateGBps float64) {
	c, u, _ := MemoryBandwidth(size, threads)
	return c, u
}

// MemoryBandwidth returns, in GB/s, the copy and in-place update bandwidths
// (read+write) and the read-only bandwidth (a vectorised sum over the
// buffer). Some
// CPUs read no faster alone than alongside writes, so a read-only pass (a
// replay non-flush step) gains less over a read+write pass (the baseline)
// than the byte counts say; the read figure shows how much.
func MemoryBandwidth(size, threads int) (copyGBps, updateGBps, readGBps float64) {
	if threads < 1 {
		threads = 1
	}
	size &^= 63
	src := make([]byte, size)
	dst := make([]byte, size)
	for i := range src {
		src[i] = byte(i * 7)
	}
	copy(dst, src) // fault the pages in
	parallel := func(fn func(lo, hi int)) float64 {
		best := 0.0
		for run := 0; run < 5; run++ {
			start := time.Now()
			var wg sync.WaitGroup
			chunk := (size / threads) &^ 63
			for t := 0; t < threads; t++ {
				lo, hi := t*chunk, (t+1)*chunk
				if t == threads-1 {
					hi = size
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					fn(lo, hi)
				}()
			}
			wg.Wait()
			best = max(best, 2*float64(size)/time.Since(start).Seconds()/1e9)
		}
		return best
	}
	copyGBps = parallel(func(lo, hi int) { copy(dst[lo:hi], src[lo:hi]) })
	updateGBps = parallel(func(lo, hi int) { update(dst[lo:hi]) })
	// The read pass sums float32 values with the SIMD dot kernel (several
	// independent FMA chains): a scalar sum is limited by its own
	// instruction rate below what memory delivers on this kind of CPU, and
	// would understate the read-only ceiling a vectorised kernel reaches.
	f := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(dst))), size/4)
	for i := range f {
		f[i] = 1 // no NaN or subnormal operands
	}
	var mu sync.Mutex
	var sink float32
	readGBps = parallel(func(lo, hi int) {
		x := f[lo/4 : hi/4]
		s := simd.Dot(x, x)
		mu.Lock()
		sink += s
		mu.Unlock()
	}) / 2 // parallel counts two transfers per byte
	_ = sink
	return copyGBps, updateGBps, readGBps
}

// update flips every bit of b in place, 32 bytes per iteration.
func update(b []byte) {
	w := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
	for i := 0; i+4 <= len(w); i += 4 {
		w[i] ^= ^uint64(0)
		w[i+1] ^= ^uint64(0)
		w[i+2] ^= ^uint64(0)
		w[i+3] ^= ^uint64(0)
	}
}
