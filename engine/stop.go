package engine

import "strings"

// StopText watches streamed text for stop strings. It holds back any tail
// that could be the beginning of one, so that text is never printed and then
// retracted.
type StopText struct {
	stops   []string
	pending string
}

// NewStopText watches for stops (empty strings are ignored).
func NewStopText(stops []string) *StopText {
	s := &StopText{}
	for _, x := range stops {
		if x != "" {
			s.stops = append(s.stops, x)
		}
	}
	return s
}

// Add takes the next piece of text and returns what may be emitted now. When
// a stop string completes, stopped is true and emit ends just before it.
func (s *StopText) Add(text string) (emit string, stopped bool) {
	s.pending += text
	cut := -1
	for _, x := range s.stops {
		if i := strings.Index(s.pending, x); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		emit, s.pending = s.pending[:cut], ""
		return emit, true
	}
	hold := 0
	for _, x := range s.stops {
		for n := min(len(x)-1, len(s.pending)); n > hold; n-- {
			if strings.HasSuffix(s.pending, x[:n]) {
				hold = n
				break
			}
		}
	}
	emit = s.pending[:len(s.pending)-hold]
	s.pending = s.pending[len(s.pending)-hold:]
	return emit, false
}

// Flush returns the text held back at the end of the stream.
func (s *StopText) Flush() string {
	p := s.pending
	s.pending = ""
	return p
}
