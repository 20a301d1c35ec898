package tensor

import (
	"fmt"
	"math"

	"github.com/replayssm/replayssm/numeric"
)

// DType is the element type of a product's weights.
type DType uint8

// The weight formats: float32, and bfloat16 (the top half of a float32,
// the format models are released in).
const (
	Float32 DType = iota
	BFloat16
)

// String names the format as the command line does ("fp32", "bf16").
func (t DType) String() string {
	switch t {
	case Float32:
		return "fp32"
	case BFloat16:
		return "bf16"
	}
	return fmt.Sprintf("DType(%d)", uint8(t))
}

// Size is the bytes of one value.
func (t DType) Size() int {
	if t == BFloat16 {
		return 2
	}
	return 4
}

// Weights are the values of a product's weight matrix (or a run of them),
// row-major, in the format the checkpoint stores them: float32 in F32, or
// bfloat16 bits in BF16. A Weights with BF16 set is bfloat16; otherwise it
// is F32. Either slice may point into a read-only memory-mapped checkpoint.
type Weights struct {
	F32  []float32
	BF16 []uint16
}

// DType is the format of w's values.
func (w Weights) DType() DType {
	if w.BF16 != nil {
		return BFloat16
	}
	return Float32
}

// Len is the number of values.
func (w Weights) Len() int {
	if w.BF16 != nil {
		return len(w.BF16)
	}
	return len(w.F32)
}

// Bytes is the memory the values take.
func (w Weights) Bytes() int64 { return int64(w.Len()) * int64(w.DType().Size()) }

// Slice returns values [lo, hi), sharing w's memory (capacity hi−lo, so
// that an append copies).
func (w Weights) Slice(lo, hi int) Weights {
	if w.BF16 != nil {
		return Weights{BF16: w.BF16[lo:hi:hi]}
	}
	return Weights{F32: w.F32[lo:hi:hi]}
}

// At is value i as float32.
func (w Weights) At(i int) float32 {
	if w.BF16 != nil {
		return bf16(w.BF16[i])
	}
	return w.F32[i]
}

// Float32 returns the values as float32: F32 itself, or BF16 widened (exact)
// into a new slice.
func (w Weights) Float32() []float32 {
	if w.BF16 == nil {
		return w.F32
	}
	f := make([]float32, len(w.BF16))
	WidenBF16(f, w.BF16)
	return f
}

// Round returns w in format t: bfloat16 rounds float32 to nearest even (in a
// new slice), float32 widens bfloat16 exactly; w itself when it is already t.
func (w Weights) Round(t DType) Weights {
	if w.DType() == t {
		return w
	}
	if t == Float32 {
		return Weights{F32: w.Float32()}
	}
	b := make([]uint16, len(w.F32))
	numeric.EncodeBF16(b, w.F32)
	return Weights{BF16: b}
}

// Concat returns the values of ws one after another, in new memory, in
// their common format (float32 when the formats differ: widening is exact).
func Concat(ws ...Weights) Weights {
	n, t := 0, BFloat16
	for _, w := range ws {
		n += w.Len()
		if w.DType() != BFloat16 {
			t = Float32
		}
	}
	if t == BFloat16 {
		out := make([]uint16, 0, n)
		for _, w := range ws {
			out = append(out, w.BF16...)
		}
		return Weights{BF16: out}
	}
	out := make([]float32, n)
	at := 0
	for _, w := range ws {
		if w.BF16 != nil {
			WidenBF16(out[at:at+w.Len()], w.BF16)
		} else {
			copy(out[at:], w.F32)
		}
		at += w.Len()
	}
	return Weights{F32: out}
}

// IsFinite reports whether every value is finite, and the index of the
// first that is not.
func (w Weights) IsFinite() (int, bool) {
	if w.BF16 != nil {
		for i, b := range w.BF16 {
			if b&0x7f80 == 0x7f80 { // exponent all ones: ±Inf or NaN
				return i, false
			}
		}
		return 0, true
	}
	for i, v := range w.F32 {
		if v-v != 0 {
			return i, false
		}
	}
	return 0, true
}

// bf16 widens one bfloat16 value to float32 (exact).
func bf16(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// WidenBF16 sets dst[i] to the float32 value of the bfloat16 bits src[i]
// (exact), for i < len(dst).
func WidenBF16(dst []float32, src []uint16) { widenBF16(dst, src[:len(dst)]) }

func widenBF16Go(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, b := range src {
		dst[i] = bf16(b)
	}
}
