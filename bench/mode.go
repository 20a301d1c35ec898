package bench

import (
	"fmt"
	"strings"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

// Mode is a benchmark mode (docs/DESIGN.md 4): how its caches keep state,
// the read copy it names, and whether its rows verify drafts rather than
// step. Its name, what rows print, is the state mode (verify rows:
// verify-baseline, verify), then for a replay mode with a read copy the
// copy's format: replay-nvfp4, verify-fp8.
type Mode struct {
	State replay.Mode
	// ReadCopy is the read copy a replay mode names (fp32: none named, the
	// base options' own).
	ReadCopy numeric.Format
	Verify   bool
}

// kernelModes are the modes of bench kernels, in the order rows are printed.
var kernelModes = []Mode{
	{State: replay.Baseline},
	{State: replay.Replay},
	{State: replay.Replay, ReadCopy: numeric.NVFP4},
	{State: replay.Replay, ReadCopy: numeric.E4M3},
	{State: replay.Baseline, Verify: true},
	{State: replay.Replay, Verify: true},
	{State: replay.Replay, ReadCopy: numeric.NVFP4, Verify: true},
	{State: replay.Replay, ReadCopy: numeric.E4M3, Verify: true},
}

// Modes names the benchmark modes in the order rows are printed:
// baseline, replay, replay-nvfp4, replay-fp8, verify-baseline, verify,
// verify-nvfp4, verify-fp8. replay-nvfp4 and replay-fp8 are replay with a
// read copy in that format, verify-nvfp4 and verify-fp8 verify with a read
// copy in that format (against verify-baseline).
var Modes = func() []string {
	var names []string
	for _, m := range kernelModes {
		names = append(names, m.String())
	}
	return names
}()

// ParseMode parses a mode's name, one of Modes.
func ParseMode(name string) (Mode, error) {
	for _, m := range kernelModes {
		if m.String() == name {
			return m, nil
		}
	}
	return Mode{}, fmt.Errorf("unknown mode %q (want %s)", name, strings.Join(Modes, ", "))
}

// String returns the mode's name.
func (m Mode) String() string {
	s := m.State.String()
	if m.Verify {
		s = "verify"
		if m.State == replay.Baseline {
			s = "verify-baseline"
		}
	}
	switch m.ReadCopy {
	case numeric.F32:
	case numeric.E4M3:
		s += "-fp8"
	default:
		s += "-" + m.ReadCopy.String()
	}
	return s
}

// Options returns the cache options of the mode on top of base: its state
// mode; a baseline keeps neither read copy nor ring, a replay mode takes
// the read copy it names (else base's); a verify mode has room for
// positions rows per slot and verify (MaxDraft at least positions).
func (m Mode) Options(base replay.Options, positions int) replay.Options {
	opt := base
	opt.Mode = m.State
	switch {
	case m.State == replay.Baseline:
		opt.ReadCopy, opt.Ring = numeric.F32, numeric.F32
	case m.ReadCopy != numeric.F32:
		opt.ReadCopy = m.ReadCopy
	}
	if m.Verify {
		opt.MaxDraft = max(opt.MaxDraft, positions)
	}
	return opt
}

// kernelOptions are the cache options of a bench kernels row: mode (a name
// of Modes) on the configuration's window and ring with state format dt,
// verify rows carrying cfg.Drafts positions.
func kernelOptions(mode string, dt numeric.Format, cfg KernelConfig) replay.Options {
	m, _ := ParseMode(mode) // the modes are checked where the configuration is made
	return m.Options(replay.Options{Window: cfg.Window, State: dt, Ring: cfg.Ring}, cfg.Drafts)
}
