package safetensors

import "fmt"

// DType is the element type of a tensor, as spelled in a safetensors header.
//
// The numeric order of the constants is the reference library's alignment
// order (smallest first); Write relies on it to lay tensors out so that every
// tensor starts at a multiple of its element size.
type DType uint8

// The element types this package knows. Invalid marks a dtype string this
// package does not know (for example F4 or C64): such a tensor can be listed
// and inspected with Info, but Bytes and Float32 refuse it, because its size in
// bytes cannot be checked against its shape.
const (
	Invalid DType = iota
	Bool          // "BOOL", one byte, 0 or 1
	U8            // "U8"
	I8            // "I8"
	F8E5M2        // "F8_E5M2", OCP FP8 with 5 exponent bits (has Inf and NaN)
	F8E4M3        // "F8_E4M3", OCP FP8 e4m3fn (no Inf, NaN = S.1111.111, max 448)
	F8E8M0        // "F8_E8M0", power-of-two scale 2^(b-127), 0xFF = NaN (MX formats)
	I16           // "I16"
	U16           // "U16"
	F16           // "F16", IEEE binary16
	BF16          // "BF16", bfloat16: the top half of a binary32
	I32           // "I32"
	U32           // "U32"
	F32           // "F32", IEEE binary32
	F64           // "F64", IEEE binary64
	I64           // "I64"
	U64           // "U64"
)

var dtypeNames = [...]string{
	Invalid: "INVALID",
	Bool:    "BOOL",
	U8:      "U8",
	I8:      "I8",
	F8E5M2:  "F8_E5M2",
	F8E4M3:  "F8_E4M3",
	F8E8M0:  "F8_E8M0",
	I16:     "I16",
	U16:     "U16",
	F16:     "F16",
	BF16:    "BF16",
	I32:     "I32",
	U32:     "U32",
	F32:     "F32",
	F64:     "F64",
	I64:     "I64",
	U64:     "U64",
}

var dtypeSizes = [...]int{
	Bool: 1, U8: 1, I8: 1, F8E5M2: 1, F8E4M3: 1, F8E8M0: 1,
	I16: 2, U16: 2, F16: 2, BF16: 2,
	I32: 4, U32: 4, F32: 4,
	F64: 8, I64: 8, U64: 8,
}

// String returns the dtype as the safetensors header spells it ("BF16").
func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Size returns the size of one element in bytes, or 0 for Invalid.
func (d DType) Size() int {
	if int(d) < len(dtypeSizes) {
		return dtypeSizes[d]
	}
	return 0
}

// IsFloat reports whether Float32 can convert tensors of this dtype.
func (d DType) IsFloat() bool {
	switch d {
	case F8E5M2, F8E4M3, F8E8M0, F16, BF16, F32, F64:
		return true
	}
	return false
}

// ParseDType returns the DType spelled s in a safetensors header, or
// Invalid and false if this package does not know it.
func ParseDType(s string) (DType, bool) {
	for d := Bool; int(d) < len(dtypeNames); d++ {
		if dtypeNames[d] == s {
			return d, true
		}
	}
	return Invalid, false
}
