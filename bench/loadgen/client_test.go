package loadgen

import (
	"strings"
	"testing"
)

func TestBody(t *testing.T) {
	tests := []struct {
		name string
		c    Client
		r    Request
		want string
	}{
		{"completions streamed", Client{Endpoint: Completions, Model: "m", Stream: true}, Request{Prompt: "hi", OutputLen: 8},
			`{"model":"m","prompt":"hi","max_tokens":8,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}`},
		{"completions with a prefix", Client{Endpoint: Completions}, Request{Prefix: "sys", Prompt: "q", OutputLen: 2},
			`{"prompt":"sys\n\nq","max_tokens":2,"temperature":0}`},
		{"chat with a prefix", Client{Endpoint: Chat, Model: "m", Temperature: 0.5}, Request{Prefix: "sys", Prompt: "q", OutputLen: 3},
			`{"model":"m","messages":[{"role":"system","content":"sys"},{"role":"user","content":"q"}],"max_completion_tokens":3,"temperature":0.5}`},
		{"ignore eos", Client{Endpoint: Chat, IgnoreEOS: true}, Request{Prompt: "q", OutputLen: 4},
			`{"messages":[{"role":"user","content":"q"}],"max_completion_tokens":4,"min_tokens":4,"ignore_eos":true,"temperature":0}`},
	}
	for _, tt := range tests {
		got, err := tt.c.Body(tt.r)
		if err != nil || string(got) != tt.want {
			t.Errorf("%s:\n got %s, %v\nwant %s", tt.name, got, err, tt.want)
		}
	}
}

func TestURL(t *testing.T) {
	for _, tt := range []struct{ base, want string }{
		{"http://h:8080", "http://h:8080/v1/completions"},
		{"http://h:8080/", "http://h:8080/v1/completions"},
		{"https://api.example.com/v1", "https://api.example.com/v1/completions"},
		{"https://api.example.com/v1/", "https://api.example.com/v1/completions"},
		{"http://h/proxy", "http://h/proxy/v1/completions"},
	} {
		c := Client{BaseURL: tt.base}
		if got := c.url("completions"); got != tt.want {
			t.Errorf("base %s: %s, want %s", tt.base, got, tt.want)
		}
	}
}

func TestStatusError(t *testing.T) {
	long := strings.Repeat("é", 300)
	tests := []struct {
		status int
		body   string
		want   string
	}{
		{500, `{"error": {"message": "boom", "type": "server_error"}}`, "HTTP 500: boom"},
		{400, `{"object": "error", "message": "flat", "code": 400}`, "HTTP 400: flat"},
		{422, `{"detail": "fastapi says no"}`, "HTTP 422: fastapi says no"},
		{422, `{"detail": [{"loc": ["body"]}]}`, `HTTP 422: [{"loc": ["body"]}]`},
		{429, `{"error": "slow down"}`, "HTTP 429: slow down"},
		{502, "<html>bad gateway</html>\nmore", "HTTP 502: <html>bad gateway</html>"},
		{503, "", "HTTP 503"},
		{500, `{"error": {"message": "` + long + `"}}`, "HTTP 500: " + long[:400] + "..."},
	}
	for _, tt := range tests {
		if got := statusError(tt.status, []byte(tt.body)); got != tt.want {
			t.Errorf("statusError(%d, %.40q) = %.80q, want %.80q", tt.status, tt.body, got, tt.want)
		}
	}
}
