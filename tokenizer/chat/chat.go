// Package chat renders a model's Jinja chat template (tokenizer_config.json
// "chat_template" or chat_template.jinja) into the prompt string the model
// was trained on, as transformers' apply_chat_template(tokenize=False) does.
//
// Templates run on github.com/ardanlabs/jinja, a pure-Go Jinja engine built
// for HF chat templates (trim_blocks/lstrip_blocks as transformers sets
// them, namespace, loop.previtem, Python string methods, tojson with
// Python's separators). Encode the result without the tokenizer's
// post-processor specials (tokenizer.EncodeRaw): the template already
// wrote them.
package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ardanlabs/jinja"
)

// Message is one conversation turn. Optional fields are left out of the
// template's view when empty, so a template's "is defined" checks see what
// they would see in Python.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// ReasoningContent is the assistant's thinking, for templates that
	// render it (Qwen3, Nemotron) instead of parsing <think> out of Content.
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	Name             string     `json:"name,omitempty"`
	ToolCallID       string     `json:"tool_call_id,omitempty"`
}

// ToolCall is a function call made by the assistant.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and its arguments. Arguments is a JSON
// object (what HF templates iterate and print with tojson, in the given key
// order); a JSON string is passed to the template as a string.
type FunctionCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Options are the keyword arguments of apply_chat_template.
type Options struct {
	// AddGenerationPrompt appends the header of an assistant turn.
	AddGenerationPrompt bool
	// EnableThinking, when set, is passed as enable_thinking; nil leaves
	// it undefined so the template's default applies (Qwen3: on,
	// Nemotron-3: on).
	EnableThinking *bool
	// Tools are tool definitions (JSON objects, usually
	// {"type": "function", "function": {...}}), key order kept.
	Tools []json.RawMessage
	// Vars are extra template variables (e.g. "low_effort").
	Vars map[string]any
}

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	source   string
	tmpl     *jinja.Template
	specials map[string]string
}

// Parse compiles template source. specialTokens are the names templates
// may use, such as "bos_token" and "eos_token", mapped to their text.
func Parse(source string, specialTokens map[string]string) (*Template, error) {
	tmpl, err := jinja.Compile(source)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	sp := make(map[string]string, len(specialTokens))
	for k, v := range specialTokens {
		sp[k] = v
	}
	return &Template{source: source, tmpl: tmpl, specials: sp}, nil
}

// specialNames are the tokenizer_config.json fields transformers passes to
// templates (its special_tokens_map).
var specialNames = []string{"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"}

// Load reads the chat template of a model directory: chat_template.jinja if
// present (transformers 5 saves it there), else tokenizer_config.json's
// "chat_template" (a string, or a list of {name, template} from which
// "default" is taken). Special-token strings come from tokenizer_config.json.
func Load(dir string) (*Template, error) {
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	cfg := map[string]json.RawMessage{}
	data, err := os.ReadFile(cfgPath)
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("chat: %s: %w", cfgPath, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("chat: %w", err)
	}
	specials := map[string]string{}
	for _, name := range specialNames {
		if s := tokenString(cfg[name]); s != "" {
			specials[name] = s
		}
	}

	jinjaPath := filepath.Join(dir, "chat_template.jinja")
	src, err := os.ReadFile(jinjaPath)
	var source string
	switch {
	case err == nil:
		source = string(src)
	case errors.Is(err, os.ErrNotExist):
		source, err = configTemplate(cfg["chat_template"])
		if err != nil {
			return nil, fmt.Errorf("chat: %s: %w", cfgPath, err)
		}
		if source == "" {
			return nil, fmt.Errorf("chat: %s has no chat_template and %s does not exist", cfgPath, jinjaPath)
		}
	default:
		return nil, fmt.Errorf("chat: %w", err)
	}
	t, err := Parse(source, specials)
	if err != nil {
		return nil, fmt.Errorf("chat: %s: %w", dir, err)
	}
	return t, nil
}

// configTemplate reads tokenizer_config.json's chat_template field.
func configTemplate(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", fmt.Errorf("chat_template: want a string or a list of {name, template}: %w", err)
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", fmt.Errorf("chat_template: no template named \"default\" among %d", len(named))
}

// tokenString reads a special-token field: a string or {"content": ...}.
func tokenString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var obj struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &obj) == nil {
		return obj.Content
	}
	return ""
}

// Source returns the template text.
func (t *Template) Source() string { return t.source }

// Render returns the prompt for messages. Like transformers, it passes
// messages, tools (None when absent), documents (None),
// add_generation_prompt, the special-token strings, enable_thinking when
// set, and Vars. Template errors (raise_exception included) are returned.
func (t *Template) Render(messages []Message, opts Options) (string, error) {
	data, err := json.Marshal(messages)
	if err != nil {
		return "", fmt.Errorf("chat: messages: %w", err)
	}
	msgs, err := jsonValue(data)
	if err != nil {
		return "", fmt.Errorf("chat: messages: %w", err)
	}
	vars := map[string]jinja.Value{
		"messages":              msgs,
		"tools":                 jinja.None(),
		"documents":             jinja.None(),
		"add_generation_prompt": jinja.NewBool(opts.AddGenerationPrompt),
	}
	if opts.Tools != nil {
		items := make([]jinja.Value, len(opts.Tools))
		for i, raw := range opts.Tools {
			if items[i], err = jsonValue(raw); err != nil {
				return "", fmt.Errorf("chat: tools[%d]: %w", i, err)
			}
		}
		vars["tools"] = jinja.NewList(items)
	}
	for k, v := range t.specials {
		vars[k] = jinja.NewString(v)
	}
	if opts.EnableThinking != nil {
		vars["enable_thinking"] = jinja.NewBool(*opts.EnableThinking)
	}
	for k, v := range opts.Vars {
		vars[k] = jinja.FromGoValue(v)
	}
	out, err := t.tmpl.RenderValues(vars)
	if err != nil {
		return "", fmt.Errorf("chat: render: %w", err)
	}
	return out, nil
}

// jsonValue converts JSON to a template value keeping object key order
// (Python dicts keep insertion order, and tojson output depends on it).
func jsonValue(data []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err == nil {
		return jinja.Undefined(), errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch x := tok.(type) {
	case json.Delim:
		switch x {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				key, _ := kt.(string)
				val, err := decodeValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.AsDict().Set(key, val)
			}
			_, err := dec.Token() // '}'
			return d, err
		case '[':
			var items []jinja.Value
			for dec.More() {
				val, err := decodeValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, val)
			}
			_, err := dec.Token() // ']'
			return jinja.NewList(items), err
		}
		return jinja.Undefined(), fmt.Errorf("unexpected %v", x)
	default:
		// string, bool, nil, json.Number
		return jinja.FromGoValue(tok), nil
	}
}
