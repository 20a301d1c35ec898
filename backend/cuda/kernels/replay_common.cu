// replay_common.cu: the pieces shared by the ReplaySSM state-cache kernels
// (replay_mamba2.cu, replay_gdn.cu). The Go side compiles this file
// concatenated in front of one layer's file, with the layer shape and formats
// as -D defines, so every loop over a state matrix has compile-time bounds and
// a flush keeps its share of the new state in registers.
//
// Defines every module gets:
//   ROWS, COLS   one state matrix per CTA: Mamba-2 P x N, GDN dv x dk (the
//                transposed layout of package replay: COLS contiguous)
//   NT           threads per CTA (a multiple of 32)
//   STATE_FMT    checkpoint / baseline state: 0 fp32, 1 bf16
//   READ_FMT     read copy: 0 none, 2 nvfp4
//   RMAX         ring entries per slot (window L + max drafts)
//   TMAX         largest number of drafts of one verify (>= 1)
//
// Number formats follow package numeric bit for bit where it matters: bf16
// rounds to nearest even, NVFP4 quantises with the same float32 operations as
// numeric.QuantizeNVFP4 (global = amax/2688, block scale e4m3(amax_b/(6 global)),
// code e2m1(x/(scale global))), codes packed with element 2i in the low nibble.

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;
typedef unsigned long long u64;

#define FMT_F32 0
#define FMT_BF16 1
#define FMT_NVFP4 2

#define FULL_MASK 0xffffffffu
#define NWARPS (NT / 32)

// ---- bf16 ----

__device__ __forceinline__ float bf16_lo(u32 w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(u32 w) { return __uint_as_float(w & 0xffff0000u); }

// f32_to_bf16 rounds to nearest even; NaN becomes the canonical quiet NaN
// with its sign (numeric.EncodeBF16).
__device__ __forceinline__ u32 f32_to_bf16(float f)
{
    const u32 b = __float_as_uint(f);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return ((b >> 16) & 0x8000u) | 0x7fc0u;
    }
    return (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
}

// ---- state formats: VEC consecutive elements per 16-byte access ----

template <int FMT> struct StateIO;

template <> struct StateIO<FMT_F32> {
    typedef float T;
    static constexpr int VEC = 4;
    static constexpr int BYTES = 4;
    __device__ static __forceinline__ void load(const float* p, u64 e, float* v)
    {
        const float4 x = *reinterpret_cast<const float4*>(p + e);
        v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w;
    }
    // unpack decodes a raw 16-byte chunk (a prefetch kept in registers).
    __device__ static __forceinline__ void unpack(uint4 x, float* v)
    {
        v[0] = __uint_as_float(x.x); v[1] = __uint_as_float(x.y);
        v[2] = __uint_as_float(x.z); v[3] = __uint_as_float(x.w);
    }
    // store writes v and leaves in v what was stored (identity for fp32).
    __device__ static __forceinline__ void store(float* p, u64 e, float* v)
    {
        *reinterpret_cast<float4*>(p + e) = make_float4(v[0], v[1], v[2], v[3]);
    }
};

template <> struct StateIO<FMT_BF16> {
    typedef u16 T;
    static constexpr int VEC = 8;
    static constexpr int BYTES = 2;
    __device__ static __forceinline__ void load(const u16* p, u64 e, float* v)
    {
        const uint4 x = *reinterpret_cast<const uint4*>(p + e);
        v[0] = bf16_lo(x.x); v[1] = bf16_hi(x.x);
        v[2] = bf16_lo(x.y); v[3] = bf16_hi(x.y);
        v[4] = bf16_lo(x.z); v[5] = bf16_hi(x.z);
        v[6] = bf16_lo(x.w); v[7] = bf16_hi(x.w);
    }
    __device__ static __forceinline__ void unpack(uint4 x, float* v)
    {
        v[0] = bf16_lo(x.x); v[1] = bf16_hi(x.x);
        v[2] = bf16_lo(x.y); v[3] = bf16_hi(x.y);
        v[4] = bf16_lo(x.z); v[5] = bf16_hi(x.z);
        v[6] = bf16_lo(x.w); v[7] = bf16_hi(x.w);
    }
    __device__ static __forceinline__ void store(u16* p, u64 e, float* v)
    {
        u32 w[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const u32 lo = f32_to_bf16(v[2 * i]), hi = f32_to_bf16(v[2 * i + 1]);
            w[i] = lo | (hi << 16);
            v[2 * i] = __uint_as_float(lo << 16);
            v[2 * i + 1] = __uint_as_float(hi << 16);
        }
        *reinterpret_cast<uint4*>(p + e) = make_uint4(w[0], w[1], w[2], w[3]);
    }
};

// ---- asynchronous global -> shared copies (sm_80+) ----
//
// The non-flush step kernels gather the ring with these, so the gather holds
// no registers and its loads are in flight together with the state prefetch.
// gmem is a generic pointer to global memory (the same address on sm_80+).

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem)
{
    const u32 sa = (u32)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async4(void* smem, const void* gmem)
{
    const u32 sa = (u32)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(sa), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// NF_VARIANT (a -D define, default 4) picks the Mamba-2 non-flush step
// kernel: 3 = v3 (ring gather, then the state), 4 = v4 (state prefetched
// into registers first, ring by cp.async). See NOTES.md.
#ifndef NF_VARIANT
#define NF_VARIANT 4
#endif

// ---- thread-to-element mapping of one ROWS x COLS matrix ----
//
// A row is split into chunks of VEC elements; LANES consecutive lanes of a
// warp share a row (each owning CPL chunks strided by LANES, so one warp
// access covers LANES*VEC contiguous elements per row), a warp covers RPW
// rows, and the CTA covers RPP rows per pass. Row dot products reduce over
// the LANES lanes with xor shuffles: fixed order, deterministic.
template <int VEC_, int COLS_, int ROWS_>
struct Map {
    static constexpr int VEC = VEC_;
    static constexpr int CHUNKS = COLS_ / VEC_;
    static constexpr int LANES = CHUNKS < 8 ? CHUNKS : 8;
    static constexpr int CPL = CHUNKS / LANES;
    static constexpr int RPW = 32 / LANES;
    static constexpr int RPP = NWARPS * RPW;
    static constexpr int PASSES = (ROWS_ + RPP - 1) / RPP;
    __device__ static __forceinline__ int row(int pass)
    {
        return pass * RPP + (int)(threadIdx.x >> 5) * RPW + (int)(threadIdx.x & 31) / LANES;
    }
    __device__ static __forceinline__ int lane() { return (int)(threadIdx.x & 31) % LANES; }
    __device__ static __forceinline__ int col(int c) { return (c * LANES + lane()) * VEC; }
};

template <int LANES>
__device__ __forceinline__ float lanes_sum(float v)
{
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1) {
        v += __shfl_xor_sync(FULL_MASK, v, o);
    }
    return v;
}

template <int LANES>
__device__ __forceinline__ float lanes_max(float v)
{
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    }
    return v;
}

__device__ __forceinline__ float warp_sum(float v) { return lanes_sum<32>(v); }

__device__ __forceinline__ double warp_sum_d(double v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(FULL_MASK, v, o);
    }
    return v;
}

// block_max returns the largest v over the CTA to every thread. scratch holds
// NWARPS floats; the call contains two barriers.
__device__ __forceinline__ float block_max(float v, float* scratch)
{
    v = lanes_max<32>(v);
    if ((threadIdx.x & 31) == 0) {
        scratch[threadIdx.x >> 5] = v;
    }
    __syncthreads();
    float m = scratch[0];
#pragma unroll
    for (int w = 1; w < NWARPS; w++) {
        m = fmaxf(m, scratch[w]);
    }
    __syncthreads();
    return m;
}

// ---- scalar activations, in double as the CPU cache computes them ----

__device__ __forceinline__ double softplus_d(double x)
{
    // ssm.Softplus: log1p(exp(x)), linear above 20.
    return x > 20.0 ? x : log1p(exp(x));
}

__device__ __forceinline__ double sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }

// ---- fp8 e4m3 and e2m1 (numeric.E4M3FromF32, numeric.E2M1FromF32) ----

__device__ __forceinline__ u32 e4m3_from_f32(float f)
{
    const u32 b = __float_as_uint(f);
    const u32 sign = (b >> 24) & 0x80u;
    u32 a = b & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return sign | 0x7fu;
    }
    if (a >= 0x43e00000u) {
        return sign | 0x7eu;
    }
    if (a < 0x3c800000u) {
        const float r = __fadd_rn(__uint_as_float(a), 16384.0f);
        return sign | ((__float_as_uint(r) - 0x46800000u) & 0xffu);
    }
    a += 0xc407ffffu + ((a >> 20) & 1u);
    return sign | ((a >> 20) & 0xffu);
}

// f32_from_e4m3 decodes a non-NaN e4m3 code.
__device__ __forceinline__ float f32_from_e4m3(u32 c)
{
    const u32 e = (c >> 3) & 15u, m = c & 7u;
    const float mag = e == 0 ? (float)m * 0.001953125f : __uint_as_float(((e + 120u) << 23) | (m << 20));
    return (c & 0x80u) ? -mag : mag;
}

__device__ __forceinline__ u32 e2m1_from_f32(float f)
{
    const u32 b = __float_as_uint(f);
    const u32 a = b & 0x7fffffffu;
    u32 c = (a + 0xc11fffffu + ((a >> 22) & 1u)) >> 22;
    const u32 sub = __float_as_uint(__fadd_rn(__uint_as_float(a), 4194304.0f)) - 0x4a800000u;
    if (a < 0x3f800000u) {
        c = sub;
    }
    if (a >= 0x40c00000u) {
        c = 7u;
    }
    if (a > 0x7f800000u) {
        return 0u;
    }
    return ((b >> 28) & 8u) | (c & 7u);
}

// finite_abs is |x| for finite x and 0 for Inf and NaN, as
// numeric.QuantizeNVFP4 leaves them out of its maxima.
__device__ __forceinline__ float finite_abs(float x)
{
    const u32 a = __float_as_uint(x) & 0x7fffffffu;
    return a >= 0x7f800000u ? 0.0f : __uint_as_float(a);
}

// e2m1 magnitudes, signed by code bit 3: the read path decodes through a
// 16-entry shared-memory table (distinct codes hit distinct banks).
__device__ __forceinline__ void init_e2m1_lut(float* lut)
{
    if (threadIdx.x < 16) {
        const u32 m = threadIdx.x & 7u;
        const float v = m < 2 ? 0.5f * (float)m : __uint_as_float(((m >> 1) + 126u) << 23 | (m & 1u) << 22);
        lut[threadIdx.x] = (threadIdx.x & 8u) ? -v : v;
    }
}

// ---- NVFP4 write of the matrix a flush holds in registers ----
//
// v[PASSES][CPL][VEC] are this thread's elements in Map SM's layout. 16/VEC
// consecutive lanes share one 16-element block. codes: ROWS*COLS/2 bytes,
// scales: ROWS*COLS/16 bytes, *global: the matrix's float32 global scale.
// Returns with v replaced by the dequantised values (what a read of the copy
// gives). Contains barriers: every thread of the CTA must call it.
template <typename SM>
__device__ __forceinline__ void nvfp4_write(float (&v)[SM::PASSES][SM::CPL][SM::VEC],
                                            u8* codes, u8* scales, float* global, float* scratch)
{
    constexpr int VEC = SM::VEC;
    constexpr int BL = 16 / VEC; // lanes per block
    float amax = 0.0f;
#pragma unroll
    for (int pass = 0; pass < SM::PASSES; pass++) {
        if (SM::row(pass) < ROWS) {
#pragma unroll
            for (int c = 0; c < SM::CPL; c++) {
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    amax = fmaxf(amax, finite_abs(v[pass][c][k]));
                }
            }
        }
    }
    amax = block_max(amax, scratch);
    const float g = __fdiv_rn(amax, 2688.0f);
    const float sixg = __fmul_rn(6.0f, g);
    if (threadIdx.x == 0) {
        *global = g;
    }
#pragma unroll
    for (int pass = 0; pass < SM::PASSES; pass++) {
        const int r = SM::row(pass);
#pragma unroll
        for (int c = 0; c < SM::CPL; c++) {
            float bm = 0.0f;
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                bm = fmaxf(bm, finite_abs(v[pass][c][k]));
            }
            bm = lanes_max<BL>(bm);
            u32 s = 0;
            if (g != 0.0f) {
                s = e4m3_from_f32(__fdiv_rn(bm, sixg));
            }
            const float d = __fmul_rn(f32_from_e4m3(s), g);
            u32 packed = 0;
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                u32 q = 0;
                if (s != 0) {
                    q = e2m1_from_f32(__fdiv_rn(v[pass][c][k], d));
                }
                packed |= q << (4 * k);
                const u32 m = q & 7u;
                const float mag = m < 2 ? 0.5f * (float)m : __uint_as_float(((m >> 1) + 126u) << 23 | (m & 1u) << 22);
                v[pass][c][k] = __fmul_rn((q & 8u) ? -mag : mag, d);
            }
            if (r < ROWS) {
                const u64 e = (u64)r * COLS + SM::col(c);
                if (VEC == 4) {
                    *reinterpret_cast<u16*>(codes + e / 2) = (u16)packed;
                } else {
                    *reinterpret_cast<u32*>(codes + e / 2) = packed;
                }
                if ((SM::lane() % BL) == 0) {
                    scales[e / 16] = (u8)s;
                }
            }
        }
    }
}

// ---- row dot products from the read copy or the state ----
//
// dots_nvfp4 computes, for each row r of an NVFP4 matrix and each of nv
// vectors vec[a*vstride ...] in shared memory, out[a*ROWS + r] = row_r . vec_a.
// Blocks of 16 are decoded through lut and scaled once per block.
template <int NV>
__device__ __forceinline__ void dots_nvfp4(const u8* codes, const u8* scales, float global,
                                           const float* vec, int vstride, int nv, float* out, const float* lut)
{
    typedef Map<16, COLS, ROWS> RM;
#pragma unroll
    for (int pass = 0; pass < RM::PASSES; pass++) {
        const int r = RM::row(pass);
        float acc[NV];
#pragma unroll
        for (int a = 0; a < NV; a++) {
            acc[a] = 0.0f;
        }
#pragma unroll
        for (int c = 0; c < RM::CPL; c++) {
            const int col = RM::col(c);
            uint2 w = make_uint2(0, 0);
            float d = 0.0f;
            if (r < ROWS) {
                const u64 e = (u64)r * COLS + col;
                w = *reinterpret_cast<const uint2*>(codes + e / 2);
                d = __fmul_rn(f32_from_e4m3(scales[e / 16]), global);
            }
            float x[16];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                x[k] = lut[(w.x >> (4 * k)) & 15u];
                x[8 + k] = lut[(w.y >> (4 * k)) & 15u];
            }
#pragma unroll
            for (int a = 0; a < NV; a++) {
                if (a < nv) {
                    const float4* vp = reinterpret_cast<const float4*>(vec + a * vstride + col);
                    float part = 0.0f;
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        const float4 c4 = vp[q];
                        part = fmaf(x[4 * q], c4.x, part);
                        part = fmaf(x[4 * q + 1], c4.y, part);
                        part = fmaf(x[4 * q + 2], c4.z, part);
                        part = fmaf(x[4 * q + 3], c4.w, part);
                    }
                    acc[a] = fmaf(part, d, acc[a]);
                }
            }
        }
#pragma unroll
        for (int a = 0; a < NV; a++) {
            if (a < nv) {
                const float s = lanes_sum<RM::LANES>(acc[a]);
                if (r < ROWS && RM::lane() == 0) {
                    out[a * ROWS + r] = s;
                }
            }
        }
    }
}

// dots_state is dots_nvfp4 for a matrix in the state format.
template <int NV, int FMT>
__device__ __forceinline__ void dots_state(const typename StateIO<FMT>::T* S,
                                           const float* vec, int vstride, int nv, float* out)
{
    typedef StateIO<FMT> IO;
    typedef Map<IO::VEC, COLS, ROWS> SM;
#pragma unroll
    for (int pass = 0; pass < SM::PASSES; pass++) {
        const int r = SM::row(pass);
        float acc[NV];
#pragma unroll
        for (int a = 0; a < NV; a++) {
            acc[a] = 0.0f;
        }
#pragma unroll
        for (int c = 0; c < SM::CPL; c++) {
            const int col = SM::col(c);
            float x[IO::VEC];
            if (r < ROWS) {
                IO::load(S, (u64)r * COLS + col, x);
            } else {
#pragma unroll
                for (int k = 0; k < IO::VEC; k++) {
                    x[k] = 0.0f;
                }
            }
#pragma unroll
            for (int a = 0; a < NV; a++) {
                if (a < nv) {
                    const float4* vp = reinterpret_cast<const float4*>(vec + a * vstride + col);
#pragma unroll
                    for (int q = 0; q < IO::VEC / 4; q++) {
                        const float4 c4 = vp[q];
                        acc[a] = fmaf(x[4 * q], c4.x, acc[a]);
                        acc[a] = fmaf(x[4 * q + 1], c4.y, acc[a]);
                        acc[a] = fmaf(x[4 * q + 2], c4.z, acc[a]);
                        acc[a] = fmaf(x[4 * q + 3], c4.w, acc[a]);
                    }
                }
            }
        }
#pragma unroll
        for (int a = 0; a < NV; a++) {
            if (a < nv) {
                const float s = lanes_sum<SM::LANES>(acc[a]);
                if (r < ROWS && SM::lane() == 0) {
                    out[a * ROWS + r] = s;
                }
            }
        }
    }
}

// ---- cursors: the per-slot decisions live on the device ----
//
// A step kernel reads hist[slot] and decides flush or not per slot; these
// kernels then move the cursors, so a whole decode step (layer kernel +
// cursor kernel) can be captured in a CUDA graph with no host round trip.

// cursor_step: after a Step, hist = (hist+1 >= L) ? 0 : hist+1 (replay);
// pending drafts are dropped in both modes.
extern "C" __global__ void cursor_step(int* __restrict__ hist, int* __restrict__ pending,
                                       const int* __restrict__ slots, int batch, int L, int replay)
{
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= batch) {
        return;
    }
    const int s = slots[b];
    if (replay) {
        const int t = hist[s] + 1;
        hist[s] = t >= L ? 0 : t;
    }
    pending[s] = 0;
}

// cursor_verify: after a Verify of counts[b] (or T) drafts, a replay slot
// that folded its history early starts a new window (hist = 0, the drafts at
// entries 0..cnt-1); pending = cnt in both modes.
extern "C" __global__ void cursor_verify(int* __restrict__ hist, int* __restrict__ pending,
                                         const int* __restrict__ slots, const int* __restrict__ counts,
                                         int T, int batch, int R, int replay)
{
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= batch) {
        return;
    }
    const int s = slots[b];
    const int cnt = counts ? counts[b] : T;
    if (replay) {
        const int n = hist[s];
        if (n > 0 && n + 2 * cnt > R) {
            hist[s] = 0;
        }
    }
    pending[s] = cnt;
}

// commit: accept the first acc[b] pending drafts: a cursor move (replay) or
// the choice of the accepted draft's state buffer (baseline, nb buffers).
// Counts outside [0, pending] are clamped and flagged in *err.
extern "C" __global__ void commit(int* __restrict__ hist, int* __restrict__ cur, int* __restrict__ pending,
                                  const int* __restrict__ slots, const int* __restrict__ acc, int batch, int nb,
                                  int replay, int* __restrict__ err)
{
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= batch) {
        return;
    }
    const int s = slots[b];
    int n = acc[b];
    const int p = pending[s];
    if (n < 0 || n > p) {
        atomicOr(err, 1);
        n = n < 0 ? 0 : p;
    }
    if (replay) {
        hist[s] += n;
    } else {
        cur[s] = (cur[s] + n) % nb;
    }
    pending[s] = 0;
}
