// Command replayssm runs hybrid SSM/attention language models with the
// ReplaySSM state cache: text generation, an HTTP server, benchmarks and
// evaluations.
//
// Usage:
//
//	replayssm <command> [flags] [arguments]
//
// Every command takes --help.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/replayssm/replayssm/backend/cuda"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand of the CLI.
type command struct {
	name    string
	summary string
	// run executes the command with the arguments after its name.
	run func(ctx context.Context, env *env, args []string) error
}

// env is what a command may touch: its output streams. Commands never write
// to os.Stdout directly, so tests can run them.
type env struct {
	stdout io.Writer
	stderr io.Writer

	gpu     *cuda.NNBackend // the GPU a command placed its models on, or nil
	closers []func() error  // run when the command ends
}

// errUsage marks an error caused by the command line; main exits with 2.
var errUsage = errors.New("usage")

func commands() []command {
	return []command{
		{name: "generate", summary: "generate text from a prompt", run: runGenerate},
		{name: "serve", summary: "serve an OpenAI-compatible HTTP API", run: runServe},
		{name: "bench", summary: "benchmark kernels, decode, speculative decoding and a server", run: runBench},
		{name: "eval", summary: "evaluate a model (perplexity, accuracy, KL)", run: runEval},
		{name: "version", summary: "print the version", run: runVersion},
	}
}

func main() {
	// SIGTERM is what docker, Kubernetes and systemd send: it drains like
	// an interrupt.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &env{stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}

// run dispatches to a subcommand and returns the process exit code.
func run(ctx context.Context, e *env, args []string) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(e.stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	name := args[0]
	for _, c := range cmds {
		if c.name != name {
			continue
		}
		err := c.run(ctx, e, args[1:])
		for _, c := range e.closers {
			if cerr := c(); err == nil && cerr != nil {
				err = cerr
			}
		}
		e.closers, e.gpu = nil, nil
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errUsage):
			fmt.Fprintf(e.stderr, "replayssm %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(e.stderr, "replayssm %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(e.stderr, "replayssm: unknown command %q\n\n", name)
	usage(e.stderr, cmds)
	return 2
}

func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			return true
		}
	}
	return false
}

func usage(w io.Writer, cmds []command) {
	fmt.Fprintln(w, "replayssm: hybrid SSM/attention inference with the ReplaySSM state cache")
	fmt.Fprintln(w, "\nUsage: replayssm <command> [flags] [arguments]\n\nCommands:")
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'replayssm <command> --help' for a command's flags.")
}

// newFlagSet returns a flag set that reports errors instead of exiting;
// --help prints its usage to e.stderr.
func newFlagSet(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: replayssm %s\n\nFlags:\n", synopsis)
		fs.SetOutput(e.stderr)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and turns flag errors into usage errors of one
// line (the command's --help lists its flags); --help prints the usage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	usage := fs.Usage
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		usage()
		return err
	}
	return fmt.Errorf("%w: %v (replayssm %s --help lists the flags)", errUsage, err, fs.Name())
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// version is set by the linker (-ldflags "-X main.version=...").
var version = "dev"

func runVersion(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "version", "version")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "replayssm %s\n", version)
	return nil
}
