package safetensors_test

import (
	"bytes"
	"fmt"
	"log"

	"github.com/replayssm/replayssm/model/safetensors"
)

func Example() {
	// Write a BF16 tensor holding [1.5, -5] (0x3FC0, 0xC0A0, little-endian).
	var buf bytes.Buffer
	err := safetensors.Write(&buf, []safetensors.Tensor{{
		Name: "backbone.norm_f.weight", DType: safetensors.BF16, Shape: []int{2},
		Data: []byte{0xc0, 0x3f, 0xa0, 0xc0},
	}}, map[string]string{"format": "pt"})
	if err != nil {
		log.Fatal(err)
	}

	// Read it back (safetensors.Open maps a file the same way).
	f, err := safetensors.FromBytes("model.safetensors", buf.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	w, err := f.Float32("backbone.norm_f.weight", 2)
	fmt.Println(w, err)

	// A wrong expected shape names the file, the tensor and both shapes.
	_, err = f.Float32("backbone.norm_f.weight", 3)
	fmt.Println(err)
	// Output:
	// [1.5 -5] <nil>
	// model.safetensors: tensor "backbone.norm_f.weight": shape [2], want [3]
}
