package ref64

import (
	"math"
	"testing"
)

// TestAttend checks Attend on cases with known answers: one cached position
// returns its value; equal scores average the values; a key aligned with
// the query dominates as the scale grows; grouped heads share a key/value
// head.
func TestAttend(t *testing.T) {
	const tol = 1e-12
	one := Attend([]float64{1, 2}, [][]float64{{3, 4}}, [][]float64{{5, 6}}, 1, 1, 2)
	if math.Abs(one[0]-5) > tol || math.Abs(one[1]-6) > tol {
		t.Errorf("one position: %v, want [5 6]", one)
	}
	avg := Attend([]float64{0, 0}, [][]float64{{1, 0}, {0, 1}}, [][]float64{{2, 4}, {4, 8}}, 1, 1, 2)
	if math.Abs(avg[0]-3) > tol || math.Abs(avg[1]-6) > tol {
		t.Errorf("equal scores: %v, want [3 6]", avg)
	}
	peak := Attend([]float64{100, 0}, [][]float64{{1, 0}, {-1, 0}}, [][]float64{{1, 1}, {-1, -1}}, 1, 1, 2)
	if math.Abs(peak[0]-1) > 1e-9 {
		t.Errorf("dominant key: %v, want ~[1 1]", peak)
	}
	// Two query heads, one key/value head: both read the same cache.
	g := Attend([]float64{1, 0, 0, 1}, [][]float64{{1, 0}, {0, 1}}, [][]float64{{1, 0}, {0, 1}}, 2, 1, 2)
	e := math.Exp(1 / math.Sqrt(2))
	want := []float64{e / (e + 1), 1 / (e + 1), 1 / (e + 1), e / (e + 1)}
	for i := range want {
		if math.Abs(g[i]-want[i]) > tol {
			t.Fatalf("grouped heads: %v, want %v", g, want)
		}
	}
}

func TestProjectAndMaxRelErr(t *testing.T) {
	y := Project([]float32{1, 2, 3, 4, 5, 6}, []float64{1, -1, 2}, 2)
	if y[0] != 5 || y[1] != 11 {
		t.Errorf("Project: %v, want [5 11]", y)
	}
	if e := MaxRelErr([]float32{1, 2.5}, []float64{1, 2}); math.Abs(e-0.25) > 1e-12 {
		t.Errorf("MaxRelErr: %v, want 0.25", e)
	}
	if e := MaxRelErr([]float32{1e-4}, []float64{0}); math.Abs(e-0.1) > 1e-7 {
		t.Errorf("MaxRelErr near zero: %v, want 0.1 (floor 1e-3)", e)
	}
}
