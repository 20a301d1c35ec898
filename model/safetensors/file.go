// Package safetensors reads and writes Hugging Face .safetensors files and
// sharded checkpoint directories, memory-mapped, with every header field
// validated before any tensor byte is touched.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON mapping
// tensor names to {dtype, shape, data_offsets} (plus an optional
// "__metadata__" object of strings), then the data section. This package
// enforces what the reference implementation enforces: the header is at most
// 100,000,000 bytes of UTF-8 JSON, every shape times its dtype size equals its
// byte range without overflow, and the ranges tile the data section exactly
// (no gaps, no overlaps, nothing after the last tensor). It also rejects
// duplicate tensor names, which JSON decoders would otherwise silently merge.
//
// Unknown dtype strings (newer formats such as F4 or C64) do not fail Open:
// such tensors are listed and their ranges checked for overlap, but Bytes and
// Float32 return ErrDType for them, so a checkpoint whose unused parts (a
// vision tower, say) use an exotic dtype still loads.
//
// Errors name the file and the tensor:
//
//	model.safetensors: tensor "backbone.layers.0.mixer.in_proj.weight": shape [64 32], want [96 32]
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxHeaderSize is the largest JSON header accepted, in bytes; the reference
// implementation uses the same limit.
const MaxHeaderSize = 100_000_000

// metadataKey is the reserved header key for free-form string metadata.
const metadataKey = "__metadata__"

// TensorInfo describes one tensor of a file without reading its data.
type TensorInfo struct {
	Name      string
	DType     DType  // Invalid if the header names a dtype this package does not know
	DTypeName string // the dtype as spelled in the header
	Shape     []int
	File      string // path of the file holding the tensor
	Offset    int64  // absolute offset of the first byte within File
	Size      int64  // bytes of data
}

// NumElements returns the product of the shape (1 for a scalar).
func (t TensorInfo) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// File is one open .safetensors file. Its methods may be called from several
// goroutines at once, except Close.
type File struct {
	path     string
	data     []byte // the whole file; nil after Close
	mapped   bool   // data is a mapping to unmap on Close
	closed   bool
	tensors  map[string]*entry
	names    []string // sorted
	metadata map[string]string
}

type entry struct {
	info       TensorInfo
	begin, end int // absolute offsets into File.data
}

// Open maps the file at path read-only and validates its header. Slices
// returned by Bytes point into the mapping and are valid until Close. The file
// must not be truncated while open (reading a vanished page faults). Where the
// platform or file system cannot map files, the content is read into memory.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, newError(path, "", ErrFormat, "not a regular file")
	}
	size := st.Size()
	if size < 8 {
		return nil, newError(path, "", ErrFormat, "file is %d bytes, too short for the 8-byte header length", size)
	}
	if size > math.MaxInt {
		return nil, newError(path, "", ErrFormat, "file is %d bytes, too large to map", size)
	}
	data, mapped, err := mapFile(f, int(size))
	if err != nil {
		return nil, fmt.Errorf("%s: map: %w", path, err)
	}
	file, err := parse(path, data)
	if err != nil {
		if mapped {
			_ = unmapFile(data)
		}
		return nil, err
	}
	file.mapped = mapped
	return file, nil
}

// FromBytes parses an in-memory safetensors file. data is used in place and
// must not change while the File is in use; name labels errors.
func FromBytes(name string, data []byte) (*File, error) {
	return parse(name, data)
}

func readAll(f *os.File, size int) ([]byte, error) {
	data := make([]byte, size)
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, err
	}
	return data, nil
}

// Close releases the mapping. Slices returned by Bytes must not be used after.
func (f *File) Close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	data := f.data
	f.data = nil
	if f.mapped {
		if err := unmapFile(data); err != nil {
			return fmt.Errorf("%s: unmap: %w", f.path, err)
		}
	}
	return nil
}

// Path returns the path (or name) the file was opened with.
func (f *File) Path() string { return f.path }

// Names returns the tensor names in sorted order.
func (f *File) Names() []string { return slices.Clone(f.names) }

// Metadata returns the header's "__metadata__" strings (nil if absent).
func (f *File) Metadata() map[string]string {
	if f.metadata == nil {
		return nil
	}
	m := make(map[string]string, len(f.metadata))
	for k, v := range f.metadata {
		m[k] = v
	}
	return m
}

// Has reports whether the file holds a tensor called name.
func (f *File) Has(name string) bool {
	_, ok := f.tensors[name]
	return ok
}

// Info describes the tensor called name.
func (f *File) Info(name string) (TensorInfo, bool) {
	e, ok := f.tensors[name]
	if !ok {
		return TensorInfo{}, false
	}
	info := e.info
	info.Shape = slices.Clone(info.Shape)
	return info, true
}

// Bytes returns the raw little-endian bytes of the tensor called name, without
// copying: the slice points into the read-only mapping, must not be written,
// and is valid until Close.
func (f *File) Bytes(name string) ([]byte, error) {
	e, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	if e.info.DType == Invalid {
		return nil, newError(f.path, name, ErrDType, "dtype %q is not supported", e.info.DTypeName)
	}
	return f.data[e.begin:e.end:e.end], nil
}

// Float32 returns the tensor called name converted to float32 (from F32, F64,
// F16, BF16, F8_E4M3, F8_E5M2 or F8_E8M0). If shape is given, the tensor's
// shape must equal it, a -1 matching any size in that dimension; with no shape
// the tensor's own shape is accepted.
func (f *File) Float32(name string, shape ...int) ([]float32, error) {
	e, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	if err := checkShape(f.path, e.info, shape); err != nil {
		return nil, err
	}
	if !e.info.DType.IsFloat() {
		return nil, newError(f.path, name, ErrDType, "dtype %s cannot be converted to float32", e.info.DTypeName)
	}
	out := make([]float32, e.info.NumElements())
	if err := DecodeFloat32(out, f.data[e.begin:e.end], e.info.DType); err != nil {
		return nil, newError(f.path, name, ErrDType, "%v", err)
	}
	return out, nil
}

func (f *File) lookup(name string) (*entry, error) {
	e, ok := f.tensors[name]
	if !ok {
		return nil, newError(f.path, name, ErrNotFound, "not found")
	}
	if f.closed {
		return nil, newError(f.path, name, ErrClosed, "file is closed")
	}
	return e, nil
}

func checkShape(path string, info TensorInfo, want []int) error {
	if len(want) == 0 {
		return nil
	}
	ok := len(want) == len(info.Shape)
	for i := 0; ok && i < len(want); i++ {
		ok = want[i] == -1 || want[i] == info.Shape[i]
	}
	if !ok {
		return newError(path, info.Name, ErrShape, "shape %v, want %v", info.Shape, want)
	}
	return nil
}

// parse validates the header of a whole-file buffer and indexes its tensors.
func parse(path string, data []byte) (*File, error) {
	bad := func(format string, args ...any) error {
		return newError(path, "", ErrFormat, format, args...)
	}
	if len(data) < 8 {
		return nil, bad("file is %d bytes, too short for the 8-byte header length", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > MaxHeaderSize {
		return nil, bad("header length %d exceeds the limit of %d bytes", n, MaxHeaderSize)
	}
	if n > uint64(len(data)-8) {
		return nil, bad("header length %d exceeds the %d bytes that follow it", n, len(data)-8)
	}
	header := data[8 : 8+n]
	if !utf8.Valid(header) {
		return nil, bad("header is not valid UTF-8")
	}
	fields, err := objectFields(header)
	if err != nil {
		return nil, bad("header: %v", err)
	}
	dataStart := 8 + int(n)
	dataLen := len(data) - dataStart

	f := &File{path: path, data: data, tensors: make(map[string]*entry, len(fields))}
	entries := make([]*entry, 0, len(fields))
	seenMetadata := false
	for _, fl := range fields {
		if fl.key == metadataKey {
			if seenMetadata {
				return nil, bad("header: duplicate %q", metadataKey)
			}
			seenMetadata = true
			// null is accepted as "no metadata", like the reference's Option.
			if err := json.Unmarshal(fl.value, &f.metadata); err != nil {
				return nil, bad("header: %q must be an object of strings", metadataKey)
			}
			continue
		}
		if _, dup := f.tensors[fl.key]; dup {
			return nil, newError(path, fl.key, ErrFormat, "duplicate tensor name in header")
		}
		e, err := parseEntry(path, fl.key, fl.value, dataStart, dataLen)
		if err != nil {
			return nil, err
		}
		f.tensors[fl.key] = e
		entries = append(entries, e)
	}

	// The data section must be tiled exactly: sort by range and walk it.
	slices.SortFunc(entries, func(a, b *entry) int {
		if c := a.begin - b.begin; c != 0 {
			return c
		}
		if c := a.end - b.end; c != 0 {
			return c
		}
		return strings.Compare(a.info.Name, b.info.Name)
	})
	next := dataStart
	var prev *entry
	for _, e := range entries {
		switch {
		case e.begin < next:
			return nil, newError(path, e.info.Name, ErrFormat, "data_offsets [%d %d] overlap tensor %q at [%d %d]",
				e.begin-dataStart, e.end-dataStart, prev.info.Name, prev.begin-dataStart, prev.end-dataStart)
		case e.begin > next:
			return nil, newError(path, e.info.Name, ErrFormat, "data_offsets [%d %d] leave bytes [%d %d) of the data section unused",
				e.begin-dataStart, e.end-dataStart, next-dataStart, e.begin-dataStart)
		}
		next, prev = e.end, e
	}
	if next != len(data) {
		return nil, bad("tensors cover %d bytes of the %d-byte data section", next-dataStart, dataLen)
	}

	f.names = make([]string, 0, len(f.tensors))
	for name := range f.tensors {
		f.names = append(f.names, name)
	}
	slices.Sort(f.names)
	return f, nil
}

// parseEntry validates one tensor's header entry against the data section,
// which starts at dataStart in the file and is dataLen bytes long.
func parseEntry(path, name string, raw json.RawMessage, dataStart, dataLen int) (*entry, error) {
	bad := func(format string, args ...any) (*entry, error) {
		return nil, newError(path, name, ErrFormat, format, args...)
	}
	fields, err := objectFields(raw)
	if err != nil {
		return bad("header entry: %v", err)
	}
	var dtypeRaw, shapeRaw, offsetsRaw json.RawMessage
	for _, fl := range fields {
		var dst *json.RawMessage
		switch fl.key {
		case "dtype":
			dst = &dtypeRaw
		case "shape":
			dst = &shapeRaw
		case "data_offsets":
			dst = &offsetsRaw
		default:
			continue // unknown keys are ignored, as the reference does
		}
		if *dst != nil {
			return bad("header entry: duplicate %q", fl.key)
		}
		*dst = fl.value
	}
	for _, req := range []struct {
		key string
		raw json.RawMessage
	}{{"dtype", dtypeRaw}, {"shape", shapeRaw}, {"data_offsets", offsetsRaw}} {
		if req.raw == nil {
			return bad("header entry has no %q", req.key)
		}
	}

	var dtypeName string
	if err := json.Unmarshal(dtypeRaw, &dtypeName); err != nil {
		return bad("dtype %s is not a string", dtypeRaw)
	}
	dt, _ := ParseDType(dtypeName)

	var dims []json.RawMessage
	if err := json.Unmarshal(shapeRaw, &dims); err != nil || dims == nil {
		return bad("shape %s is not an array", shapeRaw)
	}
	shape := make([]int, len(dims))
	for i, d := range dims {
		v, err := strconv.ParseInt(string(d), 10, 64)
		switch {
		case err != nil && errors.Is(err, strconv.ErrRange):
			return bad("shape[%d] = %s is out of range", i, d)
		case err != nil:
			return bad("shape[%d] = %s is not an integer", i, d)
		case v < 0:
			return bad("shape[%d] = %d is negative", i, v)
		case v > math.MaxInt:
			return bad("shape[%d] = %d is out of range", i, v)
		}
		shape[i] = int(v)
	}

	var offs []json.RawMessage
	if err := json.Unmarshal(offsetsRaw, &offs); err != nil || offs == nil {
		return bad("data_offsets %s is not an array", offsetsRaw)
	}
	if len(offs) != 2 {
		return bad("data_offsets has %d values, want 2", len(offs))
	}
	var be [2]uint64
	for i, o := range offs {
		v, err := strconv.ParseUint(string(o), 10, 64)
		if err != nil {
			return bad("data_offsets[%d] = %s is not a non-negative 64-bit integer", i, o)
		}
		be[i] = v
	}
	begin, end := be[0], be[1]
	if begin > end {
		return bad("data_offsets [%d %d] end before they begin", begin, end)
	}
	if end > uint64(dataLen) {
		return bad("data_offsets [%d %d] run past the end of the %d-byte data section", begin, end, dataLen)
	}

	if dt != Invalid {
		// Element count times element size, refusing to wrap around.
		nbytes := uint64(dt.Size())
		for _, d := range shape {
			hi, lo := bits.Mul64(nbytes, uint64(d))
			if hi != 0 {
				return bad("shape %v of %s overflows a 64-bit byte count", shape, dt)
			}
			nbytes = lo
		}
		if nbytes != end-begin {
			return bad("shape %v of %s needs %d bytes, data_offsets [%d %d] hold %d", shape, dt, nbytes, begin, end, end-begin)
		}
	}
	return &entry{
		info: TensorInfo{
			Name:      name,
			DType:     dt,
			DTypeName: dtypeName,
			Shape:     shape,
			File:      path,
			Offset:    int64(dataStart) + int64(begin),
			Size:      int64(end - begin),
		},
		begin: dataStart + int(begin),
		end:   dataStart + int(end),
	}, nil
}

type field struct {
	key   string
	value json.RawMessage
}

// objectFields splits a JSON object into its members in order, keeping
// duplicate keys (encoding/json would silently keep the last one) so the
// caller can reject them.
func objectFields(data []byte) ([]field, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, jsonError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	var out []field
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonError(err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errors.New("object key is not a string")
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, jsonError(err)
		}
		out = append(out, field{key, v})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON object")
	}
	return out, nil
}

func jsonError(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("truncated JSON")
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("invalid JSON at byte %d: %v", se.Offset, se)
	}
	return err
}
