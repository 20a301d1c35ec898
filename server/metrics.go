package server

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/replayssm/replayssm/engine"
	"github.com/replayssm/replayssm/replay"
)

// The endpoints the metrics name; any other path is "other".
const (
	epCompletions = "/v1/completions"
	epChat        = "/v1/chat/completions"
	epModels      = "/v1/models"
	epHealth      = "/health"
	epMetrics     = "/metrics"
	epOther       = "other"
)

// The finish reasons of replayssm_requests_finished_total: the OpenAI
// finish_reason of a completed request, or cancelled (the client went away)
// or error (answered with an error status, before or during its stream).
const (
	reasonStop      = "stop"
	reasonLength    = "length"
	reasonCancelled = "cancelled"
	reasonError     = "error"
)

// Bucket bounds in seconds: vLLM's, extended down for small models, which
// answer in milliseconds on a CPU.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560}
	itlBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
		0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	e2eBuckets = []float64{0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60,
		120, 240, 480, 960, 1920, 7680}
)

// metrics are a Server's Prometheus metrics, on a registry of its own. Every
// method is a no-op on a nil *metrics (metrics disabled). The counters are
// updated where the events happen: on the handler goroutines, and on the
// engine goroutine between forward steps (atomic adds, no locks).
type metrics struct {
	reg      *prometheus.Registry
	handler  http.Handler
	received *prometheus.CounterVec // endpoint
	finished *prometheus.CounterVec // endpoint, finish_reason
	errs     *prometheus.CounterVec // endpoint, code

	promptTokens, generationTokens prometheus.Counter
	ttft, itl, e2e                 prometheus.Histogram
	queue, prefill, decode         prometheus.Histogram

	state stateSnapshot
}

// stateSnapshot is the engine's replay.Stats and engine.SpecStats as last
// seen by the engine goroutine: the counters are plain fields written
// during a step, so they are copied here between steps and the scrape
// reads the copy.
type stateSnapshot struct {
	steps, prefilled, flushes, read, written, baseline atomic.Int64
	drafted, accepted                                  atomic.Int64
}

func (p *stateSnapshot) store(st replay.Stats, ss engine.SpecStats) {
	p.steps.Store(st.Steps)
	p.prefilled.Store(st.Prefilled)
	p.flushes.Store(st.Flushes)
	p.read.Store(st.StateBytesRead)
	p.written.Store(st.StateBytesWritten)
	p.baseline.Store(st.BaselineBytes)
	p.drafted.Store(int64(ss.Drafted))
	p.accepted.Store(int64(ss.Accepted))
}

// newMetrics registers the metrics of s, whose engine and config are set.
func newMetrics(s *Server) *metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	// Every replayssm_ series names the model, as vLLM's do.
	r := prometheus.WrapRegistererWith(prometheus.Labels{"model_name": s.cfg.Name}, reg)
	m := &metrics{
		reg: reg,
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "replayssm_requests_received_total",
			Help: "Generation requests received (completions and chat completions), by endpoint.",
		}, []string{"endpoint"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "replayssm_requests_finished_total",
			Help: "Generation requests answered, by endpoint and finish reason: stop, length, cancelled (client went away) or error (answered with an error status).",
		}, []string{"endpoint", "finish_reason"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "replayssm_request_errors_total",
			Help: "Requests answered with an error status (4xx, 5xx; 429 when the queue is full), by endpoint and HTTP status code; an error ending a started stream counts with its error's status.",
		}, []string{"endpoint", "code"}),
		promptTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "replayssm_prompt_tokens_total",
			Help: "Prompt tokens prefilled.",
		}),
		generationTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "replayssm_generation_tokens_total",
			Help: "Tokens generated (the completion_tokens of the responses, end tokens included).",
		}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "replayssm_time_to_first_token_seconds",
			Help:    "Time from a request's arrival to its first generated token.",
			Buckets: ttftBuckets,
		}),
		itl: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "replayssm_inter_token_latency_seconds",
			Help:    "Time between two consecutive generated tokens of a request.",
			Buckets: itlBuckets,
		}),
		e2e: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "replayssm_e2e_request_latency_seconds",
			Help:    "Time from a request's arrival to its end in the engine (completed, cancelled or failed).",
			Buckets: e2eBuckets,
		}),
		queue: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "replayssm_request_queue_time_seconds",
			Help:    "Time a request waited for a free sequence: from its arrival to the engine taking it.",
			Buckets: e2eBuckets,
		}),
		prefill: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "replayssm_request_prefill_time_seconds",
			Help:    "Time from the engine taking a request to its first generated token (its prompt, in chunks beside the other streams).",
			Buckets: e2eBuckets,
		}),
		decode: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "replayssm_request_decode_time_seconds",
			Help:    "Time from a request's first generated token to its end.",
			Buckets: e2eBuckets,
		}),
	}
	for _, ep := range []string{epCompletions, epChat} {
		m.received.WithLabelValues(ep)
		for _, reason := range []string{reasonStop, reasonLength, reasonCancelled, reasonError} {
			m.finished.WithLabelValues(ep, reason)
		}
	}
	r.MustRegister(m.received, m.finished, m.errs, m.promptTokens, m.generationTokens, m.ttft, m.itl, m.e2e,
		m.queue, m.prefill, m.decode)
	r.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "replayssm_requests_waiting",
			Help: "Requests queued for a free sequence.",
		}, func() float64 { return float64(s.queue.len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "replayssm_requests_running",
			Help: "Requests taken by the engine and not finished.",
		}, func() float64 { return float64(max(0, s.pending.Load()-int64(s.queue.len()))) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "replayssm_max_batch",
			Help: "Sequences the engine decodes together (--max-batch).",
		}, func() float64 { return float64(s.cfg.MaxBatch) }),
		newStateCollector(&m.state),
	)
	if s.cfg.Speculation != nil {
		r.MustRegister(newSpecCollector(&m.state))
	}
	opt := s.cfg.State
	window := opt.Window
	if window == 0 {
		window = replay.DefaultWindow
	}
	modelType := ""
	if c := s.cfg.Model.Config; c != nil {
		modelType = c.ModelType
	}
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "replayssm_build_info",
		Help: "Always 1: the build, the model and its state configuration in the labels.",
		ConstLabels: prometheus.Labels{
			"version":          version,
			"goversion":        runtime.Version(),
			"model_type":       modelType,
			"state_mode":       opt.Mode.String(),
			"state_format":     opt.State.String(),
			"read_copy_format": opt.ReadCopy.String(),
			"ring_format":      opt.Ring.String(),
			"window":           strconv.Itoa(window),
		},
	})
	info.Set(1)
	r.MustRegister(info)
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return m
}

// stateCollector exposes the engine's replay statistics from the snapshot.
type stateCollector struct {
	snap                             *stateSnapshot
	steps, prefilled, flushes, bytes *prometheus.Desc
}

func newStateCollector(snap *stateSnapshot) *stateCollector {
	return &stateCollector{
		snap: snap,
		steps: prometheus.NewDesc("replayssm_state_steps_total",
			"Recurrent-state decode steps of the SSM layers (one per token, sequence and layer).", nil, nil),
		prefilled: prometheus.NewDesc("replayssm_state_prefilled_total",
			"Prompt inputs the SSM layers ran through Prefill, a prompt chunk a call (one per token, sequence and layer).", nil, nil),
		flushes: prometheus.NewDesc("replayssm_state_flushes_total",
			"Checkpoint writes of the SSM layers' replay caches.", nil, nil),
		bytes: prometheus.NewDesc("replayssm_state_bytes_total",
			"SSM state bytes moved: read, written, and what the in-place baseline in the same format would have read plus written (baseline).",
			[]string{"kind"}, nil),
	}
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.steps
	ch <- c.prefilled
	ch <- c.flushes
	ch <- c.bytes
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v *atomic.Int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v.Load()), labels...)
	}
	counter(c.steps, &c.snap.steps)
	counter(c.prefilled, &c.snap.prefilled)
	counter(c.flushes, &c.snap.flushes)
	counter(c.bytes, &c.snap.read, "read")
	counter(c.bytes, &c.snap.written, "written")
	counter(c.bytes, &c.snap.baseline, "baseline")
}

// specCollector exposes what speculative decoding did, from the snapshot.
type specCollector struct {
	snap              *stateSnapshot
	drafted, accepted *prometheus.Desc
}

func newSpecCollector(snap *stateSnapshot) *specCollector {
	return &specCollector{
		snap: snap,
		drafted: prometheus.NewDesc("replayssm_spec_decode_num_draft_tokens_total",
			"Draft tokens proposed by the drafter and verified by the model.", nil, nil),
		accepted: prometheus.NewDesc("replayssm_spec_decode_num_accepted_tokens_total",
			"Draft tokens the verification accepted.", nil, nil),
	}
}

func (c *specCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.drafted
	ch <- c.accepted
}

func (c *specCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.drafted, prometheus.CounterValue, float64(c.snap.drafted.Load()))
	ch <- prometheus.MustNewConstMetric(c.accepted, prometheus.CounterValue, float64(c.snap.accepted.Load()))
}

// serve answers GET /metrics.
func (m *metrics) serve(w http.ResponseWriter, r *http.Request) { m.handler.ServeHTTP(w, r) }

// endpoint is the label of a routed path.
func endpoint(path string) string {
	switch path {
	case epCompletions, epChat, epHealth, epMetrics, epModels:
		return path
	}
	if len(path) > len(epModels) && path[:len(epModels)+1] == epModels+"/" {
		return epModels
	}
	return epOther
}

// tracker is the ResponseWriter of one request: it counts an error status
// when the header is written, and the request's end once, before the
// response that tells the client so (a scrape that follows a response sees
// it counted). Only the request's handler goroutine uses it.
type tracker struct {
	http.ResponseWriter
	m          *metrics
	endpoint   string
	start      time.Time
	wrote      bool
	generation bool // a received generation request, to be counted finished
	finished   bool

	// for the request's log line
	status             int
	id, reason         string
	prompt, completion int
}

// Unwrap lets http.ResponseController reach the connection (Flush).
func (t *tracker) Unwrap() http.ResponseWriter { return t.ResponseWriter }

func (t *tracker) WriteHeader(code int) {
	if !t.wrote {
		t.wrote, t.status = true, code
		if code >= 400 {
			t.fail(code)
		}
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *tracker) Write(b []byte) (int, error) {
	if !t.wrote {
		t.WriteHeader(http.StatusOK)
	}
	return t.ResponseWriter.Write(b)
}

// receive counts a generation request the handler takes.
func (t *tracker) receive() {
	t.generation = true
	if t.m != nil {
		t.m.received.WithLabelValues(t.endpoint).Inc()
	}
}

// fail counts an error answer with status code: as the response's status,
// or as the last event of a stream.
func (t *tracker) fail(code int) {
	if t == nil {
		return
	}
	if t.m != nil {
		t.m.errs.WithLabelValues(t.endpoint, strconv.Itoa(code)).Inc()
	}
	t.finish(reasonError)
}

// finish counts the end of a generation request, once.
func (t *tracker) finish(reason string) {
	if t == nil || !t.generation || t.finished {
		return
	}
	t.finished, t.reason = true, reason
	if t.m != nil {
		t.m.finished.WithLabelValues(t.endpoint, reason).Inc()
	}
}

// trackerOf is w's tracker, or nil.
func trackerOf(w http.ResponseWriter) *tracker {
	t, _ := w.(*tracker)
	return t
}

// genTimer times one generation on the engine goroutine, which alone uses
// it: its first token, the gaps between tokens, its end.
type genTimer struct {
	m       *metrics
	start   time.Time
	prompt  int
	started time.Time // the engine took it (zero: not yet)
	firstAt time.Time // its first token (zero: none yet)
	last    time.Time
}

func (m *metrics) timer(start time.Time, prompt int) *genTimer {
	if m == nil {
		return nil
	}
	return &genTimer{m: m, start: start, prompt: prompt}
}

// begin records the engine taking the generation: the end of its wait.
func (g *genTimer) begin() {
	if g == nil {
		return
	}
	g.started = time.Now()
	g.m.queue.Observe(g.started.Sub(g.start).Seconds())
}

// token records a generated token.
func (g *genTimer) token() {
	if g == nil {
		return
	}
	now := time.Now()
	if g.firstAt.IsZero() {
		g.firstAt = now
		g.m.promptTokens.Add(float64(g.prompt))
		g.m.ttft.Observe(now.Sub(g.start).Seconds())
		if !g.started.IsZero() {
			g.m.prefill.Observe(now.Sub(g.started).Seconds())
		}
	} else {
		g.m.itl.Observe(now.Sub(g.last).Seconds())
	}
	g.last = now
}

// finish records the generation's end with its token count.
func (g *genTimer) finish(tokens int) {
	if g == nil {
		return
	}
	g.m.generationTokens.Add(float64(tokens))
	g.m.e2e.Observe(time.Since(g.start).Seconds())
	if !g.firstAt.IsZero() {
		g.m.decode.Observe(time.Since(g.firstAt).Seconds())
	}
}

// observeState copies the engine's statistics; call it on the engine
// goroutine only, between forward steps (in a job's callbacks).
func (m *metrics) observeState(e *engine.Engine) {
	if m != nil {
		m.state.store(e.Stats(), e.SpecStats())
	}
}

// isCancel reports an error from a cancelled request context.
func isCancel(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
