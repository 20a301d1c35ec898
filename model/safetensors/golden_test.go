package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/tiny.safetensors from Write")

// tinyTensors is the content of testdata/tiny.safetensors. Each value was
// encoded by hand (comments give the bit patterns), so the golden file checks
// the writer's layout and the decoders' arithmetic at once.
func tinyTensors() []Tensor {
	return []Tensor{
		// 1.0 = 0x3F800000, -2.5 = 0xC0200000, 0.15625 = 1.25·2^-3 = 0x3E200000
		{Name: "a.f32", DType: F32, Shape: []int{3}, Data: unhex("0000803f" + "000020c0" + "0000203e")},
		// 1.5 = 0x3FC0, -5 = -1.25·2^2 = 0xC0A0
		{Name: "b.bf16", DType: BF16, Shape: []int{2}, Data: unhex("c03f" + "a0c0")},
		// 1 = 0x3C00, -2 = 0xC000, 65504 = 0x7BFF (largest finite), 2^-24 = 0x0001 (smallest subnormal)
		{Name: "c.f16", DType: F16, Shape: []int{2, 2}, Data: unhex("003c" + "00c0" + "ff7b" + "0100")},
		// 448 = 0.1111.110, 2^-9 = 0.0000.001 (subnormal), -1 = 1.0111.000, NaN = 0.1111.111
		{Name: "d.e4m3", DType: F8E4M3, Shape: []int{4}, Data: unhex("7e" + "01" + "b8" + "7f")},
		{Name: "e.i32", DType: I32, Shape: []int{2}, Data: unhex("07000000" + "ffffffff")},
	}
}

// tinyHeader is the header the reference library writes for tinyTensors:
// tensors ordered by decreasing dtype alignment (F32, I32, BF16, F16,
// F8_E4M3), then by name, padded with spaces to a multiple of 8.
const tinyHeader = `{"__metadata__":{"format":"pt"},` +
	`"a.f32":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},` +
	`"e.i32":{"dtype":"I32","shape":[2],"data_offsets":[12,20]},` +
	`"b.bf16":{"dtype":"BF16","shape":[2],"data_offsets":[20,24]},` +
	`"c.f16":{"dtype":"F16","shape":[2,2],"data_offsets":[24,32]},` +
	`"d.e4m3":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[32,36]}}`

func unhex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func TestGoldenTiny(t *testing.T) {
	path := filepath.Join("testdata", "tiny.safetensors")
	var buf bytes.Buffer
	if err := Write(&buf, tinyTensors(), map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	golden, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), golden) {
		t.Errorf("Write output differs from %s (run with -update if the change is intended)", path)
	}

	// The bytes, spelled out: length, header, padding, data in layout order.
	header := tinyHeader + strings.Repeat(" ", (8-len(tinyHeader)%8)%8)
	want := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	want = append(want, header...)
	for _, name := range []string{"a.f32", "e.i32", "b.bf16", "c.f16", "d.e4m3"} {
		for _, tn := range tinyTensors() {
			if tn.Name == name {
				want = append(want, tn.Data...)
			}
		}
	}
	if len(header) != 336 || !bytes.Equal(golden, want) {
		t.Fatalf("%s does not match the hand-built bytes:\n got %q\nwant %q", path, golden, want)
	}

	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := f.Metadata(); len(got) != 1 || got["format"] != "pt" {
		t.Errorf("metadata = %v", got)
	}
	nan := float32(math.NaN())
	for _, tc := range []struct {
		name  string
		shape []int
		want  []float32
	}{
		{"a.f32", []int{3}, []float32{1, -2.5, 0.15625}},
		{"b.bf16", []int{2}, []float32{1.5, -5}},
		{"c.f16", []int{2, 2}, []float32{1, -2, 65504, 0x1p-24}},
		{"d.e4m3", []int{4}, []float32{448, 0x1p-9, -1, nan}},
	} {
		got, err := f.Float32(tc.name, tc.shape...)
		if err != nil {
			t.Fatal(err)
		}
		for i := range tc.want {
			if !sameFloat(got[i], tc.want[i]) {
				t.Errorf("%s[%d] = %g, want %g", tc.name, i, got[i], tc.want[i])
			}
		}
	}
	raw, err := f.Bytes("e.i32")
	if err != nil || !bytes.Equal(raw, unhex("07000000ffffffff")) {
		t.Errorf("Bytes(e.i32) = %x, %v", raw, err)
	}
	info, _ := f.Info("e.i32")
	if want := int64(8 + len(header) + 12); info.Offset != want || info.Size != 8 {
		t.Errorf("e.i32 at offset %d size %d, want %d and 8", info.Offset, info.Size, want)
	}
}

// sameFloat is equality that treats every NaN as equal to every NaN.
func sameFloat(a, b float32) bool {
	if a != a || b != b {
		return a != a && b != b
	}
	return math.Float32bits(a) == math.Float32bits(b)
}
