package server

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/replayssm/replayssm/grammar"
)

// parseTools checks a chat request's tools and tool_choice. It returns the
// definitions to render into the prompt and, when a call is required, the
// schema each choice is decoded under: {"name": one of the functions,
// "arguments": that function's parameters}. tool_choice "auto" (the default with
// tools) needs the model's own tool-call format (format): the answer is
// parsed for calls written in it.
func parseTools(tools []json.RawMessage, choice json.RawMessage, format toolFormat) ([]json.RawMessage, *grammar.Schema, *apiError) {
	var defs []tool
	for i, raw := range tools {
		var t tool
		if err := json.Unmarshal(raw, &t); err != nil || t.Type != "function" || t.Function.Name == "" {
			return nil, nil, invalid(fmt.Sprintf("tools[%d]", i), `a tool must be {"type": "function", "function": {"name": ..., "parameters": ...}}`)
		}
		defs = append(defs, t)
	}
	var mode string
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	switch {
	case len(choice) == 0 || isNull(choice):
		if len(defs) > 0 {
			mode = "auto"
		}
	case json.Unmarshal(choice, &mode) == nil:
	case json.Unmarshal(choice, &named) == nil && named.Type == "function" && named.Function.Name != "":
		mode = "named"
	default:
		return nil, nil, invalid("tool_choice", `tool_choice must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}`)
	}
	switch mode {
	case "", "none":
		return tools, nil, nil
	case "auto":
		if format == formatNone {
			return nil, nil, newError(400, "invalid_request_error", "tool_choice", "unsupported_parameter",
				`tool_choice "auto": this model's chat template writes no tool calls; use "required", a named function, or "none"`)
		}
		return tools, nil, nil
	case "required", "named":
	default:
		return nil, nil, invalid("tool_choice", "unknown tool_choice %q", mode)
	}
	if len(defs) == 0 {
		return nil, nil, invalid("tools", "tool_choice %s needs tools", mode)
	}
	if mode == "named" {
		i := slices.IndexFunc(defs, func(t tool) bool { return t.Function.Name == named.Function.Name })
		if i < 0 {
			return nil, nil, invalid("tool_choice", "tool_choice names %q, which is not among the tools", named.Function.Name)
		}
		defs = defs[i : i+1]
	}
	names := make([]string, len(defs))
	params := make([]*grammar.Schema, len(defs))
	for i, t := range defs {
		names[i] = t.Function.Name
		if p := t.Function.Parameters; len(p) > 0 && !isNull(p) {
			var err error
			if params[i], err = grammar.CompileSchema(p); err != nil {
				return nil, nil, invalid("tools", "the parameters of %s: %v", t.Function.Name, err)
			}
		}
	}
	schema := grammar.ToolCall(names, params)
	return tools, schema, nil
}

// toolCalls reads a choice decoded under the tool schema back into
// OpenAI's tool_calls; false when it is not a whole call (its budget ran
// out).
func toolCalls(text string) ([]toolCallJSON, bool) {
	var call struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(text), &call); err != nil || call.Name == "" {
		return nil, false
	}
	var args bytes.Buffer
	if err := json.Compact(&args, call.Arguments); err != nil {
		return nil, false
	}
	return []toolCallJSON{newToolCall(call.Name, args.String())}, true
}

func newToolCall(name, args string) toolCallJSON {
	c := toolCallJSON{ID: "call_" + rand.Text(), Type: "function"}
	c.Function.Name, c.Function.Arguments = name, args
	return c
}

// paramTypes maps each function's parameters to their JSON types, which
// the XML tool-call format needs to read its bare values.
func paramTypes(tools []json.RawMessage) func(fn, param string) string {
	types := map[string]map[string]string{}
	for _, raw := range tools {
		var t struct {
			Function struct {
				Name       string `json:"name"`
				Parameters struct {
					Properties map[string]struct {
						Type any `json:"type"`
					} `json:"properties"`
				} `json:"parameters"`
			} `json:"function"`
		}
		if json.Unmarshal(raw, &t) != nil {
			continue
		}
		m := map[string]string{}
		for k, p := range t.Function.Parameters.Properties {
			if s, ok := p.Type.(string); ok {
				m[k] = s
			}
		}
		types[t.Function.Name] = m
	}
	return func(fn, param string) string { return types[fn][param] }
}

// isToolNone reports whether tool_choice is "none".
func isToolNone(choice json.RawMessage) bool {
	var s string
	return json.Unmarshal(choice, &s) == nil && s == "none"
}
