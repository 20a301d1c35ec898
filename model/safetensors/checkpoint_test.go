package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestHFSharded opens a tiny random NemotronH that transformers'
// save_pretrained split into 5 shards (testdata/hf_sharded, made by
// gen_reference.py), and checks every tensor against the manifest the
// reference library read back from the same files.
func TestHFSharded(t *testing.T) {
	dir := filepath.Join("testdata", "hf_sharded")
	var manifest map[string]struct {
		Shard string
		DType string
		Shape []int
		Sum   float64
		First []float64
	}
	raw, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(c.Files()) != 5 || len(c.Names()) != len(manifest) {
		t.Fatalf("%d shards, %d tensors; want 5 and %d", len(c.Files()), len(c.Names()), len(manifest))
	}
	torchDType := map[string]DType{"bfloat16": BF16, "float32": F32}
	var sawF32, sawBF16 bool
	for name, want := range manifest {
		info, ok := c.Info(name)
		if !ok {
			t.Fatalf("%s missing", name)
		}
		if filepath.Base(info.File) != want.Shard || info.DType != torchDType[want.DType] || !slices.Equal(info.Shape, want.Shape) {
			t.Errorf("%s: %s %v %v, manifest says %s %s %v", name, filepath.Base(info.File), info.DType, info.Shape, want.Shard, want.DType, want.Shape)
		}
		sawF32 = sawF32 || info.DType == F32
		sawBF16 = sawBF16 || info.DType == BF16
		vals, err := c.Float32(name, want.Shape...)
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range want.First {
			if float64(vals[i]) != w {
				t.Errorf("%s[%d] = %g, torch says %g", name, i, vals[i], w)
			}
		}
		var sum float64
		for _, v := range vals {
			sum += float64(v)
		}
		if math.Abs(sum-want.Sum) > 1e-9*(1+math.Abs(want.Sum)) {
			t.Errorf("%s: sum %.12g, torch says %.12g", name, sum, want.Sum)
		}
	}
	if !sawF32 || !sawBF16 {
		t.Error("fixture should mix F32 and BF16 tensors")
	}
	if !c.Has("backbone.layers.0.mixer.in_proj.weight") || c.Has("backbone.layers.9.mixer.in_proj.weight") {
		t.Error("Has is wrong")
	}
	if _, err := c.Float32("lm_head.weight", 128, 65); !errors.Is(err, ErrShape) ||
		!strings.Contains(err.Error(), `tensor "lm_head.weight": shape [128 64], want [128 65]`) ||
		!strings.Contains(err.Error(), "model-0000") {
		t.Errorf("shape error = %v", err)
	}
	if _, err := c.Bytes("nope"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `tensor "nope"`) {
		t.Errorf("missing tensor error = %v", err)
	}
}

func writeFile(t *testing.T, path string, tensors []Tensor) {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, tensors, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func writeIndex(t *testing.T, dir string, weightMap map[string]string) {
	t.Helper()
	b, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": weightMap})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, IndexFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func f32Tensor(rng *rand.Rand, name string, shape ...int) Tensor {
	n := 1
	for _, d := range shape {
		n *= d
	}
	data := make([]byte, 4*n)
	for i := range n {
		bits := math.Float32bits(float32(rng.NormFloat64()))
		data[4*i], data[4*i+1], data[4*i+2], data[4*i+3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
	}
	return Tensor{Name: name, DType: F32, Shape: shape, Data: data}
}

func TestOpenDirSharded(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	dir := t.TempDir()
	a := f32Tensor(rng, "model.embed_tokens.weight", 16, 8)
	b := f32Tensor(rng, "model.layers.0.mlp.up_proj.weight", 12, 8)
	c := f32Tensor(rng, "lm_head.weight", 16, 8)
	stale := f32Tensor(rng, "not.in.index", 2)
	writeFile(t, filepath.Join(dir, "model-00001-of-00002.safetensors"), []Tensor{a, b, stale})
	writeFile(t, filepath.Join(dir, "model-00002-of-00002.safetensors"), []Tensor{c})
	writeIndex(t, dir, map[string]string{
		a.Name: "model-00001-of-00002.safetensors",
		b.Name: "model-00001-of-00002.safetensors",
		c.Name: "model-00002-of-00002.safetensors",
	})
	ck, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if want := []string{c.Name, a.Name, b.Name}; !slices.Equal(ck.Names(), want) {
		t.Errorf("Names = %v, want %v (the index decides; stale shard tensors are ignored)", ck.Names(), want)
	}
	if len(ck.Files()) != 2 {
		t.Errorf("%d shards open, want 2 (each once)", len(ck.Files()))
	}
	for _, want := range []Tensor{a, b, c} {
		got, err := ck.Bytes(want.Name)
		if err != nil || !bytes.Equal(got, want.Data) {
			t.Errorf("Bytes(%s): %v", want.Name, err)
		}
	}
	info, _ := ck.Info(c.Name)
	if filepath.Base(info.File) != "model-00002-of-00002.safetensors" {
		t.Errorf("lm_head in %s", info.File)
	}
}

func TestOpenDirErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	w := f32Tensor(rng, "w", 2)
	v := f32Tensor(rng, "v", 3)
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  []string // substrings of the error
	}{
		{"empty dir", func(*testing.T, string) {}, []string{"no model.safetensors.index.json, model.safetensors or *.safetensors files"}},
		{"missing shard", func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]string{"w": "model-00001-of-00001.safetensors"})
		}, []string{IndexFile, `shard of tensor "w"`, "model-00001-of-00001.safetensors", "no such file"}},
		{"tensor not in shard", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "s1.safetensors"), []Tensor{w})
			writeIndex(t, dir, map[string]string{"w": "s1.safetensors", "v": "s1.safetensors"})
		}, []string{"s1.safetensors", `tensor "v"`, "listed in model.safetensors.index.json but not in this shard"}},
		{"shard outside dir", func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]string{"w": "../x.safetensors"})
		}, []string{IndexFile, `tensor "w"`, `shard "../x.safetensors" is not a file inside`}},
		{"index without weight_map", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"metadata":{}}`), 0o644)
		}, []string{IndexFile, "no weight_map"}},
		{"index duplicate", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "s1.safetensors"), []Tensor{w})
			os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"weight_map":{"w":"s1.safetensors","w":"s1.safetensors"}}`), 0o644)
		}, []string{IndexFile, `tensor "w"`, "listed twice"}},
		{"index not json", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, IndexFile), []byte(`{"weight_map":`), 0o644)
		}, []string{IndexFile, "truncated JSON"}},
		{"bad shard", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "s1.safetensors"), rawFile(`{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8), 0o644)
			writeIndex(t, dir, map[string]string{"w": "s1.safetensors"})
		}, []string{"s1.safetensors", `tensor "w"`, "shape [3] of F32 needs 12 bytes"}},
		{"duplicate across unindexed files", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "a.safetensors"), []Tensor{w, v})
			writeFile(t, filepath.Join(dir, "b.safetensors"), []Tensor{w})
		}, []string{"b.safetensors", `tensor "w"`, "also present in", "a.safetensors"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			c, err := OpenDir(dir)
			if err == nil {
				c.Close()
				t.Fatal("OpenDir succeeded")
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
		})
	}
}

func TestOpenDirUnsharded(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	w := f32Tensor(rng, "w", 2, 2)
	v := f32Tensor(rng, "v", 3)

	// model.safetensors wins over other files.
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, SingleFile), []Tensor{w})
	writeFile(t, filepath.Join(dir, "other.safetensors"), []Tensor{v})
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.Names(), []string{"w"}) {
		t.Errorf("Names = %v", c.Names())
	}
	c.Close()

	// Otherwise every *.safetensors file.
	dir = t.TempDir()
	writeFile(t, filepath.Join(dir, "b.safetensors"), []Tensor{w})
	writeFile(t, filepath.Join(dir, "a.safetensors"), []Tensor{v})
	c, err = OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !slices.Equal(c.Names(), []string{"v", "w"}) || len(c.Files()) != 2 {
		t.Errorf("Names = %v, %d files", c.Names(), len(c.Files()))
	}
	got, err := c.Float32("w", 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		want := math.Float32frombits(uint32(w.Data[4*i]) | uint32(w.Data[4*i+1])<<8 | uint32(w.Data[4*i+2])<<16 | uint32(w.Data[4*i+3])<<24)
		if got[i] != want {
			t.Errorf("w[%d] = %g, want %g", i, got[i], want)
		}
	}
}
