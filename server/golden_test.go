package server

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden responses in testdata/openai")

// TestOpenAIWire replays requests as the official OpenAI Python client
// sends them (its headers, its JSON: testdata/openai/*.request.json) and
// compares the answers, ids and timestamps masked, with the golden
// responses beside them: the wire format a client parses, fixed.
func TestOpenAIWire(t *testing.T) {
	f := newFixture(t, Config{})
	reqs, _ := filepath.Glob("testdata/openai/*.request.json")
	if len(reqs) == 0 {
		t.Fatal("no requests in testdata/openai")
	}
	masks := []struct {
		re   *regexp.Regexp
		with string
	}{
		{regexp.MustCompile(`"id":"(chat)?cmpl-[A-Z0-9]+"`), `"id":"${1}cmpl-ID"`},
		{regexp.MustCompile(`"created":\d+`), `"created":0`},
		{regexp.MustCompile(`"id":"call_[A-Z0-9]+"`), `"id":"call_ID"`},
	}
	for _, path := range reqs {
		name := strings.TrimSuffix(filepath.Base(path), ".request.json")
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			endpoint := "/v1/completions"
			if bytes.Contains(body, []byte(`"messages"`)) {
				endpoint = "/v1/chat/completions"
			}
			req := must(http.NewRequest("POST", f.url+endpoint, bytes.NewReader(body)))
			for k, v := range map[string]string{
				"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "OpenAI/Python 1.99.9",
				"X-Stainless-Lang": "python", "X-Stainless-Package-Version": "1.99.9", "X-Stainless-Retry-Count": "0",
				"Authorization": "Bearer sk-none",
			} {
				req.Header.Set(k, v)
			}
			rsp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(rsp.Body)
			rsp.Body.Close()
			if rsp.StatusCode != http.StatusOK {
				t.Fatalf("%d %s", rsp.StatusCode, got)
			}
			for _, m := range masks {
				got = m.re.ReplaceAll(got, []byte(m.with))
			}
			if !bytes.Contains(body, []byte(`"stream":true`)) {
				var v any // one JSON document, indented for review
				if err := json.Unmarshal(got, &v); err != nil {
					t.Fatalf("%v in %s", err, got)
				}
				got, _ = json.MarshalIndent(round(v), "", "  ")
				got = append(got, '\n')
			}
			golden := strings.TrimSuffix(path, ".request.json") + ".response"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test ./server -run TestOpenAIWire -update writes it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("the answer differs from %s:\n%s", golden, got)
			}
		})
	}
}

// round keeps 3 decimals of every fractional number (the
// log-probabilities, whose last float32 digits differ between the assembly
// kernels and plain Go); integers stay as they are.
func round(v any) any {
	switch x := v.(type) {
	case float64:
		if x != math.Trunc(x) {
			return math.Round(x*1000) / 1000
		}
	case []any:
		for i := range x {
			x[i] = round(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = round(x[k])
		}
	}
	return v
}
