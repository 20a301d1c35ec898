package replay

import "fmt"

// ConvWeights is a depthwise causal convolution over the last Kernel inputs:
// out[t][c] = Σ_k Weight[c·K+k]·in[t−(K−1)+k][c] + Bias[c], the layout of
// PyTorch's Conv1d weight [C, 1, K] (k = K−1 weighs the current input).
// Bias may be nil.
type ConvWeights struct {
	Channels int
	Kernel   int
	Weight   []float32
	Bias     []float32
}

func (w ConvWeights) validate() error {
	if w.Channels <= 0 || w.Kernel <= 0 {
		return fmt.Errorf("conv: channels %d and kernel %d must be positive", w.Channels, w.Kernel)
	}
	if len(w.Weight) != w.Channels*w.Kernel {
		return fmt.Errorf("conv: weight has %d values, want %d×%d", len(w.Weight), w.Channels, w.Kernel)
	}
	if w.Bias != nil && len(w.Bias) != w.Channels {
		return fmt.Errorf("conv: bias has %d values, want %d", len(w.Bias), w.Channels)
	}
	return nil
}

// convWindow keeps, per slot, the last K-1 committed raw conv inputs plus room
// for MaxDraft draft inputs (docs/DESIGN.md 2.3): rows [0, K-1) are the committed
// window, oldest first; a verify writes its drafts after them, and a commit
// of n shifts the window by n. Rejected drafts are simply overwritten later.
type convWindow struct {
	w    ConvWeights
	rows int // K-1+max(1, MaxDraft)
	data []float32
}

func newConvWindow(w ConvWeights, capacity, maxDraft int) (*convWindow, error) {
	if err := w.validate(); err != nil {
		return nil, err
	}
	rows := w.Kernel - 1 + max(1, maxDraft)
	return &convWindow{w: w, rows: rows, data: make([]float32, capacity*rows*w.Channels)}, nil
}

func (c *convWindow) slot(s Slot) []float32 {
	n := c.rows * c.w.Channels
	return c.data[int(s)*n : (int(s)+1)*n]
}

// apply writes T inputs after the committed window of slot s and computes
// their outputs, each seeing the window and the inputs before it.
func (c *convWindow) apply(s Slot, in, out []float32, T int) {
	C, K := c.w.Channels, c.w.Kernel
	win := c.slot(s)
	copy(win[(K-1)*C:(K-1+T)*C], in[:T*C])
	for t := 0; t < T; t++ {
		o := out[t*C : (t+1)*C]
		for ch := 0; ch < C; ch++ {
			var sum float32
			if c.w.Bias != nil {
				sum = c.w.Bias[ch]
			}
			wt := c.w.Weight[ch*K : (ch+1)*K]
			for k := 0; k < K; k++ {
				sum += wt[k] * win[(t+k)*C+ch]
			}
			o[ch] = sum
		}
	}
}

// shift makes the n inputs after the window part of it.
func (c *convWindow) shift(s Slot, n int) {
	if n == 0 {
		return
	}
	C, K := c.w.Channels, c.w.Kernel
	win := c.slot(s)
	copy(win[:(K-1)*C], win[n*C:(n+K-1)*C])
}

func (c *convWindow) reset(s Slot) { clear(c.slot(s)) }

func (c *convWindow) copySlot(dst, src Slot) { copy(c.slot(dst), c.slot(src)) }

func convStep(c *convWindow, l *Ledger, slots []Slot, in, out []float32) error {
	if c == nil {
		return fmt.Errorf("conv: cache built without conv weights")
	}
	if err := l.CheckBatch(slots); err != nil {
		return fmt.Errorf("conv: %w", err)
	}
	C := c.w.Channels
	if err := checkLen("conv input", len(in), len(slots)*C); err != nil {
		return fmt.Errorf("conv: %w", err)
	}
	if err := checkLen("conv output", len(out), len(slots)*C); err != nil {
		return fmt.Errorf("conv: %w", err)
	}
	for i, s := range slots {
		c.apply(s, in[i*C:(i+1)*C], out[i*C:(i+1)*C], 1)
		c.shift(s, 1)
	}
	return nil
}

func convVerify(c *convWindow, l *Ledger, maxDraft int, slots []Slot, T int, in, out []float32) error {
	if c == nil {
		return fmt.Errorf("conv: cache built without conv weights")
	}
	if err := checkDrafts(nil, len(slots), T, maxDraft); err != nil {
		return fmt.Errorf("conv: %w", err)
	}
	if err := l.CheckBatch(slots); err != nil {
		return fmt.Errorf("conv: %w", err)
	}
	C := c.w.Channels
	if err := checkLen("conv input", len(in), len(slots)*T*C); err != nil {
		return fmt.Errorf("conv: %w", err)
	}
	if err := checkLen("conv output", len(out), len(slots)*T*C); err != nil {
		return fmt.Errorf("conv: %w", err)
	}
	for i, s := range slots {
		c.apply(s, in[i*T*C:(i+1)*T*C], out[i*T*C:(i+1)*T*C], T)
	}
	return nil
}
