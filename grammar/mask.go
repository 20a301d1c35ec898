package grammar

import (
	"math"
	"sort"
)

// Vocab is a tokenizer's vocabulary as a trie of token bytes, built once
// and shared by every Constraint.
type Vocab struct {
	root   node
	ends   []int    // end-of-sequence tokens
	tokens [][]byte // each token's bytes (nil: none)
}

type node struct {
	bytes    []byte  // the children's bytes, ascending
	children []*node // parallel to bytes
	ids      []int   // tokens spelled by the path to here
}

func (n *node) child(b byte, create bool) *node {
	i := sort.Search(len(n.bytes), func(i int) bool { return n.bytes[i] >= b })
	if i < len(n.bytes) && n.bytes[i] == b {
		return n.children[i]
	}
	if !create {
		return nil
	}
	c := &node{}
	n.bytes = append(n.bytes, 0)
	copy(n.bytes[i+1:], n.bytes[i:])
	n.bytes[i] = b
	n.children = append(n.children, nil)
	copy(n.children[i+1:], n.children[i:])
	n.children[i] = c
	return c
}

// NewVocab builds the trie of size tokens; bytes(id) gives a token's bytes
// (false: it has none a grammar can read, as special tokens), ends the
// end-of-sequence tokens allowed once the text is complete.
func NewVocab(size int, bytes func(id int) ([]byte, bool), ends []int) *Vocab {
	v := &Vocab{ends: append([]int(nil), ends...), tokens: make([][]byte, size)}
	for id := range size {
		b, ok := bytes(id)
		if !ok || len(b) == 0 {
			continue
		}
		v.tokens[id] = append([]byte(nil), b...)
		n := &v.root
		for _, c := range b {
			n = n.child(c, true)
		}
		n.ids = append(n.ids, id)
	}
	return v
}

// Constraint keeps one sequence's output a prefix of a JSON object (or of
// a JSON text a Schema accepts): Mask
// sets the logits of every token that would break it to −∞ (and, once the
// object is complete, of every token but the end tokens); Accept advances
// by the token drawn. It is not safe for concurrent use.
type Constraint struct {
	v       *Vocab
	state   automaton
	allowed []bool
}

// automaton is a byte-level grammar: JSON or SchemaJSON.
type automaton interface {
	Feed(b byte) bool
	Complete() bool
	clone() automaton
}

func (j *JSON) clone() automaton {
	c := j.Clone()
	return &c
}

// NewJSONObject returns a constraint to a JSON object over v.
func NewJSONObject(v *Vocab) *Constraint {
	return &Constraint{v: v, state: &JSON{ObjectOnly: true}, allowed: make([]bool, len(v.tokens))}
}

// NewJSONSchema returns a constraint to JSON texts that s accepts, over v.
func NewJSONSchema(v *Vocab, s *Schema) *Constraint {
	return &Constraint{v: v, state: NewSchemaJSON(s), allowed: make([]bool, len(v.tokens))}
}

// Mask sets the logits of the tokens the grammar forbids next to −∞.
func (c *Constraint) Mask(logits []float32) {
	clear(c.allowed)
	if c.state.Complete() {
		for _, id := range c.v.ends {
			c.allowed[id] = true
		}
	} else {
		c.walk(&c.v.root, c.state)
	}
	inf := float32(math.Inf(-1))
	for id := range logits {
		if id >= len(c.allowed) || !c.allowed[id] {
			logits[id] = inf
		}
	}
}

// walk marks the tokens below n that keep st a valid prefix.
func (c *Constraint) walk(n *node, st automaton) {
	for i, b := range n.bytes {
		next := st.clone()
		if !next.Feed(b) {
			continue
		}
		child := n.children[i]
		for _, id := range child.ids {
			c.allowed[id] = true
		}
		c.walk(child, next)
	}
}

// Accept advances by token id, the one drawn after Mask. A token the
// grammar does not take (an end token, or one Mask forbade) leaves the
// state as it was.
func (c *Constraint) Accept(id int) {
	if id < 0 || id >= len(c.v.tokens) || c.v.tokens[id] == nil {
		return
	}
	next := c.state.clone()
	for _, b := range c.v.tokens[id] {
		if !next.Feed(b) {
			return
		}
	}
	c.state = next
}

// Complete reports whether the output is a whole JSON object.
func (c *Constraint) Complete() bool { return c.state.Complete() }
