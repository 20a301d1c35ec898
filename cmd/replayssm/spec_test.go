package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/models"
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
		{[]string{"--ring-dtype", "fp16"}, "--ring-dtype"},
		{[]string{"--ring-dtype", "bf16", "--state-mode", "baseline"}, "--ring-dtype"},
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
		if gb := r["memory_gb"].(float64); gb <= 0 || gb == 80 {
			t.Errorf("%v: a budget of %v GB, want this machine's free memory", args, gb)
		}
		if r["max_concurrent"].(float64) <= b["max_concurrent"].(float64) {
			t.Errorf("%v: replay fits %v requests, baseline %v", args, r["max_concurrent"], b["max_concurrent"])
		}
	}
}

// TestBenchDecode runs bench decode on a fixture and checks the JSON rows'
// contract and the state bytes each mode reports: the baseline moves two
// states per token, replay (1+1/L)/2 of that plus the ring, an nvfp4 read
// copy less again; the baseline figure is the same for every mode.
func TestBenchDecode(t *testing.T) {
	var out, errb bytes.Buffer
	args := []string{"--model", nemotronFixture, "--batch", "1,3", "--max-tokens", "6", "--prompt-len", "4", "--repeat", "2", "--window", "4", "--json"}
	if err := runBenchDecode(context.Background(), &env{stdout: &out, stderr: &errb}, args); err != nil {
		t.Fatalf("%v (%s)", err, errb.String())
	}
	rows := map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var row map[string]any
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		for _, k := range []string{"device", "model", "layers", "batch", "mode", "state_dtype", "tokens_per_s", "ms_per_step", "state_bytes_per_token", "baseline_bytes_per_token"} {
			if _, ok := row[k]; !ok {
				t.Errorf("row %q lacks %q", line, k)
			}
		}
		if runs := row["tokens_per_s_runs"].([]any); len(runs) != 2 {
			t.Errorf("row %q: %d runs, want 2", line, len(runs))
		}
		rows[row["mode"].(string)+"/"+strconv.Itoa(int(row["batch"].(float64)))] = row
	}
	for _, b := range []string{"1", "3"} {
		base, rep, nv := rows["baseline/"+b], rows["replay/"+b], rows["replay-nvfp4/"+b]
		if base == nil || rep == nil || nv == nil {
			t.Fatalf("batch %s: missing rows in %s", b, out.String())
		}
		bb := base["baseline_bytes_per_token"].(float64)
		if bb <= 0 || base["state_bytes_per_token"].(float64) != bb {
			t.Errorf("batch %s: baseline moved %v bytes per token, its own count says %v", b, base["state_bytes_per_token"], bb)
		}
		for _, r := range []map[string]any{rep, nv} {
			if r["baseline_bytes_per_token"].(float64) != bb {
				t.Errorf("batch %s %s: baseline bytes %v, want %v", b, r["mode"], r["baseline_bytes_per_token"], bb)
			}
			if r["speedup_vs_baseline"].(float64) <= 0 || r["tokens_per_s"].(float64) <= 0 || r["ms_per_step"].(float64) <= 0 {
				t.Errorf("batch %s %s: %v", b, r["mode"], r)
			}
		}
		if !(nv["state_bytes_per_token"].(float64) < rep["state_bytes_per_token"].(float64) && rep["state_bytes_per_token"].(float64) < bb) {
			t.Errorf("batch %s: state bytes per token nvfp4 %v, replay %v, baseline %v: want increasing", b,
				nv["state_bytes_per_token"], rep["state_bytes_per_token"], bb)
		}
	}
}

// TestBenchSpecDefaultModel: without --model or --shape, bench spec runs
// the built-in model, and its memory budget is the machine's free memory.
func TestBenchSpecDefaultModel(t *testing.T) {
	code, stdout, stderr := runCLI("bench", "spec", "--device", "cpu", "--json", "--batch", "1", "--max-tokens", "4", "--repeat", "1", "--modes", "nospec,spec-replay")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var row struct {
		Model    string  `json:"model"`
		MemoryGB float64 `json:"memory_gb"`
	}
	if err := json.Unmarshal([]byte(strings.SplitN(stdout, "\n", 2)[0]), &row); err != nil {
		t.Fatalf("%v in %q", err, stdout)
	}
	if !strings.HasPrefix(row.Model, models.Default) || !(row.MemoryGB > 0) || row.MemoryGB == 80 {
		t.Errorf("row %+v: want the built-in model and the machine's memory", row)
	}
}
