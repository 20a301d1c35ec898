package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Endpoint is the OpenAI API a Client calls.
type Endpoint string

// The endpoints a Client can call.
const (
	Completions Endpoint = "completions"      // POST /v1/completions
	Chat        Endpoint = "chat/completions" // POST /v1/chat/completions
)

// Client sends Requests to one OpenAI-compatible server and times them.
// Its fields are read by Do, which any number of goroutines may call.
type Client struct {
	// BaseURL is the server's address, with or without the /v1 that the
	// API's paths start with: http://127.0.0.1:8080 and
	// https://api.example.com/v1 both work.
	BaseURL  string
	Endpoint Endpoint
	// Model is the "model" of every request; empty leaves it out.
	Model string
	// APIKey, if set, is sent as Authorization: Bearer <key>.
	APIKey string
	// Stream asks for server-sent events with usage in the last one
	// (stream_options.include_usage): TTFT and inter-token latency are
	// measured only then.
	Stream bool
	// IgnoreEOS asks for exactly Request.OutputLen tokens: ignore_eos
	// (vLLM, SGLang) and min_tokens = max_tokens (vLLM, replayssm, which
	// ignores ignore_eos). A server that knows neither may refuse them.
	IgnoreEOS bool
	// Temperature is every request's temperature (0: greedy).
	Temperature float64
	// Timeout bounds each request, from its start to its last byte
	// (0: none).
	Timeout time.Duration
	// HTTP sends the requests; nil uses http.DefaultClient (NewHTTPClient
	// makes one fit for many concurrent requests).
	HTTP *http.Client
}

// NewHTTPClient returns an HTTP client for conns concurrent requests to one
// host: idle connections are kept for all of them, so a run's requests
// reuse connections instead of each dialling its own, and responses are not
// compressed (a gzipped event stream would arrive in bursts).
func NewHTTPClient(conns int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = max(conns, 100)
	t.MaxIdleConnsPerHost = max(conns, 100)
	t.DisableCompression = true
	return &http.Client{Transport: t}
}

// Result is what one request produced and how long it took.
type Result struct {
	// Sent is false for a request the run never started (it was
	// interrupted first).
	Sent bool
	// Err is why the request failed; "" for one that completed.
	Err string
	// Cancelled is set for a request cut short by the run's interruption:
	// neither completed nor failed.
	Cancelled bool
	// TTFT is the time to the first chunk carrying output; 0 when none
	// came or the request was not streamed.
	TTFT time.Duration
	// ITL are the gaps between consecutive chunks carrying output.
	ITL []time.Duration
	// Latency is the time from the request's start to its last byte.
	Latency time.Duration
	// PromptTokens and OutputTokens are the usage the server reported, or
	// when it reported none (Usage false) the request's nominal InputLen
	// and the number of chunks that carried output.
	PromptTokens, OutputTokens int
	Usage                      bool
}

// url is the address of path under the server's /v1.
func (c *Client) url(path string) string {
	base := strings.TrimRight(c.BaseURL, "/")
	if !strings.HasSuffix(base, "/v1") {
		base += "/v1"
	}
	return base + "/" + path
}

// ErrUnreachable marks a server that could not be asked at all (no
// connection, or no HTTP answer).
var ErrUnreachable = errors.New("server unreachable")

// Models asks GET /v1/models for the ids the server serves. A server that
// cannot be reached gives an error wrapping ErrUnreachable.
func (c *Client) Models(ctx context.Context) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url("models"), nil)
	if err != nil {
		return nil, err
	}
	c.authorize(req)
	rsp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: GET %s: %s", ErrUnreachable, req.URL, shortError(err))
	}
	defer rsp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(rsp.Body, 4<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %v", req.URL, err)
	}
	if rsp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", req.URL, statusError(rsp.StatusCode, body))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("GET %s: not a model list: %v", req.URL, err)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	return ids, nil
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) authorize(req *http.Request) {
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// body is a request's JSON. The chat endpoint takes the budget as
// max_completion_tokens, its current name, as vLLM's benchmark sends it.
type body struct {
	Model               string    `json:"model,omitempty"`
	Prompt              string    `json:"prompt,omitempty"`
	Messages            []message `json:"messages,omitempty"`
	MaxTokens           int       `json:"max_tokens,omitempty"`
	MaxCompletionTokens int       `json:"max_completion_tokens,omitempty"`
	MinTokens           int       `json:"min_tokens,omitempty"`
	IgnoreEOS           bool      `json:"ignore_eos,omitempty"`
	Temperature         float64   `json:"temperature"`
	Stream              bool      `json:"stream,omitempty"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options,omitempty"`
}

// Body is the JSON Do sends for r.
func (c *Client) Body(r Request) ([]byte, error) {
	b := body{Model: c.Model, Temperature: c.Temperature, Stream: c.Stream}
	if c.Endpoint == Chat {
		if r.Prefix != "" {
			b.Messages = append(b.Messages, message{"system", r.Prefix})
		}
		b.Messages = append(b.Messages, message{"user", r.Prompt})
		b.MaxCompletionTokens = r.OutputLen
	} else {
		b.Prompt = r.Prompt
		if r.Prefix != "" {
			b.Prompt = r.Prefix + "\n\n" + r.Prompt
		}
		b.MaxTokens = r.OutputLen
	}
	if c.IgnoreEOS {
		b.IgnoreEOS, b.MinTokens = true, r.OutputLen
	}
	if c.Stream {
		b.StreamOptions = &struct {
			IncludeUsage bool `json:"include_usage"`
		}{true}
	}
	return json.Marshal(b)
}

// Do sends r and times its answer. It never returns an error: a request
// that fails says why in Result.Err, one cut short by ctx is Cancelled.
func (c *Client) Do(ctx context.Context, r Request) Result {
	res := Result{Sent: true}
	data, err := c.Body(r)
	if err != nil {
		res.Err = err.Error()
		return res
	}
	reqCtx, cancel := ctx, context.CancelFunc(func() {})
	if c.Timeout > 0 {
		reqCtx, cancel = context.WithTimeout(ctx, c.Timeout)
	}
	defer cancel()
	start := time.Now()
	err = c.do(reqCtx, data, start, &res)
	res.Latency = time.Since(start)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		res.Cancelled = true
		res.Err = "cancelled"
	case reqCtx.Err() != nil:
		res.Err = fmt.Sprintf("timed out after %v", c.Timeout)
	default:
		res.Err = err.Error()
	}
	if !res.Usage {
		res.PromptTokens = r.InputLen
	}
	return res
}

func (c *Client) do(ctx context.Context, data []byte, start time.Time, res *Result) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url(string(c.Endpoint)), bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	c.authorize(req)
	rsp, err := c.httpClient().Do(req)
	if err != nil {
		return errors.New(shortError(err))
	}
	defer rsp.Body.Close()
	if rsp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(rsp.Body, 64<<10))
		return errors.New(statusError(rsp.StatusCode, b))
	}
	// A server that does not stream answers JSON even when asked to.
	if !c.Stream || strings.HasPrefix(rsp.Header.Get("Content-Type"), "application/json") {
		return readWhole(rsp.Body, res)
	}
	return readStream(rsp.Body, start, res)
}

// shortError drops net/url's "Post \"URL\": " from a transport error: every
// request of a run names the same URL, and errors are grouped by message.
func shortError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err.Error()
	}
	return err.Error()
}
