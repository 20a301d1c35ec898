package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/replayssm/replayssm/engine/spec"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/models"
	"github.com/replayssm/replayssm/server"
	"github.com/replayssm/replayssm/tokenizer"
	"github.com/replayssm/replayssm/tokenizer/chat"
)

func runServe(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "serve", "serve [--model DIR] [--addr HOST:PORT] [flags]")
	dir := fs.String("model", "", "model directory (config.json, safetensors, tokenizer.json); default: the built-in "+models.Default+" model")
	device := deviceFlags(fs)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on (port 0: any free port)")
	maxBatch := fs.Int("max-batch", 16, "sequences decoded together")
	maxQueue := fs.Int("max-queue", 64, "requests that may wait for a free sequence; more are answered 429")
	maxTokens := fs.Int("max-tokens", 256, "completion budget of a request without max_tokens")
	chunk := fs.Int("chunked-prefill-size", 2048, "most prompt tokens one step runs, in chunks beside the decoding streams (0: whole prompts)")
	ctxLen := fs.Int("context", 0, "most prompt plus completion tokens (0: the model's max_position_embeddings)")
	metrics := fs.Bool("metrics", true, "serve Prometheus metrics at GET /metrics (--metrics=false: off)")
	apiKey := fs.String("api-key", os.Getenv("REPLAYSSM_API_KEY"), "bearer token every /v1 request must carry (default: $REPLAYSSM_API_KEY; empty: none)")
	grace := fs.Duration("shutdown-grace", 20*time.Second, "on SIGTERM or SIGINT, how long running requests may finish before the rest end with an error")
	readTimeout := fs.Duration("read-timeout", 60*time.Second, "most time to read a request, headers and body")
	writeTimeout := fs.Duration("write-timeout", 60*time.Second, "most time one write of a response may block (a client that stops reading a stream is dropped)")
	idleTimeout := fs.Duration("idle-timeout", 60*time.Second, "how long an idle keep-alive connection stays open")
	servedNames := fs.String("served-model-name", "", "model ids requests may name, comma-separated; the first is the one responses report (default: the model directory's name)")
	logRequests := fs.Bool("log-requests", true, "log one line per request on stderr (id, status, tokens, duration)")
	sf := addStateFlags(fs)
	spf := addSpecFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	opt, err := sf.options()
	if err != nil {
		return err
	}
	opt, acceptRule, err := spf.resolve(opt)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"--max-batch", *maxBatch}, {"--max-queue", *maxQueue}, {"--max-tokens", *maxTokens}} {
		if f.v <= 0 {
			return fmt.Errorf("%w: %s must be positive", errUsage, f.name)
		}
	}
	if *ctxLen < 0 {
		return fmt.Errorf("%w: --context must not be negative", errUsage)
	}
	if *chunk < 0 {
		return fmt.Errorf("%w: --chunked-prefill-size must not be negative", errUsage)
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"--shutdown-grace", *grace}, {"--read-timeout", *readTimeout}, {"--write-timeout", *writeTimeout}, {"--idle-timeout", *idleTimeout}} {
		if f.v <= 0 {
			return fmt.Errorf("%w: %s must be positive", errUsage, f.name)
		}
	}
	var name string
	var d *nn.Decoder
	var tok *tokenizer.Tokenizer
	if *dir, name, d, tok, err = openModel(ctx, e, *dir, *device); err != nil {
		return err
	}
	var tmpl *chat.Template
	if tok != nil {
		if tmpl, err = chat.Load(*dir); err != nil {
			fmt.Fprintf(e.stderr, "no chat template (%v): /v1/chat/completions will answer 400\n", err)
			tmpl = nil
		}
	}
	var aliases []string
	if names := splitList(*servedNames); len(names) > 0 {
		name, aliases = names[0], names[1:]
	}
	var requestLog *slog.Logger
	if *logRequests {
		requestLog = slog.New(slog.NewTextHandler(e.stderr, nil))
	}
	var sp *server.Speculation
	speculating := ""
	if spf.enabled() {
		sp = &server.Speculation{
			NewDrafter: func(st *nn.State, capacity int) (spec.Drafter, error) {
				return spf.newDrafter(e.stderr, *dir, d, st, capacity, opt)
			},
			Drafts: *spf.drafts, Accept: acceptRule,
		}
		speculating = fmt.Sprintf(", speculative %s T=%d", *spf.drafter, *spf.drafts)
	}
	srv, err := server.New(server.Config{
		Model: d, Tokenizer: tok, Template: tmpl, Name: name, Aliases: aliases,
		MaxBatch: *maxBatch, MaxQueue: *maxQueue, MaxTokens: *maxTokens, ContextLength: *ctxLen, State: opt, PrefillChunk: *chunk,
		Speculation: sp, DisableMetrics: !*metrics, APIKey: *apiKey, WriteTimeout: *writeTimeout, Log: requestLog,
	})
	if err != nil {
		return err
	}
	defer srv.Close()

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", *addr)
	if err != nil {
		return err
	}
	ln = server.Listener(ln) // protocol errors in OpenAI's JSON shape too
	// The engine outlives ctx by the grace period, so that requests in
	// flight at an interrupt can finish.
	engCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	defer stopEngine()
	engDone := make(chan error, 1)
	go func() { engDone <- srv.Run(engCtx) }()
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: min(10*time.Second, *readTimeout),
		ReadTimeout:       *readTimeout,
		IdleTimeout:       *idleTimeout,
		ErrorLog:          log.New(e.stderr, "serve: ", log.LstdFlags),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	fmt.Fprintf(e.stdout, "serving %s (%s, %s state, %d sequences%s) on http://%s\n",
		name, d.Config.ModelType, precision(opt), *maxBatch, speculating, ln.Addr())

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	case serveErr = <-engDone:
		engDone <- serveErr
	}
	fmt.Fprintf(e.stderr, "shutting down: running requests may finish within %v\n", *grace)
	// Stop accepting, let requests in flight finish for the grace period,
	// then cancel the rest: stopping the engine ends their streams with an
	// error event and [DONE].
	shCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), *grace)
	defer cancel()
	if err := hs.Shutdown(shCtx); err != nil {
		stopEngine()
		shCtx2, cancel2 := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel2()
		if hs.Shutdown(shCtx2) != nil {
			_ = hs.Close()
		}
	}
	stopEngine()
	if err := <-engDone; err != nil && serveErr == nil {
		serveErr = err
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return serveErr
}
