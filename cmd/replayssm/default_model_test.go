package main

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
)

// useTempCache points os.UserCacheDir at a fresh folder, so that the
// default model is extracted there.
func useTempCache(t *testing.T) {
	t.Helper()
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
}

// TestGenerateDefaultModel runs generate without --model: the built-in
// qwen35-kjv writes its greedy continuation (the README's main command),
// the same in both state modes.
func TestGenerateDefaultModel(t *testing.T) {
	useTempCache(t)
	const (
		prompt = "And the LORD spake unto Moses, saying,"
		want   = " This is the thing which the LORD hath commanded, that ye shall offer an offering made by fire unto the LORD."
	)
	for _, mode := range []string{"replay", "baseline"} {
		code, stdout, stderr := runCLI("generate", "--max-tokens", "24", "--state-mode", mode, prompt)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", mode, code, stderr)
		}
		if !strings.HasPrefix(stdout, want) {
			t.Errorf("%s: generated %q, want it to start with %q", mode, stdout, want)
		}
		if !strings.Contains(stderr, "qwen3_5_text") {
			t.Errorf("%s: stderr %q does not name the model type", mode, stderr)
		}
	}
}

// TestEvalDefaultModel scores the CI slice of the held-out split (two
// 512-token segments) with the built-in model and compares with its card.
func TestEvalDefaultModel(t *testing.T) {
	useTempCache(t)
	data, err := os.ReadFile("../../models/qwen35-kjv/eval.json")
	if err != nil {
		t.Fatal(err)
	}
	var card struct {
		Transformers map[string]struct {
			Predictions int     `json:"predictions"`
			Perplexity  float64 `json:"perplexity"`
		} `json:"transformers"`
	}
	if err := json.Unmarshal(data, &card); err != nil {
		t.Fatal(err)
	}
	ref := card.Transformers["test_slice"]
	code, stdout, stderr := runCLI("eval", "perplexity", "--segment", "512", "--max-tokens", "1023", "--json", "../../models/kjv-test.txt")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got struct {
		Model      string  `json:"model"`
		Tokens     int     `json:"tokens"`
		Perplexity float64 `json:"perplexity"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("bad JSON %q: %v", stdout, err)
	}
	if got.Model != "qwen35-kjv" || got.Tokens != ref.Predictions || math.Abs(got.Perplexity-ref.Perplexity) > 0.02*ref.Perplexity {
		t.Errorf("got %+v; want model qwen35-kjv, %d tokens, perplexity %.4f ± 2%%", got, ref.Predictions, ref.Perplexity)
	}
	if code, _, stderr := runCLI("eval", "perplexity", "--segment", "1", "../../models/kjv-test.txt"); code != 2 || !strings.Contains(stderr, "--segment") {
		t.Errorf("--segment 1: exit %d, %q; want a usage error", code, stderr)
	}
}
