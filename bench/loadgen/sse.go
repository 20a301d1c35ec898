package loadgen

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
)

// maxEvent bounds one server-sent event's line.
const maxEvent = 8 << 20

// eventReader reads the data of server-sent events (the WHATWG
// event-stream format): an event's "data:" lines joined by newlines, the
// event ended by a blank line. Comments, other fields and events without
// data are skipped.
type eventReader struct{ r *bufio.Reader }

func newEventReader(r io.Reader) *eventReader { return &eventReader{bufio.NewReaderSize(r, 64<<10)} }

// next returns the next event's data, or io.EOF at the stream's clean end.
// An event cut off by the end is returned whole if it has data: a server
// that omits the last blank line still ends its stream.
func (e *eventReader) next() ([]byte, error) {
	var data []byte
	has := false
	for {
		line, err := e.line()
		if err == io.EOF && has && len(line) == 0 {
			return data, nil
		}
		if err != nil && (err != io.EOF || len(line) == 0) {
			return nil, err
		}
		if len(line) == 0 {
			if has {
				return data, nil
			}
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			continue // a comment (empty field), event:, id:, retry:
		}
		if has {
			data = append(data, '\n')
		}
		data = append(data, bytes.TrimPrefix(value, []byte(" "))...)
		has = true
	}
}

// line reads one line without its end (\n or \r\n). A last line without
// an end comes with io.EOF.
func (e *eventReader) line() ([]byte, error) {
	var line []byte
	for {
		part, err := e.r.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > maxEvent {
			return nil, fmt.Errorf("an event line longer than %d MiB", maxEvent>>20)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if err == io.EOF && len(line) > 0 {
			return line, io.EOF
		}
		return line, err
	}
}
