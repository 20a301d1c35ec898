package bench

import (
	"sync"
	"time"
)

// CopyBandwidth measures this machine's memory copy bandwidth in GB/s,
// counting bytes read plus bytes written, with threads goroutines each
// copying its share of a buffer of size bytes (far larger than the caches).
// It returns the best of several runs: the ceiling a memory-bound kernel can
// approach.
func CopyBandwidth(size, threads int) float64 {
	if threads < 1 {
		threads = 1
	}
	src := make([]byte, size)
	dst := make([]byte, size)
	for i := range src {
		src[i] = byte(i * 7)
	}
	copy(dst, src) // fault the pages in
	best := 0.0
	for run := 0; run < 5; run++ {
		start := time.Now()
		var wg sync.WaitGroup
		chunk := size / threads
		for t := 0; t < threads; t++ {
			lo, hi := t*chunk, (t+1)*chunk
			if t == threads-1 {
				hi = size
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				copy(dst[lo:hi], src[lo:hi])
			}()
		}
		wg.Wait()
		gbps := 2 * float64(size) / time.Since(start).Seconds() / 1e9
		best = max(best, gbps)
	}
	return best
}
