//go:build !amd64 || noasm

package replay

import "github.com/replayssm/replayssm/numeric"

const simdCodec = false

func decodeF16(dst []float32, src []uint16)                { numeric.DecodeF16(dst, src) }
func encodeF16(dst []uint16, src []float32)                { numeric.EncodeF16(dst, src) }
func decodeE4M3(dst []float32, src []uint8, scale float32) { numeric.DecodeE4M3(dst, src, scale) }
func encodeE4M3(dst []uint8, src []float32, inv float32)   { numeric.EncodeE4M3(dst, src, inv) }
func absMax(x []float32) float32                           { return absMaxGo(x) }

func dotRowsF16SIMD(S []uint16, n int, v []float32, out []float32) bool                { return false }
func dotRowsE4M3SIMD(S []uint8, scale float32, n int, v []float32, out []float32) bool { return false }

func dotRowsF16PairSIMD(S []uint16, n int, v, w []float32, out, out2 []float32) bool { return false }
func dotRowsE4M3PairSIMD(S []uint8, scale float32, n int, v, w []float32, out, out2 []float32) bool {
	return false
}

func updateRowsF16(S []uint16, n int, a float32, c, B, C, out []float32) bool { return false }
