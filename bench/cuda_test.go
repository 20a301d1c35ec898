package bench

import "testing"

// TestFoldPeriod checks the verify rows' fold period against walks done by
// hand: the history grows by T, folds once it and 2T overflow the ring.
func TestFoldPeriod(t *testing.T) {
	for _, tc := range []struct{ R, T, want int }{
		{20, 4, 4},  // 4, 8, 12, 16, fold (16+8 > 20), 4, ...
		{20, 1, 19}, // folds at 19 (19+2 > 20), restarts at 1
		{20, 2, 9},  // 2 .. 16, fold at 18 (18+4 > 20)
		{5, 3, 1},   // every verify after the first folds
	} {
		if got := foldPeriod(tc.R, tc.T); got != tc.want {
			t.Errorf("foldPeriod(%d, %d) = %d, want %d", tc.R, tc.T, got, tc.want)
		}
	}
}
