package ssm

import (
	"math"
	"testing"
)

// TestMamba2ScalarSteps checks the reference on a 1×1×1 layer over three
// steps against the recurrence written out by hand:
// s ← e^{Δ·A}·s + Δ·x·b, y = s·c + D·x, Δ = softplus(dt + dt_bias).
func TestMamba2ScalarSteps(t *testing.T) {
	sh := Mamba2Shape{Heads: 1, HeadDim: 1, StateSize: 1, Groups: 1}
	prm := Mamba2Params{ALog: []float64{math.Log(0.5)}, DtBias: []float64{0.25}, D: []float64{0.125}}
	state := []float64{0}
	want := 0.0
	inputs := [][4]float64{{1.5, 2, -1, 0.3}, {-0.5, 0.25, 3, -1.2}, {2, -1, 0.5, 4}}
	for i, in := range inputs {
		x, b, c, dt := in[0], in[1], in[2], in[3]
		y := []float64{0}
		Mamba2Step64(sh, prm, state, []float64{x}, []float64{b}, []float64{c}, []float64{dt}, y)
		delta := math.Log(1 + math.Exp(dt+0.25))
		want = math.Exp(delta*-0.5)*want + delta*x*b
		if math.Abs(state[0]-want) > 1e-15 || math.Abs(y[0]-(want*c+0.125*x)) > 1e-15 {
			t.Fatalf("step %d: state %v y %v, want %v %v", i, state[0], y[0], want, want*c+0.125*x)
		}
	}
}

// TestMamba2GroupsAndLayout checks that head h reads group h/(H/G) and that
// batch rows are independent, by comparing a batched 2-group step with
// single-head steps.
func TestMamba2GroupsAndLayout(t *testing.T) {
	sh := Mamba2Shape{Heads: 4, HeadDim: 2, StateSize: 3, Groups: 2}
	prm := Mamba2Params{ALog: []float64{0.1, 0.2, 0.3, 0.4}, DtBias: []float64{0, 0.1, -0.1, 0.2}, D: []float64{1, 2, 3, 4}}
	val := func(i int) float64 { return math.Sin(float64(i)*1.3) + 0.1*float64(i%5) }
	const batch = 2
	x, B, C, dt := make([]float64, batch*8), make([]float64, batch*6), make([]float64, batch*6), make([]float64, batch*4)
	for i := range x {
		x[i] = val(i)
	}
	for i := range B {
		B[i], C[i] = val(100+i), val(200+i)
	}
	for i := range dt {
		dt[i] = val(300 + i)
	}
	state := make([]float64, batch*sh.StateElems())
	for i := range state {
		state[i] = val(400 + i)
	}
	orig := append([]float64(nil), state...)
	y := make([]float64, batch*8)
	Mamba2Step64(sh, prm, state, x, B, C, dt, y)
	one := Mamba2Shape{Heads: 1, HeadDim: 2, StateSize: 3, Groups: 1}
	for b := 0; b < batch; b++ {
		for h := 0; h < 4; h++ {
			g := h / 2
			st := append([]float64(nil), orig[(b*4+h)*6:(b*4+h+1)*6]...)
			yh := make([]float64, 2)
			Mamba2Step64(one, Mamba2Params{ALog: prm.ALog[h : h+1], DtBias: prm.DtBias[h : h+1], D: prm.D[h : h+1]},
				st, x[(b*4+h)*2:(b*4+h+1)*2], B[(b*2+g)*3:(b*2+g+1)*3], C[(b*2+g)*3:(b*2+g+1)*3], dt[b*4+h:b*4+h+1], yh)
			for p := 0; p < 2; p++ {
				if y[(b*4+h)*2+p] != yh[p] {
					t.Fatalf("batch %d head %d row %d: %v vs single-head %v", b, h, p, y[(b*4+h)*2+p], yh[p])
				}
			}
		}
	}
}

// TestGDNScalarDeltaRule checks the reference with dk = dv = 1, where
// l2norm(k) = k/sqrt(k²+eps) and the delta rule reads
// s ← g·s; u = β(v − s·k̂); s ← s + k̂·u; o = s·q̂.
func TestGDNScalarDeltaRule(t *testing.T) {
	sh := GDNShape{KeyHeads: 1, ValueHeads: 1, KeyDim: 1, ValueDim: 1}
	prm := GDNParams{ALog: []float64{math.Log(0.3)}, DtBias: []float64{-0.5}}
	state := []float64{0.7}
	s := 0.7
	inputs := [][5]float64{{0.9, -1.1, 2, 0.4, -0.3}, {-2, 0.5, -1, -1, 1.5}}
	for i, in := range inputs {
		q, k, v, a, b := in[0], in[1], in[2], in[3], in[4]
		o := []float64{0}
		GDNStep64(sh, prm, state, []float64{q}, []float64{k}, []float64{v}, []float64{a}, []float64{b}, o)
		qn, kn := q/math.Sqrt(q*q+L2NormEps), k/math.Sqrt(k*k+L2NormEps)
		g := math.Exp(-0.3 * math.Log1p(math.Exp(a-0.5)))
		beta := 1 / (1 + math.Exp(-b))
		s *= g
		u := beta * (v - s*kn)
		s += kn * u
		if math.Abs(state[0]-s) > 1e-14 || math.Abs(o[0]-s*qn) > 1e-14 {
			t.Fatalf("step %d: state %v o %v, want %v %v", i, state[0], o[0], s, s*qn)
		}
	}
}

func TestShapesValidate(t *testing.T) {
	if err := (Mamba2Shape{Heads: 96, HeadDim: 80, StateSize: 128, Groups: 8}).Validate(); err != nil {
		t.Error(err)
	}
	if err := (Mamba2Shape{Heads: 6, HeadDim: 8, StateSize: 8, Groups: 4}).Validate(); err == nil {
		t.Error("6 heads in 4 groups accepted")
	}
	if err := (GDNShape{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128}).Validate(); err != nil {
		t.Error(err)
	}
	if err := (GDNShape{KeyHeads: 3, ValueHeads: 4, KeyDim: 8, ValueDim: 8}).Validate(); err == nil {
		t.Error("4 value heads over 3 key heads accepted")
	}
	if got := (GDNShape{KeyHeads: 16, ValueHeads: 64, KeyDim: 128, ValueDim: 128}).StateElems(); got != 1048576 {
		t.Errorf("Qwen3.5-122B GDN state elements %d, want 1048576 (docs/DESIGN.md 3)", got)
	}
}
