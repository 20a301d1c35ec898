package loadgen

import (
	"math"
	"math/rand/v2"
	"time"
)

// Arrivals returns when each of n requests is sent, as offsets from the
// start of a run: a Poisson process of rate requests per second (the gaps
// are exponential with mean 1/rate; the first request goes at once), or
// every request at once when rate is +Inf. vLLM's benchmark draws its
// gaps the same way (its burstiness 1).
func Arrivals(rng *rand.Rand, n int, rate float64) []time.Duration {
	at := make([]time.Duration, n)
	if math.IsInf(rate, 1) {
		return at
	}
	var t float64 // seconds
	for i := 1; i < n; i++ {
		t += rng.ExpFloat64() / rate
		at[i] = time.Duration(t * float64(time.Second))
	}
	return at
}
