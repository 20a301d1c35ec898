package grammar

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
)

// typeSet is a set of JSON types.
type typeSet uint8

const (
	tObject typeSet = 1 << iota
	tArray
	tString
	tNumber
	tInteger
	tBoolean
	tNull
	tAny typeSet = 1<<7 - 1
)

var typeNames = map[string]typeSet{"object": tObject, "array": tArray, "string": tString, "number": tNumber,
	"integer": tInteger, "boolean": tBoolean, "null": tNull}

// Schema is a compiled JSON schema: the subset structured output uses
// (types, object properties with required ones and no others, array items,
// enum and const). An object schema with properties allows no others (as
// OpenAI's strict mode); one with neither properties nor
// additionalProperties allows any.
type Schema struct {
	types      typeSet
	properties []property
	required   []string
	items      *Schema  // nil: any
	enum       [][]byte // allowed values as compact JSON; nil: any
	open       bool     // an object of any properties (no "properties", no "additionalProperties")
	ordered    bool     // properties come in their order (ToolCall)
	choose     *choice  // one property's schema picked by another's value (ToolCall)
}

// choice picks the schema of property prop by the value of property by,
// which comes first (the schema is ordered).
type choice struct {
	by, prop string
	variants map[string]*Schema // by's compact JSON value → prop's schema
}

// ToolCall is the schema of one function call {"name": ..., "arguments":
// ...}, name first, whose arguments follow the parameters of the function
// it names; params[i] is names[i]'s (nil: any object).
func ToolCall(names []string, params []*Schema) *Schema {
	anyObject := &Schema{types: tObject, open: true}
	nameSchema := &Schema{types: tString}
	c := &choice{by: "name", prop: "arguments", variants: map[string]*Schema{}}
	for i, n := range names {
		v, _ := json.Marshal(n)
		nameSchema.enum = append(nameSchema.enum, v)
		p := params[i]
		if p == nil {
			p = anyObject
		}
		c.variants[string(v)] = p
	}
	return &Schema{types: tObject, ordered: true, choose: c, required: []string{"name", "arguments"},
		properties: []property{{name: "name", schema: nameSchema}, {name: "arguments", schema: anyObject}}}
}

type property struct {
	name   string
	schema *Schema
}

// annotations are keywords that do not constrain a value.
var annotations = []string{"title", "description", "examples", "default", "$schema", "$id", "$comment"}

// CompileSchema compiles a JSON schema, or names the first keyword it does
// not support ($ref, anyOf, pattern, ...), so that a request is refused
// rather than answered unconstrained.
func CompileSchema(raw []byte) (*Schema, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("a schema must be a JSON object: %v", err)
	}
	return compile(m, "schema")
}

func compile(m map[string]json.RawMessage, at string) (*Schema, error) {
	s := &Schema{types: tAny}
	_, hasProps := m["properties"]
	_, hasAdditional := m["additionalProperties"]
	s.open = !hasProps && !hasAdditional
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := m[k]
		switch k {
		case "type":
			var one string
			var many []string
			if json.Unmarshal(v, &one) == nil {
				many = []string{one}
			} else if json.Unmarshal(v, &many) != nil {
				return nil, fmt.Errorf("%s.type must be a string or a list of strings", at)
			}
			s.types = 0
			for _, name := range many {
				t, ok := typeNames[name]
				if !ok {
					return nil, fmt.Errorf("%s.type %q is not a JSON type", at, name)
				}
				s.types |= t
			}
		case "properties":
			var props map[string]json.RawMessage
			if err := json.Unmarshal(v, &props); err != nil {
				return nil, fmt.Errorf("%s.properties must be an object", at)
			}
			names := make([]string, 0, len(props))
			for n := range props {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				if strings.ContainsAny(n, "\\\"") || !isPrintable(n) {
					return nil, fmt.Errorf("%s.properties: the name %q needs escaping, which is not supported", at, n)
				}
				var pm map[string]json.RawMessage
				if err := json.Unmarshal(props[n], &pm); err != nil {
					return nil, fmt.Errorf("%s.properties.%s must be a schema object", at, n)
				}
				ps, err := compile(pm, at+".properties."+n)
				if err != nil {
					return nil, err
				}
				s.properties = append(s.properties, property{name: n, schema: ps})
			}
		case "required":
			if err := json.Unmarshal(v, &s.required); err != nil {
				return nil, fmt.Errorf("%s.required must be a list of names", at)
			}
		case "additionalProperties":
			var b bool
			if json.Unmarshal(v, &b) != nil || b {
				return nil, fmt.Errorf("%s.additionalProperties: only false is supported", at)
			}
		case "items":
			var im map[string]json.RawMessage
			if err := json.Unmarshal(v, &im); err != nil {
				return nil, fmt.Errorf("%s.items must be a schema object", at)
			}
			items, err := compile(im, at+".items")
			if err != nil {
				return nil, err
			}
			s.items = items
		case "enum", "const":
			var vals []json.RawMessage
			if k == "const" {
				vals = []json.RawMessage{v}
			} else if err := json.Unmarshal(v, &vals); err != nil || len(vals) == 0 {
				return nil, fmt.Errorf("%s.enum must be a non-empty list", at)
			}
			for _, x := range vals {
				var b bytes.Buffer
				if err := json.Compact(&b, x); err != nil {
					return nil, err
				}
				if c := b.Bytes()[0]; c == '{' || c == '[' {
					return nil, fmt.Errorf("%s.%s: only strings, numbers, booleans and null are supported", at, k)
				}
				s.enum = append(s.enum, b.Bytes())
			}
		default:
			if !slices.Contains(annotations, k) {
				return nil, fmt.Errorf("%s: the keyword %q is not supported", at, k)
			}
		}
	}
	for _, r := range s.required {
		if !slices.ContainsFunc(s.properties, func(p property) bool { return p.name == r }) {
			return nil, fmt.Errorf("%s.required names %q, which is not among the properties", at, r)
		}
	}
	if len(s.properties) > 0 && s.types&tObject == 0 {
		return nil, fmt.Errorf("%s has properties but is not an object", at)
	}
	return s, nil
}

func isPrintable(s string) bool {
	for i := range len(s) {
		if s[i] < 0x20 {
			return false
		}
	}
	return s != ""
}

// allows reports whether a value of the schema may start with byte b.
func (s *Schema) allows(b byte) bool {
	if s.enum != nil {
		for _, e := range s.enum {
			if e[0] == b {
				return true
			}
		}
		return false
	}
	t := s.types
	switch {
	case b == '{':
		return t&tObject != 0
	case b == '[':
		return t&tArray != 0
	case b == '"':
		return t&tString != 0
	case b == '-' || (b >= '0' && b <= '9'):
		return t&(tNumber|tInteger) != 0
	case b == 't' || b == 'f':
		return t&tBoolean != 0
	case b == 'n':
		return t&tNull != 0
	}
	return false
}

// frame is an open container and its schema.
type frame struct {
	s      *Schema
	seen   []bool  // the object's properties given so far
	prop   int     // the property whose value is being read (−1: none)
	chosen *Schema // the schema s.choose picked
}

// SchemaJSON is the JSON automaton steered by a Schema: object keys spell
// unseen properties, an object closes once its required ones are there,
// values have their schema's types, integers have no fraction or
// exponent, and enum values are spelled out exactly.
type SchemaJSON struct {
	j      JSON
	root   *Schema
	frames []frame
	val    *Schema // the primitive value being read (nil: none)
	vbuf   []byte  // its bytes so far
	inKey  bool
	key    []byte
}

// NewSchemaJSON returns the automaton for texts whose top-level value
// follows s.
func NewSchemaJSON(s *Schema) *SchemaJSON {
	// An object starts at once, as with NewJSONObject.
	return &SchemaJSON{root: s, j: JSON{ObjectOnly: s.types == tObject}}
}

func (a *SchemaJSON) clone() automaton {
	c := *a
	c.j = a.j.Clone()
	c.frames = make([]frame, len(a.frames))
	for i, f := range a.frames {
		f.seen = slices.Clone(f.seen)
		c.frames[i] = f
	}
	c.vbuf = slices.Clone(a.vbuf)
	c.key = slices.Clone(a.key)
	return &c
}

// Complete reports whether a whole value has been read.
func (a *SchemaJSON) Complete() bool {
	if a.j.mode == mNumber {
		return false // a top-level number ends only at its terminator
	}
	return a.j.Complete()
}

// Feed advances by one byte and reports whether the text is still a prefix
// of a JSON text the schema accepts.
func (a *SchemaJSON) Feed(b byte) bool {
	j := &a.j
	switch {
	case a.inKey:
		return a.keyByte(b)
	case a.val != nil && j.mode == mNumber && !isNumberByte(b):
		// b ends the number: check it, then b belongs to what follows.
		if !numberEnds(j.num) || !a.endValue() {
			return false
		}
		j.afterValue()
		return a.Feed(b)
	case a.val != nil:
		if j.mode == mNumber && a.val.types&tNumber == 0 && (b == '.' || b == 'e' || b == 'E') {
			return false // an integer
		}
		a.vbuf = append(a.vbuf, b)
		if !a.enumPrefix() || !j.Feed(b) {
			return false
		}
		switch j.mode {
		case mString, mEscape, mUnicode, mLiteral, mNumber:
			return true
		}
		return a.endValue() // the string or literal ended with b
	}
	if isWS(b) {
		return j.Feed(b)
	}
	m := j.mode
	switch {
	case (m == mStart || m == mValue || m == mValueOrEnd) && !(m == mValueOrEnd && b == ']'):
		s := a.valueSchema()
		if s != nil && !s.allows(b) {
			return false
		}
		if !j.Feed(b) {
			return false
		}
		switch b {
		case '{', '[':
			f := frame{s: s, prop: -1}
			if s != nil && b == '{' && !s.open {
				f.seen = make([]bool, len(s.properties))
			}
			a.frames = append(a.frames, f)
			return true
		}
		a.val, a.vbuf = s, append(a.vbuf[:0], b)
		if s == nil {
			a.val = &Schema{types: tAny}
		}
		if !a.enumPrefix() {
			return false
		}
		switch j.mode {
		case mString, mLiteral, mNumber:
			return true
		}
		return a.endValue()
	case (m == mKeyOrEnd || m == mKey) && b == '"':
		a.inKey, a.key = true, a.key[:0]
		return j.Feed(b) && a.keyPossible()
	case (m == mKeyOrEnd || m == mCommaOrEnd) && b == '}':
		f := &a.frames[len(a.frames)-1]
		if f.s != nil {
			for _, r := range f.s.required {
				if i := f.s.index(r); !f.seen[i] {
					return false
				}
			}
		}
		a.frames = a.frames[:len(a.frames)-1]
		return j.Feed(b)
	case m == mValueOrEnd || (m == mCommaOrEnd && b == ']'):
		a.frames = a.frames[:len(a.frames)-1]
		return j.Feed(b)
	case m == mCommaOrEnd && b == ',':
		f := &a.frames[len(a.frames)-1]
		if f.seen != nil && !slices.Contains(f.seen, false) {
			return false // no property left to give
		}
		f.prop = -1
		return j.Feed(b)
	}
	return j.Feed(b)
}

// valueSchema is the schema of the value about to start (nil: any).
func (a *SchemaJSON) valueSchema() *Schema {
	if len(a.frames) == 0 {
		return a.root
	}
	f := a.frames[len(a.frames)-1]
	switch {
	case f.s == nil:
		return nil
	case f.seen != nil && f.prop >= 0:
		p := f.s.properties[f.prop]
		if c := f.s.choose; c != nil && p.name == c.prop && f.chosen != nil {
			return f.chosen
		}
		return p.schema
	case f.seen == nil:
		return f.s.items
	}
	return nil
}

// keyByte reads a byte of an object key: the key must stay a prefix of a
// property not given yet, and end as one.
func (a *SchemaJSON) keyByte(b byte) bool {
	f := &a.frames[len(a.frames)-1]
	if b == '"' {
		a.inKey = false
		if f.s == nil || f.seen == nil {
			return a.j.Feed(b)
		}
		i := f.s.index(string(a.key))
		if i < 0 || f.seen[i] || (f.s.ordered && slices.Contains(f.seen[:i], false)) {
			return false
		}
		f.seen[i], f.prop = true, i
		return a.j.Feed(b)
	}
	if b == '\\' && f.s != nil && f.seen != nil {
		return false // property names need no escapes
	}
	a.key = append(a.key, b)
	return a.j.Feed(b) && a.keyPossible()
}

// keyPossible reports whether the key so far begins an unseen property.
func (a *SchemaJSON) keyPossible() bool {
	f := a.frames[len(a.frames)-1]
	if f.s == nil || f.seen == nil {
		return true
	}
	for i, p := range f.s.properties {
		if !f.seen[i] && strings.HasPrefix(p.name, string(a.key)) {
			return true
		}
		if !f.seen[i] && f.s.ordered {
			return false // only the next property in order
		}
	}
	return false
}

func (s *Schema) index(name string) int {
	return slices.IndexFunc(s.properties, func(p property) bool { return p.name == name })
}

// enumPrefix reports whether the value so far begins one of its enum's.
func (a *SchemaJSON) enumPrefix() bool {
	if a.val.enum == nil {
		return true
	}
	for _, e := range a.val.enum {
		if bytes.HasPrefix(e, a.vbuf) {
			return true
		}
	}
	return false
}

// endValue checks a finished primitive value against its enum, and picks
// the schema it chooses (Schema.choose).
func (a *SchemaJSON) endValue() bool {
	ok := a.val.enum == nil || slices.ContainsFunc(a.val.enum, func(e []byte) bool { return bytes.Equal(e, a.vbuf) })
	a.val = nil
	if n := len(a.frames); ok && n > 0 {
		f := &a.frames[n-1]
		if f.s != nil && f.s.choose != nil && f.seen != nil && f.prop >= 0 && f.s.properties[f.prop].name == f.s.choose.by {
			c := f.s.choose
			f.chosen = c.variants[string(a.vbuf)]
		}
	}
	return ok
}

func isNumberByte(b byte) bool {
	return (b >= '0' && b <= '9') || b == '.' || b == 'e' || b == 'E' || b == '+' || b == '-'
}
