package cuda

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/model/nn/nntest"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tensor"
)

// TestNNKernelsCompile compiles kernels/nn.cu with this machine's NVRTC (no
// GPU needed) and checks that every kernel NewNNBackend looks up is there.
func TestNNKernelsCompile(t *testing.T) {
	n, err := loadNVRTC(newSearchPlan(os.Getenv, nil))
	if err != nil {
		t.Skipf("no NVRTC on this machine (%v)", err)
	}
	src, err := KernelSource("nn.cu")
	if err != nil {
		t.Fatal(err)
	}
	best := 0
	for _, a := range n.archs {
		if a <= 90 {
			best = max(best, a)
		}
	}
	ptx, err := n.build("nn.cu", src, []string{fmt.Sprintf("--gpu-architecture=compute_%d", best), "--std=c++17"}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"nn_embed", "nn_rmsnorm", "nn_rows", "nn_bias", "nn_gather", "nn_scatter", "nn_axpy_rows",
		"nn_unary", "nn_binary", "nn_mul_sigmoid_rows", "nn_clamp_delta", "nn_rope", "nn_kv_append", "nn_kv_move", "nn_attend"} {
		if !strings.Contains(string(ptx), ".entry "+k+"(") {
			t.Errorf("no kernel %s", k)
		}
	}
}

func nnBackend(t *testing.T) *NNBackend {
	t.Helper()
	d := gpu(t)
	b, err := NewNNBackend(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// TestNNBackend runs the nn.Backend conformance suite on the GPU: fp32
// products by cuBLAS without TF32, so the CPU's bounds hold.
func TestNNBackend(t *testing.T) {
	nntest.Run(t, nnBackend(t), nntest.Float32)
}

// TestNNModels runs every fixture architecture and both shipped models on
// the GPU and on the CPU, with float32 weights, over a prompt and 64 greedy
// steps, both fed the CPU's tokens: each position's logits within 1e-3 of
// the CPU's (‖Δ‖/‖cpu‖) and the same argmax, in replay and baseline mode.
func TestNNModels(t *testing.T) {
	be := nnBackend(t)
	dirs, _ := filepath.Glob("../../model/testdata/fixtures/*/config.json")
	dirs = append(dirs, "../../models/qwen35-kjv/config.json", "../../models/nemotronh-kjv/config.json")
	for _, cfg := range dirs {
		dir := filepath.Dir(cfg)
		for _, mode := range []replay.Mode{replay.Replay, replay.Baseline} {
			t.Run(filepath.Base(dir)+"/"+mode.String(), func(t *testing.T) {
				compareModel(t, dir, be, replay.Options{Mode: mode, Window: 4})
			})
		}
	}
}

func compareModel(t *testing.T, dir string, be nn.Backend, opt replay.Options) {
	cpu, err := model.Load(dir, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	onGPU, err := model.Load(dir, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cpu.Place(nn.CPU())
	onGPU.Place(be)
	if err := be.Err(); err != nil {
		t.Fatal(err)
	}
	const seqs = 2
	sc, err := cpu.NewState(seqs, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	sg, err := onGPU.NewState(seqs, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer sg.Close()
	ctx := context.Background()
	var qs []nn.Seq
	for range seqs {
		a, err := sc.Admit()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sg.Admit(); err != nil {
			t.Fatal(err)
		}
		qs = append(qs, a)
	}
	V := cpu.Vocab
	// Two prompts of different lengths in one pass, then decode steps of
	// both together.
	var rows []nn.Row
	for i, q := range qs {
		for p := range 5 + 3*i {
			rows = append(rows, nn.Row{Seq: q, Token: (7*p + 13*i + 1) % V, Logits: p == 4+3*i})
		}
	}
	worst := 0.0
	for step := range 65 {
		lc, lg := make([]float32, seqs*V), make([]float32, seqs*V)
		for i := range lg {
			lg[i] = float32(math.NaN())
		}
		if err := cpu.Forward(ctx, sc, rows, lc); err != nil {
			t.Fatal(err)
		}
		if err := onGPU.Forward(ctx, sg, rows, lg); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		rows = rows[:0]
		for i, q := range qs {
			c, g := lc[i*V:(i+1)*V], lg[i*V:(i+1)*V]
			var num, den float64
			for j := range c {
				d := float64(g[j]) - float64(c[j])
				num += d * d
				den += float64(c[j]) * float64(c[j])
			}
			rel := math.Sqrt(num / den)
			worst = max(worst, rel)
			if !(rel <= 1e-3) {
				t.Fatalf("step %d sequence %d: logits differ by %.3g of their norm", step, i, rel)
			}
			ac, ag := tensor.Argmax(c), tensor.Argmax(g)
			if ac != ag && math.Abs(float64(c[ac]-c[ag])) > 1e-4*math.Abs(float64(c[ac])) {
				t.Fatalf("step %d sequence %d: greedy token %d on the GPU, %d on the CPU (logits %v, %v)", step, i, ag, ac, c[ag], c[ac])
			}
			rows = append(rows, nn.Row{Seq: q, Token: ac, Logits: true})
		}
	}
	t.Logf("worst ‖Δ logits‖/‖logits‖ %.3g over 65 steps", worst)
}
