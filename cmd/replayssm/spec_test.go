package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// TestGenerateSpeculative: speculative generation prints transformers'
// greedy tokens in both state modes, with either drafter.
func TestGenerateSpeculative(t *testing.T) {
	for _, extra := range [][]string{
		{"--speculative", "ngram", "--spec-mode", "replay", "--window", "4"},
		{"--speculative", "draft", "--draft-model", nemotronFixture, "--spec-mode", "baseline", "--draft-tokens", "3"},
		{"--speculative", "draft", "--draft-model", "../../model/testdata/fixtures/mamba2", "--accept", "stochastic"},
	} {
		args := append([]string{"generate", "--model", nemotronFixture, "--prompt-ids", nemotronPrompt, "--max-tokens", "10"}, extra...)
		code, stdout, stderr := runCLI(args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, code, stderr)
		}
		if got := strings.TrimSpace(stdout); got != nemotronGreedy {
			t.Errorf("%v: generated %q, want %q", extra, got, nemotronGreedy)
		}
		if !strings.Contains(stderr, "drafts accepted") {
			t.Errorf("%v: stderr %q lacks the speculation summary", extra, stderr)
		}
	}
	for _, tc := range []struct {
		args     []string
		inStderr string
	}{
		{[]string{"--speculative", "draft"}, "--draft-model"},
		{[]string{"--speculative", "eagle"}, "eagle"},
		{[]string{"--speculative", "ngram", "--draft-tokens", "16"}, "--draft-tokens"},
		{[]string{"--speculative", "ngram", "--accept", "lenient"}, "lenient"},
		{[]string{"--speculative", "ngram", "--spec-mode", "fast"}, "--spec-mode"},
	} {
		args := append([]string{"generate", "--model", nemotronFixture, "--prompt-ids", "1"}, tc.args...)
		code, _, stderr := runCLI(args...)
		if code != 2 || !strings.Contains(stderr, tc.inStderr) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.inStderr)
		}
	}
}

// TestBenchSpec runs bench spec on a fixture (end to end, the fixture
// drafting for itself) and on a target layer shape (state cache only), and
// checks the JSON rows' contract.
func TestBenchSpec(t *testing.T) {
	runs := [][]string{
		{"--model", nemotronFixture, "--speculative", "draft", "--draft-model", nemotronFixture, "--batch", "3", "--draft-tokens", "2", "--max-tokens", "8", "--repeat", "1"},
		{"--shape", "qwen3.5-4b", "--batch", "2", "--draft-tokens", "2", "--layers", "1", "--repeat", "1", "--min-time", "1ms"},
	}
	for _, args := range runs {
		var out, errb bytes.Buffer
		if err := runBenchSpec(context.Background(), &env{stdout: &out, stderr: &errb}, append(args, "--json")); err != nil {
			t.Fatalf("%v: %v (%s)", args, err, errb.String())
		}
		modes := map[string]map[string]any{}
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			var row map[string]any
			if err := json.Unmarshal([]byte(line), &row); err != nil {
				t.Fatalf("%v: %q: %v", args, line, err)
			}
			for _, k := range []string{"device", "model", "batch", "t", "mode", "tokens_per_s", "mean_accepted", "state_bytes_per_request", "max_concurrent"} {
				if _, ok := row[k]; !ok {
					t.Errorf("%v: row %q lacks %q", args, line, k)
				}
			}
			modes[row["mode"].(string)] = row
		}
		for _, m := range []string{"nospec", "spec-baseline", "spec-replay"} {
			r := modes[m]
			if r == nil {
				t.Fatalf("%v: no %s row in %s", args, m, out.String())
			}
			if r["tokens_per_s"].(float64) <= 0 || r["state_bytes_per_request"].(float64) <= 0 {
				t.Errorf("%v: %s row %v", args, m, r)
			}
		}
		if args[0] == "--model" && modes["spec-replay"]["acceptance_rate"].(float64) != 1 {
			t.Errorf("the fixture drafting for itself had %v of its drafts accepted, want all", modes["spec-replay"]["acceptance_rate"])
		}
		b, r := modes["spec-baseline"], modes["spec-replay"]
		if b["mean_accepted"] != r["mean_accepted"] {
			t.Errorf("%v: acceptance differs between modes: baseline %v, replay %v", args, b["mean_accepted"], r["mean_accepted"])
		}
		if r["max_concurrent"].(float64) <= b["max_concurrent"].(float64) {
			t.Errorf("%v: replay fits %v requests, baseline %v", args, r["max_concurrent"], b["max_concurrent"])
		}
	}
}
