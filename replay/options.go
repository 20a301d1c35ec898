// Package replay is the ReplaySSM state cache: the recurrent state of every
// live sequence of one SSM layer (Mamba-2, Gated DeltaNet or Kimi Delta
// Attention), kept as a checkpoint plus a ring of the raw inputs of the
// steps since it.
//
// A plain decode step reads the whole state, updates it and writes it back.
// The cache instead computes each step's output from the checkpoint and the
// ring (docs/DESIGN.md 2.1, 2.2, 2.2b) and writes the state only when the
// ring is full (a flush), so a step moves about half the bytes. Speculative drafts are
// appended to the ring and verified against the same checkpoint; accepting a
// prefix is a cursor move (docs/DESIGN.md 2.3). Outputs may read a low-precision
// read copy of the checkpoint while the recurrence keeps its own precision, so
// quantisation error never compounds (docs/DESIGN.md 2.4).
//
// The baseline modes live behind the same API: in-place update every step,
// and a speculative path that stores one state per draft token. Every mode is
// checked against the float64 references of package ssm.
//
// A cache is not safe for concurrent use: one engine loop drives it. Its
// operations run in parallel across slots and heads internally.
package replay

import (
	"fmt"
	"runtime"
	"slices"
	"strings"

	"github.com/replayssm/replayssm/numeric"
)

// Mode selects how a cache keeps state.
type Mode uint8

const (
	// Replay keeps a checkpoint plus a ring of inputs and flushes when the
	// ring holds Window steps.
	Replay Mode = iota
	// Baseline updates the state in place every step; speculative verify
	// writes one full state per draft token and commit selects the accepted
	// one, as vLLM and SGLang do.
	Baseline
)

// String names the mode: replay or baseline.
func (m Mode) String() string {
	switch m {
	case Replay:
		return "replay"
	case Baseline:
		return "baseline"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ParseMode parses "replay" or "baseline".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "replay":
		return Replay, nil
	case "baseline":
		return Baseline, nil
	}
	return 0, fmt.Errorf("unknown state mode %q (want replay or baseline)", s)
}

// DefaultWindow is the ring window L of the published ReplaySSM kernels.
const DefaultWindow = 16

// MaxDraftLimit bounds the positions one verify may carry (T drafts plus
// the last accepted token).
const MaxDraftLimit = 16

// Options configure a cache.
type Options struct {
	Mode Mode
	// Window is L: a replay slot flushes when its ring holds L steps.
	// Zero means DefaultWindow. L=1 flushes every step and equals Baseline.
	Window int
	// MaxDraft is the largest number of draft tokens a Verify may carry
	// (0 disables Verify). It sizes the ring (L+MaxDraft entries) and, in
	// Baseline mode, the per-draft states (1+MaxDraft per slot).
	MaxDraft int
	// State is the format of the recurrence: the replay checkpoint, or the
	// baseline state itself. A baseline in a low format rounds the state
	// after every update ("naive low precision", docs/DESIGN.md 2.4).
	// Replay checkpoints take fp32, fp16, bf16 or fp8-e4m3 (with one scale
	// per slot and head); a baseline state also takes nvfp4.
	State numeric.Format
	// ReadCopy is the format of the copy of the checkpoint that non-flush
	// steps read for their outputs (replay only): bf16, fp8-e4m3 or nvfp4,
	// written by each flush. The zero value, fp32, means no read copy: the
	// outputs read the checkpoint.
	ReadCopy numeric.Format
	// Ring is the format of the per-token inputs the ring keeps: Mamba-2's
	// x and B, Gated DeltaNet's and Kimi Delta Attention's k and v (Δ, the
	// decays, β and the cached u stay fp32). The zero value, fp32, keeps
	// them as given. bf16 rounds them to bf16 as the cache takes them in (k
	// before its l2 normalisation), as a bf16 model's activations already
	// are, and everything the cache computes from them (outputs, flushes,
	// verifies) sees the rounded values: the cache is then exactly the fp32
	// ring's on inputs rounded beforehand. A ring of half the bytes is what
	// the GPU's non-flush steps need to reach their targets (docs/PERF.md);
	// the CPU cache keeps the rounded values in float32. Replay only: a
	// baseline keeps no ring.
	Ring numeric.Format
	// ExactFold makes every Gated DeltaNet and Kimi Delta Attention flush
	// recompute the corrected updates u from the ring's raw k, v, g, β on
	// the checkpoint (the exact fold of docs/DESIGN.md 2.2, 2.2b) even
	// without a read copy. By default a flush without a read copy folds
	// the u that the steps since the checkpoint cached, recomputing only
	// the flush's own token: each was formed from this same checkpoint, so
	// it is the exact fold's value up to the order of float32 sums, at a
	// fraction of the fold's arithmetic. With a read copy the cached u
	// carry its quantisation error, and the fold is always exact. Mamba-2
	// folds its raw inputs either way (its state is additive in them).
	ExactFold bool
	// Stochastic rounds state writes in low formats stochastically, with a
	// generator seeded from Seed, the slot and the flush count, so a run is
	// reproducible.
	Stochastic bool
	Seed       uint64
	// Threads is the number of worker goroutines; zero means GOMAXPROCS.
	Threads int
}

// Capabilities describes what one backend's caches take: the state and
// read-copy formats its kernels store, the ring formats of each layer kind,
// how long a ring may be and whether state writes can round
// stochastically. Options.Check holds options against it.
//
// A format list names the formats taken besides fp32 where fp32 means "as
// given" (no read copy, a ring kept as given), which every backend takes.
type Capabilities struct {
	// Backend names the backend in errors: "cpu", "cuda".
	Backend string
	// ReplayStates are the checkpoint formats of a replay cache.
	ReplayStates []numeric.Format
	// BaselineStates are the state formats of a baseline cache.
	BaselineStates []numeric.Format
	// ReadCopies are the read-copy formats of a replay cache, besides
	// none (fp32).
	ReadCopies []numeric.Format
	// Rings are the ring formats of a replay cache per layer kind
	// ("mamba2", "gdn", "kda"), besides fp32.
	Rings map[string][]numeric.Format
	// MaxWindow bounds Window, and MaxRing the ring, Window + MaxDraft
	// entries. MaxDraft is at most MaxDraftLimit on every backend, and at
	// most MaxDrafts[kind] where that is set.
	MaxWindow, MaxRing int
	MaxDrafts          map[string]int
	// ExcludedReadCopies are, per checkpoint format, read copies not
	// taken with it.
	ExcludedReadCopies map[numeric.Format][]numeric.Format
	// Stochastic reports whether low-precision state writes can round
	// stochastically (Options.Stochastic).
	Stochastic bool
}

// CPUCapabilities returns what the caches of this package take: replay
// checkpoints in fp32, fp16, bf16 or fp8-e4m3 and baseline states in those
// or nvfp4 (the naive comparison point), read copies in bf16, fp8-e4m3 or
// nvfp4, a bf16 ring for every layer kind, windows up to 256 and stochastic
// rounding.
func CPUCapabilities() Capabilities {
	return Capabilities{
		Backend:        "cpu",
		ReplayStates:   []numeric.Format{numeric.F32, numeric.F16, numeric.BF16, numeric.E4M3},
		BaselineStates: []numeric.Format{numeric.F32, numeric.F16, numeric.BF16, numeric.E4M3, numeric.NVFP4},
		ReadCopies:     []numeric.Format{numeric.BF16, numeric.E4M3, numeric.NVFP4},
		Rings:          map[string][]numeric.Format{"mamba2": {numeric.BF16}, "gdn": {numeric.BF16}, "kda": {numeric.BF16}},
		MaxWindow:      256,
		MaxRing:        256 + MaxDraftLimit,
		Stochastic:     true,
	}
}

// An OptionsError reports options that a backend's caches do not take.
type OptionsError struct {
	Backend string // Capabilities.Backend
	Kind    string // the layer kind, "mamba2", "gdn" or "kda"; "" for every kind
	// Option is the field of Options at fault: Mode, Window, MaxDraft,
	// State, ReadCopy, Ring or Stochastic ("Kind" for an unknown layer
	// kind).
	Option string
	Reason string // what is wrong, e.g. "window 0 out of range [1, 256]"
}

func (e *OptionsError) Error() string {
	if e.Kind == "" {
		return fmt.Sprintf("%s caches: %s", e.Backend, e.Reason)
	}
	return fmt.Sprintf("%s %s cache: %s", e.Backend, e.Kind, e.Reason)
}

// Check returns o with its defaults filled in (Window, Threads), or an
// *OptionsError if a cache of the layer kind ("mamba2", "gdn" or "kda"; ""
// for options the Mamba-2 and Gated DeltaNet kinds must both take) on a
// backend with capabilities caps cannot take it. The rules that hold on every backend are checked here too: a
// read copy and a low-precision ring need replay mode, and an nvfp4
// checkpoint is refused (docs/DESIGN.md 2.4).
func (o Options) Check(kind string, caps Capabilities) (Options, error) {
	o = o.withDefaults()
	fail := func(option, format string, args ...any) (Options, error) {
		return o, &OptionsError{Backend: caps.Backend, Kind: kind, Option: option, Reason: fmt.Sprintf(format, args...)}
	}
	var rings []numeric.Format
	switch kind {
	case "mamba2", "gdn", "kda":
		rings = caps.Rings[kind]
	case "":
		// A ring format both kinds of the backends' models take. A
		// backend may have no KDA caches at all, so "kda" is left out.
		for _, f := range caps.Rings["mamba2"] {
			if slices.Contains(caps.Rings["gdn"], f) {
				rings = append(rings, f)
			}
		}
	default:
		return fail("Kind", "unknown layer kind %q (want mamba2, gdn or kda)", kind)
	}
	if o.Mode != Replay && o.Mode != Baseline {
		return fail("Mode", "mode %v not supported (want replay or baseline)", o.Mode)
	}
	if o.Window < 1 || o.Window > caps.MaxWindow {
		return fail("Window", "window %d out of range [1, %d]", o.Window, caps.MaxWindow)
	}
	if o.MaxDraft < 0 || o.MaxDraft > MaxDraftLimit {
		return fail("MaxDraft", "max draft %d out of range [0, %d]", o.MaxDraft, MaxDraftLimit)
	}
	if m, ok := caps.MaxDrafts[kind]; ok && o.MaxDraft > m {
		return fail("MaxDraft", "max draft %d: the %s caches take at most %d drafts", o.MaxDraft, kind, m)
	}
	if o.Window+o.MaxDraft > caps.MaxRing {
		return fail("MaxDraft", "window %d + max draft %d = %d ring entries, more than the %d this backend takes",
			o.Window, o.MaxDraft, o.Window+o.MaxDraft, caps.MaxRing)
	}
	states := caps.ReplayStates
	if o.Mode == Baseline {
		states = caps.BaselineStates
	}
	switch {
	case o.Mode == Replay && o.State == numeric.NVFP4:
		return fail("State", "an nvfp4 checkpoint would feed quantisation error into the recurrence; use it as a read copy, or as a naive baseline state")
	case !slices.Contains(states, o.State):
		return fail("State", "%v state format %v not supported (want %s)", o.Mode, o.State, formatList(states, ""))
	}
	switch {
	case o.ReadCopy == numeric.F32:
	case o.Mode != Replay:
		return fail("ReadCopy", "a read copy needs replay mode")
	case !slices.Contains(caps.ReadCopies, o.ReadCopy):
		return fail("ReadCopy", "read copy format %v not supported (want %s)", o.ReadCopy, formatList(caps.ReadCopies, "none"))
	case slices.Contains(caps.ExcludedReadCopies[o.State], o.ReadCopy):
		return fail("ReadCopy", "%v checkpoints take no %v read copy", o.State, o.ReadCopy)
	}
	switch {
	case o.Ring == numeric.F32:
	case o.Mode != Replay:
		return fail("Ring", "a %v ring needs replay mode (a baseline keeps no ring)", o.Ring)
	case !slices.Contains(rings, o.Ring):
		return fail("Ring", "ring format %v not supported (want %s)", o.Ring, formatList(rings, "fp32"))
	}
	if o.Stochastic && !caps.Stochastic {
		return fail("Stochastic", "stochastic rounding not supported")
	}
	return o, nil
}

// formatList names formats for an error: "fp32, bf16 or nvfp4", with first
// (when not "") before them.
func formatList(fs []numeric.Format, first string) string {
	var names []string
	if first != "" {
		names = append(names, first)
	}
	for _, f := range fs {
		names = append(names, f.String())
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

func (o Options) withDefaults() Options {
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.Threads <= 0 {
		o.Threads = runtime.GOMAXPROCS(0)
	}
	return o
}

// roundsRing reports whether the ring's inputs are rounded to bf16 as the
// cache takes them (Options.Ring).
func (o Options) roundsRing() bool { return o.Ring == numeric.BF16 }

// toRing writes input row src into ring row dst in the ring's format
// (Options.Ring): a copy, or rounded to bf16.
func (o Options) toRing(dst, src []float32) {
	if o.roundsRing() {
		roundBF16(dst, src)
		return
	}
	copy(dst, src)
}

// roundBF16 writes src rounded to bf16 (to nearest even, as
// numeric.BF16FromF32) into dst, as float32.
func roundBF16(dst, src []float32) {
	for i, v := range src {
		dst[i] = numeric.F32FromBF16(numeric.BF16FromF32(v))
	}
}

// FoldsCachedU reports whether a Gated DeltaNet or Kimi Delta Attention
// cache with these options folds the ring's cached u at a flush (no read copy, no ExactFold) rather
// than recomputing every u from the raw inputs.
func (o Options) FoldsCachedU() bool {
	return o.Mode == Replay && o.ReadCopy == numeric.F32 && !o.ExactFold
}

// ring is the number of ring entries per slot: L committed steps plus room
// for one verify's drafts.
func (o Options) ring() int { return o.Window + o.MaxDraft }

// stateBuffers is the number of full states a slot owns.
func (o Options) stateBuffers() int {
	if o.Mode == Baseline {
		return 1 + o.MaxDraft
	}
	return 1
}
