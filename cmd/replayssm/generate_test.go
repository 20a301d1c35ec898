package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const nemotronFixture = "../../model/testdata/fixtures/nemotron_h"

// The main prompt of the nemotron_h fixture and transformers' first greedy
// tokens after it (reference.safetensors prompt.0.ids, greedy.0.ids) and the
// mean teacher-forced NLL over it (reference.json).
const (
	nemotronPrompt = "159,248,153,102,305,74,248,169,298,43,145,111,214,244,350,65,23,287,132,368,275,21,333,89,367,378,113,372,115,346,107,207,160"
	nemotronGreedy = "262 131 193 381 130 104 106 137 177 212"
	nemotronNLL    = 7.729390667716197
)

func TestGenerateFixture(t *testing.T) {
	for _, mode := range [][]string{{"--state-mode", "replay", "--window", "4"}, {"--state-mode", "baseline"}} {
		args := append([]string{"generate", "--model", nemotronFixture, "--prompt-ids", nemotronPrompt, "--max-tokens", "10"}, mode...)
		code, stdout, stderr := runCLI(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", mode, code, stderr)
		}
		if got := strings.TrimSpace(stdout); got != nemotronGreedy {
			t.Errorf("%v: generated %q, want %q", mode, got, nemotronGreedy)
		}
		for _, want := range []string{"tok/s", "flushes", "vs baseline"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%v: stderr %q lacks %q", mode, stderr, want)
			}
		}
	}
}

// TestGenerateRandomWeights generates from a Kimi-Linear config alone
// (--random-weights): the same seeded weights give the same tokens in
// replay and baseline modes.
func TestGenerateRandomWeights(t *testing.T) {
	dir := t.TempDir()
	cfg, err := os.ReadFile("../../model/kimi/testdata/tiny_config.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	var first string
	for _, mode := range [][]string{{"--state-mode", "replay", "--window", "4"}, {"--state-mode", "baseline"}} {
		args := append([]string{"generate", "--model", dir, "--random-weights", "--prompt-ids", "5,17,200,3,99", "--max-tokens", "12"}, mode...)
		code, stdout, stderr := runCLI(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", mode, code, stderr)
		}
		got := strings.TrimSpace(stdout)
		if len(strings.Fields(got)) != 12 || !strings.Contains(stderr, "random weights, 5 layers") {
			t.Fatalf("%v: generated %q, stderr %q", mode, got, stderr)
		}
		if first == "" {
			first = got
		} else if got != first {
			t.Errorf("%v: generated %q, replay mode %q", mode, got, first)
		}
	}
	if code, _, stderr := runCLI("generate", "--random-weights", "--prompt-ids", "1"); code != 2 || !strings.Contains(stderr, "--model") {
		t.Errorf("--random-weights without --model: exit %d, stderr %q", code, stderr)
	}
}

func TestGenerateErrors(t *testing.T) {
	tests := []struct {
		args     []string
		code     int
		inStderr string
	}{
		{[]string{"generate", "--model", nemotronFixture, "hello"}, 1, "no tokenizer.json"},
		{[]string{"generate"}, 2, "prompt"},
		{[]string{"generate", "--model", nemotronFixture}, 2, "prompt"},
		{[]string{"generate", "--model", nemotronFixture, "--prompt-ids", "1,x"}, 2, `"x"`},
		{[]string{"generate", "--model", nemotronFixture, "--prompt-ids", "999"}, 2, "vocabulary"},
		{[]string{"generate", "--model", nemotronFixture, "--prompt-ids", "1", "--temperature", "-1"}, 2, "temperature"},
		{[]string{"generate", "--model", nemotronFixture, "--prompt-ids", "1", "--state-mode", "fast"}, 2, "state mode"},
		{[]string{"generate", "--model", nemotronFixture, "--prompt-ids", "1", "--state-dtype", "fp7"}, 2, "fp7"},
		{[]string{"generate", "--model", "/nonexistent", "--prompt-ids", "1"}, 1, "nonexistent"},
		{[]string{"eval"}, 2, "perplexity"},
		{[]string{"eval", "accuracy"}, 2, "unknown evaluation"},
		{[]string{"eval", "perplexity", "--model", nemotronFixture}, 2, "FILE"},
		{[]string{"eval", "perplexity", "--model", nemotronFixture, "text.txt"}, 1, "no tokenizer.json"},
		{[]string{"eval", "drift", "--model", nemotronFixture}, 2, "FILE"},
		{[]string{"eval", "drift", "--model", nemotronFixture, "--ids", "x", "--modes", "naive-fp8+nvfp4"}, 2, "no read copy"},
		{[]string{"eval", "drift", "--model", nemotronFixture, "--ids", "x", "--modes", "fp12"}, 2, "fp12"},
		{[]string{"eval", "drift", "--model", nemotronFixture, "--ids", "x", "--windows", "0"}, 2, "window"},
		{[]string{"eval", "drift", "--model", nemotronFixture, "--ids", "x", "--chunk", "0"}, 2, "--chunk"},
	}
	for _, tt := range tests {
		code, _, stderr := runCLI(tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.inStderr) {
			t.Errorf("replayssm %v: exit %d, stderr %q; want exit %d and %q", tt.args, code, stderr, tt.code, tt.inStderr)
		}
	}
}

// TestEvalDriftFixture runs eval drift on a fixture: a row per mode and
// bucket in JSON, the naive nvfp4 state drifting more than an fp16
// checkpoint, the baseline mode once although two windows were asked for,
// and the plot written.
func TestEvalDriftFixture(t *testing.T) {
	dir := t.TempDir()
	ids := filepath.Join(dir, "ids.txt")
	var sb strings.Builder
	for i := range 400 {
		fmt.Fprintf(&sb, "%d ", (i*37+11)%60)
	}
	if err := os.WriteFile(ids, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	plot := filepath.Join(dir, "drift.svg")
	code, stdout, stderr := runCLI("eval", "drift", "--model", nemotronFixture, "--ids", ids, "--json", "--chunk", "100",
		"--modes", "naive-nvfp4,fp16", "--windows", "4,8", "--plot", plot)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got struct {
		Model     string `json:"model"`
		Positions int    `json:"positions"`
		Ends      []int  `json:"bucket_ends"`
		Series    []struct {
			Mode    string `json:"mode"`
			Window  int    `json:"window"`
			Buckets []struct {
				Positions int `json:"positions"`
			} `json:"buckets"`
			All struct {
				MeanKL float64 `json:"mean_kl"`
			} `json:"all"`
		} `json:"series"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("bad JSON %q: %v", stdout, err)
	}
	if got.Positions != 399 || len(got.Series) != 3 || !slices.Equal(got.Ends, []int{256, 399}) {
		t.Fatalf("%d positions, %d series, bucket ends %v; want 399, 3 (naive once, fp16 at two windows), [256 399]", got.Positions, len(got.Series), got.Ends)
	}
	naive, fp16 := got.Series[0], got.Series[1]
	if naive.Mode != "naive-nvfp4" || naive.Window != 0 || fp16.Mode != "fp16" || fp16.Window != 4 || got.Series[2].Window != 8 {
		t.Errorf("series %+v", got.Series)
	}
	if !(naive.All.MeanKL > fp16.All.MeanKL) {
		t.Errorf("mean KL naive-nvfp4 %g, fp16 %g: want the naive state to drift more", naive.All.MeanKL, fp16.All.MeanKL)
	}
	if svg, err := os.ReadFile(plot); err != nil || !strings.Contains(string(svg), "<svg") {
		t.Errorf("plot: %v, %d bytes", err, len(svg))
	}
}

func TestEvalPerplexityFixture(t *testing.T) {
	ids := filepath.Join(t.TempDir(), "ids.txt")
	if err := os.WriteFile(ids, []byte(strings.ReplaceAll(nemotronPrompt, ",", " ")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"replay", "baseline"} {
		code, stdout, stderr := runCLI("eval", "perplexity", "--model", nemotronFixture, "--ids", ids, "--json", "--chunk", "7", "--state-mode", mode)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var got struct {
			Model      string  `json:"model"`
			Tokens     int     `json:"tokens"`
			NLL        float64 `json:"nll"`
			Perplexity float64 `json:"perplexity"`
			Mode       string  `json:"mode"`
			Precision  string  `json:"precision"`
		}
		if err := json.Unmarshal([]byte(stdout), &got); err != nil {
			t.Fatalf("bad JSON %q: %v", stdout, err)
		}
		if got.Tokens != 32 || math.Abs(got.NLL-nemotronNLL) > 1e-4*nemotronNLL || math.Abs(got.Perplexity-math.Exp(got.NLL)) > 1e-9*got.Perplexity ||
			got.Model != "nemotron_h" || got.Mode != mode || got.Precision != "fp32" {
			t.Errorf("%s: got %+v, want 32 tokens, NLL %.6f", mode, got, nemotronNLL)
		}
	}
	code, stdout, stderr := runCLI("eval", "perplexity", "--model", nemotronFixture, "--ids", ids)
	if code != 0 || !strings.Contains(stdout, "perplexity") {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
}

// TestGenerateCapAndInterrupt asks for more tokens than the model's
// context holds (capped, with a notice) and interrupts the generation once
// it streams: it ends cleanly, with a newline and the statistics so far.
func TestGenerateCapAndInterrupt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, outW := io.Pipe()
	var errb strings.Builder
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, &env{stdout: outW, stderr: &errb}, []string{"generate", "--model", nemotronFixture, "--prompt-ids", nemotronPrompt,
			"--max-tokens", "1000000000", "--temperature", "1"})
		outW.Close()
	}()
	buf := make([]byte, 1)
	if _, err := io.ReadFull(out, buf); err != nil {
		t.Fatalf("no output: %v (%s)", err, errb.String())
	}
	cancel()
	rest, _ := io.ReadAll(out)
	if c := <-code; c != 0 {
		t.Fatalf("exit %d after the interrupt: %s", c, errb.String())
	}
	if !strings.HasSuffix(string(rest), "\n") {
		t.Errorf("output does not end with a newline: %q", rest)
	}
	for _, want := range []string{"--max-tokens capped at", "stop: interrupted", "tok/s"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q: %s", want, errb.String())
		}
	}
}
