package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"

	"github.com/replayssm/replayssm/engine"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/models"
	"github.com/replayssm/replayssm/tokenizer"
)

func runEval(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || wantsHelp(args[:1]) {
		fmt.Fprintln(e.stderr, `Usage: replayssm eval <what> [flags]

What:
  perplexity   teacher-forced NLL and perplexity of a model over a text file
  drift        how far each state mode's next-token distributions drift from
               the float32 recurrence's over one long text (KL, log-prob,
               top-1 agreement by position), with a plot`)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	switch args[0] {
	case "perplexity":
		return runEvalPerplexity(ctx, e, args[1:])
	case "drift":
		return runEvalDrift(ctx, e, args[1:])
	}
	return fmt.Errorf("%w: unknown evaluation %q (want perplexity or drift)", errUsage, args[0])
}

// readTokens returns the token ids to score: those of the file idsFile
// names, or the tokenized text of the one positional FILE.
func readTokens(dir string, tok *tokenizer.Tokenizer, vocab int, idsFile string, pos []string) ([]int, error) {
	if idsFile != "" {
		raw, err := os.ReadFile(idsFile)
		if err != nil {
			return nil, err
		}
		ids, err := parseIDs(string(raw), vocab)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", idsFile, err)
		}
		return ids, nil
	}
	if tok == nil {
		return nil, fmt.Errorf("%s has no tokenizer.json: score token ids with --ids FILE", dir)
	}
	raw, err := os.ReadFile(pos[0])
	if err != nil {
		return nil, err
	}
	return tok.Encode(string(raw)), nil
}

func runEvalPerplexity(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "eval perplexity", "eval perplexity [--model DIR] [flags] FILE | --ids FILE")
	dir := fs.String("model", "", "model directory; default: the built-in "+models.Default+" model")
	device := deviceFlags(fs)
	idsFile := fs.String("ids", "", "score this file of token ids (comma or white-space separated) instead of text")
	asJSON := fs.Bool("json", false, "print one JSON object")
	chunk := fs.Int("chunk", 512, "tokens per prefill forward")
	maxTokens := fs.Int("max-tokens", 0, "score at most this many tokens (0: all)")
	segment := fs.Int("segment", 0, "score non-overlapping segments of this many tokens, each from a fresh state, as the model cards in models/ do (0: the whole text as one sequence)")
	sf := addStateFlags(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	opt, err := sf.options()
	if err != nil {
		return err
	}
	if (*idsFile == "") == (len(pos) != 1) {
		return fmt.Errorf("%w: give one text FILE or --ids FILE", errUsage)
	}
	if *segment == 1 || *segment < 0 {
		return fmt.Errorf("%w: --segment must be 0 or at least 2", errUsage)
	}
	var name string
	var d *nn.Decoder
	var tok *tokenizer.Tokenizer
	if *dir, name, d, tok, err = openModel(ctx, e, *dir, *device); err != nil {
		return err
	}
	ids, err := readTokens(*dir, tok, d.Vocab, *idsFile, pos)
	if err != nil {
		return err
	}
	if *maxTokens > 0 && len(ids) > *maxTokens+1 {
		ids = ids[:*maxTokens+1]
	}
	eng, err := engine.New(d, 1, opt)
	if err != nil {
		return err
	}
	defer eng.Close()
	w := *segment
	if w == 0 {
		w = len(ids)
	}
	var sum float64
	var n int
	for lo := 0; lo+1 < len(ids); lo += w {
		s, c, err := eng.NLL(ctx, ids[lo:min(lo+w, len(ids))], *chunk)
		if err != nil {
			return err
		}
		sum, n = sum+s, n+c
	}
	if n == 0 {
		return fmt.Errorf("%w: need at least two tokens to score", errUsage)
	}
	mean := sum / float64(n)
	if *asJSON {
		return json.NewEncoder(e.stdout).Encode(struct {
			Model      string  `json:"model"`
			Tokens     int     `json:"tokens"`
			NLL        float64 `json:"nll"`
			Perplexity float64 `json:"perplexity"`
			Mode       string  `json:"mode"`
			Precision  string  `json:"precision"`
		}{name, n, mean, math.Exp(mean), opt.Mode.String(), precision(opt)})
	}
	fmt.Fprintf(e.stdout, "tokens      %d\nmean NLL    %.6f\nperplexity  %.4f\n", n, mean, math.Exp(mean))
	return nil
}
