package tokenizer

// Decode turns ids back into text as HF's tokenizer.decode does: each id's
// bytes are concatenated (or, for a tokenizer without a decoder, its tokens
// joined by spaces) and invalid UTF-8 is replaced by U+FFFD per maximal
// ill-formed subsequence. Unknown ids are skipped; skipSpecial also skips
// special added tokens. (transformers' clean_up_tokenization_spaces is not
// applied: the Qwen and Nemotron configs turn it off.)
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	buf := make([]byte, 0, 4*len(ids))
	first := true
	for _, id := range ids {
		info, ok := t.visible(id, skipSpecial)
		if !ok {
			continue
		}
		if !t.decodeByteLevel && !first {
			buf = append(buf, ' ')
		}
		first = false
		buf = append(buf, info.raw...)
	}
	out, _ := appendLossy(make([]byte, 0, len(buf)), buf, true)
	return string(out)
}

// visible returns the decoding info of id unless it is unknown or a
// special token being skipped.
func (t *Tokenizer) visible(id int, skipSpecial bool) (*idInfo, bool) {
	if id < 0 || id >= len(t.ids) || !t.ids[id].present {
		return nil, false
	}
	info := &t.ids[id]
	if skipSpecial && info.special {
		return nil, false
	}
	return info, true
}

// StreamDecoder turns a stream of ids into text, emitting only complete
// UTF-8: a character split across tokens (emoji, CJK in a small vocab) is
// held back until its last byte arrives. The concatenation of everything
// Add and Flush return equals Decode of all the ids. A StreamDecoder is
// not safe for concurrent use; make one per sequence.
type StreamDecoder struct {
	// SkipSpecial drops special tokens, as Decode's skipSpecial does.
	SkipSpecial bool

	t       *Tokenizer
	pending []byte // bytes of a character not yet complete
	started bool   // a token was emitted (space-joined decoding only)
}

// NewStreamDecoder returns a decoder for one generated sequence.
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder {
	return &StreamDecoder{t: t}
}

// Add feeds one id and returns the text it completes (often "", or
// several characters when it finishes a held-back one).
func (d *StreamDecoder) Add(id int) string {
	info, ok := d.t.visible(id, d.SkipSpecial)
	if !ok {
		return ""
	}
	if !d.t.decodeByteLevel && d.started {
		d.pending = append(d.pending, ' ')
	}
	d.started = true
	d.pending = append(d.pending, info.raw...)
	out, used := appendLossy(nil, d.pending, false)
	d.pending = append(d.pending[:0], d.pending[used:]...)
	return string(out)
}

// Flush returns what is still held back, with U+FFFD for an unfinished
// character, and resets the decoder to start a new sequence.
func (d *StreamDecoder) Flush() string {
	out, _ := appendLossy(nil, d.pending, true)
	d.pending = d.pending[:0]
	d.started = false
	return string(out)
}
