package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/replayssm/replayssm/engine/spec"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
)

// DefaultDrafts is the default number of draft tokens per step, T.
const DefaultDrafts = 4

// MaxDrafts is the largest T: a verify carries T+1 positions (the newest
// token and T drafts), and a cache verifies at most replay.MaxDraftLimit.
const MaxDrafts = replay.MaxDraftLimit - 1

// Speculation configures speculative decoding (GenerateSpeculative, Run).
type Speculation struct {
	Drafter spec.Drafter
	// Drafts is T, the most draft tokens per sequence and step; 0 means
	// DefaultDrafts. The engine's state needs replay.Options.MaxDraft ≥ T+1
	// (StateOptions).
	Drafts int
	Accept spec.Acceptance
}

// StateOptions returns opt with MaxDraft set for speculation with T drafts:
// T+1 positions per verify.
func StateOptions(opt replay.Options, T int) replay.Options {
	if T <= 0 {
		T = DefaultDrafts
	}
	opt.MaxDraft = max(opt.MaxDraft, T+1)
	return opt
}

// SpecStats counts what speculation did.
type SpecStats struct {
	Steps     int           // verify forwards
	Verifies  int           // sequence-verifies (one sequence in one step)
	Drafted   int           // draft tokens verified
	Accepted  int           // draft tokens accepted
	Emitted   int           // tokens produced by verifies: accepted drafts plus one each
	DraftTime time.Duration // spent in the drafter
}

// MeanAccepted is the mean number of drafts accepted per sequence-verify.
func (s SpecStats) MeanAccepted() float64 {
	if s.Verifies == 0 {
		return 0
	}
	return float64(s.Accepted) / float64(s.Verifies)
}

// AcceptanceRate is the fraction of verified drafts accepted.
func (s SpecStats) AcceptanceRate() float64 {
	if s.Drafted == 0 {
		return 0
	}
	return float64(s.Accepted) / float64(s.Drafted)
}

// since is what speculation did after before.
func (s SpecStats) since(before SpecStats) SpecStats {
	return SpecStats{
		Steps:     s.Steps - before.Steps,
		Verifies:  s.Verifies - before.Verifies,
		Drafted:   s.Drafted - before.Drafted,
		Accepted:  s.Accepted - before.Accepted,
		Emitted:   s.Emitted - before.Emitted,
		DraftTime: s.DraftTime - before.DraftTime,
	}
}

// SpecStats sums what speculation did since the engine began, over
// GenerateSpeculative and Run. Like Stats, read it between steps only (in a
// job's callbacks, or when no generation runs).
func (e *Engine) SpecStats() SpecStats { return e.specStats }

// speculator is the scheduler's speculation strategy. Each step it asks
// the drafter for up to T drafts for every sequence past its prompt,
// scores every such sequence's newest token and drafts together in one
// verify forward of the target (nn.Decoder.Verify), keeps by the
// acceptance rule a prefix of the drafts plus one target token, and keeps
// exactly that in the state (nn.Decoder.Commit): SSM caches move a cursor
// (replay) or select the accepted state (baseline), attention drops the
// rejected keys. Sequences in a batch accept different counts.
//
// A sequence whose prompt ended in the step's forward has no token to run
// yet: its first generated token is checked against drafts too, from the
// prompt's last logits. A sequence that asks for log-probabilities, or
// whose sampler is not plain (penalties, biases, a minimum length, a
// grammar), gets no drafts: it decodes one token a step in the verify.
type speculator struct {
	drafter spec.Drafter
	T       int
	accept  spec.Acceptance

	dreqs   []spec.Request
	rows    []nn.Row
	logits  []float32
	commitQ []nn.Seq
	commitN []int
	target  specTarget
}

// newSpeculator checks sp against the engine's state.
func (e *Engine) newSpeculator(sp Speculation) (*speculator, error) {
	T := sp.Drafts
	if T == 0 {
		T = DefaultDrafts
	}
	if T < 1 || T > MaxDrafts {
		return nil, fmt.Errorf("speculation: %d drafts out of range [1, %d]", T, MaxDrafts)
	}
	if sp.Drafter == nil {
		return nil, fmt.Errorf("speculation: no drafter")
	}
	if md := e.st.Options().MaxDraft; md < T+1 {
		return nil, fmt.Errorf("speculation with %d drafts verifies %d positions; the engine's state was built with MaxDraft %d (use StateOptions)", T, T+1, md)
	}
	return &speculator{drafter: sp.Drafter, T: T, accept: sp.Accept}, nil
}

// step advances every sequence of sc past its prompt by a speculative
// step: draft, verify, accept, commit. Timing.Decode takes its time, and
// Timing.DecodeTokens counts every token it generates.
func (p *speculator) step(ctx context.Context, sc *scheduler) error {
	e, V := sc.e, sc.e.dec.Vocab
	stats := &e.specStats
	start := time.Now()

	// Draft.
	p.dreqs = p.dreqs[:0]
	for _, s := range sc.running {
		s.draft = -1
		if s.prefilling() {
			continue
		}
		n := 0
		if s.sampler.Plain() && s.job.OnLogprobs == nil {
			n = p.T
		}
		if m := s.job.MaxTokens; m > 0 {
			// The step emits at most drafts+1 tokens: draft no more
			// than the budget needs.
			n = min(n, m-len(s.out())-1)
		}
		if n > 0 {
			s.draft = len(p.dreqs)
			if len(p.dreqs) < cap(p.dreqs) {
				p.dreqs = p.dreqs[:len(p.dreqs)+1] // keep the element's Drafts storage
			} else {
				p.dreqs = append(p.dreqs, spec.Request{})
			}
			d := &p.dreqs[s.draft]
			*d = spec.Request{Seq: int(s.seq), History: s.hist, Max: n, Drafts: d.Drafts[:0]}
		}
	}
	if len(p.dreqs) > 0 {
		t := time.Now()
		if err := p.drafter.Propose(ctx, p.dreqs); err != nil {
			return err
		}
		stats.DraftTime += time.Since(t)
	}

	// Verify: each sequence's unrun token (if any), then its drafts.
	p.rows = p.rows[:0]
	for _, s := range sc.running {
		if s.prefilling() {
			continue
		}
		s.row = len(p.rows)
		if len(s.out()) > 0 {
			p.rows = append(p.rows, nn.Row{Seq: s.seq, Token: s.hist[len(s.hist)-1], Logits: true})
		}
		for _, d := range p.drafts(s, V) {
			p.rows = append(p.rows, nn.Row{Seq: s.seq, Token: d, Logits: true})
		}
	}
	if len(p.rows) > 0 {
		p.logits = grow(p.logits, len(p.rows)*V)
		if err := e.dec.Verify(ctx, e.st, p.rows, p.logits); err != nil {
			return err
		}
		stats.Steps++
	}

	// Accept, commit, emit.
	p.commitQ, p.commitN = p.commitQ[:0], p.commitN[:0]
	for _, s := range sc.running {
		if s.prefilling() {
			continue
		}
		drafts := p.drafts(s, V)
		var q [][]float32
		if s.draft >= 0 {
			q = p.dreqs[s.draft].Probs
		}
		hasNext := len(s.out()) > 0
		p.target = specTarget{sc: sc, s: s, rows: p.logits[s.row*V:], V: V, p: p.target.p}
		if !hasNext {
			p.target.first = s.last
		}
		acc, next := spec.Accept(p.accept, &p.target, drafts, q)
		if hasNext || len(drafts) > 0 {
			stats.Verifies++
			stats.Drafted += len(drafts)
			stats.Accepted += acc
			stats.Emitted += acc + 1
			n := acc
			if hasNext {
				n++
			}
			p.commitQ = append(p.commitQ, s.seq)
			p.commitN = append(p.commitN, n)
		}
		for k := range acc + 1 {
			id := next
			if k < acc {
				id = drafts[k]
			}
			sc.tm.DecodeTokens++
			if sc.emit(s, id) {
				break
			}
		}
	}
	if len(p.commitQ) > 0 {
		if err := e.dec.Commit(e.st, p.commitQ, p.commitN); err != nil {
			return err
		}
	}
	sc.tm.Decode += time.Since(start)
	return nil
}

// drafts returns the sequence's proposal for this step, at most the number
// asked for and cut before any token outside the target's vocabulary (a
// draft model with a larger one).
func (p *speculator) drafts(s *sequence, V int) []int {
	if s.draft < 0 {
		return nil
	}
	r := &p.dreqs[s.draft]
	d := r.Drafts[:min(len(r.Drafts), r.Max)]
	for i, id := range d {
		if id < 0 || id >= V {
			return d[:i]
		}
	}
	return d
}

// specTarget serves spec.Accept the target's distributions at one sequence's
// verified positions.
type specTarget struct {
	sc    *scheduler
	s     *sequence
	first []float32 // position 0 when the step has no row for it
	rows  []float32 // logits of the sequence's verify rows
	V     int
	p     []float64
}

func (t *specTarget) logits(j int) []float32 {
	if t.first != nil {
		if j == 0 {
			return t.first
		}
		j--
	}
	return t.rows[j*t.V : (j+1)*t.V]
}

func (t *specTarget) Sample(j int) int { return t.sc.draw(t.s, t.logits(j)) }
func (t *specTarget) Float64() float64 { return t.s.sampler.Float64() }
func (t *specTarget) Probs(j int) []float64 {
	if len(t.p) < t.V {
		t.p = make([]float64, t.V)
	}
	t.s.sampler.Probs(t.logits(j), t.p)
	return t.p
}

// GenerateSpeculative runs reqs to completion like Generate, with
// speculative decoding (see speculator): the scheduler's loop fed with
// reqs, with sp as its speculation strategy. With sp.Accept = spec.Greedy
// and greedy sampling the output is Generate's, token for token. A request
// that asks for log-probabilities, or whose sampling has penalties, logit
// biases, a minimum length or a grammar, decodes without drafts.
//
// Timing.Prefill is the time of the forwards of prompt chunks;
// Timing.DecodeTokens counts the tokens generated by the verify steps (all
// of them), Timing.Decode their time, drafting included. SpecStats counts
// this call's speculation.
func (e *Engine) GenerateSpeculative(ctx context.Context, reqs []Request, sp Speculation) ([]Result, Timing, SpecStats, error) {
	p, err := e.newSpeculator(sp)
	if err != nil {
		return nil, Timing{}, SpecStats{}, err
	}
	before := e.specStats
	res, tm, err := e.generate(ctx, reqs, p)
	return res, tm, e.specStats.since(before), err
}
