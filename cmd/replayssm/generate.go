package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/replayssm/replayssm/engine"
	"github.com/replayssm/replayssm/engine/spec"
	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/models"
	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tokenizer"
	"github.com/replayssm/replayssm/tokenizer/chat"
	"github.com/schollz/progressbar/v3"
)

// stateFlags are the ReplaySSM options shared by generate and eval.
type stateFlags struct {
	mode     *string
	window   *int
	dtype    *string
	readCopy *string
	ring     *string
	exact    *bool
}

func addStateFlags(fs *flag.FlagSet) stateFlags {
	return stateFlags{
		mode:     fs.String("state-mode", "replay", "SSM state management: replay or baseline"),
		window:   fs.Int("window", replay.DefaultWindow, "replay window L (ring entries before a flush)"),
		dtype:    fs.String("state-dtype", "fp32", "SSM state (checkpoint) format: fp32, fp16, bf16 or fp8"),
		readCopy: fs.String("read-copy", "none", "replay read copy of the checkpoint: none, bf16, fp8 or nvfp4"),
		ring:     fs.String("ring-dtype", "fp32", "replay ring's inputs (x and B, or k and v): fp32, or bf16 (rounded as the cache takes them, as a bf16 model's activations are; on CUDA Mamba-2 layers only)"),
		exact:    fs.Bool("exact-fold", false, "Gated DeltaNet flushes recompute every corrected update from the raw inputs even without a read copy (default: fold the cached ones, which that checkpoint formed)"),
	}
}

func (f stateFlags) options() (replay.Options, error) {
	mode, err := replay.ParseMode(*f.mode)
	if err != nil {
		return replay.Options{}, fmt.Errorf("%w: --state-mode: %v", errUsage, err)
	}
	st, err := numeric.ParseFormat(*f.dtype)
	if err != nil {
		return replay.Options{}, fmt.Errorf("%w: --state-dtype: %v", errUsage, err)
	}
	rc := numeric.F32
	if *f.readCopy != "none" && *f.readCopy != "" {
		if rc, err = numeric.ParseFormat(*f.readCopy); err != nil {
			return replay.Options{}, fmt.Errorf("%w: --read-copy: %v", errUsage, err)
		}
	}
	ring, err := numeric.ParseFormat(*f.ring)
	if err != nil {
		return replay.Options{}, fmt.Errorf("%w: --ring-dtype: %v", errUsage, err)
	}
	// Options take a zero window as the default; a flag of 0 is a mistake.
	if *f.window < 1 {
		return replay.Options{}, fmt.Errorf("%w: --window %d: want a positive window", errUsage, *f.window)
	}
	opt := replay.Options{Mode: mode, Window: *f.window, State: st, ReadCopy: rc, Ring: ring, ExactFold: *f.exact}
	if _, err := opt.Check("", replay.CPUCapabilities()); err != nil {
		return replay.Options{}, fmt.Errorf("%w: %s", errUsage, flagError(err))
	}
	return opt, nil
}

// stateFlagNames are the flags that set each field of replay.Options.
var stateFlagNames = map[string]string{
	"Mode": "--state-mode", "Window": "--window", "State": "--state-dtype", "ReadCopy": "--read-copy", "Ring": "--ring-dtype",
}

// flagError words an error of replay.Options.Check in terms of the flag that
// set the option at fault.
func flagError(err error) string {
	var oe *replay.OptionsError
	if errors.As(err, &oe) && stateFlagNames[oe.Option] != "" {
		return stateFlagNames[oe.Option] + ": " + oe.Reason
	}
	return err.Error()
}

// precision names the state formats of opt, e.g. "fp32", "fp32+nvfp4-read"
// or "bf16+nvfp4-read+bf16-ring".
func precision(opt replay.Options) string {
	s := opt.State.String()
	if opt.ReadCopy != numeric.F32 {
		s += "+" + opt.ReadCopy.String() + "-read"
	}
	if opt.Ring != numeric.F32 {
		s += "+" + opt.Ring.String() + "-ring"
	}
	return s
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

// parseInterleaved parses flags that may come before or after positional
// arguments and returns the positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// modelDir returns the --model flag's value, or the folder of the model
// compiled into the program (models.Default) when the flag is empty.
func modelDir(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	return models.DefaultDir()
}

// openModel resolves the --model flag (empty: the built-in model), loads
// the model onto the --device flag's device, and its tokenizer (nil for a directory without tokenizer.json).
// It returns the directory it used and the model's name: the directory's base
// name, or the built-in model's.
func openModel(ctx context.Context, e *env, flagValue string, device deviceChoice) (dir, name string, d *nn.Decoder, tok *tokenizer.Tokenizer, err error) {
	name = models.Default
	if flagValue != "" {
		name = filepath.Base(filepath.Clean(flagValue))
	}
	if dir, err = modelDir(flagValue); err != nil {
		return "", "", nil, nil, err
	}
	if d, err = loadModel(e.stderr, dir); err != nil {
		return "", "", nil, nil, err
	}
	if err = place(ctx, e, d, device); err != nil {
		return "", "", nil, nil, err
	}
	if tok, err = loadTokenizer(dir); err != nil {
		return "", "", nil, nil, err
	}
	return dir, name, d, tok, nil
}

// loadModel loads the model in dir, drawing a progress bar on w for
// checkpoints large enough to take a while.
func loadModel(w io.Writer, dir string) (*nn.Decoder, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: --model DIR is required", errUsage)
	}
	bar := newProgress(w, "loading "+filepath.Base(filepath.Clean(dir)))
	d, err := model.Load(dir, model.Options{Progress: bar.update})
	bar.done()
	return d, err
}

// progress draws a bar of long work (github.com/schollz/progressbar): the
// bytes of a checkpoint above progressMin (small models load silently), or
// a count of items, from min up.
type progress struct {
	w     io.Writer
	label string
	bytes bool
	min   int64
	bar   *progressbar.ProgressBar
}

const progressMin = 256 << 20

// newProgress is a loading bar in bytes.
func newProgress(w io.Writer, label string) *progress {
	return &progress{w: w, label: label, bytes: true, min: progressMin}
}

// newCountProgress is a bar of items (positions, tokens) shown from min on.
func newCountProgress(w io.Writer, label string, min int64) *progress {
	return &progress{w: w, label: label, min: min}
}

func (p *progress) update(done, total int64) {
	if total < p.min {
		return
	}
	if p.bar == nil {
		p.bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(p.label),
			progressbar.OptionShowBytes(p.bytes),
			progressbar.OptionShowCount(),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionShowElapsedTimeOnFinish(),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(p.w) }))
	}
	_ = p.bar.Set64(done)
}

func (p *progress) done() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

// loadTokenizer returns the model's tokenizer, or nil and no error when the
// directory has no tokenizer.json (the test fixtures).
func loadTokenizer(dir string) (*tokenizer.Tokenizer, error) {
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return tokenizer.Load(dir)
}

// parseIDs reads token ids separated by commas or white space.
func parseIDs(s string, vocab int) ([]int, error) {
	f := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' || r == '\r' })
	ids := make([]int, 0, len(f))
	for _, x := range f {
		id, err := strconv.Atoi(x)
		if err != nil {
			return nil, fmt.Errorf("token id %q: %w", x, err)
		}
		if id < 0 || id >= vocab {
			return nil, fmt.Errorf("token id %d outside the vocabulary [0, %d)", id, vocab)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func runGenerate(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "generate", `generate [--model DIR] [flags] "prompt"`)
	dir := fs.String("model", "", "model directory (config.json, safetensors, tokenizer.json); default: the built-in "+models.Default+" model")
	device := deviceFlags(fs)
	temp := fs.Float64("temperature", 0, "sampling temperature; 0 is greedy")
	topK := fs.Int("top-k", 0, "sample among the K most likely tokens (0: all)")
	topP := fs.Float64("top-p", 1, "nucleus sampling: keep the most likely tokens up to this probability mass, in (0, 1] (1: all)")
	seed := fs.Uint64("seed", 0, "random seed for sampling")
	maxTokens := fs.Int("max-tokens", 256, "most tokens to generate")
	var stops stringList
	fs.Var(&stops, "stop", "stop when this text appears (repeatable)")
	useChat := fs.Bool("chat", false, "wrap the prompt in the model's chat template as a user turn")
	promptIDs := fs.String("prompt-ids", "", "prompt as comma-separated token ids instead of text")
	random := fs.Bool("random-weights", false, "seeded random weights at the model's shapes instead of its checkpoint: --model is a directory with a config.json, or a shipped config ("+strings.Join(models.Configs(), ", ")+")")
	sf := addStateFlags(fs)
	spf := addSpecFlags(fs)
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	opt, err := sf.options()
	if err != nil {
		return err
	}
	opt, acceptRule, err := spf.resolve(opt)
	if err != nil {
		return err
	}
	if *maxTokens <= 0 {
		return fmt.Errorf("%w: --max-tokens must be positive", errUsage)
	}
	if !(*topP > 0 && *topP <= 1) { // as top_p in the API
		return fmt.Errorf("%w: --top-p %v: want a value in (0, 1]", errUsage, *topP)
	}
	sampling := engine.SamplerOptions{Temperature: *temp, TopK: *topK, TopP: *topP, Seed: *seed}
	if err := sampling.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	text := strings.Join(pos, " ")
	if *promptIDs == "" && text == "" {
		return fmt.Errorf("%w: give a prompt, or --prompt-ids", errUsage)
	}

	var d *nn.Decoder
	var tok *tokenizer.Tokenizer
	switch {
	case *random && *dir == "":
		return fmt.Errorf("%w: --random-weights needs --model (a directory with a config.json, or a shipped config)", errUsage)
	case *random:
		if _, d, err = openBenchModel(ctx, e, *dir, true, 0, *device); err != nil {
			return err
		}
		if tok, err = loadTokenizer(*dir); err != nil {
			return err
		}
	default:
		if *dir, _, d, tok, err = openModel(ctx, e, *dir, *device); err != nil {
			return err
		}
	}
	var prompt []int
	switch {
	case *promptIDs != "":
		if prompt, err = parseIDs(*promptIDs, d.Vocab); err != nil {
			return fmt.Errorf("%w: --prompt-ids: %v", errUsage, err)
		}
	case tok == nil:
		return fmt.Errorf("%s has no tokenizer.json: pass the prompt as --prompt-ids \"1,2,3\"", *dir)
	case *useChat:
		tmpl, err := chat.Load(*dir)
		if err != nil {
			return err
		}
		s, err := tmpl.Render([]chat.Message{{Role: "user", Content: text}}, chat.Options{AddGenerationPrompt: true})
		if err != nil {
			return err
		}
		prompt = tok.EncodeRaw(s)
	default:
		prompt = tok.Encode(text)
	}
	if len(prompt) == 0 {
		return fmt.Errorf("%w: the prompt encodes to no tokens", errUsage)
	}
	if ctxLen := d.Config.MaxPositionEmbeddings; ctxLen > 0 {
		if len(prompt) >= ctxLen {
			return fmt.Errorf("the prompt has %d tokens; the model's context is %d", len(prompt), ctxLen)
		}
		if len(prompt)+*maxTokens > ctxLen {
			*maxTokens = ctxLen - len(prompt)
			fmt.Fprintf(e.stderr, "--max-tokens capped at %d: the model's context is %d tokens and the prompt has %d\n", *maxTokens, ctxLen, len(prompt))
		}
	}

	eng, err := engine.New(d, 1, opt)
	if err != nil {
		return err
	}
	defer eng.Close()
	isEnd := func(id int) bool {
		for _, x := range d.Config.EOSTokenIDs {
			if id == x {
				return true
			}
		}
		return tok != nil && tok.IsEOS(id)
	}
	stopper := engine.NewStopText(stops)
	var stream *tokenizer.StreamDecoder
	if tok != nil {
		stream = tok.NewStreamDecoder()
		stream.SkipSpecial = true
	}
	var werr error
	write := func(s string) {
		if werr == nil && s != "" {
			_, werr = io.WriteString(e.stdout, s)
		}
	}
	first := true
	// Ctrl-C (ctx) ends the generation at the next token, with the
	// statistics so far; before the first token it cancels the prefill.
	interrupted := false
	var started atomic.Bool
	genCtx, cancelGen := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelGen()
	defer context.AfterFunc(ctx, func() {
		if !started.Load() {
			cancelGen()
		}
	})()
	onToken := func(id int) bool {
		started.Store(true)
		if ctx.Err() != nil {
			interrupted = true
			return false
		}
		if stream == nil {
			if !first {
				write(" ")
			}
			first = false
			write(strconv.Itoa(id))
			return werr == nil
		}
		if isEnd(id) {
			return true
		}
		out, stopped := stopper.Add(stream.Add(id))
		write(out)
		return !stopped && werr == nil
	}
	reqs := []engine.Request{{Prompt: prompt, MaxTokens: *maxTokens, Sampling: sampling, IsEnd: isEnd, OnToken: onToken}}
	var (
		res []engine.Result
		tm  engine.Timing
		ss  engine.SpecStats
	)
	if spf.enabled() {
		var dr spec.Drafter
		if dr, err = spf.newDrafter(e.stderr, *dir, d, eng.State(), 1, opt); err != nil {
			return err
		}
		defer dr.Close()
		res, tm, ss, err = eng.GenerateSpeculative(genCtx, reqs, engine.Speculation{Drafter: dr, Drafts: *spf.drafts, Accept: acceptRule})
	} else {
		res, tm, err = eng.Generate(genCtx, reqs)
	}
	if err != nil {
		if ctx.Err() != nil { // interrupted before the first token
			write("\n")
			return errors.New("interrupted")
		}
		return err
	}
	if stream != nil && res[0].Reason != engine.StopCallback {
		out, _ := stopper.Add(stream.Flush())
		write(out + stopper.Flush())
	}
	write("\n")
	if werr != nil {
		return werr
	}
	n := len(res[0].Tokens)
	reason := res[0].Reason.String()
	if interrupted {
		reason = "interrupted"
	}
	fmt.Fprintf(e.stderr, "\n%s: %d prompt tokens in %.2fs (%.1f tok/s), %d generated in %.2fs (%.1f tok/s decode), stop: %s\n",
		d.Config.ModelType, tm.PromptTokens, tm.Prefill.Seconds(), rate(tm.PromptTokens, tm.Prefill),
		n, tm.Decode.Seconds(), rate(tm.DecodeTokens, tm.Decode), reason)
	printReplayStats(e.stderr, eng.Stats(), opt)
	if spf.enabled() {
		printSpecStats(e.stderr, ss, *spf.drafts, opt)
	}
	return nil
}

func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// printReplayStats prints the state traffic of the SSM layers against what
// the in-place baseline would have moved.
func printReplayStats(w io.Writer, st replay.Stats, opt replay.Options) {
	if st.Steps == 0 {
		return
	}
	moved := st.StateBytesRead + st.StateBytesWritten
	ratio := 0.0
	if moved > 0 {
		ratio = float64(st.BaselineBytes) / float64(moved)
	}
	window := ""
	if opt.Mode == replay.Replay {
		w := opt.Window
		if w == 0 {
			w = replay.DefaultWindow
		}
		window = fmt.Sprintf(" window %d,", w)
	}
	fmt.Fprintf(w, "state (%v,%s %s): %d layer-steps, %d flushes; state bytes read %s + written %s = %s vs baseline %s (%.2fx fewer)\n",
		opt.Mode, window, precision(opt), st.Steps, st.Flushes, bytesString(st.StateBytesRead), bytesString(st.StateBytesWritten),
		bytesString(moved), bytesString(st.BaselineBytes), ratio)
}

func bytesString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
