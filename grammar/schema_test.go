package grammar

import (
	"encoding/json"
	"strings"
	"testing"
)

const personSchema = `{
	"type": "object",
	"title": "person",
	"properties": {
		"name": {"type": "string"},
		"age": {"type": "integer"},
		"height": {"type": ["number", "null"]},
		"tags": {"type": "array", "items": {"type": "string", "enum": ["a", "bc"]}},
		"kind": {"const": "human"},
		"pet": {"type": "object", "properties": {"legs": {"type": "integer"}}, "required": ["legs"], "additionalProperties": false}
	},
	"required": ["name", "age"],
	"additionalProperties": false
}`

func schemaFeed(t *testing.T, s *Schema, text string) (bool, bool) {
	t.Helper()
	a := NewSchemaJSON(s)
	for i := range len(text) {
		if !a.Feed(text[i]) {
			return false, false
		}
	}
	return true, a.Complete()
}

func TestSchemaJSON(t *testing.T) {
	s, err := CompileSchema([]byte(personSchema))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		in               string
		prefix, complete bool
	}{
		{`{"name":"Moses","age":120}`, true, true},
		{`{"age": 120, "name": "Moses", "height": null, "tags": ["a", "bc"], "kind": "human", "pet": {"legs": 4}}`, true, true},
		{`{"name":"Moses"`, true, false},
		{`{"name":"Moses"}`, false, false},           // age is required
		{`{"name":"Moses","age":1.5}`, false, false}, // an integer
		{`{"name":"Moses","age":1e3}`, false, false},
		{`{"name":"Moses","age":"1"}`, false, false},
		{`{"nam":1}`, false, false},              // not a property
		{`{"name":"a","name":"b"`, false, false}, // given twice
		{`{"name":"a","age":1,"tags":["b"]}`, false, false},
		{`{"name":"a","age":1,"tags":["bc","a"]}`, true, true},
		{`{"name":"a","age":1,"kind":"humans"}`, false, false},
		{`{"name":"a","age":1,"kind":[`, false, false}, // an enum of strings holds no list
		{`{"name":"a","age":1,"kind":{`, false, false},
		{`{"name":"a","age":1,"pet":{}}`, false, false},
		{`{"name":"a","age":1,"height":-0.5e2}`, true, true},
		{`["name"]`, false, false},
		{` {"name":"a","age":1}`, false, false},
	} {
		prefix, complete := schemaFeed(t, s, tt.in)
		if prefix != tt.prefix || complete != tt.complete {
			t.Errorf("%s: prefix %v complete %v, want %v %v", tt.in, prefix, complete, tt.prefix, tt.complete)
		}
	}
	// An object schema without properties takes any object.
	open, err := CompileSchema([]byte(`{"type":"object"}`))
	if err != nil {
		t.Fatal(err)
	}
	if ok, complete := schemaFeed(t, open, `{"x":[1,{"y":null}],"z":"w"}`); !ok || !complete {
		t.Errorf("an open object refused {\"x\":...}: %v %v", ok, complete)
	}
	// Every prefix of an accepted text is accepted.
	full := `{"age": 120, "name": "Moses", "height": null, "tags": ["a", "bc"], "kind": "human", "pet": {"legs": 4}}`
	for i := range len(full) {
		if ok, _ := schemaFeed(t, s, full[:i]); !ok {
			t.Fatalf("prefix %q refused", full[:i])
		}
	}
}

func TestCompileSchemaErrors(t *testing.T) {
	for _, tt := range []struct{ schema, want string }{
		{`[]`, "must be a JSON object"},
		{`{"type":"thing"}`, `"thing" is not a JSON type`},
		{`{"anyOf":[]}`, `keyword "anyOf"`},
		{`{"$ref":"#/x"}`, `keyword "$ref"`},
		{`{"type":"object","properties":{"a":{"pattern":"x"}}}`, `schema.properties.a: the keyword "pattern"`},
		{`{"type":"object","additionalProperties":true}`, "only false"},
		{`{"type":"object","properties":{"a":{}},"required":["b"]}`, `"b"`},
		{`{"enum":[{"a":1}]}`, "only strings"},
		{`{"type":"string","properties":{"a":{}}}`, "not an object"},
	} {
		if _, err := CompileSchema([]byte(tt.schema)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one with %q", tt.schema, err, tt.want)
		}
	}
}

// FuzzSchemaJSON: any text the steered automaton takes whole and calls
// complete is valid JSON that the schema accepts (checked by a plain
// validator over the decoded value).
func FuzzSchemaJSON(f *testing.F) {
	s, err := CompileSchema([]byte(personSchema))
	if err != nil {
		f.Fatal(err)
	}
	for _, x := range []string{`{"name":"M","age":1}`, `{"age":2,"name":"","pet":{"legs":0}}`, `{"name":"a","age":1,"tags":[]}`} {
		f.Add(x)
	}
	f.Fuzz(func(t *testing.T, text string) {
		ok, complete := schemaFeed(t, s, text)
		if !ok || !complete {
			return
		}
		var v any
		if err := json.Unmarshal([]byte(text), &v); err != nil {
			t.Fatalf("%q: complete but not JSON: %v", text, err)
		}
		if err := validate(v, []byte(personSchema)); err != "" {
			t.Fatalf("%q: complete but the schema says %s", text, err)
		}
	})
}

// validate checks v against the person schema by hand.
func validate(v any, _ []byte) string {
	o, ok := v.(map[string]any)
	if !ok {
		return "not an object"
	}
	for k, x := range o {
		switch k {
		case "name":
			if _, ok := x.(string); !ok {
				return "name not a string"
			}
		case "age":
			if f, ok := x.(float64); !ok || f != float64(int64(f)) {
				return "age not an integer"
			}
		case "height":
			if _, ok := x.(float64); !ok && x != nil {
				return "height not a number or null"
			}
		case "tags":
			l, ok := x.([]any)
			if !ok {
				return "tags not a list"
			}
			for _, e := range l {
				if e != "a" && e != "bc" {
					return "tag outside the enum"
				}
			}
		case "kind":
			if x != "human" {
				return "kind not the const"
			}
		case "pet":
			p, ok := x.(map[string]any)
			if !ok || len(p) != 1 {
				return "pet not an object of legs"
			}
			if f, ok := p["legs"].(float64); !ok || f != float64(int64(f)) {
				return "legs not an integer"
			}
		default:
			return "unknown property " + k
		}
	}
	if _, ok := o["name"]; !ok {
		return "no name"
	}
	if _, ok := o["age"]; !ok {
		return "no age"
	}
	return ""
}

// TestToolCall: a call names its function first, and its arguments follow
// that function's parameters.
func TestToolCall(t *testing.T) {
	verse, err := CompileSchema([]byte(`{"type":"object","properties":{"book":{"enum":["Genesis"]},"chapter":{"type":"integer"}},"required":["book","chapter"],"additionalProperties":false}`))
	if err != nil {
		t.Fatal(err)
	}
	s := ToolCall([]string{"verse", "pray"}, []*Schema{verse, nil})
	for _, tt := range []struct {
		in               string
		prefix, complete bool
	}{
		{`{"name":"verse","arguments":{"book":"Genesis","chapter":1}}`, true, true},
		{`{"name":"pray","arguments":{"x":[1,"y"]}}`, true, true},
		{`{"arguments":{}`, false, false},                 // the name comes first
		{`{"name":"verse","arguments":{}}`, false, false}, // verse's required parameters
		{`{"name":"verse","arguments":{"x":1}}`, false, false},
		{`{"name":"sing"`, false, false},
		{`{"name":"verse"}`, false, false},
	} {
		prefix, complete := schemaFeed(t, s, tt.in)
		if prefix != tt.prefix || complete != tt.complete {
			t.Errorf("%s: prefix %v complete %v, want %v %v", tt.in, prefix, complete, tt.prefix, tt.complete)
		}
	}
}
