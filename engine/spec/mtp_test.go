package spec_test

import (
	"path/filepath"
	"testing"

	"github.com/replayssm/replayssm/engine"
	"github.com/replayssm/replayssm/internal/spectest"
	"github.com/replayssm/replayssm/model/qwen"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tokenizer"
)

// TestMTPGreedyLossless runs the shipped qwen35-kjv with its MTP head as the
// drafter: greedy speculative output must be plain greedy output, token for
// token, in both state modes, with three requests sharing two sequences (so
// a slot is reused), and the head must have its drafts accepted.
func TestMTPGreedyLossless(t *testing.T) {
	dir := filepath.Join("..", "..", "models", "qwen35-kjv")
	d, head := spectest.LoadWithHead(t, dir, qwen.LoadMTP)
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []engine.Request
	for _, p := range []string{"And the LORD spake unto Moses, saying,", "And Jesus said unto them,", "In the beginning"} {
		reqs = append(reqs, engine.Request{Prompt: tok.Encode(p), MaxTokens: 48})
	}
	modes := []replay.Mode{replay.Replay, replay.Baseline}
	stats := spectest.MTPMatchesGreedy(t, d, head, reqs, 4, modes, func(mode replay.Mode, eng *engine.Engine) {
		if eng.State().OnLayer != nil {
			t.Errorf("%v: Close left the target hooked", mode)
		}
	})
	for i, ss := range stats {
		t.Logf("%v: %d of %d drafts accepted (%.0f%%), %.2f tokens per verify", modes[i], ss.Accepted, ss.Drafted,
			100*ss.AcceptanceRate(), ss.MeanAccepted()+1)
		if ss.AcceptanceRate() < 0.3 {
			t.Errorf("%v: acceptance rate %.2f, want ≥ 0.3 from the trained head", modes[i], ss.AcceptanceRate())
		}
	}
}
