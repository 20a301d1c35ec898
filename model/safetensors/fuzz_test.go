package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// FuzzOpen feeds arbitrary bytes to the parser. It must never panic or read
// out of bounds; what it rejects must be an *Error naming the file; what it
// accepts must be self-consistent and survive a Write/parse round trip.
func FuzzOpen(f *testing.F) {
	for _, name := range []string{"tiny.safetensors", "writer_reference.safetensors"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-1]) // truncated data
		f.Add(b[:len(b)/2]) // truncated header
		f.Add(append(b, 0)) // trailing byte
	}
	var buf bytes.Buffer
	if err := Write(&buf, randomTensors(rand.New(rand.NewPCG(9, 9))), map[string]string{"k": "v"}); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	for _, bad := range []string{
		`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,9223372036854775808]}}`,
		`{"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`,
		`{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`,
		`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`,
		`{"a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`,
		`{"a":{"dtype":"F4","shape":[1000000000000],"data_offsets":[0,8]}}`,
		`{"__metadata__":{"a":"b"},"a":{"dtype":"BF16","shape":[],"data_offsets":[0,2]}}`,
	} {
		f.Add(rawFile(bad, 8))
	}
	f.Add(append(binary.LittleEndian.AppendUint64(nil, 1<<62), "{}"...))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, data []byte) {
		const name = "fuzz.safetensors"
		file, err := FromBytes(name, data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || !strings.HasPrefix(err.Error(), name+": ") {
				t.Fatalf("error is not an *Error naming the file: %v", err)
			}
			return
		}
		var tensors []Tensor
		var covered int64
		for _, n := range file.Names() {
			info, ok := file.Info(n)
			if !ok {
				t.Fatalf("listed tensor %q has no info", n)
			}
			covered += info.Size
			if info.Offset < 8 || info.Offset+info.Size > int64(len(data)) {
				t.Fatalf("%q at [%d, %d) outside the %d-byte file", n, info.Offset, info.Offset+info.Size, len(data))
			}
			b, err := file.Bytes(n)
			if info.DType == Invalid {
				if !errors.Is(err, ErrDType) {
					t.Fatalf("Bytes of unknown dtype %q: %v", info.DTypeName, err)
				}
				continue
			}
			if err != nil || int64(len(b)) != info.Size || int64(info.NumElements()*info.DType.Size()) != info.Size {
				t.Fatalf("Bytes(%q) = %d bytes, %v; info %+v", n, len(b), err, info)
			}
			if !bytes.Equal(b, data[info.Offset:info.Offset+info.Size]) {
				t.Fatalf("Bytes(%q) is not the file's range", n)
			}
			if info.DType.IsFloat() {
				if v, err := file.Float32(n, info.Shape...); err != nil || len(v) != info.NumElements() {
					t.Fatalf("Float32(%q): %d values, %v", n, len(v), err)
				}
			}
			tensors = append(tensors, Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: b})
		}
		n := binary.LittleEndian.Uint64(data)
		if covered != int64(len(data))-8-int64(n) {
			t.Fatalf("tensors cover %d bytes of a %d-byte data section", covered, int64(len(data))-8-int64(n))
		}
		if len(tensors) != len(file.Names()) {
			return // unknown dtypes cannot be rewritten
		}
		var buf bytes.Buffer
		if err := Write(&buf, tensors, file.Metadata()); err != nil {
			t.Fatalf("rewrite: %v", err)
		}
		again, err := FromBytes(name, buf.Bytes())
		if err != nil {
			t.Fatalf("reparse: %v", err)
		}
		if !slices.Equal(again.Names(), file.Names()) {
			t.Fatalf("names changed: %v -> %v", file.Names(), again.Names())
		}
		for _, tn := range tensors {
			info, _ := again.Info(tn.Name)
			b, _ := again.Bytes(tn.Name)
			if info.DType != tn.DType || !slices.Equal(info.Shape, tn.Shape) || !bytes.Equal(b, tn.Data) {
				t.Fatalf("%q changed in the round trip", tn.Name)
			}
		}
	})
}
