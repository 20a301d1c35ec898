package loadgen

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
)

// Request is one prompt of a workload and the completion it asks for.
type Request struct {
	// Prefix is text several requests share (the shared-prefix
	// workload's system prompt), empty otherwise. The chat endpoint sends
	// it as a system message; the completions endpoint puts it before
	// Prompt, a blank line between.
	Prefix string
	// Prompt is the request's own text: the user message of a chat.
	Prompt string
	// InputLen is the prompt's nominal length in words (Prefix included):
	// the input tokens counted for a server that reports no usage. The
	// server's tokenizer decides the real count.
	InputLen int
	// OutputLen is the completion's budget, sent as max_tokens (and, with
	// Client.IgnoreEOS, as min_tokens).
	OutputLen int
}

// Lengths bounds the random workloads' lengths as vLLM's random dataset
// does: each request draws its lengths uniformly from the integers in
// [⌊Mean·(1−RangeRatio)⌋, ⌈Mean·(1+RangeRatio)⌉], at least 1.
type Lengths struct {
	Input, Output int
	RangeRatio    float64 // in [0, 1): 0 gives every request the same lengths
}

// Check reports lengths a workload cannot use.
func (l Lengths) Check() error {
	switch {
	case l.Input < 1:
		return fmt.Errorf("input length %d: want at least 1", l.Input)
	case l.Output < 1:
		return fmt.Errorf("output length %d: want at least 1", l.Output)
	case !(l.RangeRatio >= 0 && l.RangeRatio < 1):
		return fmt.Errorf("range ratio %v: want a value in [0, 1)", l.RangeRatio)
	}
	return nil
}

// LengthRange is the inclusive range of lengths drawn around mean. The
// bounds are taken as exact decimals (100·1.1 is 110, not the float
// 110.00000000000001 whose ceiling is 111).
func LengthRange(mean int, ratio float64) (lo, hi int) {
	const slack = 1e-9
	lo = max(1, int(math.Floor(float64(mean)*(1-ratio)+slack)))
	hi = max(lo, int(math.Ceil(float64(mean)*(1+ratio)-slack)))
	return lo, hi
}

func drawLength(rng *rand.Rand, mean int, ratio float64) int {
	lo, hi := LengthRange(mean, ratio)
	return lo + rng.IntN(hi-lo+1)
}

// Random is vLLM's random dataset with words for tokens: n prompts of
// random common English words, with lengths drawn by l. A server that
// tokenizes them counts roughly one token per word; the real count comes
// back in each response's usage.
func Random(rng *rand.Rand, n int, l Lengths) ([]Request, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	reqs := make([]Request, n)
	for i := range reqs {
		in := drawLength(rng, l.Input, l.RangeRatio)
		reqs[i] = Request{Prompt: Words(rng, in), InputLen: in, OutputLen: drawLength(rng, l.Output, l.RangeRatio)}
	}
	return reqs, nil
}

// SharedPrefix is a workload of n users behind prefixes long system
// prompts of prefixLen words each, as vLLM's prefix_repetition and
// SGLang's generated-shared-prefix datasets: request i shares prefix
// i mod prefixes and asks its own question, whose length (l.Input words)
// and budget (l.Output tokens) are drawn as Random's. It measures how much
// a server gains from caching the prefix.
func SharedPrefix(rng *rand.Rand, n, prefixLen, prefixes int, l Lengths) ([]Request, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	if prefixLen < 1 {
		return nil, fmt.Errorf("prefix length %d: want at least 1", prefixLen)
	}
	if prefixes < 1 {
		return nil, fmt.Errorf("%d prefixes: want at least 1", prefixes)
	}
	shared := make([]string, prefixes)
	for g := range shared {
		shared[g] = Words(rng, prefixLen)
	}
	reqs := make([]Request, n)
	for i := range reqs {
		in := drawLength(rng, l.Input, l.RangeRatio)
		reqs[i] = Request{Prefix: shared[i%prefixes], Prompt: Words(rng, in), InputLen: prefixLen + in,
			OutputLen: drawLength(rng, l.Output, l.RangeRatio)}
	}
	return reqs, nil
}

// maxLine bounds one line of a JSONL workload (a prompt of a million words
// is far past any model's context).
const maxLine = 16 << 20

// ParseJSONL reads a workload of one JSON object per line:
//
//	{"prompt": "text", "output_len": 128}
//
// "prompt" is required; the budget is "output_len" or "max_tokens"
// (vLLM's custom dataset and OpenAI's name), else defaultOutput. Other
// fields are ignored and so are blank lines. An error names its line.
func ParseJSONL(r io.Reader, defaultOutput int) ([]Request, error) {
	if defaultOutput < 1 {
		return nil, fmt.Errorf("default output length %d: want at least 1", defaultOutput)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	var reqs []Request
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		req, err := parseLine(b, defaultOutput)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		reqs = append(reqs, req)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("line %d: longer than %d MiB", len(reqs)+1, maxLine>>20)
		}
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, errors.New("no prompts")
	}
	return reqs, nil
}

func parseLine(b []byte, defaultOutput int) (Request, error) {
	var v struct {
		Prompt    *string `json:"prompt"`
		OutputLen *int    `json:"output_len"`
		MaxTokens *int    `json:"max_tokens"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return Request{}, fmt.Errorf("%s must be %s, not %s", te.Field, kind(te.Field), te.Value)
		}
		return Request{}, fmt.Errorf("not a JSON object: %v", err)
	}
	if v.Prompt == nil || *v.Prompt == "" {
		return Request{}, errors.New(`no "prompt"`)
	}
	out := defaultOutput
	for _, f := range []struct {
		name string
		v    *int
	}{{"max_tokens", v.MaxTokens}, {"output_len", v.OutputLen}} {
		if f.v == nil {
			continue
		}
		if *f.v < 1 {
			return Request{}, fmt.Errorf("%s %d: want at least 1", f.name, *f.v)
		}
		out = *f.v
	}
	return Request{Prompt: *v.Prompt, InputLen: len(strings.Fields(*v.Prompt)), OutputLen: out}, nil
}

func kind(field string) string {
	if field == "prompt" {
		return "a string"
	}
	return "an integer"
}

// Cycle returns n requests taken from reqs in order, starting over at
// the end: a file of fewer prompts than the run sends is repeated (vLLM
// oversamples the same way, though at random).
func Cycle(reqs []Request, n int) []Request {
	out := make([]Request, n)
	for i := range out {
		out[i] = reqs[i%len(reqs)]
	}
	return out
}

// Words returns n words drawn uniformly from a list of common English
// words, separated by spaces. The list holds short frequent words, which
// the byte-level BPE vocabularies of English models (GPT-2's, Llama's,
// Qwen's) mostly keep as one token with their leading space, so n words
// come to about n tokens (the built-in model's small vocabulary: 1.15n).
func Words(rng *rand.Rand, n int) string {
	var sb strings.Builder
	sb.Grow(n * 5)
	for i := range n {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(wordList[rng.IntN(len(wordList))])
	}
	return sb.String()
}

// wordList is common short English words.
var wordList = strings.Fields(`
the of and to in is that for it as was with be by on not he this are or
his from at which but have an had they you were their one all we can her
has there been if more when will would who so no she other its may these
them than some him time into only do could new two first any my now such
like our over man me even most made after also did many before must
through years where much your way well down should because each just those
people how too little state good very make world still own see men work long
get here between both life being under never day same another know while
last might us great old year off come since against go came right used take
three house use during without again place around however home small found
thought went say part once general high upon school every does got united
left number course war until always away something fact though water less
public put think almost hand enough far took head yet government system
better set told nothing night end why called find going look asked
later knew point next program city business give group toward young days
let room president side social given present order national rather second
face per among form important often things looked early white case become
large big need four within felt along children saw best church ever least
power development light thing seemed family interest want members mind
country area others done turned although open problem sure free land
`)
