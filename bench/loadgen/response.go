package loadgen

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// chunk is a response, or one event of a streamed one, of either
// endpoint: only the fields the measurements read.
type chunk struct {
	Choices []struct {
		Text    string `json:"text"`
		Delta   output `json:"delta"`
		Message output `json:"message"`
		// FinishReason is set on a choice's last chunk.
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	// Error is OpenAI's {"error": {...}} sent in place of a chunk;
	// Object "error" with Message is the flat shape some servers send.
	Error   json.RawMessage `json:"error"`
	Object  string          `json:"object"`
	Message string          `json:"message"`
}

// output is a chat message or delta: text, reasoning or tool calls all
// count as output.
type output struct {
	Content          string            `json:"content"`
	ReasoningContent string            `json:"reasoning_content"`
	Reasoning        string            `json:"reasoning"`
	ToolCalls        []json.RawMessage `json:"tool_calls"`
}

func (o output) empty() bool {
	return o.Content == "" && o.ReasoningContent == "" && o.Reasoning == "" && len(o.ToolCalls) == 0
}

// hasOutput reports whether the chunk carries generated text; role-only
// chat deltas, finish chunks and the usage chunk do not.
func (ch *chunk) hasOutput() bool {
	for _, c := range ch.Choices {
		if c.Text != "" || !c.Delta.empty() || !c.Message.empty() {
			return true
		}
	}
	return false
}

// failure is the error a chunk carries in place of output, or "".
func (ch *chunk) failure() string {
	if len(ch.Error) > 0 && !bytes.Equal(ch.Error, []byte("null")) {
		var e struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(ch.Error, &e) == nil && e.Message != "" {
			return e.Message
		}
		var s string
		if json.Unmarshal(ch.Error, &s) == nil && s != "" {
			return s
		}
		return string(ch.Error)
	}
	if ch.Object == "error" {
		return cmp.Or(ch.Message, "error")
	}
	return ""
}

func (ch *chunk) finished() bool {
	for _, c := range ch.Choices {
		if c.FinishReason != nil && *c.FinishReason != "" {
			return true
		}
	}
	return false
}

func readWhole(r io.Reader, res *Result) error {
	var ch chunk
	if err := json.NewDecoder(r).Decode(&ch); err != nil {
		return fmt.Errorf("bad response body: %v", err)
	}
	if msg := ch.failure(); msg != "" {
		return errors.New(msg)
	}
	if len(ch.Choices) == 0 {
		return errors.New("response without choices")
	}
	if ch.Usage != nil {
		res.PromptTokens, res.OutputTokens, res.Usage = ch.Usage.PromptTokens, ch.Usage.CompletionTokens, true
	} else {
		// No usage: the words of the answer stand in for its tokens.
		c := ch.Choices[0]
		res.OutputTokens = len(strings.Fields(c.Text + c.Message.Content + c.Message.ReasoningContent + c.Message.Reasoning))
	}
	return nil
}

// readStream reads server-sent events up to [DONE], timing the chunks that
// carry output: TTFT from start to the first, ITL between consecutive ones.
func readStream(r io.Reader, start time.Time, res *Result) error {
	events := newEventReader(r)
	var last time.Time
	chunks, finished := 0, false
	for {
		data, err := events.next()
		if err == io.EOF {
			if finished {
				break // the answer is whole; only [DONE] is missing
			}
			return errors.New("stream ended before its last chunk")
		}
		if err != nil {
			return fmt.Errorf("stream broken: %v", err)
		}
		if string(bytes.TrimSpace(data)) == "[DONE]" {
			break
		}
		now := time.Now()
		var ch chunk
		if err := json.Unmarshal(data, &ch); err != nil {
			return fmt.Errorf("bad stream chunk: %v", err)
		}
		if msg := ch.failure(); msg != "" {
			return errors.New(msg)
		}
		if ch.hasOutput() {
			if chunks == 0 {
				res.TTFT = now.Sub(start)
			} else {
				res.ITL = append(res.ITL, now.Sub(last))
			}
			last = now
			chunks++
		}
		finished = finished || ch.finished()
		if ch.Usage != nil {
			res.PromptTokens, res.OutputTokens, res.Usage = ch.Usage.PromptTokens, ch.Usage.CompletionTokens, true
		}
	}
	if !res.Usage {
		res.OutputTokens = chunks
	}
	return nil
}

// statusError describes an HTTP error answer by its status and the message
// of its body: OpenAI's {"error": {"message"}}, the flat {"message"} of
// some servers, FastAPI's {"detail"}, else the body's first line.
func statusError(status int, body []byte) string {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	msg := ""
	if json.Unmarshal(body, &v) == nil {
		ch := chunk{Error: v.Error}
		msg = ch.failure()
		if msg == "" {
			msg = v.Message
		}
		if msg == "" && len(v.Detail) > 0 {
			var s string
			if json.Unmarshal(v.Detail, &s) != nil {
				s = string(v.Detail)
			}
			msg = s
		}
	}
	if msg == "" {
		msg, _, _ = strings.Cut(strings.TrimSpace(string(body)), "\n")
	}
	if r := []rune(msg); len(r) > 200 {
		msg = string(r[:200]) + "..."
	}
	if msg == "" {
		return fmt.Sprintf("HTTP %d", status)
	}
	return fmt.Sprintf("HTTP %d: %s", status, msg)
}
