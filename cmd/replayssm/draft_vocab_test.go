package main

import (
	"strings"
	"testing"
)

// TestDraftVocab: --draft-vocab is checked (negative, beyond the vocabulary,
// or with a drafter other than mtp: usage errors), and an MTP drafter
// restricted to the first N token ids still prints plain greedy generation's
// text (verification keeps the output exact).
func TestDraftVocab(t *testing.T) {
	const kjv = "../../models/qwen35-kjv" // vocabulary 8192
	prompt := "And the LORD spake unto Moses, saying,"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--speculative", "mtp", "--draft-vocab", "-1"}, "--draft-vocab -1 is negative"},
		{[]string{"--speculative", "ngram", "--draft-vocab", "100"}, "--speculative mtp only"},
		{[]string{"--speculative", "mtp", "--draft-vocab", "8193"}, "exceeds the model's vocabulary of 8192"},
	} {
		args := append([]string{"generate", "--model", kjv, "--max-tokens", "4", prompt}, tc.args...)
		code, _, stderr := runCLI(args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
	base := []string{"generate", "--model", kjv, "--max-tokens", "24", prompt}
	code, want, stderr := runCLI(base...)
	if code != 0 {
		t.Fatalf("plain: exit %d: %s", code, stderr)
	}
	for _, n := range []string{"2000", "8192", "0"} {
		code, got, stderr := runCLI(append(base, "--speculative", "mtp", "--draft-vocab", n)...)
		if code != 0 {
			t.Fatalf("--draft-vocab %s: exit %d: %s", n, code, stderr)
		}
		if got != want {
			t.Errorf("--draft-vocab %s printed %q, plain %q", n, got, want)
		}
	}
}
