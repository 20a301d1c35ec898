package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), &env{stdout: &out, stderr: &errb}, args)
	return code, out.String(), errb.String()
}

func TestCLIDispatch(t *testing.T) {
	tests := []struct {
		args     []string
		code     int
		inStderr string
	}{
		{nil, 2, "Usage"},
		{[]string{"--help"}, 0, "Commands"},
		{[]string{"nosuch"}, 2, `unknown command "nosuch"`},
		{[]string{"serve", "--max-batch", "0"}, 2, "max-batch"},
		{[]string{"serve", "--chunked-prefill-size", "-1"}, 2, "--chunked-prefill-size must not be negative"},
		{[]string{"serve", "--help"}, 0, "Usage: replayssm serve"},
		{[]string{"bench", "kernels", "--batch", "0"}, 2, "batch"},
		{[]string{"bench", "kernels", "--shapes", "llama"}, 2, "unknown shape"},
		{[]string{"bench", "kernels", "--modes", "fast"}, 2, "unknown mode"},
		{[]string{"bench", "kernels", "--state-dtype", "fp7"}, 2, "fp7"},
		{[]string{"bench", "kernels", "--window", "0"}, 2, "window"},
		{[]string{"bench", "kernels", "--ring-dtype", "fp16"}, 2, "--ring-dtype fp16: want fp32 or bf16"},
		{[]string{"bench", "nosuch"}, 2, "unknown benchmark"},
		{[]string{"bench", "copy", "--device", "tpu"}, 2, `device "tpu"`},
		{[]string{"bench", "copy", "--mib", "-1"}, 2, "--mib -1"},
		{[]string{"bench", "decode", "--modes", "fast"}, 2, "unknown mode"},
		{[]string{"bench", "decode", "--batch", "513"}, 2, "batch"},
		{[]string{"bench", "decode", "--max-tokens", "1"}, 2, "max-tokens"},
		{[]string{"bench", "decode", "--state-dtype", "fp7"}, 2, "fp7"},
		{[]string{"bench", "decode", "--layers", "2"}, 2, "--layers needs random weights"},
		{[]string{"bench", "decode", "--prefill", "1"}, 2, "prefill"},
		{[]string{"bench", "decode", "--dtype", "fp8"}, 2, "--dtype \"fp8\""},
		{[]string{"bench", "decode", "--model", "no-such-model-dir", "--random-weights"}, 1, "no-such-model-dir"},
		{[]string{"version"}, 0, ""},
		{[]string{"generate", "--window", "0", "x"}, 2, "--window 0: want a positive window"},
		{[]string{"generate", "--window", "300", "x"}, 2, "--window: window 300 out of range [1, 256]"},
		{[]string{"generate", "--read-copy", "fp16", "x"}, 2, "--read-copy: read copy format fp16 not supported"},
		{[]string{"generate", "--state-mode", "baseline", "--read-copy", "nvfp4", "x"}, 2, "--read-copy: a read copy needs replay mode"},
		{[]string{"generate", "--state-mode", "sideways", "x"}, 2, "--state-mode"},
		{[]string{"generate", "--top-p", "0", "x"}, 2, "--top-p 0: want a value in (0, 1]"},
		{[]string{"generate", "--nosuch", "x"}, 2, "flag provided but not defined: -nosuch (replayssm generate --help lists the flags)\n"},
	}
	for _, tt := range tests {
		code, _, stderr := runCLI(tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.inStderr) {
			t.Errorf("replayssm %v: exit %d, stderr %q; want exit %d and %q", tt.args, code, stderr, tt.code, tt.inStderr)
		}
		// A command's usage error is one line, not its whole usage.
		if isCommand := len(tt.args) > 0 && tt.args[0] != "nosuch"; isCommand && code == 2 && strings.Count(stderr, "\n") != 1 {
			t.Errorf("replayssm %v: a usage error of %d lines: %q", tt.args, strings.Count(stderr, "\n"), stderr)
		}
	}
}

// TestBenchKernelsJSON runs one small row of each mode and checks the JSON
// contract scripts rely on.
func TestBenchKernelsJSON(t *testing.T) {
	code, stdout, stderr := runCLI("bench", "kernels", "--json", "--shapes", "nemotron-3-nano-4b",
		"--batch", "1", "--state-dtype", "fp32", "--min-time", "5ms", "--window", "4", "--drafts", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	modes := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		var row map[string]any
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		for _, f := range []string{"device", "layer", "shape", "mode", "state_dtype", "batch", "window",
			"us_per_step", "us_nonflush", "us_flush", "bytes_per_step", "gbps", "copy_gbps", "pct_copy", "speedup_vs_baseline"} {
			if _, ok := row[f]; !ok {
				t.Errorf("row %v lacks %q", row["mode"], f)
			}
		}
		if row["device"] != "cpu" || row["layer"] != "mamba2" || row["state_dtype"] != "fp32" {
			t.Errorf("row fields: %v", row)
		}
		for _, f := range []string{"us_per_step", "bytes_per_step", "gbps", "copy_gbps", "speedup_vs_baseline"} {
			if v, _ := row[f].(float64); !(v > 0) {
				t.Errorf("row %v: %s = %v, want > 0", row["mode"], f, row[f])
			}
		}
		modes[row["mode"].(string)] = true
	}
	for _, m := range []string{"baseline", "replay", "replay-nvfp4", "verify-baseline", "verify"} {
		if !modes[m] {
			t.Errorf("no %s row", m)
		}
	}
}

// TestBenchDecodeRandomJSON runs bench decode on a fixture's config with
// random weights, its first layers only, and checks the rows' JSON
// contract: a decode row per mode with its bytes, and a prefill row.
func TestBenchDecodeRandomJSON(t *testing.T) {
	code, stdout, stderr := runCLI("bench", "decode", "--device", "cpu", "--json", "--model", "../../model/testdata/fixtures/qwen3_5",
		"--random-weights", "--layers", "4", "--batch", "2", "--max-tokens", "3", "--prompt-len", "4", "--repeat", "1", "--prefill", "8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "random weights, 4 layers") {
		t.Errorf("stderr does not say what was loaded: %q", stderr)
	}
	kinds := map[string]int{}
	baseRate := 0.0
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		var row map[string]any
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatalf("bad JSON line %q: %v", sc.Text(), err)
		}
		kind, _ := row["kind"].(string)
		kinds[kind]++
		if row["device"] != "cpu" || row["model"] != "qwen3_5[:4]" {
			t.Errorf("row fields: %v", row)
		}
		want := []string{"ms_per_step", "tokens_per_s", "weight_bytes", "kv_bytes", "state_bytes"}
		if kind == "prefill" {
			want = []string{"ms", "tokens_per_s", "tokens"}
		}
		for _, f := range want {
			if v, _ := row[f].(float64); !(v > 0) {
				t.Errorf("%s row %v: %s = %v, want > 0", kind, row["mode"], f, row[f])
			}
		}
		// The ratio to the baseline is the rows' own, its spread around it.
		rate, _ := row["tokens_per_s"].(float64)
		switch sp, _ := row["speedup_vs_baseline"].(float64); {
		case row["mode"] == "baseline":
			baseRate = rate
		case kind == "decode":
			lo, _ := row["speedup_min"].(float64)
			hi, _ := row["speedup_max"].(float64)
			if math.Abs(sp-rate/baseRate) > 1e-9*sp || !(lo <= hi) || !(lo > 0) {
				t.Errorf("%v: vs baseline %v (spread %v-%v), rows say %v", row["mode"], sp, lo, hi, rate/baseRate)
			}
		}
	}
	if kinds["decode"] != 3 || kinds["prefill"] != 1 {
		t.Errorf("rows by kind %v, want 3 decode and 1 prefill", kinds)
	}
}
