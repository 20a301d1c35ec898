package engine

import (
	"context"
	"errors"
	"fmt"
)

// Job is one request submitted to a running engine (Run): the Request, the
// context that cancels it alone, and the callback that receives its end.
type Job struct {
	Request
	// Context, if set, cancels this job alone: Run drops it and frees its
	// sequence before the next forward after Context is done. The other
	// sequences keep running.
	Context context.Context
	// Started, if set, is called on Run's goroutine when the job takes a
	// sequence, before its prompt runs (the end of its wait in the queue).
	Started func()
	// Finish is called exactly once, on Run's goroutine, with the job's
	// result, or with an error: the job was invalid, its Context ended,
	// the forward failed, or Run stopped. It must not block.
	Finish func(Result, error)
}

// ErrStopped is the error a job finishes with when Run ends (its context
// was cancelled) before the job did.
var ErrStopped = errors.New("engine stopped")

// Run serves jobs until ctx is done or jobs is closed and drained: the
// scheduler's loop fed from a channel, the long running form of Generate
// (or, with sp set, of GenerateSpeculative). It takes jobs while sequences
// are free, and each step runs the prompts' next chunks
// (Engine.PrefillChunk) beside the decoding sequences, calls their OnToken
// and finishes them at an end token, their budget or their callback. Run
// blocks while there is nothing to do. It returns ctx's error, or nil when
// jobs was closed; every job it took from the channel has been finished by
// then. A failed step finishes the jobs running in it with the error, and
// Run goes on with the next ones. Run and Generate must not be used on one
// Engine at the same time.
func (e *Engine) Run(ctx context.Context, jobs <-chan *Job, sp *Speculation) error {
	var strategy *speculator
	if sp != nil {
		var err error
		if strategy, err = e.newSpeculator(*sp); err != nil {
			return err
		}
	}
	sc := e.newScheduler(strategy)
	defer sc.stop(ErrStopped)
	open := true
	for {
		// Wait for work when idle, else take what is queued now.
	take:
		for open && sc.room() > 0 {
			var j *Job
			var ok bool
			if !sc.busy() {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case j, ok = <-jobs:
				}
			} else {
				select {
				case j, ok = <-jobs:
				default:
					break take
				}
			}
			if !ok {
				open = false
				break
			}
			sc.waiting = append(sc.waiting, j)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !sc.busy() {
			if !open {
				return nil
			}
			continue
		}
		if err := sc.step(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// The caches of every sequence in the step are now unknown.
			sc.fail(fmt.Errorf("forward: %w", err))
		}
	}
}

// checkJob rejects a job before it takes a sequence: one bad token id would
// otherwise fail the forward of every sequence batched with it.
func (e *Engine) checkJob(j *Job) error {
	if j.Context != nil && j.Context.Err() != nil {
		return j.Context.Err()
	}
	return e.checkRequest(&j.Request)
}

// checkRequest validates a request for this engine's model.
func (e *Engine) checkRequest(r *Request) error {
	if len(r.Prompt) == 0 {
		return errors.New("empty prompt")
	}
	for _, id := range r.Prompt {
		if id < 0 || id >= e.dec.Vocab {
			return fmt.Errorf("token id %d outside the vocabulary [0, %d)", id, e.dec.Vocab)
		}
	}
	return e.check(r.Sampling)
}
