package server

import (
	"bytes"
	"encoding/json"
	"strings"
)

// toolFormat is how a model writes tool calls in its text, as its chat
// template teaches it.
type toolFormat uint8

const (
	formatNone   toolFormat = iota // the template renders no tool calls
	formatHermes                   // <tool_call>{"name": ..., "arguments": {...}}</tool_call> (Qwen3, Qwen3-Next)
	formatXML                      // <tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function></tool_call> (Qwen3-Coder, Qwen3.5)
	formatList                     // <TOOLCALL>[{"name": ..., "arguments": {...}}, ...]</TOOLCALL> (Nemotron)
)

// detectToolFormat reads the tool-call format from a chat template's
// source.
func detectToolFormat(source string) toolFormat {
	switch {
	case strings.Contains(source, "<TOOLCALL>"):
		return formatList
	case strings.Contains(source, "<function=") && strings.Contains(source, "<tool_call>"):
		return formatXML
	case strings.Contains(source, "<tool_call>"):
		return formatHermes
	}
	return formatNone
}

// parseToolCalls splits a model's answer into its text and the tool calls
// written in format f; params gives a function's parameter types (for the
// XML format, whose values are bare text). A block that does not parse
// stays in the text.
func parseToolCalls(text string, f toolFormat, params func(fn, param string) string) (string, []toolCallJSON) {
	open, close := "<tool_call>", "</tool_call>"
	if f == formatList {
		open, close = "<TOOLCALL>", "</TOOLCALL>"
	}
	var rest strings.Builder
	var calls []toolCallJSON
	for {
		i := strings.Index(text, open)
		if i < 0 {
			break
		}
		j := strings.Index(text[i:], close)
		if j < 0 {
			break
		}
		block := strings.TrimSpace(text[i+len(open) : i+j])
		var got []toolCallJSON
		switch f {
		case formatHermes:
			got = jsonCalls("[" + block + "]")
		case formatList:
			got = jsonCalls(block)
		case formatXML:
			got = xmlCall(block, params)
		}
		if got == nil {
			rest.WriteString(text[:i+j+len(close)])
		} else {
			rest.WriteString(text[:i])
			calls = append(calls, got...)
		}
		text = text[i+j+len(close):]
	}
	rest.WriteString(text)
	return strings.TrimSpace(rest.String()), calls
}

// jsonCalls reads a JSON list of {"name", "arguments"} objects.
func jsonCalls(list string) []toolCallJSON {
	var raw []struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if json.Unmarshal([]byte(list), &raw) != nil || len(raw) == 0 {
		return nil
	}
	var calls []toolCallJSON
	for _, r := range raw {
		var args bytes.Buffer
		if r.Name == "" || json.Compact(&args, r.Arguments) != nil {
			return nil
		}
		calls = append(calls, newToolCall(r.Name, args.String()))
	}
	return calls
}

// xmlCall reads <function=NAME><parameter=KEY>VALUE</parameter>...</function>.
func xmlCall(block string, params func(fn, param string) string) []toolCallJSON {
	name, body, ok := strings.Cut(strings.TrimPrefix(block, "<function="), ">")
	if !strings.HasPrefix(block, "<function=") || !ok || name == "" {
		return nil
	}
	body, ok = strings.CutSuffix(strings.TrimSpace(body), "</function>")
	if !ok {
		return nil
	}
	args := map[string]json.RawMessage{}
	var order []string
	for {
		body = strings.TrimSpace(body)
		if body == "" {
			break
		}
		key, rest, ok := strings.Cut(strings.TrimPrefix(body, "<parameter="), ">")
		if !strings.HasPrefix(body, "<parameter=") || !ok {
			return nil
		}
		value, after, ok := strings.Cut(rest, "</parameter>")
		if !ok {
			return nil
		}
		value = strings.TrimPrefix(strings.TrimSuffix(value, "\n"), "\n")
		v := json.RawMessage(value)
		if t := params(name, key); t == "string" || t == "" || !json.Valid(v) {
			v, _ = json.Marshal(value)
		}
		if _, dup := args[key]; !dup {
			order = append(order, key)
		}
		args[key] = v
		body = after
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range order {
		if i > 0 {
			b.WriteByte(',')
		}
		kj, _ := json.Marshal(k)
		b.Write(kj)
		b.WriteByte(':')
		var c bytes.Buffer
		_ = json.Compact(&c, args[k])
		b.Write(c.Bytes())
	}
	b.WriteByte('}')
	return []toolCallJSON{newToolCall(name, b.String())}
}
