package numeric

import (
	"errors"
	"fmt"
	"strings"
)

// Format names a number format a tensor is stored in. The zero value is F32.
type Format uint8

// The formats the state cache can store (docs/DESIGN.md 2.4).
const (
	F32   Format = iota // IEEE 754 binary32
	F16                 // IEEE 754 binary16
	BF16                // bfloat16: the top half of a float32
	E4M3                // OCP fp8 e4m3fn, saturating
	E5M2                // OCP fp8 e5m2
	NVFP4               // e2m1 elements, e4m3 scale per 16 elements, float32 scale per tensor
)

// ErrUnknownFormat is returned (wrapped) by ParseFormat for a name it does not know.
var ErrUnknownFormat = errors.New("unknown number format")

var formatNames = [...]string{
	F32:   "fp32",
	F16:   "fp16",
	BF16:  "bf16",
	E4M3:  "fp8-e4m3",
	E5M2:  "fp8-e5m2",
	NVFP4: "nvfp4",
}

// String returns the format's canonical name: "fp32", "fp16", "bf16",
// "fp8-e4m3", "fp8-e5m2" or "nvfp4"; "Format(N)" for an unknown value.
func (f Format) String() string {
	if int(f) < len(formatNames) {
		return formatNames[f]
	}
	return fmt.Sprintf("Format(%d)", uint8(f))
}

// ParseFormat returns the format named s, ignoring case. It accepts the
// canonical names String returns and the aliases "f32", "float32", "f16",
// "float16", "half", "bfloat16", "fp8" (which means e4m3), "e4m3",
// "e4m3fn", "fp8-e4m3fn" and "e5m2".
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "fp32", "f32", "float32":
		return F32, nil
	case "fp16", "f16", "float16", "half":
		return F16, nil
	case "bf16", "bfloat16":
		return BF16, nil
	case "fp8-e4m3", "fp8", "e4m3", "fp8-e4m3fn", "e4m3fn":
		return E4M3, nil
	case "fp8-e5m2", "e5m2":
		return E5M2, nil
	case "nvfp4":
		return NVFP4, nil
	}
	return 0, fmt.Errorf("parse format %q: %w", s, ErrUnknownFormat)
}

// BitsPerElement returns the storage cost of one element in bits, scales
// included: 32, 16, 16, 8, 8 and 4.5 for NVFP4 (4 bits plus an 8-bit scale
// per 16 elements; the per-tensor float32 scale is not counted). It returns
// 0 for an unknown format.
func (f Format) BitsPerElement() float64 {
	switch f {
	case F32:
		return 32
	case F16, BF16:
		return 16
	case E4M3, E5M2:
		return 8
	case NVFP4:
		return 4.5
	}
	return 0
}

// MarshalText implements encoding.TextMarshaler with the canonical name, so
// a Format reads well in JSON configs and works with flag.TextVar.
func (f Format) MarshalText() ([]byte, error) {
	if int(f) >= len(formatNames) {
		return nil, fmt.Errorf("marshal %v: %w", f, ErrUnknownFormat)
	}
	return []byte(formatNames[f]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseFormat.
func (f *Format) UnmarshalText(text []byte) error {
	v, err := ParseFormat(string(text))
	if err != nil {
		return err
	}
	*f = v
	return nil
}
