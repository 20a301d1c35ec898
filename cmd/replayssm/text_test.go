package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/model/safetensors"
	"github.com/replayssm/replayssm/tokenizer"
)

// textModel writes a tiny random Mamba-2 model next to the nemotron test
// tokenizer and chat template, so that the text paths of generate and eval
// (encode, chat template, stream decode, stop strings) run end to end.
func textModel(t *testing.T) string {
	t.Helper()
	src := filepath.Join("..", "..", "tokenizer", "testdata", "nemotron")
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	const H, heads, P, N, K = 32, 4, 16, 8, 4
	V, I := tok.VocabSize(), heads*P
	cfg := fmt.Sprintf(`{"model_type":"mamba2","hidden_size":%d,"vocab_size":%d,"num_hidden_layers":2,"num_heads":%d,
"head_dim":%d,"state_size":%d,"n_groups":1,"conv_kernel":%d,"expand":2,"tie_word_embeddings":true,"eos_token_id":11}`, H, V, heads, P, N, K)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	tensor := func(name string, fill func() float32, shape ...int) safetensors.Tensor {
		n := 1
		for _, d := range shape {
			n *= d
		}
		b := make([]byte, 4*n)
		for i := range n {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(fill()))
		}
		return safetensors.Tensor{Name: name, DType: safetensors.F32, Shape: shape, Data: b}
	}
	normal := func() float32 { return float32(r.NormFloat64()) * 0.5 }
	one := func() float32 { return 1 }
	ts := []safetensors.Tensor{tensor("backbone.embeddings.weight", normal, V, H), tensor("backbone.norm_f.weight", one, H)}
	for l := range 2 {
		m := fmt.Sprintf("backbone.layers.%d.", l)
		C := I + 2*N
		ts = append(ts,
			tensor(m+"norm.weight", one, H),
			tensor(m+"mixer.in_proj.weight", normal, 2*I+2*N+heads, H),
			tensor(m+"mixer.conv1d.weight", normal, C, 1, K),
			tensor(m+"mixer.conv1d.bias", normal, C),
			tensor(m+"mixer.A_log", func() float32 { return float32(math.Log(1 + 4*r.Float64())) }, heads),
			tensor(m+"mixer.dt_bias", func() float32 { return -3 }, heads),
			tensor(m+"mixer.D", one, heads),
			tensor(m+"mixer.norm.weight", one, I),
			tensor(m+"mixer.out_proj.weight", normal, H, I))
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := safetensors.Write(f, ts, nil); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestGenerateText(t *testing.T) {
	dir := textModel(t)
	base := []string{"generate", "--model", dir, "--max-tokens", "12", "--temperature", "0.9", "--top-k", "50", "--top-p", "0.95", "--seed", "7"}
	code, out1, stderr := runCLI(append(base, "Hello, world")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if _, out2, _ := runCLI(append(base, "Hello, world")...); out1 != out2 {
		t.Errorf("same seed, different text: %q and %q", out1, out2)
	}
	if !strings.Contains(stderr, "tok/s") || !strings.Contains(stderr, "flushes") {
		t.Errorf("no statistics in %q", stderr)
	}
	// A stop string made of the first generated characters cuts the output
	// before them.
	if first := strings.TrimSpace(out1); len(first) >= 2 {
		stop := first[:2]
		code, out, stderr := runCLI(append(base, "--stop", stop, "Hello, world")...)
		if code != 0 || strings.Contains(out, stop) {
			t.Errorf("--stop %q: exit %d, output %q (%s)", stop, code, out, stderr)
		}
	}
	for _, args := range [][]string{
		{"--chat", "--state-mode", "baseline", "Hi"},
		{"--state-dtype", "bf16", "--read-copy", "nvfp4", "--window", "4", "Hi"},
		{"--ring-dtype", "bf16", "--window", "4", "Hi"},
	} {
		if code, _, stderr := runCLI(append(base, args...)...); code != 0 {
			t.Errorf("%v: exit %d: %s", args, code, stderr)
		}
	}
}

func TestEvalPerplexityText(t *testing.T) {
	dir := textModel(t)
	text := filepath.Join(t.TempDir(), "text.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 20)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI("eval", "perplexity", "--model", dir, "--chunk", "16", text, "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, `"perplexity"`) || !strings.Contains(out, `"mode":"replay"`) {
		t.Errorf("output %q", out)
	}
}
