package replay

import (
	"fmt"

	"github.com/replayssm/replayssm/numeric"
)

// matrices holds a set of equally sized state matrices (one per slot, state
// buffer and head) in one number format. fp8 matrices carry one scale each
// (amax/448, so the largest element maps to the top of the e4m3 range); nvfp4
// matrices carry one global scale each plus their block scales.
type matrices struct {
	format numeric.Format
	elems  int // elements per matrix
	count  int

	f32    []float32
	u16    []uint16  // fp16, bf16
	u8     []uint8   // e4m3 codes, or nvfp4 packed codes
	scales []uint8   // nvfp4 block scales (e4m3 codes), elems/16 per matrix
	scale  []float32 // per matrix: e4m3 scale or nvfp4 global scale
}

func newMatrices(format numeric.Format, elems, count int) (*matrices, error) {
	m := &matrices{format: format, elems: elems, count: count}
	n := elems * count
	switch format {
	case numeric.F32:
		m.f32 = make([]float32, n)
	case numeric.F16, numeric.BF16:
		m.u16 = make([]uint16, n)
	case numeric.E4M3:
		m.u8 = make([]uint8, n)
		m.scale = make([]float32, count)
	case numeric.NVFP4:
		if elems%16 != 0 {
			return nil, fmt.Errorf("nvfp4 needs matrices of a multiple of 16 elements, have %d", elems)
		}
		m.u8 = make([]uint8, n/2)
		m.scales = make([]uint8, n/16)
		m.scale = make([]float32, count)
	default:
		return nil, fmt.Errorf("format %v cannot hold state", format)
	}
	return m, nil
}

// bytesPerMatrix is what reading or writing one matrix moves.
func (m *matrices) bytesPerMatrix() int {
	switch m.format {
	case numeric.F32:
		return 4 * m.elems
	case numeric.F16, numeric.BF16:
		return 2 * m.elems
	case numeric.E4M3:
		return m.elems + 4
	case numeric.NVFP4:
		return m.elems/2 + m.elems/16 + 4
	}
	return 0
}

// raw returns matrix i as float32 when the store is fp32, else nil.
func (m *matrices) raw(i int) []float32 {
	if m.f32 == nil {
		return nil
	}
	return m.f32[i*m.elems : (i+1)*m.elems]
}

// load decodes matrix i into dst (len elems).
func (m *matrices) load(i int, dst []float32) {
	e := m.elems
	switch m.format {
	case numeric.F32:
		copy(dst, m.f32[i*e:(i+1)*e])
	case numeric.F16:
		decodeF16(dst, m.u16[i*e:(i+1)*e])
	case numeric.BF16:
		decodeBF16(dst, m.u16[i*e:(i+1)*e])
	case numeric.E4M3:
		decodeE4M3(dst, m.u8[i*e:(i+1)*e], m.scale[i])
	case numeric.NVFP4:
		numeric.DequantizeNVFP4(dst, m.u8[i*e/2:(i+1)*e/2], m.scales[i*e/16:(i+1)*e/16], m.scale[i])
	}
}

// store encodes src (len elems) into matrix i, rounding to nearest even, or
// stochastically when sr is not nil.
func (m *matrices) store(i int, src []float32, sr *numeric.Stochastic) {
	e := m.elems
	switch m.format {
	case numeric.F32:
		copy(m.f32[i*e:(i+1)*e], src)
	case numeric.F16:
		if sr != nil {
			sr.EncodeF16(m.u16[i*e:(i+1)*e], src)
		} else {
			encodeF16(m.u16[i*e:(i+1)*e], src)
		}
	case numeric.BF16:
		if sr != nil {
			sr.EncodeBF16(m.u16[i*e:(i+1)*e], src)
		} else {
			encodeBF16(m.u16[i*e:(i+1)*e], src)
		}
	case numeric.E4M3:
		amax := absMax(src)
		scale := amax / 448
		inv := float32(0)
		if scale > 0 {
			inv = 1 / scale
		}
		m.scale[i] = scale
		if sr != nil {
			sr.EncodeE4M3(m.u8[i*e:(i+1)*e], src, inv)
		} else {
			encodeE4M3(m.u8[i*e:(i+1)*e], src, inv)
		}
	case numeric.NVFP4:
		m.scale[i] = quantizeNVFP4(m.u8[i*e/2:(i+1)*e/2], m.scales[i*e/16:(i+1)*e/16], src)
	}
}

// zero clears matrix i.
func (m *matrices) zero(i int) {
	e := m.elems
	switch m.format {
	case numeric.F32:
		clear(m.f32[i*e : (i+1)*e])
	case numeric.F16, numeric.BF16:
		clear(m.u16[i*e : (i+1)*e])
	case numeric.E4M3:
		clear(m.u8[i*e : (i+1)*e])
		m.scale[i] = 0
	case numeric.NVFP4:
		clear(m.u8[i*e/2 : (i+1)*e/2])
		clear(m.scales[i*e/16 : (i+1)*e/16])
		m.scale[i] = 0
	}
}

// copyMatrix copies matrix src of o into matrix dst of m (same format).
func (m *matrices) copyMatrix(dst int, o *matrices, src int) {
	e := m.elems
	switch m.format {
	case numeric.F32:
		copy(m.f32[dst*e:(dst+1)*e], o.f32[src*e:(src+1)*e])
	case numeric.F16, numeric.BF16:
		copy(m.u16[dst*e:(dst+1)*e], o.u16[src*e:(src+1)*e])
	case numeric.E4M3:
		copy(m.u8[dst*e:(dst+1)*e], o.u8[src*e:(src+1)*e])
		m.scale[dst] = o.scale[src]
	case numeric.NVFP4:
		copy(m.u8[dst*e/2:(dst+1)*e/2], o.u8[src*e/2:(src+1)*e/2])
		copy(m.scales[dst*e/16:(dst+1)*e/16], o.scales[src*e/16:(src+1)*e/16])
		m.scale[dst] = o.scale[src]
	}
}

// bytes returns the encoded bytes of matrices [first, first+n) as one blob,
// appended to dst, for export.
func (m *matrices) appendBytes(dst []byte, first, n int) []byte {
	e := m.elems
	switch m.format {
	case numeric.F32:
		for _, v := range m.f32[first*e : (first+n)*e] {
			dst = appendF32(dst, v)
		}
	case numeric.F16, numeric.BF16:
		for _, v := range m.u16[first*e : (first+n)*e] {
			dst = append(dst, byte(v), byte(v>>8))
		}
	case numeric.E4M3:
		dst = append(dst, m.u8[first*e:(first+n)*e]...)
		for _, s := range m.scale[first : first+n] {
			dst = appendF32(dst, s)
		}
	case numeric.NVFP4:
		dst = append(dst, m.u8[first*e/2:(first+n)*e/2]...)
		dst = append(dst, m.scales[first*e/16:(first+n)*e/16]...)
		for _, s := range m.scale[first : first+n] {
			dst = appendF32(dst, s)
		}
	}
	return dst
}

// encodedBytes is the length of n matrices as appendBytes writes them.
func (m *matrices) encodedBytes(n int) int {
	e := m.elems
	switch m.format {
	case numeric.F32:
		return 4 * n * e
	case numeric.F16, numeric.BF16:
		return 2 * n * e
	case numeric.E4M3:
		return n*e + 4*n
	case numeric.NVFP4:
		return n*e/2 + n*e/16 + 4*n
	}
	return 0
}

// readBytes is the inverse of appendBytes; it returns the rest of src.
func (m *matrices) readBytes(src []byte, first, n int) ([]byte, error) {
	e := m.elems
	need := m.encodedBytes(n)
	if len(src) < need {
		return nil, fmt.Errorf("state blob holds %d bytes, want %d for %d %v matrices", len(src), need, n, m.format)
	}
	switch m.format {
	case numeric.F32:
		for i := range m.f32[first*e : (first+n)*e] {
			m.f32[first*e+i], src = readF32(src)
		}
	case numeric.F16, numeric.BF16:
		for i := range m.u16[first*e : (first+n)*e] {
			m.u16[first*e+i] = uint16(src[0]) | uint16(src[1])<<8
			src = src[2:]
		}
	case numeric.E4M3:
		src = src[copy(m.u8[first*e:(first+n)*e], src):]
		for i := range n {
			m.scale[first+i], src = readF32(src)
		}
	case numeric.NVFP4:
		src = src[copy(m.u8[first*e/2:(first+n)*e/2], src):]
		src = src[copy(m.scales[first*e/16:(first+n)*e/16], src):]
		for i := range n {
			m.scale[first+i], src = readF32(src)
		}
	}
	return src, nil
}

// absMaxGo is the largest |x[i]|, NaN left out (a comparison with NaN is
// false), Inf counted.
func absMaxGo(x []float32) float32 {
	var m float32
	for _, v := range x {
		if v < 0 {
			v = -v
		}
		if v > m {
			m = v
		}
	}
	return m
}
