package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rawFile builds a file from a literal header and dataLen bytes of data
// (a counting pattern, so misplaced slices show up).
func rawFile(header string, dataLen int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	for i := range dataLen {
		b = append(b, byte(i))
	}
	return b
}

func TestOpenErrors(t *testing.T) {
	const file = "model.safetensors"
	f32x2 := `"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}`
	hugeLen := binary.LittleEndian.AppendUint64(nil, 1<<40)
	lyingLen := binary.LittleEndian.AppendUint64(nil, 100)
	tests := []struct {
		name   string
		data   []byte
		kind   error
		want   string // the whole message
		tensor string // the tensor the error must name, if any
	}{
		{"truncated length", []byte{1, 2, 3, 4, 5}, ErrFormat,
			`model.safetensors: file is 5 bytes, too short for the 8-byte header length`, ""},
		{"huge header length", append(hugeLen, "{}"...), ErrFormat,
			`model.safetensors: header length 1099511627776 exceeds the limit of 100000000 bytes`, ""},
		{"header past end of file", append(lyingLen, "{}    "...), ErrFormat,
			`model.safetensors: header length 100 exceeds the 6 bytes that follow it`, ""},
		{"invalid utf-8", rawFile("{\"\xff\":1}", 0), ErrFormat,
			`model.safetensors: header is not valid UTF-8`, ""},
		{"truncated json", rawFile(`{"w":{"dtype":`, 0), ErrFormat,
			`model.safetensors: header: truncated JSON`, ""},
		{"not an object", rawFile(`[1,2]`, 0), ErrFormat,
			`model.safetensors: header: not a JSON object`, ""},
		{"trailing json", rawFile(`{} {}`, 0), ErrFormat,
			`model.safetensors: header: trailing data after the JSON object`, ""},
		{"syntax error", rawFile(`{"w" 1}`, 0), ErrFormat,
			`model.safetensors: header: invalid JSON at byte 5: expected colon after object key`, ""},
		{"duplicate name", rawFile(`{`+f32x2+`,`+f32x2+`}`, 8), ErrFormat,
			`model.safetensors: tensor "w": duplicate tensor name in header`, "w"},
		{"duplicate metadata", rawFile(`{"__metadata__":{},"__metadata__":{}}`, 0), ErrFormat,
			`model.safetensors: header: duplicate "__metadata__"`, ""},
		{"metadata not strings", rawFile(`{"__metadata__":{"a":1}}`, 0), ErrFormat,
			`model.safetensors: header: "__metadata__" must be an object of strings`, ""},
		{"entry not object", rawFile(`{"w":[1]}`, 0), ErrFormat,
			`model.safetensors: tensor "w": header entry: not a JSON object`, "w"},
		{"missing dtype", rawFile(`{"w":{"shape":[2],"data_offsets":[0,8]}}`, 8), ErrFormat,
			`model.safetensors: tensor "w": header entry has no "dtype"`, "w"},
		{"missing offsets", rawFile(`{"w":{"dtype":"F32","shape":[2]}}`, 8), ErrFormat,
			`model.safetensors: tensor "w": header entry has no "data_offsets"`, "w"},
		{"duplicate field", rawFile(`{"w":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}}`, 8), ErrFormat,
			`model.safetensors: tensor "w": header entry: duplicate "dtype"`, "w"},
		{"dtype not string", rawFile(`{"w":{"dtype":4,"shape":[2],"data_offsets":[0,8]}}`, 8), ErrFormat,
			`model.safetensors: tensor "w": dtype 4 is not a string`, "w"},
		{"shape not array", rawFile(`{"w":{"dtype":"F32","shape":null,"data_offsets":[0,8]}}`, 8), ErrFormat,
			`model.safetensors: tensor "w": shape null is not an array`, "w"},
		{"negative dim", rawFile(`{"w":{"dtype":"F32","shape":[2,-3],"data_offsets":[0,8]}}`, 8), ErrFormat,
			`model.safetensors: tensor "w": shape[1] = -3 is negative`, "w"},
		{"fractional dim", rawFile(`{"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}}`, 8), ErrFormat,
			`model.safetensors: tensor "w": shape[0] = 2.5 is not an integer`, "w"},
		{"dim past int64", rawFile(`{"w":{"dtype":"F32","shape":[99999999999999999999],"data_offsets":[0,8]}}`, 8), ErrFormat,
			`model.safetensors: tensor "w": shape[0] = 99999999999999999999 is out of range`, "w"},
		{"three offsets", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}}`, 8), ErrFormat,
			`model.safetensors: tensor "w": data_offsets has 3 values, want 2`, "w"},
		{"negative offset", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}}`, 8), ErrFormat,
			`model.safetensors: tensor "w": data_offsets[0] = -8 is not a non-negative 64-bit integer`, "w"},
		{"offset past uint64", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551616]}}`, 8), ErrFormat,
			`model.safetensors: tensor "w": data_offsets[1] = 18446744073709551616 is not a non-negative 64-bit integer`, "w"},
		{"offset 2^63", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[9223372036854775808,9223372036854775816]}}`, 8), ErrFormat,
			`model.safetensors: tensor "w": data_offsets [9223372036854775808 9223372036854775816] run past the end of the 8-byte data section`, "w"},
		{"end before begin", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}`, 8), ErrFormat,
			`model.safetensors: tensor "w": data_offsets [8 0] end before they begin`, "w"},
		{"size lies", rawFile(`{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}}`, 20), ErrFormat,
			`model.safetensors: tensor "w": shape [2 3] of F32 needs 24 bytes, data_offsets [0 20] hold 20`, "w"},
		{"size overflows", rawFile(`{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, 0), ErrFormat,
			`model.safetensors: tensor "w": shape [4294967296 4294967296] of F32 overflows a 64-bit byte count`, "w"},
		{"size wraps to zero", rawFile(`{"w":{"dtype":"BF16","shape":[9223372036854775807,2,2],"data_offsets":[0,4]}}`, 4), ErrFormat,
			`model.safetensors: tensor "w": shape [9223372036854775807 2 2] of BF16 overflows a 64-bit byte count`, "w"},
		{"overlap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}}`, 8), ErrFormat,
			`model.safetensors: tensor "b": data_offsets [0 8] overlap tensor "a" at [0 8]`, "b"},
		{"partial overlap", rawFile(`{"a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},"b":{"dtype":"U8","shape":[6],"data_offsets":[4,10]}}`, 10), ErrFormat,
			`model.safetensors: tensor "b": data_offsets [4 10] overlap tensor "a" at [0 6]`, "b"},
		{"gap", rawFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}}`, 16), ErrFormat,
			`model.safetensors: tensor "b": data_offsets [12 16] leave bytes [8 12) of the data section unused`, "b"},
		{"trailing data", rawFile(`{`+f32x2+`}`, 12), ErrFormat,
			`model.safetensors: tensors cover 8 bytes of the 12-byte data section`, ""},
		{"offsets past data", rawFile(`{`+f32x2+`}`, 4), ErrFormat,
			`model.safetensors: tensor "w": data_offsets [0 8] run past the end of the 4-byte data section`, "w"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := FromBytes(file, tc.data)
			if err == nil {
				t.Fatalf("FromBytes succeeded with tensors %v", f.Names())
			}
			if !errors.Is(err, tc.kind) {
				t.Errorf("error %v is not %v", err, tc.kind)
			}
			if err.Error() != tc.want {
				t.Errorf("error\n got %s\nwant %s", err, tc.want)
			}
			var e *Error
			if !errors.As(err, &e) || e.File != file || e.Tensor != tc.tensor {
				t.Errorf("error %#v does not name file %q and tensor %q", err, file, tc.tensor)
			}
		})
	}
}

// TestOpenFileErrors runs a few malformed files through Open, which must
// name the path, unmap on failure, and accept what FromBytes accepts.
func TestOpenFileErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := write("short.safetensors", []byte{1})
	if _, err := Open(p); err == nil || !strings.HasPrefix(err.Error(), p+": file is 1 bytes") {
		t.Errorf("Open(short) = %v", err)
	}
	p = write("lies.safetensors", rawFile(`{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8))
	if _, err := Open(p); err == nil || !strings.HasPrefix(err.Error(), p+`: tensor "w": shape [3] of F32 needs 12 bytes`) {
		t.Errorf("Open(lies) = %v", err)
	}
	if _, err := Open(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("Open(dir) = %v", err)
	}
	if _, err := Open(filepath.Join(dir, "missing.safetensors")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open(missing) = %v", err)
	}
	good := rawFile(`{"w":{"dtype":"U8","shape":[2,2],"data_offsets":[0,4]}}    `, 4)
	f, err := Open(write("good.safetensors", good))
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.Bytes("w")
	if err != nil || !bytes.Equal(b, []byte{0, 1, 2, 3}) {
		t.Errorf("Bytes = %v, %v", b, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Bytes("w"); !errors.Is(err, ErrClosed) {
		t.Errorf("Bytes after Close = %v, want ErrClosed", err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestFloat32Shape(t *testing.T) {
	const name = "backbone.layers.0.mixer.in_proj.weight"
	var buf bytes.Buffer
	err := Write(&buf, []Tensor{
		{Name: name, DType: BF16, Shape: []int{64, 32}, Data: make([]byte, 64*32*2)},
		{Name: "ids", DType: I64, Shape: []int{3}, Data: make([]byte, 24)},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := FromBytes("model.safetensors", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		shape []int
		want  string // "" for success
		kind  error
	}{
		{name, []int{96, 32}, `model.safetensors: tensor "backbone.layers.0.mixer.in_proj.weight": shape [64 32], want [96 32]`, ErrShape},
		{name, []int{64, 32, 1}, `model.safetensors: tensor "backbone.layers.0.mixer.in_proj.weight": shape [64 32], want [64 32 1]`, ErrShape},
		{name, []int{2048}, `model.safetensors: tensor "backbone.layers.0.mixer.in_proj.weight": shape [64 32], want [2048]`, ErrShape},
		{name, []int{64, 32}, "", nil},
		{name, []int{-1, 32}, "", nil},
		{name, nil, "", nil},
		{"ids", []int{3}, `model.safetensors: tensor "ids": dtype I64 cannot be converted to float32`, ErrDType},
		{"missing", nil, `model.safetensors: tensor "missing": not found`, ErrNotFound},
	}
	for _, tc := range tests {
		got, err := f.Float32(tc.name, tc.shape...)
		if tc.want == "" {
			if err != nil || len(got) != 64*32 {
				t.Errorf("Float32(%q, %v) = len %d, %v", tc.name, tc.shape, len(got), err)
			}
			continue
		}
		if err == nil || err.Error() != tc.want || !errors.Is(err, tc.kind) {
			t.Errorf("Float32(%q, %v) error\n got %v\nwant %s", tc.name, tc.shape, err, tc.want)
		}
	}
}

// TestUnknownDType: a dtype this package does not know opens (its range still
// checked), is listed, and fails only on access.
func TestUnknownDType(t *testing.T) {
	data := rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"packed":{"dtype":"F4","shape":[4],"data_offsets":[4,6]}}  `, 6)
	f, err := FromBytes("q.safetensors", data)
	if err != nil {
		t.Fatal(err)
	}
	info, ok := f.Info("packed")
	if !ok || info.DType != Invalid || info.DTypeName != "F4" || info.Size != 2 {
		t.Errorf("Info(packed) = %+v", info)
	}
	if _, err := f.Bytes("packed"); !errors.Is(err, ErrDType) || err.Error() != `q.safetensors: tensor "packed": dtype "F4" is not supported` {
		t.Errorf("Bytes(packed) = %v", err)
	}
	if _, err := f.Float32("packed"); !errors.Is(err, ErrDType) {
		t.Errorf("Float32(packed) = %v", err)
	}
	// Its range still takes part in the overlap check.
	bad := rawFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"packed":{"dtype":"F4","shape":[4],"data_offsets":[2,4]}}`, 4)
	if _, err := FromBytes("q.safetensors", bad); err == nil || !strings.Contains(err.Error(), `overlap tensor "a"`) {
		t.Errorf("overlapping unknown dtype: %v", err)
	}
}

func TestEmptyAndScalar(t *testing.T) {
	var buf bytes.Buffer
	if err := Write(&buf, nil, nil); err != nil {
		t.Fatal(err)
	}
	// The reference library's serialisation of nothing: "{}" padded to 8.
	if want := "\x08\x00\x00\x00\x00\x00\x00\x00{}      "; buf.String() != want {
		t.Errorf("empty file = %q, want %q", buf.String(), want)
	}
	f, err := FromBytes("empty", buf.Bytes())
	if err != nil || len(f.Names()) != 0 || f.Metadata() != nil {
		t.Fatalf("empty file: %v, %v", f, err)
	}
	buf.Reset()
	if err := Write(&buf, []Tensor{{Name: "s", DType: F64, Shape: []int{}, Data: []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}}}, nil); err != nil {
		t.Fatal(err)
	}
	f, err = FromBytes("scalar", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	v, err := f.Float32("s")
	if err != nil || len(v) != 1 || v[0] != 1 {
		t.Errorf("scalar = %v, %v", v, err)
	}
	if info, _ := f.Info("s"); info.NumElements() != 1 || len(info.Shape) != 0 {
		t.Errorf("scalar info = %+v", info)
	}
}

func TestWriteErrors(t *testing.T) {
	tests := []struct {
		t    Tensor
		want string
	}{
		{Tensor{Name: "a", DType: F32, Shape: []int{2}, Data: make([]byte, 7)}, `write tensor "a": 7 data bytes, shape [2] of F32 needs 8`},
		{Tensor{Name: "a", DType: F32, Shape: []int{-2}, Data: nil}, `write tensor "a": negative dimension in shape [-2]`},
		{Tensor{Name: "a", DType: Invalid, Shape: []int{1}, Data: []byte{1}}, `write tensor "a": invalid dtype INVALID`},
		{Tensor{Name: "__metadata__", DType: U8, Shape: []int{1}, Data: []byte{1}}, `write tensor "__metadata__": the name is reserved for metadata`},
		{Tensor{Name: "a", DType: U8, Shape: []int{1 << 62, 1 << 62}, Data: nil}, `write tensor "a": shape [4611686018427387904 4611686018427387904] overflows`},
	}
	for _, tc := range tests {
		if err := Write(&bytes.Buffer{}, []Tensor{tc.t}, nil); err == nil || err.Error() != tc.want {
			t.Errorf("Write(%+v) = %v, want %s", tc.t, err, tc.want)
		}
	}
	a := Tensor{Name: "a", DType: U8, Shape: []int{1}, Data: []byte{1}}
	if err := Write(&bytes.Buffer{}, []Tensor{a, a}, nil); err == nil || err.Error() != `write tensor "a": duplicate name` {
		t.Errorf("duplicate: %v", err)
	}
}

func TestDTypeNames(t *testing.T) {
	for d := Bool; d <= U64; d++ {
		got, ok := ParseDType(d.String())
		if !ok || got != d || d.Size() == 0 {
			t.Errorf("ParseDType(%v) = %v, %v; size %d", d, got, ok, d.Size())
		}
	}
	for _, s := range []string{"F4", "C64", "f32", ""} {
		if d, ok := ParseDType(s); ok || d != Invalid {
			t.Errorf("ParseDType(%q) = %v, %v", s, d, ok)
		}
	}
}
