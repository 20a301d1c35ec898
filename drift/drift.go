// Package drift measures how far a state mode's next-token distributions
// drift from a reference's over one long token stream: both run the same
// model on the same tokens, teacher-forced, side by side, and every
// position's two distributions are compared (KL divergence, the next
// token's log-probability, the top-1 token). A lossy state's error shows
// where it compounds: in the output distribution, position by position.
package drift

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

// Mode is a state mode to compare against the reference.
type Mode struct {
	Name    string // as ParseMode reads it
	Options replay.Options
}

// ParseMode reads a mode's name:
//
//	naive-FMT       the baseline recurrence with its state rounded to FMT
//	                after every step (nvfp4, fp8, bf16, fp16)
//	FMT             replay with an FMT checkpoint (fp32, fp16, bf16, fp8)
//	FMT+READ        ... and a READ read copy for the outputs (nvfp4, fp8, bf16)
//	...-sr          stochastic rounding of the state's writes
//
// with window as the replay window (a baseline has none).
func ParseMode(name string, window int) (Mode, error) {
	opt := replay.Options{Mode: replay.Replay, Window: window}
	rest := name
	if s, ok := strings.CutSuffix(rest, "-sr"); ok {
		opt.Stochastic, rest = true, s
	}
	if s, ok := strings.CutPrefix(rest, "naive-"); ok {
		opt.Mode, opt.Window, rest = replay.Baseline, 0, s
	}
	state, read, hasRead := strings.Cut(rest, "+")
	var err error
	if opt.State, err = numeric.ParseFormat(state); err != nil {
		return Mode{}, fmt.Errorf("drift mode %q: %w", name, err)
	}
	if hasRead {
		if opt.Mode == replay.Baseline {
			return Mode{}, fmt.Errorf("drift mode %q: a naive state has no read copy", name)
		}
		if opt.ReadCopy, err = numeric.ParseFormat(read); err != nil {
			return Mode{}, fmt.Errorf("drift mode %q: %w", name, err)
		}
	}
	if _, err := opt.Check("", replay.CPUCapabilities()); err != nil {
		return Mode{}, fmt.Errorf("drift mode %q: %w", name, err)
	}
	return Mode{Name: name, Options: opt}, nil
}

// DefaultModes are the modes eval drift compares by default: the naive low
// states, half-precision checkpoints rounded to nearest and stochastically,
// and the dual-precision pairs of a checkpoint and an nvfp4 or fp8 read
// copy.
var DefaultModes = []string{
	"naive-nvfp4", "naive-fp8", "bf16", "bf16-sr", "fp16", "fp16-sr",
	"fp16+nvfp4", "fp8+nvfp4", "fp8+fp8", "fp32+nvfp4",
}

// Reference is the state every mode is compared against: the baseline
// recurrence in float32.
var Reference = replay.Options{Mode: replay.Baseline, State: numeric.F32}

// Stats summarise positions of one series.
type Stats struct {
	Positions int `json:"positions"`
	// KL is KL(p_ref ‖ p_mode) in nats, mean and 95th percentile.
	MeanKL float64 `json:"mean_kl"`
	P95KL  float64 `json:"p95_kl"`
	// DLogP is |log p_ref(next) − log p_mode(next)| of the token that
	// follows, mean and 95th percentile.
	MeanDLogP float64 `json:"mean_abs_dlogp"`
	P95DLogP  float64 `json:"p95_abs_dlogp"`
	// Top1 is the share of positions where both take the same most likely
	// token.
	Top1 float64 `json:"top1_agreement"`
}

// Series is one mode's measurement.
type Series struct {
	Mode   string `json:"mode"`
	Window int    `json:"window"` // 0: a baseline
	// Buckets[i] covers positions (Ends[i−1], Ends[i]] of Result.Ends.
	Buckets []Stats `json:"buckets"`
	All     Stats   `json:"all"`
	// KL is every position's divergence, for plots.
	KL []float32 `json:"-"`
	// DLogP is every position's |Δ log-prob|.
	DLogP []float32 `json:"-"`
	top1  []bool
}

// Result is a measurement of every mode over one stream.
type Result struct {
	Positions int      `json:"positions"`
	Ends      []int    `json:"bucket_ends"` // positions, 1-based, ascending
	Series    []Series `json:"series"`
}

// BucketEnds returns the report's bucket ends for n positions: 256, 512,
// 1K, 2K, ... below n, then n.
func BucketEnds(n int) []int {
	var ends []int
	for e := 256; e < n; e *= 2 {
		ends = append(ends, e)
	}
	return append(ends, n)
}

// Measure runs the reference and every mode over ids, teacher-forced in
// forwards of chunk tokens, and compares each position's next-token
// distribution (positions 1..len(ids)−1: the distribution after token p
// predicts token p+1). progress, when not nil, is called with the
// positions done after each chunk.
func Measure(ctx context.Context, d *nn.Decoder, ids []int, modes []Mode, chunk int, progress func(done, total int)) (*Result, error) {
	n := len(ids) - 1
	if n < 1 {
		return nil, errors.New("drift: need at least two tokens")
	}
	if chunk < 1 {
		return nil, fmt.Errorf("drift: chunk %d must be positive", chunk)
	}
	opts := []replay.Options{Reference}
	for _, m := range modes {
		opts = append(opts, m.Options)
	}
	states := make([]*nn.State, len(opts))
	seqs := make([]nn.Seq, len(opts))
	defer func() {
		for _, st := range states {
			if st != nil {
				st.Close()
			}
		}
	}()
	for i, opt := range opts {
		st, err := d.NewState(1, opt)
		if err != nil {
			return nil, fmt.Errorf("drift: %s: %w", name(modes, i), err)
		}
		// Every token as a decode step: the drift is decoding's, outputs
		// read from the checkpoint (or its read copy) and the ring.
		st.Stepwise = true
		states[i] = st
		if seqs[i], err = st.Admit(); err != nil {
			return nil, err
		}
	}
	// On the CPU the states run side by side: a long prompt runs token by
	// token through each SSM cache, which a single sequence cannot spread
	// over the cores. A GPU backend takes one pass at a time.
	concurrent := d.Backend() == nn.CPU()
	series := make([]Series, len(modes))
	for i, m := range modes {
		series[i] = Series{Mode: m.Name, Window: m.Options.Window, KL: make([]float32, n), DLogP: make([]float32, n), top1: make([]bool, n)}
	}
	V := d.Vocab
	logits := make([][]float32, len(opts))
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		errs := make([]error, len(opts))
		forward := func(i int) {
			rows := make([]nn.Row, hi-lo)
			for p := lo; p < hi; p++ {
				rows[p-lo] = nn.Row{Seq: seqs[i], Token: ids[p], Logits: true}
			}
			logits[i] = slices.Grow(logits[i][:0], len(rows)*V)[:len(rows)*V]
			if err := d.Forward(ctx, states[i], rows, logits[i]); err != nil {
				errs[i] = fmt.Errorf("drift: %s at position %d: %w", name(modes, i), lo, err)
			}
		}
		if concurrent {
			var wg sync.WaitGroup
			for i := range opts {
				wg.Go(func() { forward(i) })
			}
			wg.Wait()
		} else {
			for i := range opts {
				forward(i)
			}
		}
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		if err := compare(logits, V, ids, lo, hi, series); err != nil {
			return nil, err
		}
		if progress != nil {
			progress(hi, n)
		}
	}
	r := &Result{Positions: n, Ends: BucketEnds(n), Series: series}
	for i := range series {
		s := &series[i]
		lo := 0
		for _, e := range r.Ends {
			s.Buckets = append(s.Buckets, summarise(s.KL[lo:e], s.DLogP[lo:e], s.top1[lo:e]))
			lo = e
		}
		s.All = summarise(s.KL, s.DLogP, s.top1)
	}
	return r, nil
}

func name(modes []Mode, i int) string {
	if i == 0 {
		return "the reference"
	}
	return "mode " + modes[i-1].Name
}

// compare fills positions lo..hi−1 of every series from the chunk's logits
// (logits[0] the reference's), rows split across the cores.
func compare(logits [][]float32, V int, ids []int, lo, hi int, series []Series) error {
	rows := hi - lo
	workers := min(runtime.GOMAXPROCS(0), rows)
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lr := make([]float64, V)
			for r := w; r < rows; r += workers {
				p := lo + r
				ref := logits[0][r*V : (r+1)*V]
				lse, top := logSoftmax(lr, ref)
				if math.IsNaN(lse) || math.IsInf(lse, 0) {
					errs[w] = fmt.Errorf("drift: the reference's logits at position %d are not finite", p)
					return
				}
				next := ids[p+1]
				for i := range series {
					m := logits[i+1][r*V : (r+1)*V]
					kl, dlogp, mtop, err := against(lr, m, next)
					if err != nil {
						errs[w] = fmt.Errorf("drift: mode %s at position %d: %w", series[i].Mode, p, err)
						return
					}
					s := &series[i]
					s.KL[p], s.DLogP[p], s.top1[p] = float32(kl), float32(dlogp), mtop == top
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// logSumExp returns the log-sum-exp of logits x in float64 and the most
// likely token (the first on ties).
func logSumExp(x []float32) (float64, int) {
	top := 0
	for i, v := range x {
		if v > x[top] {
			top = i
		}
	}
	mx := float64(x[top])
	var sum float64
	for _, v := range x {
		sum += math.Exp(float64(v) - mx)
	}
	return mx + math.Log(sum), top
}

// logSoftmax writes log p of logits x to lr in float64 and returns the
// log-sum-exp and the most likely token.
func logSoftmax(lr []float64, x []float32) (float64, int) {
	lse, top := logSumExp(x)
	for i, v := range x {
		lr[i] = float64(v) - lse
	}
	return lse, top
}

// against returns KL(p_ref ‖ p_m) for the reference's log-probabilities lr
// and a mode's logits m, the next token's |Δ log p|, and m's top token.
func against(lr []float64, m []float32, next int) (kl, dlogp float64, top int, err error) {
	lse, top := logSumExp(m)
	if math.IsNaN(lse) || math.IsInf(lse, 0) {
		return 0, 0, 0, errors.New("logits are not finite")
	}
	for i, v := range m {
		kl += math.Exp(lr[i]) * (lr[i] - (float64(v) - lse))
	}
	dlogp = math.Abs(lr[next] - (float64(m[next]) - lse))
	// Rounding can leave a KL of identical distributions a hair below 0.
	return max(kl, 0), dlogp, top, nil
}

// summarise reduces positions to their Stats.
func summarise(kl, dlogp []float32, top1 []bool) Stats {
	s := Stats{Positions: len(kl)}
	if len(kl) == 0 {
		return s
	}
	s.MeanKL, s.P95KL = meanP95(kl)
	s.MeanDLogP, s.P95DLogP = meanP95(dlogp)
	agree := 0
	for _, t := range top1 {
		if t {
			agree++
		}
	}
	s.Top1 = float64(agree) / float64(len(top1))
	return s
}

// meanP95 returns the mean and the 95th percentile (nearest rank).
func meanP95(v []float32) (mean, p95 float64) {
	sorted := slices.Clone(v)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	var sum float64
	for _, x := range v {
		sum += float64(x)
	}
	rank := int(math.Ceil(0.95*float64(len(sorted)))) - 1
	return sum / float64(len(v)), float64(sorted[max(rank, 0)])
}
