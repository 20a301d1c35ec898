package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/safetensors"
	"github.com/replayssm/replayssm/replay"
)

type jobEnd struct {
	res Result
	err error
}

func submit(ctx context.Context, jobs chan<- *Job, r Request) <-chan jobEnd {
	done := make(chan jobEnd, 1)
	jobs <- &Job{Request: r, Context: ctx, Finish: func(res Result, err error) { done <- jobEnd{res, err} }}
	return done
}

// TestRunGreedy feeds the fixture prompts to a running engine with room for
// two sequences and prompts run in chunks of 5 tokens, plus an invalid job
// and a cancelled one; the valid ones must give transformers' greedy
// tokens and the others must not disturb them.
func TestRunGreedy(t *testing.T) {
	d, err := model.Load(fixtureDir("qwen3_5"), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := safetensors.Open(filepath.Join(fixtureDir("qwen3_5"), "reference.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	e, err := New(d, 2, replay.Options{Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	e.PrefillChunk = 5
	jobs := make(chan *Job, 8)
	ran := make(chan error, 1)
	go func() { ran <- e.Run(context.Background(), jobs, nil) }()

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	bad := submit(context.Background(), jobs, Request{Prompt: []int{-1}})
	gone := submit(cancelled, jobs, Request{Prompt: []int{1, 2}, MaxTokens: 4})
	var ends []<-chan jobEnd
	for i := range 5 {
		ends = append(ends, submit(context.Background(), jobs, Request{Prompt: refIDs(t, ref, fmt.Sprintf("prompt.%d.ids", i)), MaxTokens: 32}))
	}
	if r := <-bad; r.err == nil {
		t.Error("out-of-vocabulary prompt accepted")
	}
	if r := <-gone; !errors.Is(r.err, context.Canceled) {
		t.Errorf("cancelled job: %v, want context.Canceled", r.err)
	}
	for i, c := range ends {
		r := <-c
		want := refIDs(t, ref, fmt.Sprintf("greedy.%d.ids", i))
		if r.err != nil || fmt.Sprint(r.res.Tokens) != fmt.Sprint(want) || r.res.Reason != StopLength {
			t.Errorf("prompt %d: got %v (%v, %v), want %v", i, r.res.Tokens, r.res.Reason, r.err, want)
		}
	}
	close(jobs)
	if err := <-ran; err != nil {
		t.Errorf("Run after close: %v", err)
	}
}

// TestRunStop checks that cancelling Run finishes the jobs in flight.
func TestRunStop(t *testing.T) {
	d, err := model.Load(fixtureDir("mamba2"), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(d, 1, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithCancel(context.Background())
	jobs := make(chan *Job, 1)
	ran := make(chan error, 1)
	go func() { ran <- e.Run(ctx, jobs, nil) }()
	started := make(chan struct{})
	n := 0
	end := submit(context.Background(), jobs, Request{Prompt: []int{1}, OnToken: func(int) bool {
		if n++; n == 1 {
			close(started)
		}
		return true
	}})
	<-started
	cancel()
	if r := <-end; !errors.Is(r.err, ErrStopped) {
		t.Errorf("job in flight at stop: %v, want ErrStopped", r.err)
	}
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v, want context.Canceled", err)
	}
}
