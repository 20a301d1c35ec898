package tokenizer_test

import (
	"fmt"
	"log"
	"strings"

	"github.com/replayssm/replayssm/tokenizer"
)

func Example() {
	tok, err := tokenizer.Load("testdata/qwen")
	if err != nil {
		log.Fatal(err)
	}
	ids := tok.EncodeRaw("<|im_start|>user\nHello, world!<|im_end|>")
	var toks []string
	for _, id := range ids {
		s, _ := tok.Token(id)
		toks = append(toks, fmt.Sprintf("%q", s))
	}
	fmt.Println(strings.Join(toks, " "))
	fmt.Println(tok.Decode(ids, true))

	// Token-by-token output keeps multi-byte characters whole.
	d := tok.NewStreamDecoder()
	var chunks []string
	for _, id := range tok.EncodeRaw("日本") {
		chunks = append(chunks, fmt.Sprintf("%q", d.Add(id)))
	}
	fmt.Println(strings.Join(chunks, " "), fmt.Sprintf("%q", d.Flush()))
	// Output:
	// "<|im_start|>" "user" "Ċ" "Hello" "," "Ġworld" "!" "<|im_end|>"
	// user
	// Hello, world!
	// "日" "" "" "本" ""
}
