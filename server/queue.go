package server

import (
	"context"
	"slices"
	"sync"

	"github.com/replayssm/replayssm/engine"
)

// jobQueue holds the requests waiting for a sequence, in arrival order, up
// to max of them. A request whose client gives up is taken out at once, so
// that it does not hold a place a new client is refused for.
type jobQueue struct {
	mu     sync.Mutex
	jobs   []*engine.Job
	inHand int // 1 while feed holds the oldest job out for the engine
	max    int
	ready  chan struct{} // holds a token while jobs may be non-empty
	// dropped is called (on feed's goroutine) for a job whose client left
	// while feed held it: it never reaches the engine, whose Finish it
	// will not get.
	dropped func(*engine.Job)
}

func newJobQueue(max int, dropped func(*engine.Job)) *jobQueue {
	return &jobQueue{max: max, ready: make(chan struct{}, 1), dropped: dropped}
}

// push appends js (one request's choices), or none of them and reports
// false when they do not fit beside the max requests waiting.
func (q *jobQueue) push(js ...*engine.Job) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.jobs)+q.inHand+len(js) > q.max {
		return false
	}
	q.jobs = append(q.jobs, js...)
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return true
}

// remove takes j out if it is still waiting and reports whether it was
// (if not, the engine or feed's dropped has it).
func (q *jobQueue) remove(j *engine.Job) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := slices.Index(q.jobs, j)
	if i < 0 {
		return false
	}
	q.jobs = slices.Delete(q.jobs, i, i+1)
	return true
}

// len is the number of requests waiting.
func (q *jobQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.jobs) + q.inHand
}

// pop takes the oldest job out and holds it in hand until handed.
func (q *jobQueue) pop() *engine.Job {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.jobs) == 0 {
		return nil
	}
	j := q.jobs[0]
	q.jobs = slices.Delete(q.jobs, 0, 1)
	q.inHand = 1
	return j
}

func (q *jobQueue) handed() {
	q.mu.Lock()
	q.inHand = 0
	q.mu.Unlock()
}

// feed hands the waiting requests to out, oldest first, as the engine
// takes them, until ctx ends.
func (q *jobQueue) feed(ctx context.Context, out chan<- *engine.Job) {
	for {
		j := q.pop()
		if j == nil {
			select {
			case <-q.ready:
				continue
			case <-ctx.Done():
				return
			}
		}
		var gone <-chan struct{}
		if j.Context != nil {
			gone = j.Context.Done()
		}
		select {
		case out <- j:
		case <-gone:
			q.dropped(j) // its client left while it was in hand
		case <-ctx.Done():
			q.handed()
			return // j never reached the engine: its handler answers 503
		}
		q.handed()
	}
}
