package loadgen

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// TestEventReader reads event streams written the ways servers write
// them.
func TestEventReader(t *testing.T) {
	tests := []struct {
		name   string
		stream string
		want   []string
		err    string // the error after the events; "" for a clean end
	}{
		{"openai", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []string{`{"a":1}`, "[DONE]"}, ""},
		{"crlf", "data: x\r\n\r\ndata: y\r\n\r\n", []string{"x", "y"}, ""},
		{"no space after the colon", "data:x\n\n", []string{"x"}, ""},
		{"multi-line data", "data: a\ndata: b\n\n", []string{"a\nb"}, ""},
		{"comments and other fields", ": ping\n\nevent: chunk\nid: 7\nretry: 10\ndata: x\n\n", []string{"x"}, ""},
		{"no blank line at the end", "data: x\n\ndata: [DONE]", []string{"x", "[DONE]"}, ""},
		{"no newline at all at the end", "data: [DONE]\n", []string{"[DONE]"}, ""},
		{"empty", "", nil, ""},
		{"blank lines only", "\n\n\n", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEventReader(strings.NewReader(tt.stream))
			var got []string
			for {
				data, err := e.next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("after %q: %v", got, err)
				}
				got = append(got, string(data))
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("events %q, want %q", got, tt.want)
			}
		})
	}
	// A stream cut by the transport ends with the transport's error.
	e := newEventReader(io.MultiReader(strings.NewReader("data: x\n\ndata: {\"tr"), errReader{io.ErrUnexpectedEOF}))
	if data, err := e.next(); string(data) != "x" || err != nil {
		t.Fatalf("first event %q, %v", data, err)
	}
	if _, err := e.next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut stream: %v, want unexpected EOF", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// BenchmarkEventReader reads a streamed answer of 256 chunks: the client's
// own cost per chunk, which must stay far below an inter-token latency.
func BenchmarkEventReader(b *testing.B) {
	var sb strings.Builder
	for range 256 {
		sb.WriteString(`data: {"id":"cmpl-1","object":"text_completion","created":0,"model":"m","choices":[{"index":0,"text":" word","logprobs":null,"finish_reason":null}]}` + "\n\n")
	}
	sb.WriteString("data: [DONE]\n\n")
	stream := sb.String()
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		var res Result
		if err := readStream(strings.NewReader(stream), time.Now(), &res); err != nil || res.OutputTokens != 256 {
			b.Fatalf("%d chunks counted, %v", res.OutputTokens, err)
		}
	}
}

// FuzzReadStream: any bytes a server may send are read without a panic,
// and a stream that is accepted has a consistent count of its chunks.
func FuzzReadStream(f *testing.F) {
	for _, s := range []string{
		"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\n",
		"data: {\"error\":{\"message\":\"x\"}}\n\n",
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\r\n\r\ndata: [DONE]",
		": ping\n\ndata:\ndata: [DONE]\n\n", "data: {", "\n\n\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var res Result
		if err := readStream(bytes.NewReader(in), time.Now(), &res); err != nil {
			return
		}
		if !res.Usage && res.OutputTokens != len(res.ITL)+min(res.OutputTokens, 1) {
			t.Fatalf("%d output chunks counted, %d gaps", res.OutputTokens, len(res.ITL))
		}
	})
}
