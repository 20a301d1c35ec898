package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/replayssm/replayssm/tokenizer/chat"
	"io"
	"net/http"
	"slices"
	"strings"
)

// apiError is an error answered to the client in OpenAI's shape:
// {"error": {"message", "type", "param", "code"}}.
type apiError struct {
	status  int
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) Error() string { return e.Message }

// invalid is a 400 about one request field (param may be "").
func invalid(param, format string, args ...any) *apiError {
	return newError(http.StatusBadRequest, "invalid_request_error", param, "", format, args...)
}

func newError(status int, typ, param, code, format string, args ...any) *apiError {
	e := &apiError{status: status, Message: fmt.Sprintf(format, args...), Type: typ}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	return e
}

// stopField is "stop": a string, a list of strings, or null.
type stopField []string

func (s *stopField) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		*s = nil
		return nil
	}
	var one string
	if json.Unmarshal(b, &one) == nil {
		*s = stopField{one}
		return nil
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return invalid("stop", "stop must be a string or a list of strings")
	}
	*s = list
	return nil
}

// promptField is the completions "prompt": text, token ids, or a list
// holding one of those (batched prompts are not supported).
type promptField struct {
	text  string
	ids   []int
	isIDs bool
	set   bool
}

func (p *promptField) UnmarshalJSON(b []byte) error { return p.unmarshal(b, 0) }

// unmarshal reads a prompt nested depth lists deep: a list may hold one
// prompt, which may not be a list of lists again, so that parsing stays
// linear in the body (each level parses its bytes once).
func (p *promptField) unmarshal(b []byte, depth int) error {
	if isNull(b) {
		return nil
	}
	p.set = true
	if json.Unmarshal(b, &p.text) == nil {
		return nil
	}
	if json.Unmarshal(b, &p.ids) == nil {
		p.isIDs = true
		return nil
	}
	if depth > 0 {
		return invalid("prompt", "prompt must be a string, a list of token ids, or a list holding one of those")
	}
	var list []json.RawMessage
	if json.Unmarshal(b, &list) == nil {
		if len(list) != 1 {
			return invalid("prompt", "a list of %d prompts: give one prompt per request", len(list))
		}
		return p.unmarshal(list[0], depth+1)
	}
	return invalid("prompt", "prompt must be a string or a list of token ids")
}

// contentField is a chat message's "content": a string, a list of
// {"type": "text", "text": ...} parts, or null.
type contentField string

func (c *contentField) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		*c = ""
		return nil
	}
	var s string
	if json.Unmarshal(b, &s) == nil {
		*c = contentField(s)
		return nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return invalid("content", "content must be a string or a list of text parts")
	}
	var sb strings.Builder
	for _, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return invalid("content", "content part of type %q is not supported: only text", p.Type)
		}
		sb.WriteString(*p.Text)
	}
	*c = contentField(sb.String())
	return nil
}

func isNull(b []byte) bool { return bytes.Equal(bytes.TrimSpace(b), []byte("null")) }

// samplingFields are the fields shared by completions and chat requests.
// Fields that do not change the output (user, metadata, ...) are accepted
// and ignored; parameters the server does not implement are in
// unsupportedFields, refused unless neutral.
type samplingFields struct {
	Model         string    `json:"model"`
	MaxTokens     *int      `json:"max_tokens"`
	Temperature   *float64  `json:"temperature"`
	TopP          *float64  `json:"top_p"`
	TopK          *int      `json:"top_k"`
	Seed          *int64    `json:"seed"`
	Stop          stopField `json:"stop"`
	Stream        bool      `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	N      *int `json:"n"`
	BestOf *int `json:"best_of"`

	PresencePenalty   *float64           `json:"presence_penalty"`
	FrequencyPenalty  *float64           `json:"frequency_penalty"`
	RepetitionPenalty *float64           `json:"repetition_penalty"`
	LogitBias         map[string]float64 `json:"logit_bias"`
	MinTokens         *int               `json:"min_tokens"`
	StopTokenIDs      []int              `json:"stop_token_ids"`
	// Logprobs is a count of alternatives (completions) or a switch
	// (chat, with TopLogprobs).
	Logprobs    json.RawMessage `json:"logprobs"`
	TopLogprobs *int            `json:"top_logprobs"`
	// ResponseFormat is {"type": "text"}, {"type": "json_object"} or
	// {"type": "json_schema", "json_schema": {"name": ..., "schema": {...}}}.
	ResponseFormat *struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	} `json:"response_format"`
	unsupportedFields
}

// unsupportedFields are OpenAI and vLLM parameters the server does not
// implement yet. A request that sets one to anything but its neutral value
// (what leaves the output unchanged) is answered 400 naming it: never
// silently ignored.
type unsupportedFields struct {
	Suffix       json.RawMessage `json:"suffix"`
	Functions    json.RawMessage `json:"functions"`
	FunctionCall json.RawMessage `json:"function_call"`
}

// check refuses the first parameter set to a value that is not neutral.
func (u *unsupportedFields) check() *apiError {
	for _, f := range []struct {
		name    string
		raw     json.RawMessage
		neutral []string // compact JSON values that leave the output unchanged
	}{
		{"suffix", u.Suffix, []string{`""`}},
		{"functions", u.Functions, []string{"[]"}},
		{"function_call", u.FunctionCall, []string{`"none"`, `"auto"`}},
	} {
		if len(f.raw) == 0 || isNull(f.raw) {
			continue
		}
		var b bytes.Buffer
		if json.Compact(&b, f.raw) == nil && slices.Contains(f.neutral, b.String()) {
			continue
		}
		return newError(http.StatusBadRequest, "invalid_request_error", f.name, "unsupported_parameter",
			"%s is not supported by this server", f.name)
	}
	return nil
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	samplingFields
	Prompt promptField `json:"prompt"`
	Echo   bool        `json:"echo"`
}

// chatMessage is one message of a chat request: an assistant's may carry
// tool calls, a tool's answers one of them.
type chatMessage struct {
	Role       string          `json:"role"`
	Content    contentField    `json:"content"`
	Name       string          `json:"name"`
	ToolCalls  []chat.ToolCall `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

// tool is one entry of a chat request's tools.
type tool struct {
	Type     string `json:"type"`
	Function struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	samplingFields
	Messages            []chatMessage     `json:"messages"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	Tools               []json.RawMessage `json:"tools"`
	ToolChoice          json.RawMessage   `json:"tool_choice"`
}

// decodeBody reads one JSON object of at most limit bytes into v.
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any) *apiError {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	err := dec.Decode(v)
	if err == nil {
		if _, err2 := dec.Token(); err2 != io.EOF {
			err = errors.New("data after the JSON object")
			var mbe *http.MaxBytesError
			if errors.As(err2, &mbe) {
				err = err2
			}
		}
	}
	if err == nil {
		return nil
	}
	var (
		ae  *apiError
		mbe *http.MaxBytesError
		te  *json.UnmarshalTypeError
		se  *json.SyntaxError
	)
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &mbe):
		return newError(http.StatusRequestEntityTooLarge, "invalid_request_error", "", "request_too_large",
			"request body is larger than %d bytes", mbe.Limit)
	case errors.As(err, &te):
		if te.Field == "" {
			return invalid("", "the request body must be a JSON object, not %s", te.Value)
		}
		// The embedded struct's Go name leads the path of its fields.
		field := strings.TrimPrefix(te.Field, "samplingFields.")
		return invalid(field, "%s has the wrong type: %s, want %v", field, te.Value, te.Type)
	case errors.As(err, &se), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("", "malformed JSON: %v", err)
	}
	return invalid("", "malformed request body: %v", err)
}

// The response bodies.

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type completionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type chatContent struct {
	Role      string         `json:"role,omitempty"`
	Content   *string        `json:"content,omitempty"`
	ToolCalls []toolCallJSON `json:"tool_calls,omitempty"`
}

// toolCallJSON is a tool call as OpenAI answers it: arguments as a string
// holding JSON.
type toolCallJSON struct {
	Index    *int   `json:"index,omitempty"` // in a streamed delta
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatChoice struct {
	Index        int          `json:"index"`
	Message      *chatContent `json:"message,omitempty"`
	Delta        *chatContent `json:"delta,omitempty"`
	Logprobs     any          `json:"logprobs"`
	FinishReason *string      `json:"finish_reason"`
}

// response is a completion, a chat completion, or a chunk of either.
type response struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices any    `json:"choices"`
	Usage   *usage `json:"usage,omitempty"`
}

type modelCard struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Created     int64  `json:"created"`
	OwnedBy     string `json:"owned_by"`
	MaxModelLen int    `json:"max_model_len"`
}
