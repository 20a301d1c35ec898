package replay

import (
	"sync"
	"sync/atomic"
)

// workers runs the tasks of one cache operation on a fixed set of goroutines
// that live as long as the cache, so a decode step starts no goroutine and
// allocates nothing. The caller's goroutine is worker 0.
type workers struct {
	n     int
	wake  []chan struct{}
	done  sync.WaitGroup
	next  atomic.Int64
	total int64
	chunk int64
	task  func(worker, i int)
}

func newWorkers(n int) *workers {
	w := &workers{n: n}
	for id := 1; id < n; id++ {
		ch := make(chan struct{}, 1)
		w.wake = append(w.wake, ch)
		go func() {
			for range ch {
				w.drain(id)
				w.done.Done()
			}
		}()
	}
	return w
}

// run calls task(worker, i) for every i in [0, total), spread over the
// workers, and returns when all calls have returned. task must be a func
// value that does not change between steps (a method value bound once), so
// passing it allocates nothing.
func (w *workers) run(total int, task func(worker, i int)) {
	if total == 0 {
		return
	}
	w.task = task
	w.total = int64(total)
	// Small chunks balance heads of unequal cost (flush and non-flush slots
	// share a step) and shorten the wait for the last chunk at the end of
	// a step; total/(16n) keeps the atomic traffic negligible.
	w.chunk = max(1, int64(total)/int64(16*w.n))
	w.next.Store(0)
	helpers := min(w.n-1, total-1)
	w.done.Add(helpers)
	for i := 0; i < helpers; i++ {
		w.wake[i] <- struct{}{}
	}
	w.drain(0)
	w.done.Wait()
	w.task = nil
}

func (w *workers) drain(id int) {
	for {
		start := w.next.Add(w.chunk) - w.chunk
		if start >= w.total {
			return
		}
		end := min(start+w.chunk, w.total)
		for i := start; i < end; i++ {
			w.task(id, int(i))
		}
	}
}

// close stops the worker goroutines.
func (w *workers) close() {
	for _, ch := range w.wake {
		close(ch)
	}
	w.wake = nil
}
