package server

import (
	"fmt"
	"testing"
)

// TestParseToolCalls reads each model family's tool-call format out of an
// answer: the calls (arguments as compact JSON, XML values typed by the
// function's parameters) and the text around them; a block that does not
// parse stays text.
func TestParseToolCalls(t *testing.T) {
	types := func(fn, p string) string {
		return map[string]string{"city": "string", "days": "integer", "opts": "object", "zip": "string"}[p]
	}
	for _, tt := range []struct {
		name  string
		f     toolFormat
		in    string
		text  string
		calls string
	}{
		{"hermes", formatHermes,
			"Let me look.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Ur\", \"days\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"time\", \"arguments\": {}}\n</tool_call>",
			"Let me look.", `[weather {"city":"Ur","days":3}] [time {}]`},
		{"hermes broken", formatHermes, "<tool_call>{\"name\": </tool_call> ok", "<tool_call>{\"name\": </tool_call> ok", ``},
		{"xml", formatXML,
			"<tool_call>\n<function=weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=zip>\n10001\n</parameter>\n<parameter=opts>\n{\"unit\": \"C\"}\n</parameter>\n</function>\n</tool_call>",
			"", `[weather {"city":"New York","days":3,"zip":"10001","opts":{"unit":"C"}}]`},
		{"xml broken", formatXML, "<tool_call><function=weather><parameter=city>Ur</function></tool_call>", "<tool_call><function=weather><parameter=city>Ur</function></tool_call>", ``},
		{"nemotron list", formatList, "<TOOLCALL>[{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]</TOOLCALL>", "", `[a {"x":1}] [b {}]`},
		{"plain text", formatHermes, "In the beginning.", "In the beginning.", ``},
	} {
		text, calls := parseToolCalls(tt.in, tt.f, types)
		got := ""
		for i, c := range calls {
			if i > 0 {
				got += " "
			}
			got += fmt.Sprintf("[%s %s]", c.Function.Name, c.Function.Arguments)
		}
		if text != tt.text || got != tt.calls {
			t.Errorf("%s: text %q calls %s; want %q and %s", tt.name, text, got, tt.text, tt.calls)
		}
	}
	for src, want := range map[string]toolFormat{
		"{{ '<tool_call>' }}{{ tool_call | tojson }}":             formatHermes,
		"<tool_call>\n<function={{ name }}>":                      formatXML,
		"<TOOLCALL>{{ calls }}</TOOLCALL>":                        formatList,
		"{%- for message in messages %}{{ message }}{% endfor %}": formatNone,
	} {
		if got := detectToolFormat(src); got != want {
			t.Errorf("detectToolFormat(%q) = %v, want %v", src, got, want)
		}
	}
}
