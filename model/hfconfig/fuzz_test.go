package hfconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse: it must never panic, and what it
// accepts must be a valid, self-consistent Config, the same on every parse.
func FuzzParse(f *testing.F) {
	for _, glob := range []string{"testdata/hub/*.json", "testdata/hf/*.json"} {
		paths, err := filepath.Glob(glob)
		if err != nil {
			f.Fatal(err)
		}
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	for _, s := range []string{
		`{"model_type":"nemotron_h","hidden_size":64,"vocab_size":100,"hybrid_override_pattern":"M*-E","time_step_limit":[0.0, Infinity]}`,
		`{"model_type":"qwen3_next","hidden_size":64,"vocab_size":100,"num_hidden_layers":4,"decoder_sparse_step":0}`,
		`{"model_type":"qwen3_5","text_config":{"hidden_size":64,"vocab_size":10,"num_hidden_layers":2000000000}}`,
		`{"d_model":768,"n_layer":2,"vocab_size":10,"ssm_cfg":{"layer":"Mamba2"},"attn_layer_idx":[1],"attn_cfg":{"num_heads":12}}`,
		`{"model_type":"mamba2","hidden_size":64,"vocab_size":10,"num_hidden_layers":2,"num_heads":2,"head_dim":64,"n_groups":1}`,
		`{"model_type":"kimi_linear","hidden_size":64,"vocab_size":10,"num_hidden_layers":3,"linear_attn_config":{"kda_layers":[1,3],"full_attn_layers":[2]}}`,
		`{"a":NaN,"b":"NaN\"","c":-Infinity}`,
		`null`, `[]`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if c != nil {
				t.Fatal("Config returned with an error")
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted an invalid config: %v", err)
		}
		if _, ok := modelTypes[c.ModelType]; !ok || c.Family == UnknownFamily {
			t.Fatalf("model_type %q, family %v", c.ModelType, c.Family)
		}
		branches := 0
		for _, l := range c.Layers {
			if l.Mixer == None {
				t.Fatalf("layer without a mixer: %v", c.Layers)
			}
			branches++
			if l.FFN != None {
				branches++
			}
		}
		total := 0
		for k := Mamba; k <= LatentAttention; k++ {
			total += c.Count(k)
		}
		if total != branches || c.NumLayers != len(c.Layers) {
			t.Fatalf("counts %d vs %d branches, NumLayers %d vs %d", total, branches, c.NumLayers, len(c.Layers))
		}
		m, g, k, l := c.Mamba, c.GDN, c.KDA, c.MLA
		for _, v := range []int{m.ConvDim(), m.InProjSize(), m.StateElements(), g.ConvDim(), g.StateElements(), k.StateElements(), l.LatentDim()} {
			if v < 0 {
				t.Fatalf("derived size overflowed: %+v %+v %+v %+v", m, g, k, l)
			}
		}
		again, err := Parse(data)
		if err != nil || fmt.Sprintf("%+v", again) != fmt.Sprintf("%+v", c) {
			t.Fatalf("second parse differs: %v", err)
		}
	})
}
