package hfconfig_test

import (
	"fmt"
	"log"

	"github.com/replayssm/replayssm/model/hfconfig"
)

func Example() {
	// A Qwen3.5 VLM wrapper: the language model's fields live in text_config.
	c, err := hfconfig.Parse([]byte(`{
	  "model_type": "qwen3_5",
	  "tie_word_embeddings": true,
	  "text_config": {
	    "hidden_size": 2560, "vocab_size": 248320, "num_hidden_layers": 8,
	    "full_attention_interval": 4, "intermediate_size": 9216,
	    "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 256,
	    "rope_parameters": {"rope_theta": 10000000, "partial_rotary_factor": 0.25}
	  }
	}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.ModelType, c.WrapperModelType, c.TieWordEmbeddings)
	fmt.Println(c.Layers)
	fmt.Println("rotary dims:", c.Attention.RotaryDim, "GDN state per sequence:", c.GDN.StateElements())

	// Inconsistent sizes are reported with the fields to fix.
	_, err = hfconfig.Parse([]byte(`{"model_type": "nemotron_h", "hidden_size": 3136, "vocab_size": 131072,
	  "hybrid_override_pattern": "M-M*", "mamba_num_heads": 96, "n_groups": 7}`))
	fmt.Println(err)
	// Output:
	// qwen3_5_text qwen3_5 true
	// [gated_deltanet+mlp gated_deltanet+mlp gated_deltanet+mlp attention+mlp gated_deltanet+mlp gated_deltanet+mlp gated_deltanet+mlp attention+mlp]
	// rotary dims: 64 GDN state per sequence: 524288
	// mamba_num_heads (96) must be divisible by n_groups (7)
}
