package loadgen

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestArrivals checks the Poisson schedule over a seeded run of 20000
// requests: the mean gap is 1/rate and, the gaps being exponential, so is
// their standard deviation. Both are within 3% (the sampling error of
// the mean is 1/√20000 = 0.7%); the first request goes at once.
func TestArrivals(t *testing.T) {
	const n = 20000
	for _, rate := range []float64{0.5, 10, 1000} {
		at := Arrivals(rand.New(rand.NewPCG(1, 2)), n, rate)
		if at[0] != 0 {
			t.Errorf("rate %v: first arrival at %v, want 0", rate, at[0])
		}
		var sum, sumSq float64
		for i := 1; i < n; i++ {
			gap := (at[i] - at[i-1]).Seconds()
			if gap < 0 {
				t.Fatalf("rate %v: arrival %d before %d", rate, i, i-1)
			}
			sum += gap
			sumSq += gap * gap
		}
		mean := sum / (n - 1)
		std := math.Sqrt(sumSq/(n-1) - mean*mean)
		if want := 1 / rate; math.Abs(mean-want) > 0.03*want || math.Abs(std-want) > 0.03*want {
			t.Errorf("rate %v: gaps mean %.4g s, std %.4g s; want both %.4g s within 3%%", rate, mean, std, want)
		}
		if got := float64(n-1) / at[n-1].Seconds(); math.Abs(got-rate) > 0.03*rate {
			t.Errorf("rate %v: %.4g requests per second over the run", rate, got)
		}
	}
}

func TestArrivalsInf(t *testing.T) {
	for i, at := range Arrivals(rand.New(rand.NewPCG(1, 2)), 100, math.Inf(1)) {
		if at != 0 {
			t.Fatalf("rate inf: request %d at %v, want all at once", i, at)
		}
	}
	if got := Arrivals(rand.New(rand.NewPCG(1, 2)), 0, 5); len(got) != 0 {
		t.Errorf("no requests: %v", got)
	}
	a := Arrivals(rand.New(rand.NewPCG(7, 7)), 10, 3)
	b := Arrivals(rand.New(rand.NewPCG(7, 7)), 10, 3)
	for i := range a {
		if a[i] != b[i] || (i > 0 && a[i] == time.Duration(0)) {
			t.Fatalf("seeded arrivals differ or repeat 0: %v vs %v", a, b)
		}
	}
}
