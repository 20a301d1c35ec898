package nn

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/tensor"
)

func TestClampDelta(t *testing.T) {
	bias := []float32{-4, 0.5, 2}
	dt := []float32{-10, -10, 30}
	clampDelta(dt, bias, 0.02, 5)
	want := []float64{0.02, 0.02, 5}
	for h := range dt {
		got := tensor.Softplus(float64(dt[h]) + float64(bias[h]))
		if math.Abs(got-want[h]) > 1e-6*want[h] {
			t.Errorf("head %d: Δ = %v after clamping, want %v", h, got, want[h])
		}
	}
	in := []float32{0.3, -1}
	m := &Mamba2Mixer{DtBias: bias[:2], StepDelta: [2]float64{0, math.Inf(1)}}
	be := CPU()
	m.place(be)
	m.clamp(be, tensorOf(in, 1, 2), false)
	if in[0] != 0.3 || in[1] != -1 {
		t.Errorf("no clamp changed dt: %v", in)
	}
}

func TestPlan(t *testing.T) {
	s := &State{live: []bool{true, true, true}, pos: []int{5, 0, 2}}
	var b batch
	// Sequence 0 decodes two tokens, 1 prefills two, 2 decodes one.
	b.plan(s, []Row{{Seq: 0}, {Seq: 1}, {Seq: 0}, {Seq: 2}, {Seq: 1}}, false)
	if got := fmt.Sprint(b.waves); got != "[[0 1 3] [2 4]]" {
		t.Errorf("waves %s", got)
	}
	if got := fmt.Sprint(b.pos); got != "[5 0 6 2 1]" {
		t.Errorf("positions %s", got)
	}
	if got := fmt.Sprint(b.scan); got != "[true true true false true]" {
		t.Errorf("scan flags %s", got)
	}
	b.plan(s, []Row{{Seq: 2}}, false)
	if fmt.Sprint(b.waves, b.pos, b.scan) != "[[0]] [2] [false]" {
		t.Errorf("replanning: %v %v %v", b.waves, b.pos, b.scan)
	}
}

func TestRoute(t *testing.T) {
	E := 8
	logits := []float32{0.1, 2, -1, 0.5, 1.5, 0, -0.3, 1.9}
	prob, sel := make([]float32, E), make([]float32, E)
	chosen, weight := make([]int, 2), make([]float32, 2)

	m := &MoE{Routing: SoftmaxRouter, TopK: 2, NormTopK: true}
	m.route(logits, prob, sel, chosen, weight)
	if fmt.Sprint(chosen) != "[1 7]" || math.Abs(float64(weight[0]+weight[1])-1) > 1e-6 || weight[0] <= weight[1] {
		t.Errorf("softmax router: %v %v", chosen, weight)
	}

	// The correction bias moves expert 2 into the top 2 but its weight is
	// its unbiased sigmoid.
	bias := make([]float32, E)
	bias[2] = 3
	m = &MoE{Routing: SigmoidRouter, TopK: 2, NormTopK: false, Scale: 2.5, CorrectionBias: bias}
	m.route(logits, prob, sel, chosen, weight)
	if fmt.Sprint(chosen) != "[2 1]" || math.Abs(float64(weight[0])-2.5*float64(tensor.Sigmoid(-1))) > 1e-6 {
		t.Errorf("sigmoid router: %v %v", chosen, weight)
	}

	// Four groups of two; a group scores the sum of its two sigmoids: group 0
	// (experts 0, 1) 1.40 beats group 2 (1.32) and group 3 (1.30). With one
	// group kept, expert 7 (the second best overall) is out.
	m = &MoE{Routing: SigmoidRouter, TopK: 2, Groups: 4, TopKGroups: 1, Scale: 1}
	m.route(logits, prob, sel, chosen, weight)
	if fmt.Sprint(chosen) != "[1 0]" {
		t.Errorf("grouped router: %v", chosen)
	}
}

// TestStackRows stacks projections in either format: bfloat16 ones stay
// bfloat16 (the values are exact in both formats).
func TestStackRows(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		a := Linear{In: 2, Out: 1, W: tensor.Weights{F32: []float32{1, 2}}.Round(dt)}
		b := Linear{In: 2, Out: 2, W: tensor.Weights{F32: []float32{3, 4, 5, 6}}.Round(dt), B: []float32{1, 1}}
		s, err := StackRows(a, b)
		if err != nil {
			t.Fatal(err)
		}
		if s.W.DType() != dt {
			t.Errorf("%v projections stacked into %v", dt, s.W.DType())
		}
		y := make([]float32, 3)
		be := CPU()
		s.place(be)
		s.apply(be, tensorOf(y, 1, 3), tensorOf([]float32{1, 1}, 1, 2))
		if fmt.Sprint(y) != "[3 8 12]" {
			t.Errorf("%v: stacked forward %v", dt, y)
		}
	}
	a := Linear{In: 2, Out: 1, W: tensor.Weights{F32: []float32{1, 2}}}
	if _, err := StackRows(a, Linear{In: 3, Out: 1, W: tensor.Weights{F32: make([]float32, 3)}}); err == nil {
		t.Error("mismatched inputs accepted")
	}
}

func TestArena(t *testing.T) {
	a := CPU().NewArena()
	x := host(a.Alloc(2, 5))
	x[0] = 1
	a.Reset()
	y, z := host(a.Alloc(1, 4)), host(a.Alloc(2, 3))
	if y[0] != 0 || &y[0] == &z[0] {
		t.Errorf("arena reuse: y %v", y)
	}
	_ = append(y, 7) // capacity is capped: must not overwrite z
	if z[0] != 0 {
		t.Error("append to one buffer overwrote the next")
	}
}

// tensorOf views host values as a rows × cols CPU tensor.
func tensorOf(v []float32, rows, cols int) Tensor {
	return Tensor{S: &cpuBuf{f: v}, Rows: rows, Cols: cols, Stride: cols}
}

// nanSource answers every tensor with a NaN in the middle.
type nanSource struct{}

func (nanSource) Has(string) bool { return true }

func (nanSource) Float32(name string, shape ...int) ([]float32, error) {
	v := make([]float32, 8)
	v[5] = float32(math.NaN())
	return v, nil
}

// TestLoaderRejectsNonFinite: a weight holding NaN or ±Inf fails the load
// with the tensor's name, instead of decoding garbage.
func TestLoaderRejectsNonFinite(t *testing.T) {
	l := NewSourceLoader(nanSource{})
	if v := l.Tensor("layers.3.mixer.in_proj.weight"); v != nil {
		t.Errorf("got values %v", v)
	}
	if err := l.Err(); err == nil || !strings.Contains(err.Error(), "tensor layers.3.mixer.in_proj.weight holds a non-finite value (NaN at index 5)") {
		t.Errorf("error %v", err)
	}
}
