package cuda

import (
	"encoding/binary"
	"errors"
	"math"
)

// Limits of one kernel's arguments. 4 KiB is the classic CUDA parameter
// limit, which every architecture accepts.
const (
	maxArgs     = 64
	maxArgBytes = 4096
)

// errArgsFull is recorded by an Args that ran out of room; Launch returns it.
var errArgsFull = errors.New("cuda: kernel arguments exceed 64 values or 4096 bytes")

// Args builds a kernel's argument list in the order of the kernel's
// parameters. It is a plain value (no allocation): declare one per launch
// site and Reset it, or build it once and launch it many times.
//
//	var a cuda.Args
//	a.Ptr(y); a.Ptr(x); a.F32(alpha); a.U64(uint64(n))
//	err := dev.Launch(fn, grid, block, 0, s, &a)
//
// Each value is stored at its natural alignment; the types must match the
// kernel's C parameter types exactly (int → I32, size_t → U64, float* → Ptr).
// Overflowing the limits is reported by Launch, not by a panic.
type Args struct {
	n    int
	size int
	err  error
	off  [maxArgs]uint16
	data [maxArgBytes]byte
}

// Reset empties a for reuse.
func (a *Args) Reset() { a.n, a.size, a.err = 0, 0, nil }

// Len is the number of arguments added.
func (a *Args) Len() int { return a.n }

// slot reserves size bytes aligned to align and returns them, or nil after
// recording errArgsFull.
func (a *Args) slot(size, align int) []byte {
	off := (a.size + align - 1) &^ (align - 1)
	if a.err != nil || a.n >= maxArgs || off+size > maxArgBytes {
		a.err = errArgsFull
		return nil
	}
	// Padding is zeroed: a deferred stream compares argument bytes, and
	// stale bytes of an earlier launch there would tell equal launches apart.
	clear(a.data[a.size:off])
	a.off[a.n] = uint16(off)
	a.n++
	a.size = off + size
	return a.data[off : off+size]
}

// Ptr adds a device pointer to the start of b (any T* parameter).
func (a *Args) Ptr(b Buffer) { a.U64(b.ptr) }

// I32 adds an int parameter.
func (a *Args) I32(v int32) { a.U32(uint32(v)) }

// U32 adds an unsigned int parameter.
func (a *Args) U32(v uint32) {
	if s := a.slot(4, 4); s != nil {
		binary.LittleEndian.PutUint32(s, v)
	}
}

// I64 adds a long long (int64_t) parameter.
func (a *Args) I64(v int64) { a.U64(uint64(v)) }

// U64 adds an unsigned long long or size_t parameter.
func (a *Args) U64(v uint64) {
	if s := a.slot(8, 8); s != nil {
		binary.LittleEndian.PutUint64(s, v)
	}
}

// F32 adds a float parameter.
func (a *Args) F32(v float32) { a.U32(math.Float32bits(v)) }

// F64 adds a double parameter.
func (a *Args) F64(v float64) { a.U64(math.Float64bits(v)) }

// Bytes adds a by-value struct parameter (for example a CUtensorMap, 128
// bytes aligned to 64) laid out exactly as the kernel's C struct. align must
// be a power of two no larger than 128.
func (a *Args) Bytes(v []byte, align int) {
	if align <= 0 || align > 128 || align&(align-1) != 0 {
		a.err = errors.New("cuda: Args.Bytes: alignment must be a power of two in [1, 128]")
		return
	}
	if s := a.slot(len(v), align); s != nil {
		copy(s, v)
	}
}
