package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// Tensor is one tensor to Write: raw little-endian, row-major Data.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  []byte
}

// Write writes tensors and optional string metadata as a safetensors file,
// laid out the way the reference library lays it out, so that the same
// tensors produce the same bytes: tensors sorted by decreasing dtype
// alignment, then by name; compact JSON with "__metadata__" first (its keys
// sorted); the header padded with spaces to a multiple of 8 bytes, so every
// tensor starts aligned to its element size.
func Write(w io.Writer, tensors []Tensor, metadata map[string]string) error {
	order := make([]*Tensor, len(tensors))
	seen := make(map[string]bool, len(tensors))
	for i := range tensors {
		t := &tensors[i]
		if err := checkTensor(t); err != nil {
			return err
		}
		if seen[t.Name] {
			return fmt.Errorf("write tensor %q: duplicate name", t.Name)
		}
		seen[t.Name] = true
		order[i] = t
	}
	slices.SortFunc(order, func(a, b *Tensor) int {
		if a.DType != b.DType {
			return int(b.DType) - int(a.DType)
		}
		return strings.Compare(a.Name, b.Name)
	})

	var h bytes.Buffer
	h.WriteByte('{')
	if metadata != nil {
		h.WriteString(`"` + metadataKey + `":{`)
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				h.WriteByte(',')
			}
			writeJSONString(&h, k)
			h.WriteByte(':')
			writeJSONString(&h, metadata[k])
		}
		h.WriteByte('}')
	}
	var offset uint64
	for i, t := range order {
		if i > 0 || metadata != nil {
			h.WriteByte(',')
		}
		writeJSONString(&h, t.Name)
		h.WriteString(`:{"dtype":"` + t.DType.String() + `","shape":[`)
		for j, d := range t.Shape {
			if j > 0 {
				h.WriteByte(',')
			}
			h.WriteString(strconv.Itoa(d))
		}
		end := offset + uint64(len(t.Data))
		fmt.Fprintf(&h, `],"data_offsets":[%d,%d]}`, offset, end)
		offset = end
	}
	h.WriteByte('}')
	for h.Len()%8 != 0 {
		h.WriteByte(' ')
	}
	if h.Len() > MaxHeaderSize {
		return fmt.Errorf("write: header of %d bytes exceeds the limit of %d", h.Len(), MaxHeaderSize)
	}

	bw := bufio.NewWriterSize(w, 1<<20)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(h.Len()))
	bw.Write(n[:])
	bw.Write(h.Bytes())
	for _, t := range order {
		bw.Write(t.Data)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write safetensors: %w", err)
	}
	return nil
}

func checkTensor(t *Tensor) error {
	if t.Name == metadataKey {
		return fmt.Errorf("write tensor %q: the name is reserved for metadata", t.Name)
	}
	if t.DType == Invalid || t.DType.Size() == 0 {
		return fmt.Errorf("write tensor %q: invalid dtype %v", t.Name, t.DType)
	}
	want := uint64(t.DType.Size())
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("write tensor %q: negative dimension in shape %v", t.Name, t.Shape)
		}
		hi, lo := bits.Mul64(want, uint64(d))
		if hi != 0 {
			return fmt.Errorf("write tensor %q: shape %v overflows", t.Name, t.Shape)
		}
		want = lo
	}
	if uint64(len(t.Data)) != want {
		return fmt.Errorf("write tensor %q: %d data bytes, shape %v of %v needs %d", t.Name, len(t.Data), t.Shape, t.DType, want)
	}
	return nil
}

// writeJSONString writes s as a JSON string without HTML escaping, matching
// serde_json's output for the same string.
func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)           // cannot fail for a string
	b.Truncate(b.Len() - 1) // Encode appends a newline
}
