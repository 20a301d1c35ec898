package server

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/replayssm/replayssm/models"
	"github.com/replayssm/replayssm/replay"
)

// scrape GETs /metrics and parses the text exposition.
func (f *fixture) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	rsp := f.do(t, context.Background(), "GET", "/metrics", "")
	defer rsp.Body.Close()
	if rsp.StatusCode != http.StatusOK || !strings.HasPrefix(rsp.Header.Get("Content-Type"), "text/plain") {
		b, _ := io.ReadAll(rsp.Body)
		t.Fatalf("GET /metrics: %d %s %.200s", rsp.StatusCode, rsp.Header.Get("Content-Type"), b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rsp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// sample is one expected series: its family, the labels it must carry
// (others are ignored) and its value (the sample count of a histogram).
type sample struct {
	name   string
	labels map[string]string
	want   float64
}

// value finds the series of name with labels; ok false: none.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	mf := fams[name]
	if mf == nil {
		return 0, false
	}
next:
	for _, m := range mf.GetMetric() {
		for k, v := range labels {
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == k && l.GetValue() == v }) {
				continue next
			}
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func check(t *testing.T, fams map[string]*dto.MetricFamily, want []sample) {
	t.Helper()
	for _, s := range want {
		got, ok := value(fams, s.name, s.labels)
		if !ok || got != s.want {
			t.Errorf("%s%v = %v (found %v), want %v", s.name, s.labels, got, ok, s.want)
		}
	}
}

func lbl(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// TestMetrics serves a completion, a streamed chat completion and a few
// bad requests while /metrics is scraped concurrently, then checks the
// exposition against the responses, in both state modes.
func TestMetrics(t *testing.T) {
	for _, tt := range []struct {
		mode replay.Mode
		// stateOK checks bytes read+written against the baseline's.
		stateOK func(moved, baseline float64) bool
	}{
		{replay.Replay, func(moved, baseline float64) bool { return moved < baseline }},
		{replay.Baseline, func(moved, baseline float64) bool { return moved == baseline }},
	} {
		t.Run(tt.mode.String(), func(t *testing.T) {
			f := newFixture(t, Config{MaxBatch: 2, State: replay.Options{Mode: tt.mode}})

			// Scrape throughout: the state collector must not race the engine.
			done := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					w := httptest.NewRecorder()
					f.s.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
					if w.Code != http.StatusOK {
						t.Errorf("concurrent scrape: %d", w.Code)
						return
					}
				}
			})

			var c completion
			f.post(t, "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":12,"temperature":0}`, mosesPrompt), &c)
			_, sreason, chunks := f.stream(t, "/v1/chat/completions",
				`{"messages":[{"role":"user","content":"Who spake unto Moses?"}],"max_tokens":10,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}`)
			su := chunks[len(chunks)-1].Usage
			if c.Usage == nil || su == nil {
				t.Fatalf("no usage: %+v, %+v", c.Usage, su)
			}
			for _, r := range []struct {
				method, path, body string
				status             int
			}{
				{"POST", epCompletions, `{"prompt":"a","max_tokens":0}`, 400},
				{"GET", epCompletions, ``, 405},
				{"GET", "/v1/nothing", ``, 404},
			} {
				rsp := f.do(t, context.Background(), r.method, r.path, r.body)
				rsp.Body.Close()
				if rsp.StatusCode != r.status {
					t.Fatalf("%s %s: %d, want %d", r.method, r.path, rsp.StatusCode, r.status)
				}
			}
			close(done)
			wg.Wait()

			fams := f.scrape(t)
			creason := *c.Choices[0].FinishReason
			finished := func(ep, reason string) sample {
				n := 0.0
				switch {
				case ep == epCompletions && (reason == creason || reason == reasonError):
					n = 1
				case ep == epChat && reason == sreason:
					n = 1
				}
				return sample{"replayssm_requests_finished_total", lbl("endpoint", ep, "finish_reason", reason), n}
			}
			want := []sample{
				{"replayssm_requests_received_total", lbl("endpoint", epCompletions, "model_name", models.Default), 2},
				{"replayssm_requests_received_total", lbl("endpoint", epChat), 1},
				{"replayssm_request_errors_total", lbl("endpoint", epCompletions, "code", "400"), 1},
				{"replayssm_request_errors_total", lbl("endpoint", epCompletions, "code", "405"), 1},
				{"replayssm_request_errors_total", lbl("endpoint", epOther, "code", "404"), 1},
				{"replayssm_prompt_tokens_total", nil, float64(c.Usage.PromptTokens + su.PromptTokens)},
				{"replayssm_generation_tokens_total", nil, float64(c.Usage.CompletionTokens + su.CompletionTokens)},
				{"replayssm_time_to_first_token_seconds", nil, 2},
				{"replayssm_e2e_request_latency_seconds", nil, 2},
				{"replayssm_request_queue_time_seconds", nil, 2},
				{"replayssm_request_prefill_time_seconds", nil, 2},
				{"replayssm_request_decode_time_seconds", nil, 2},
				{"replayssm_inter_token_latency_seconds", nil, float64(c.Usage.CompletionTokens - 1 + su.CompletionTokens - 1)},
				{"replayssm_requests_waiting", nil, 0},
				{"replayssm_requests_running", nil, 0},
				{"replayssm_max_batch", nil, 2},
				{"replayssm_build_info", lbl("model_name", models.Default, "state_mode", tt.mode.String(), "state_format", "fp32", "window", "16"), 1},
			}
			for _, ep := range []string{epCompletions, epChat} {
				for _, reason := range []string{reasonStop, reasonLength, reasonCancelled, reasonError} {
					want = append(want, finished(ep, reason))
				}
			}
			check(t, fams, want)
			if _, ok := value(fams, "replayssm_request_errors_total", lbl("endpoint", epChat)); ok {
				t.Errorf("errors counted on %s", epChat)
			}
			if fams["replayssm_spec_decode_num_draft_tokens_total"] != nil {
				t.Error("speculation counted by a server that does not speculate")
			}

			st := map[string]float64{}
			for _, name := range []string{"replayssm_state_steps_total", "replayssm_state_prefilled_total", "replayssm_state_flushes_total"} {
				st[name], _ = value(fams, name, nil)
			}
			for _, kind := range []string{"read", "written", "baseline"} {
				st[kind], _ = value(fams, "replayssm_state_bytes_total", lbl("kind", kind))
			}
			if st["replayssm_state_steps_total"] <= 0 || st["replayssm_state_prefilled_total"] <= 0 || st["read"] <= 0 || st["written"] <= 0 || st["baseline"] <= 0 ||
				!tt.stateOK(st["read"]+st["written"], st["baseline"]) {
				t.Errorf("state statistics %v", st)
			}
			// The snapshot is the engine's own count once it is idle.
			es := f.s.eng.Stats()
			if st["read"] != float64(es.StateBytesRead) || st["baseline"] != float64(es.BaselineBytes) ||
				st["replayssm_state_flushes_total"] != float64(es.Flushes) {
				t.Errorf("state statistics %v, engine %+v", st, es)
			}
			for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
				if fams[name] == nil {
					t.Errorf("no %s in %v", name, slices.Sorted(maps.Keys(fams)))
				}
			}
		})
	}
}

// TestMetricsDisabled: without metrics, /metrics is an unknown path.
func TestMetricsDisabled(t *testing.T) {
	for _, tt := range []struct {
		disable bool
		status  int
	}{{false, 200}, {true, 404}} {
		f := newFixture(t, Config{DisableMetrics: tt.disable})
		for _, method := range []string{"GET", "HEAD"} {
			rsp := f.do(t, context.Background(), method, "/metrics", "")
			rsp.Body.Close()
			if rsp.StatusCode != tt.status {
				t.Errorf("disabled %v: %s /metrics: %d, want %d", tt.disable, method, rsp.StatusCode, tt.status)
			}
		}
		if (f.s.Registry() == nil) != tt.disable {
			t.Errorf("disabled %v: Registry %v", tt.disable, f.s.Registry())
		}
	}
}
