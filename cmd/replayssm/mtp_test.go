package main

import (
	"strings"
	"testing"
)

// TestGenerateMTP: --speculative mtp on the shipped qwen35-kjv (its head in
// mtp.safetensors) prints plain greedy generation's text; a model without a
// head is refused.
func TestGenerateMTP(t *testing.T) {
	base := []string{"generate", "--model", "../../models/qwen35-kjv", "--max-tokens", "24", "And the LORD spake unto Moses, saying,"}
	code, want, stderr := runCLI(base...)
	if code != 0 {
		t.Fatalf("plain: exit %d: %s", code, stderr)
	}
	code, got, stderr := runCLI(append(base, "--speculative", "mtp")...)
	if code != 0 {
		t.Fatalf("mtp: exit %d: %s", code, stderr)
	}
	if got != want {
		t.Errorf("--speculative mtp printed %q, plain %q", got, want)
	}
	if !strings.Contains(stderr, "drafts accepted") {
		t.Errorf("stderr %q lacks the speculation summary", stderr)
	}
	code, _, stderr = runCLI("generate", "--model", nemotronFixture, "--prompt-ids", nemotronPrompt, "--max-tokens", "4", "--speculative", "mtp")
	if code == 0 || !strings.Contains(stderr, "mtp") {
		t.Errorf("mtp on a model without a head: exit %d, %q", code, stderr)
	}
}
