package safetensors

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// littleEndian reports whether this machine stores numbers as the format does,
// so that a tensor's bytes can be read as its elements in place.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// BF16 returns the BF16 tensor called name as its bfloat16 bits, checking
// its shape as Float32 does. The slice points into the read-only mapping
// (valid until Close, never to be written) when the tensor is 2-byte
// aligned and the machine little-endian, and is a copy otherwise.
func (f *File) BF16(name string, shape ...int) ([]uint16, error) {
	b, err := f.typed(name, BF16, shape)
	if err != nil || len(b) == 0 {
		return nil, err
	}
	if littleEndian && uintptr(unsafe.Pointer(&b[0]))%2 == 0 {
		return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2), nil
	}
	v := make([]uint16, len(b)/2)
	for i := range v {
		v[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return v, nil
}

// F32 returns the F32 tensor called name, checking its shape as Float32
// does. Unlike Float32 it does not copy: the slice points into the
// read-only mapping (valid until Close, never to be written) when the
// tensor is 4-byte aligned and the machine little-endian, and is a copy
// otherwise.
func (f *File) F32(name string, shape ...int) ([]float32, error) {
	b, err := f.typed(name, F32, shape)
	if err != nil || len(b) == 0 {
		return nil, err
	}
	if littleEndian && uintptr(unsafe.Pointer(&b[0]))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4), nil
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, nil
}

// typed returns the bytes of the tensor called name after checking its
// dtype and shape.
func (f *File) typed(name string, dt DType, shape []int) ([]byte, error) {
	e, err := f.lookup(name)
	if err != nil {
		return nil, err
	}
	if err := checkShape(f.path, e.info, shape); err != nil {
		return nil, err
	}
	if e.info.DType != dt {
		return nil, newError(f.path, name, ErrDType, "dtype %s, want %s", e.info.DTypeName, dt)
	}
	return f.data[e.begin:e.end:e.end], nil
}

// BF16 returns the BF16 tensor called name in place; see File.BF16.
func (c *Checkpoint) BF16(name string, shape ...int) ([]uint16, error) {
	f, err := c.shard(name)
	if err != nil {
		return nil, err
	}
	return f.BF16(name, shape...)
}

// F32 returns the F32 tensor called name in place; see File.F32.
func (c *Checkpoint) F32(name string, shape ...int) ([]float32, error) {
	f, err := c.shard(name)
	if err != nil {
		return nil, err
	}
	return f.F32(name, shape...)
}
