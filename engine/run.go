package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/replayssm/replayssm/model/nn"
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

// running is a job in flight.
type running struct {
	sequence
	job *Job
}

// Run serves jobs until ctx is done or jobs is closed and drained: the long
// running form of Generate. Jobs are admitted as sequences free up; each
// step runs the prompts' next chunks (Engine.PrefillChunk) and one token
// for the others, samples
// every live sequence, calls its OnToken and finishes it at an end token,
// its budget or its callback. Run blocks while there is nothing to do. It
// returns ctx's error, or nil when jobs was closed; every job it took from
// the channel has been finished by then. Run and Generate must not be used
// on one Engine at the same time.
func (e *Engine) Run(ctx context.Context, jobs <-chan *Job) error {
	var live []*running
	end := func(r *running, res Result, err error) {
		_ = e.st.Evict(r.seq)
		r.job.Finish(res, err)
	}
	defer func() {
		for _, r := range live {
			end(r, Result{Tokens: r.out, Reason: StopCallback}, ErrStopped)
		}
	}()
	var rows []nn.Row
	var asked []int
	open := true
	for {
		// Admit: wait for work when idle, else take what is queued now.
	admit:
		for open && len(live) < e.st.Capacity() {
			var j *Job
			var ok bool
			if len(live) == 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case j, ok = <-jobs:
				}
			} else {
				select {
				case j, ok = <-jobs:
				default:
					break admit
				}
			}
			if !ok {
				open = false
				break
			}
			if err := e.checkJob(j); err != nil {
				j.Finish(Result{}, err)
				continue
			}
			q, err := e.st.Admit()
			if err != nil {
				j.Finish(Result{}, err)
				continue
			}
			if j.Started != nil {
				j.Started()
			}
			sm := NewSampler(j.Sampling)
			sm.Prompt(j.Prompt)
			live = append(live, &running{sequence: sequence{seq: q, sampler: sm, fresh: true, logprobs: j.OnLogprobs, top: j.TopLogprobs}, job: j})
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// Drop the jobs whose clients went away.
		kept := live[:0]
		for _, r := range live {
			if c := r.job.Context; c != nil && c.Err() != nil {
				end(r, Result{Tokens: r.out, Reason: StopCallback}, c.Err())
				continue
			}
			kept = append(kept, r)
		}
		live = kept
		if len(live) == 0 {
			if !open {
				return nil
			}
			continue
		}

		rows, _, asked = e.stepRows(rows, asked, len(live), func(k int) (*sequence, []int) {
			return &live[k].sequence, live[k].job.Prompt
		})
		next, err := e.next(ctx, rows, len(asked), func(k int) *sequence { return &live[asked[k]].sequence })
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// The caches of every sequence in the batch are now unknown.
			for _, r := range live {
				end(r, Result{Tokens: r.out, Reason: StopCallback}, fmt.Errorf("forward: %w", err))
			}
			live = live[:0]
			continue
		}

		for k, i := range asked {
			r := live[i]
			if done, reason := r.advance(&r.job.Request, next[k]); done {
				end(r, Result{Tokens: r.out, Reason: reason}, nil)
				live[i] = nil
			}
		}
		kept = live[:0]
		for _, r := range live {
			if r != nil {
				kept = append(kept, r)
			}
		}
		live = kept
	}
}

// checkJob rejects a job before it takes a sequence: one bad token id would
// otherwise fail the forward of every sequence batched with it.
func (e *Engine) checkJob(j *Job) error {
	if j.Context != nil && j.Context.Err() != nil {
		return j.Context.Err()
	}
	if len(j.Prompt) == 0 {
		return errors.New("empty prompt")
	}
	for _, id := range j.Prompt {
		if id < 0 || id >= e.dec.Vocab {
			return fmt.Errorf("token id %d outside the vocabulary [0, %d)", id, e.dec.Vocab)
		}
	}
	return e.check(j.Sampling)
}
