// Package loadgen is a load generator for OpenAI-compatible servers, in the
// manner of vLLM's serving benchmark: it builds a workload, sends it on a
// Poisson schedule under a concurrency cap, and summarises TTFT, time per
// output token, inter-token and end-to-end latency and throughput.
//
// The workloads (Random, SharedPrefix, ParseJSONL), the schedule
// (Arrivals) and the statistics (Summarize, Percentile) are pure functions;
// Client sends one request and times it; Run drives a whole benchmark.
package loadgen

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Schedule says when a run sends its requests.
type Schedule struct {
	// Rate is the mean request rate of a Poisson process, requests per
	// second; +Inf (or any value that is not positive) sends every
	// request at once.
	Rate float64
	// MaxConcurrency caps the requests in flight (0: no cap). A request
	// whose arrival finds the cap reached waits for a free place; its
	// latencies are timed from when it is sent, as vLLM's are.
	MaxConcurrency int
	// Seed seeds the arrival times.
	Seed uint64
}

// Run sends reqs on the schedule through c and returns one Result per
// request, in reqs' order, and the run's duration: from the first request
// to the end of the last. When ctx ends, requests not yet sent are not
// sent (Result.Sent false), those in flight are cancelled, and Run returns
// what completed.
func Run(ctx context.Context, c *Client, reqs []Request, s Schedule) ([]Result, time.Duration) {
	rate := s.Rate
	if rate <= 0 || math.IsNaN(rate) {
		rate = math.Inf(1)
	}
	at := Arrivals(rand.New(rand.NewPCG(s.Seed, 0x6c6f616467656e)), len(reqs), rate)
	var slots chan struct{}
	if s.MaxConcurrency > 0 {
		slots = make(chan struct{}, s.MaxConcurrency)
	}
	results := make([]Result, len(reqs))
	var wg sync.WaitGroup
	timer := time.NewTimer(0)
	defer timer.Stop()
	start := time.Now()
	for i, r := range reqs {
		if d := time.Until(start.Add(at[i])); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
			case <-timer.C:
			}
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			if slots != nil {
				select {
				case slots <- struct{}{}:
					defer func() { <-slots }()
				case <-ctx.Done():
					return
				}
			}
			results[i] = c.Do(ctx, r)
		})
	}
	wg.Wait()
	return results, time.Since(start)
}
