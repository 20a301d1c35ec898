// Package numeric converts float32 to and from the number formats the state
// cache stores checkpoints and read copies in (docs/DESIGN.md 2.4): fp16, bf16, fp8
// (e4m3fn and e5m2) and NVFP4, with round-to-nearest-even or stochastic
// rounding. It also names those formats (Format) for the rest of the project.
//
// # Formats
//
// Every conversion from float32 is a single correct rounding of the float32
// input; no format is reached through another (double rounding would move
// ties). The exact rules:
//
//   - fp16: IEEE 754 binary16 (1 sign, 5 exponent bits, bias 15, 10 mantissa
//     bits), round to nearest, ties to even, with IEEE overflow: magnitudes
//     from 65520 (the midpoint between 65504 and 2^16) up round to ±Inf.
//     Subnormals down to 2^-24 are produced and decoded exactly.
//   - bf16: the top 16 bits of the float32, rounded to nearest even; overflow
//     goes to ±Inf as in IEEE. float32 subnormals round like any other value.
//   - fp8 e4m3fn (OCP 8-bit floating point, "E4M3"): bias 7, 3 mantissa bits,
//     no infinities, S.1111.111 (0x7f, 0xff) is NaN, largest finite 448,
//     subnormals down to 2^-9. Encoding rounds to nearest even and then
//     saturates: a finite value whose magnitude rounds above 448 becomes ±448,
//     as NVIDIA's "satfinite" conversion does, and ±Inf becomes ±448 too.
//   - fp8 e5m2 (OCP "E5M2"): bias 15, 2 mantissa bits, ±Inf are 0x7c/0xfc,
//     largest finite 57344, subnormals down to 2^-16. Encoding rounds to
//     nearest even and saturates finite overflow to ±57344; ±Inf stays ±Inf.
//     (CUDA's __NV_SATFINITE conversion turns ±Inf into ±57344 instead, so a
//     GPU encoder built on it agrees with this one except on infinities.)
//   - e2m1 (the 4-bit element of NVFP4): magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}
//     with magnitude index 0..7 in that order; the 4-bit code is
//     sign<<3 | index. Encoding rounds to the nearest grid value, ties to the
//     even index (the ties 0.25, 0.75, 1.25, 1.75, 2.5, 3.5 and 5 give 0, 1,
//     1, 2, 2, 4 and 4), and
//     saturates at ±6 (±Inf too). e2m1 has no NaN: NaN encodes as code 0.
//
// # NaN
//
// A NaN input keeps its sign and becomes the format's canonical quiet NaN:
// 0x7e00 for fp16, 0x7fc0 for bf16, 0x7f for e4m3 and 0x7e for e5m2 (the
// quiet bit, the top mantissa bit, set; payloads are dropped), each with the
// sign bit 0x8000 or 0x80 added for a negative NaN. Decoding any NaN code
// gives a float32 NaN.
//
// # NVFP4
//
// NVFP4 (docs/DESIGN.md 2.4) stores a tensor as e2m1 codes in blocks of 16
// contiguous elements, one positive e4m3 scale per block and one float32
// global scale per tensor:
//
//	global = amax / (6·448)                amax: largest finite |x| in the tensor
//	S_b    = e4m3(amax_b / (6·global))     amax_b: largest finite |x| in block b
//	D_b    = S_b·global                    (one float32 rounding)
//	code   = e2m1(x / D_b)                 x̂ = e2m1value(code)·D_b
//
// all in float32 arithmetic. Codes are packed two per byte: element 2i in the
// low nibble and element 2i+1 in the high nibble of byte i. If amax is 0
// (or global underflows to 0) the global scale, every block scale and every
// code are 0. A block whose scale rounds to 0 stores code 0 for all its
// elements, so zero blocks decode to +0. NaN elements are left out of the
// amax and encode as code 0; ±Inf elements are left out of the amax and
// saturate to ±6·D_b (to 0 in a block whose scale is 0). A tensor whose
// length n is not a multiple of 16 ends with a short block that has its own
// scale, as if padded with zeros; it then takes ceil(n/2) packed bytes (an
// odd n leaves the last high nibble 0) and ceil(n/16) scales. NVFP4Bytes
// gives the total.
//
// Quantising dequantised data gives back the same codes and scales, bit for
// bit, in every block whose scale is zero or a normal e4m3 value, that is
// whose amax is at least about 2^-6/448 ≈ 3.5e-5 of the tensor's (the
// global scale may move by a float32 ulp). Below that the block scale is an
// e4m3 subnormal, rounded so coarsely that the block's largest element may
// get code 3 or 4 instead of 6, and re-quantising can pick another scale.
// An amax below about 3e-35 makes global a float32 subnormal, with less
// precision.
//
// # Stochastic rounding
//
// Stochastic rounds a value to one of its two representable neighbours with
// probability proportional to proximity, exactly (the decision compares the
// discarded bits with uniform random bits of the same width), so the rounded
// value is an unbiased estimate of the input. Finite inputs beyond a format's
// largest finite value saturate to it (a stochastically rounded checkpoint
// must not become infinite); infinities and NaN follow the round-to-nearest
// rules above.
//
// # Bulk conversion
//
// The Encode* and Decode* functions convert whole slices without allocating.
// Passing slices of different lengths is a programming error and panics; so
// does passing NVFP4 buffers of the wrong size.
package numeric
