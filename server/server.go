// Package server is replayssm's OpenAI-compatible HTTP API: /v1/completions,
// /v1/chat/completions (both streaming), /v1/models and /health, in front of
// one engine loop that batches every request in flight (engine.Run), with or
// without speculative decoding, and its Prometheus metrics at /metrics.
package server

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/replayssm/replayssm/engine"
	"github.com/replayssm/replayssm/engine/spec"
	"github.com/replayssm/replayssm/grammar"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tokenizer"
	"github.com/replayssm/replayssm/tokenizer/chat"
)

// Config describes the model a Server serves and its limits. Zero values
// take the defaults named on each field.
type Config struct {
	Model *nn.Decoder // required
	// Tokenizer encodes text prompts and decodes output; nil (test fixtures)
	// accepts token-id prompts only and answers token ids as text.
	Tokenizer *tokenizer.Tokenizer
	// Template renders chat messages; nil answers chat requests with 400.
	Template *chat.Template
	// Name is the model id in /v1/models and in responses.
	Name string
	// Aliases are more ids a request's "model" may name (vLLM's
	// --served-model-name); a request naming another model is a 404.
	Aliases []string
	// MaxBatch is the number of sequences decoded together (default 16).
	MaxBatch int
	// MaxQueue is the number of requests that may wait for a free sequence
	// (default 64); more are answered 429.
	MaxQueue int
	// PrefillChunk bounds the prompt tokens one engine step runs
	// (engine.Engine.PrefillChunk; 0: whole prompts), so that a long prompt
	// does not stall the streams decoding beside it.
	PrefillChunk int
	// MaxTokens is the completion budget of a request without max_tokens
	// (default 256), cut to what the context leaves.
	MaxTokens int
	// ContextLength bounds prompt plus completion tokens (default: the
	// model's max_position_embeddings, else 32768).
	ContextLength int
	// MaxBodyBytes bounds a request body (default 4 MiB).
	MaxBodyBytes int64
	// State configures the SSM layers' state (ReplaySSM options).
	State replay.Options
	// Speculation, if set, makes the engine decode speculatively (its
	// MaxDraft is raised to fit), and the metrics count the drafts.
	Speculation *Speculation
	// DisableMetrics turns the Prometheus metrics off: /metrics answers 404.
	DisableMetrics bool
	// APIKey, if set, is the bearer token every /v1 request must carry
	// (Authorization: Bearer <key>); others are answered 401.
	APIKey string
	// WriteTimeout bounds each write of a response (0: none): a client
	// that stops reading a stream for that long is dropped and its
	// sequence freed.
	WriteTimeout time.Duration
	// Log, if set, gets one line per request: id, method, path, status,
	// tokens, finish reason and duration.
	Log *slog.Logger
}

// Speculation configures a Server's speculative decoding: the engine's
// speculation strategy (engine.Speculation) with a drafter built for its
// state.
type Speculation struct {
	// NewDrafter builds the drafter for the engine's state st, which holds
	// capacity sequences (an MTP drafter hooks st). The server closes it.
	NewDrafter func(st *nn.State, capacity int) (spec.Drafter, error)
	// Drafts is T, the most draft tokens per sequence and step (0:
	// engine.DefaultDrafts).
	Drafts int
	Accept spec.Acceptance
}

// Server answers the API. Create it with New, run its engine with Run, and
// serve HTTP with it (it is an http.Handler) from any number of goroutines.
type Server struct {
	cfg     Config
	eng     *engine.Engine
	spec    *engine.Speculation // nil: none
	queue   *jobQueue
	jobs    chan *engine.Job // the queue's head, handed to the engine
	stopped chan struct{}    // closed when Run returns
	created int64
	eos     []int        // every end token: the model's and the tokenizer's
	pending atomic.Int64 // requests submitted to the engine and not finished
	metrics *metrics     // nil: disabled

	vocabOnce sync.Once
	vocab     *grammar.Vocab // the tokenizer's trie, for json_object
}

// New builds the engine state for cfg.MaxBatch sequences.
func New(cfg Config) (*Server, error) {
	if cfg.Model == nil {
		return nil, errors.New("server: no model")
	}
	if cfg.Name == "" {
		cfg.Name = "model"
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 16
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = 64
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = 256
	}
	if cfg.ContextLength <= 0 {
		cfg.ContextLength = 32768
		if c := cfg.Model.Config; c != nil && c.MaxPositionEmbeddings > 0 {
			cfg.ContextLength = c.MaxPositionEmbeddings
		}
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 4 << 20
	}
	state := cfg.State
	if sp := cfg.Speculation; sp != nil {
		state = engine.StateOptions(state, sp.Drafts)
	}
	eng, err := engine.New(cfg.Model, cfg.MaxBatch, state)
	if err != nil {
		return nil, err
	}
	eng.PrefillChunk = cfg.PrefillChunk
	var esp *engine.Speculation
	if sp := cfg.Speculation; sp != nil {
		dr, err := sp.NewDrafter(eng.State(), cfg.MaxBatch)
		if err != nil {
			eng.Close()
			return nil, fmt.Errorf("drafter: %w", err)
		}
		esp = &engine.Speculation{Drafter: dr, Drafts: sp.Drafts, Accept: sp.Accept}
	}
	s := &Server{
		cfg:     cfg,
		eng:     eng,
		spec:    esp,
		jobs:    make(chan *engine.Job),
		stopped: make(chan struct{}),
		created: time.Now().Unix(),
	}
	s.queue = newJobQueue(cfg.MaxQueue, func(*engine.Job) { s.pending.Add(-1) })
	if c := cfg.Model.Config; c != nil {
		s.eos = slices.Clone(c.EOSTokenIDs)
	}
	if t := cfg.Tokenizer; t != nil {
		for _, id := range t.EOSIDs() {
			if !slices.Contains(s.eos, id) {
				s.eos = append(s.eos, id)
			}
		}
	}
	if !cfg.DisableMetrics {
		s.metrics = newMetrics(s)
	}
	return s, nil
}

// Run runs the engine loop until ctx is done; requests are answered only
// while it runs, and those in flight when it stops get an error. Call it
// once, then Close.
func (s *Server) Run(ctx context.Context) error {
	defer close(s.stopped)
	feedCtx, stopFeed := context.WithCancel(ctx)
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		s.queue.feed(feedCtx, s.jobs)
	}()
	err := s.eng.Run(ctx, s.jobs, s.spec)
	stopFeed()
	<-fed
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// Close releases the drafter and the engine's state; call it after Run has
// returned.
func (s *Server) Close() {
	if s.spec != nil {
		s.spec.Drafter.Close()
	}
	s.eng.Close()
}

// Name is the model id the server answers with.
func (s *Server) Name() string { return s.cfg.Name }

// Registry is the registry of the metrics served at /metrics, for a caller
// that adds its own collectors; nil when the metrics are disabled.
func (s *Server) Registry() *prometheus.Registry {
	if s.metrics == nil {
		return nil
	}
	return s.metrics.reg
}

// ServeHTTP routes a request, answering unknown paths with 404 and wrong
// methods with 405, both in OpenAI's error shape.
func (s *Server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	w := &tracker{ResponseWriter: rw, m: s.metrics, endpoint: endpoint(path), start: time.Now()}
	var (
		allow   string
		handler func(http.ResponseWriter, *http.Request)
	)
	switch {
	case path == "/health":
		allow, handler = "GET, HEAD", s.health
	case path == "/v1/models":
		allow, handler = "GET, HEAD", s.models
	case strings.HasPrefix(path, "/v1/models/"):
		allow, handler = "GET, HEAD", s.model
	case path == "/v1/completions":
		allow, handler = "POST", s.completions
	case path == "/v1/chat/completions":
		allow, handler = "POST", s.chatCompletions
	case path == "/metrics" && s.metrics != nil:
		allow, handler = "GET, HEAD", s.metrics.serve
	default:
		writeError(w, newError(http.StatusNotFound, "not_found_error", "", "not_found", "no route for %s %s", r.Method, r.URL.Path))
		return
	}
	if s.cfg.APIKey != "" && strings.HasPrefix(path, "/v1/") && !s.authorized(r) {
		writeError(w, newError(http.StatusUnauthorized, "invalid_request_error", "", "invalid_api_key",
			"missing or incorrect API key: send Authorization: Bearer <key>"))
		s.logRequest(w, r)
		return
	}
	if !slices.Contains(strings.Split(allow, ", "), r.Method) {
		w.Header().Set("Allow", allow)
		writeError(w, newError(http.StatusMethodNotAllowed, "invalid_request_error", "", "method_not_allowed",
			"method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow))
		return
	}
	if w.endpoint == epCompletions || w.endpoint == epChat {
		w.receive()
	}
	handler(w, r)
	// A generation that ended without an answer lost its client.
	w.finish(reasonCancelled)
	s.logRequest(w, r)
}

// authorized reports whether r carries the API key, compared in constant
// time.
func (s *Server) authorized(r *http.Request) bool {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(token), []byte(s.cfg.APIKey)) == 1
}

// logRequest writes the request's log line.
func (s *Server) logRequest(w *tracker, r *http.Request) {
	if s.cfg.Log == nil {
		return
	}
	attrs := []slog.Attr{
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", cmp.Or(w.status, http.StatusOK)),
		slog.Float64("ms", float64(time.Since(w.start).Microseconds())/1e3),
	}
	if w.id != "" {
		attrs = append(attrs, slog.String("id", w.id))
	}
	if w.generation {
		attrs = append(attrs, slog.Int("prompt_tokens", w.prompt), slog.Int("completion_tokens", w.completion), slog.String("finish_reason", w.reason))
	}
	s.cfg.Log.LogAttrs(r.Context(), slog.LevelInfo, "request", attrs...)
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	select {
	case <-s.stopped:
		writeError(w, newError(http.StatusServiceUnavailable, "server_error", "", "unavailable", "the engine has stopped"))
	default:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}
}

// names are the model ids the server answers to, its Name first.
func (s *Server) names() []string { return append([]string{s.cfg.Name}, s.cfg.Aliases...) }

func (s *Server) serves(id string) bool { return slices.Contains(s.names(), id) }

func (s *Server) card(id string) modelCard {
	return modelCard{ID: id, Object: "model", Created: s.created, OwnedBy: "replayssm", MaxModelLen: s.cfg.ContextLength}
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	var cards []modelCard
	for _, id := range s.names() {
		cards = append(cards, s.card(id))
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": cards})
}

func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(strings.TrimSuffix(r.URL.Path, "/"), "/v1/models/")
	if !s.serves(id) {
		writeError(w, newError(http.StatusNotFound, "not_found_error", "model", "model_not_found", "the model %q does not exist", id))
		return
	}
	writeJSON(w, http.StatusOK, s.card(id))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"message":"encoding the response failed","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, e *apiError) {
	writeJSON(w, e.status, map[string]*apiError{"error": e})
}
