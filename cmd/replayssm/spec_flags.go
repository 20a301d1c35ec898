package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/replayssm/replayssm/engine"
	"github.com/replayssm/replayssm/engine/spec"
	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
)

// specFlags are the speculative decoding options of generate and serve.
type specFlags struct {
	drafter    *string
	drafts     *int
	draftModel *string
	mode       *string
	accept     *string
	draftVocab *int
}

func addSpecFlags(fs *flag.FlagSet) specFlags {
	return specFlags{
		drafter:    fs.String("speculative", "none", "speculative decoding drafter: ngram (prompt lookup), draft (a small model, --draft-model), mtp (the model's multi-token-prediction head, mtp.* tensors) or none"),
		drafts:     fs.Int("draft-tokens", engine.DefaultDrafts, fmt.Sprintf("draft tokens T per step (1..%d)", engine.MaxDrafts)),
		draftModel: fs.String("draft-model", "", "draft model directory (same tokenizer as --model)"),
		mode:       fs.String("spec-mode", "", "SSM state under speculation: replay (drafts in the ring, rejection = cursor move) or baseline (one state per draft); default: --state-mode"),
		accept:     fs.String("accept", "greedy", "draft acceptance: greedy (exact match with the target's sample) or stochastic (rejection sampling)"),
		draftVocab: fs.Int("draft-vocab", 0, "--speculative mtp: draft only tokens with ids below N, computing the head's logits for those LM-head rows only (cheaper drafts; verification keeps the output exact); 0 = the whole vocabulary"),
	}
}

// enabled reports whether speculation was asked for.
func (f specFlags) enabled() bool { return *f.drafter != "none" && *f.drafter != "" }

// check validates the flags and returns the acceptance rule.
func (f specFlags) check() (spec.Acceptance, error) {
	acc, err := spec.ParseAcceptance(*f.accept)
	if err != nil {
		return 0, fmt.Errorf("%w: --accept: %v", errUsage, err)
	}
	switch *f.drafter {
	case "none", "", "ngram", "mtp":
	case "draft":
		if *f.draftModel == "" {
			return 0, fmt.Errorf("%w: --speculative draft needs --draft-model DIR", errUsage)
		}
	default:
		return 0, fmt.Errorf("%w: --speculative %q (want ngram, draft, mtp or none)", errUsage, *f.drafter)
	}
	if *f.draftVocab < 0 {
		return 0, fmt.Errorf("%w: --draft-vocab %d is negative (0 = the whole vocabulary)", errUsage, *f.draftVocab)
	}
	if *f.draftVocab != 0 && *f.drafter != "mtp" {
		return 0, fmt.Errorf("%w: --draft-vocab applies to --speculative mtp only", errUsage)
	}
	if *f.drafts < 1 || *f.drafts > engine.MaxDrafts {
		return 0, fmt.Errorf("%w: --draft-tokens %d out of range [1, %d]", errUsage, *f.drafts, engine.MaxDrafts)
	}
	return acc, nil
}

// resolve validates the flags and returns the acceptance rule and the
// target's state options: opt, or under speculation the --spec-mode state
// mode and room for T+1 positions per verify.
func (f specFlags) resolve(opt replay.Options) (replay.Options, spec.Acceptance, error) {
	acc, err := f.check()
	if err != nil || !f.enabled() {
		return opt, acc, err
	}
	opt, err = f.stateOptions(opt)
	return opt, acc, err
}

// stateOptions returns the target's state options under speculation.
func (f specFlags) stateOptions(opt replay.Options) (replay.Options, error) {
	if *f.mode != "" {
		m, err := replay.ParseMode(*f.mode)
		if err != nil {
			return opt, fmt.Errorf("%w: --spec-mode: %v", errUsage, err)
		}
		opt.Mode = m
	}
	return engine.StateOptions(opt, *f.drafts), nil
}

// drafter builds the drafter for a target with vocabulary vocab and room for
// capacity sequences; the draft model's caches follow opt's mode. The MTP
// drafter reads the head from the target's directory dir and hooks the
// target's state tst.
func (f specFlags) newDrafter(w io.Writer, dir string, target *nn.Decoder, tst *nn.State, capacity int, opt replay.Options) (spec.Drafter, error) {
	switch *f.drafter {
	case "ngram":
		return &spec.NGram{}, nil
	case "mtp":
		if *f.draftVocab > target.Vocab {
			return nil, fmt.Errorf("%w: --draft-vocab %d exceeds the model's vocabulary of %d tokens", errUsage, *f.draftVocab, target.Vocab)
		}
		head, err := model.LoadMTP(dir, target)
		if err != nil {
			return nil, err
		}
		m, err := spec.NewMTP(head, target, tst, capacity, *f.drafts)
		if err != nil {
			return nil, err
		}
		m.DraftVocab = *f.draftVocab
		return m, nil
	}
	d, err := loadModel(w, *f.draftModel)
	if err != nil {
		return nil, fmt.Errorf("draft model: %w", err)
	}
	if d.Vocab != target.Vocab {
		return nil, fmt.Errorf("draft model vocabulary %d differs from the target's %d: they must share the tokenizer", d.Vocab, target.Vocab)
	}
	if be := target.Backend(); be != nil {
		d.Place(be) // beside the target
	}
	return spec.NewDraftModel(d, capacity, *f.drafts, replay.Options{Mode: opt.Mode, Window: opt.Window})
}

// printSpecStats prints what speculation did.
func printSpecStats(w io.Writer, ss engine.SpecStats, T int, opt replay.Options) {
	fmt.Fprintf(w, "speculation (%v state, T=%d): %d verify steps, %d of %d drafts accepted (%.0f%%), %.2f accepted per step, %.2f tokens per step; drafting %.2fs\n",
		opt.Mode, T, ss.Steps, ss.Accepted, ss.Drafted, 100*ss.AcceptanceRate(), ss.MeanAccepted(),
		ss.MeanAccepted()+1, ss.DraftTime.Seconds())
}
