package safetensors

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// randomTensors makes one tensor of every dtype with random shapes (a scalar
// and an empty tensor among them) and random bytes.
func randomTensors(rng *rand.Rand) []Tensor {
	var ts []Tensor
	for d := Bool; d <= U64; d++ {
		rank := rng.IntN(4)
		shape := make([]int, rank)
		n := 1
		for i := range shape {
			shape[i] = 1 + rng.IntN(5)
			if d == I16 && i == 0 {
				shape[i] = 0 // an empty tensor
			}
			n *= shape[i]
		}
		data := make([]byte, n*d.Size())
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		if d == Bool {
			for i := range data {
				data[i] &= 1
			}
		}
		ts = append(ts, Tensor{Name: "t." + d.String(), DType: d, Shape: shape, Data: data})
	}
	return ts
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 20 {
		tensors := randomTensors(rng)
		rng.Shuffle(len(tensors), func(i, j int) { tensors[i], tensors[j] = tensors[j], tensors[i] })
		meta := map[string]string{"format": "pt", "trial": string(rune('a' + trial))}
		var buf bytes.Buffer
		if err := Write(&buf, tensors, meta); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "rt.safetensors")
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		mapped, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		inMemory, err := FromBytes(path, buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []*File{mapped, inMemory} {
			if got := f.Metadata(); len(got) != 2 || got["trial"] != meta["trial"] {
				t.Errorf("metadata = %v", got)
			}
			var names []string
			for _, want := range tensors {
				names = append(names, want.Name)
				info, ok := f.Info(want.Name)
				if !ok || info.DType != want.DType || !slices.Equal(info.Shape, want.Shape) || info.Size != int64(len(want.Data)) {
					t.Fatalf("Info(%s) = %+v, want %v %v", want.Name, info, want.DType, want.Shape)
				}
				// Write aligns every tensor to its element size (the header is
				// padded to 8 and tensors go in decreasing alignment).
				if info.Offset%int64(want.DType.Size()) != 0 {
					t.Errorf("%s at offset %d, not aligned to %d", want.Name, info.Offset, want.DType.Size())
				}
				got, err := f.Bytes(want.Name)
				if err != nil || !bytes.Equal(got, want.Data) {
					t.Fatalf("Bytes(%s) differs: %v", want.Name, err)
				}
				if want.DType.IsFloat() {
					vals, err := f.Float32(want.Name, want.Shape...)
					if err != nil {
						t.Fatal(err)
					}
					ref := make([]float32, len(vals))
					if err := DecodeFloat32(ref, want.Data, want.DType); err != nil {
						t.Fatal(err)
					}
					for i := range ref {
						if !sameFloat(vals[i], ref[i]) {
							t.Fatalf("Float32(%s)[%d] = %g, want %g", want.Name, i, vals[i], ref[i])
						}
					}
				}
			}
			slices.Sort(names)
			if !slices.Equal(f.Names(), names) {
				t.Errorf("Names = %v, want %v", f.Names(), names)
			}
		}
		mapped.Close()
	}
}

// TestWriteMatchesReference: given the tensors of a file the reference
// library wrote, Write produces exactly its bytes (same order, offsets, JSON
// spelling and padding), so files we write are what Python would write.
func TestWriteMatchesReference(t *testing.T) {
	for _, name := range []string{"writer_reference.safetensors", "reference.safetensors"} {
		path := filepath.Join("testdata", name)
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := FromBytes(path, want)
		if err != nil {
			t.Fatal(err)
		}
		var tensors []Tensor
		for _, n := range f.Names() {
			info, _ := f.Info(n)
			data, err := f.Bytes(n)
			if err != nil {
				t.Fatal(err)
			}
			tensors = append(tensors, Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: data})
		}
		if name == "writer_reference.safetensors" && len(tensors) != 18 {
			t.Errorf("%s has %d tensors, want one per dtype plus extras (18)", name, len(tensors))
		}
		var got bytes.Buffer
		if err := Write(&got, tensors, f.Metadata()); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			n := min(len(want), got.Len(), 400)
			t.Errorf("%s: Write differs from the reference library\n got %q\nwant %q", name, got.Bytes()[:n], want[:n])
		}
	}
}
