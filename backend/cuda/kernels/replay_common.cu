// replay_common.cu: the pieces shared by the ReplaySSM state-cache kernels
// (replay_mamba2.cu, replay_gdn.cu). The Go side compiles this file
// concatenated in front of one layer's file, with the layer shape and formats
// as -D defines, so every loop over a state matrix has compile-time bounds and
// a flush keeps its share of the new state in registers.
//
// The defines the Go planner passes (the layers' own in their files'
// headers). Every module:
//   ROWS, COLS   one state matrix per CTA: Mamba-2 P x N, GDN dv x dk (the
//                transposed layout of package replay: COLS contiguous)
//   NT           threads per CTA (a multiple of 32)
//   STATE_FMT    checkpoint / baseline state: 0 fp32, 1 bf16, 3 fp16,
//                4 fp8 e4m3 (one float32 scale per matrix, amax/448)
//   READ_FMT     read copy: 0 none, 1 bf16, 2 nvfp4, 4 fp8 e4m3
//   RMAX         ring entries per slot (window L + max drafts)
//   TMAX         largest number of drafts of one verify (>= 1)
//   CACHE_MODE   0: a baseline cache's module, 1: a replay cache's
//                (BASELINE_KERNELS, REPLAY_KERNELS below)
// Where they apply:
//   STATE_MATS   (fp8 states) matrices in the state buffer: their scales
//                follow the codes of all of them
//   RING_BF16    1: the ring keeps Mamba-2's x and B rows as bf16 codes
//   HSPLIT       the small-batch module of heads split in HSPLIT parts
//                (replay_mamba2.cu, replay_gdn.cu)
//   SPLIT_VERIFY 1: that module has the small batches' verify too
//   BASE_BULK    1: the baseline step stages its whole matrix in shared
//                memory (base_stage_begin), BASE_MINB blocks an SM
//   BASE_REGS    the registers a thread the streaming baseline step's
//                launch bound asks for
//   STORE_V4     1: whole chunks stored with one st.global.v4 (store_words)
//   NCW, GW      the pipelined kernels' consumer warps, in groups of
//                GW; NSTAGE stages of STAGE_BYTES, SCR_BYTES of scratch
//                each; PIPE_MINB blocks an SM for the register bound
//   FNSTAGE      the pipelined folds' stages, of FSTAGE_BYTES each; FMINB
//                blocks an SM for the register bound
//   GNT          the group step's and verify's threads a block
//   GROUP_TC     1: the group step's stream on the tensor cores (nvfp4,
//                e4m3 matrices)
//   VERIFY_TC    1: the group verify's stream on the tensor cores (nvfp4,
//                bf16, e4m3 matrices)
//   SCALARS_EARLY 1: the early verifies form the drafts' scalars early
//   OVERLAP      1: a decode step's flush runs beside its non-flush kernel
//   FL_FEW       a staggered step's few flush items go to the first
//                FL_KEEP blocks, from a batch of FL_FEW_BATCH
//
// Number formats follow package numeric bit for bit where it matters: bf16
// and fp16 round to nearest even, fp8 matrices as replay's store (scale =
// amax/448, code e4m3(x·(1/scale)), value code·scale), NVFP4 quantises
// with the same float32 operations as numeric.QuantizeNVFP4 (global =
// amax/2688, block scale e4m3(amax_b/(6 global)), code e2m1(x/(scale
// global))), codes packed with element 2i in the low nibble.

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;
typedef unsigned long long u64;

#define FMT_F32 0
#define FMT_BF16 1
#define FMT_NVFP4 2
#define FMT_F16 3
#define FMT_E4M3 4

#define FULL_MASK 0xffffffffu

// A module holds the kernels of its cache's mode: a baseline cache launches
// the baseline step and verify (and commit) and nothing else, a replay cache
// everything but those two, and the modules of the two modes differ in
// their defines anyway (a baseline module plans no pipeline, group step or
// folds). A module's build time is its kernels': a baseline module with
// the replay ones took NVRTC 11.8 2.6 s (Nano fp32, to PTX, a 2-core Xeon
// VM) and ptxas sm_90 2.1 s, without them 0.37 and 0.17 s (GDN 3.8 / 2.4
// -> 0.39 / 0.19 s); a replay module is two kernels lighter (within 10%).
// The kernels each keeps are the same SASS. Without CACHE_MODE a module
// holds both. WHOLE_REPLAY: the replay kernels a module of split heads
// (HSPLIT > 1, replay_mamba2.cu and replay_gdn.cu) leaves out.
#ifndef CACHE_MODE
#define CACHE_MODE 2
#endif
// PREFILL_MODULE=1 builds a cache's prefill module: the prefill kernels
// (docs/DESIGN.md 2.3b) without the decode ones, which a module without it
// holds alone. A cache builds both; one whose prefill module fails to
// build still decodes, its Prefill returning the error.
#ifndef PREFILL_MODULE
#define PREFILL_MODULE 0
#endif
#define BASELINE_KERNELS (CACHE_MODE != 1 && HSPLIT == 1 && !PREFILL_MODULE)
#define REPLAY_KERNELS (CACHE_MODE != 0 && !PREFILL_MODULE)
#define WHOLE_REPLAY (REPLAY_KERNELS && HSPLIT == 1)

// RMAXP is RMAX rounded up to 4: the ring's per-head scalar rows are 16-byte
// multiples, so bulk copies can move them.
#define RMAXP ((RMAX + 3) & ~3)
#define NWARPS (NT / 32)

// ring_at is ring entry e of slot s: the ring's rows are [slot][RMAX][...].
__device__ __forceinline__ u64 ring_at(int s, int e) { return (u64)s * RMAX + e; }

// load_then_store moves count elements, idx = threadIdx.x + it*STRIDE for
// it < IT: every load(idx) first, then every store(idx, value). A loop that
// loads an element and stores it, one per iteration, waits a memory round
// trip per iteration (the store needs its load, the next load comes after
// the store); IT * STRIDE must cover count; load may return a float2 (two
// arrays read at once, one round trip for both). The drafts' inputs of
// the group verify (Mamba-2 B, C: 2 round trips an item) and of the per-head /
// early-fold verify of both layers (x, B, C; v) move so, and the per-head
// verify takes its y inputs from shared memory. Against the loops, H200,
// B=256, T=4: the Mamba-2 verify 1-5% faster (Nano bf16 412 -> 392 us),
// the GDN verify the same within 0.5%.
template <int IT, int STRIDE, typename Load, typename Store>
__device__ __forceinline__ void load_then_store(int count, Load load, Store store)
{
    decltype(load(0)) v[IT]; // a float, or a float2 for two arrays at once
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int idx = threadIdx.x + it * STRIDE;
        v[it] = idx < count ? load(idx) : decltype(load(0)){};
    }
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int idx = threadIdx.x + it * STRIDE;
        if (idx < count) {
            store(idx, v[it]);
        }
    }
}

// ring_scalars puts the first n ring entries' two per-head scalars of a
// slot (Mamba-2 delta and decay, GDN exp(g) and beta; entry i of each at
// at(i) in ra, rb) in shared memory a, b: with early, from ea and eb,
// entry tid's asked for before the cursor (the small step's and the small
// verify's early start), else loaded here.
template <typename At>
__device__ __forceinline__ void ring_scalars(float* a, float* b, const float* __restrict__ ra,
                                             const float* __restrict__ rb, int tid, int n, bool early, float ea,
                                             float eb, At at)
{
    if (early) {
        if (tid < n) {
            a[tid] = ea;
            b[tid] = eb;
        }
    } else {
        for (int i = tid; i < n; i += NT) {
            a[i] = ra[at(i)];
            b[i] = rb[at(i)];
        }
    }
}

// row_regs loads this thread's elements threadIdx.x + it*NT (it < IT) of a
// len-float row, zeros past its end: a token's input row asked for at once.
template <int IT>
__device__ __forceinline__ void row_regs(float (&v)[IT], const float* __restrict__ src, int len)
{
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int i = threadIdx.x + it * NT;
        v[it] = i < len ? src[i] : 0.0f;
    }
}

// The decode steps (mamba2_step, gdn_step: the small step and the per-head
// non-flush; not the work_items flush items, where ptxas 11.8 then spills
// 16-36 bytes) ask for the last of the token's inputs with the others,
// before the cursor: Mamba-2's D[h] (and x, for the small step's flush),
// GDN's v row. Loaded after the step's last barrier they cost one more
// round trip at the end of every step (batch-1 ncu: the small step's
// output waited on D[h]). H200, batch 1, loads after the barrier -> before
// the cursor: replay Qwen3.5-4B 6.1 -> 5.7 us (fp32), 6.1 -> 5.9 (bf16),
// 122B 6.1 -> 5.7, 6.1 -> 5.8; Mamba-2 within 0.1 us.

// FOLDS_EARLY is the verify's rule (docs/DESIGN.md 2.3): a slot whose committed
// history n plus 2*cnt drafts would overflow the ring of r entries folds
// its history into the checkpoint first. Every verify kernel and the cursor
// kernel take it from here, so they agree on which slots fold. (A macro: as
// an inline function it moved NVVM's inlining and scheduling in every
// module, which no device run has measured.)
#define FOLDS_EARLY(n, cnt, r) ((n) > 0 && (n) + 2 * (cnt) > (r))

// ---- bf16 ----

__device__ __forceinline__ float bf16_lo(u32 w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(u32 w) { return __uint_as_float(w & 0xffff0000u); }

// f32_to_bf16 rounds to nearest even; NaN becomes the canonical quiet NaN
// with its sign (numeric.EncodeBF16). BF16_CVT=1 (sm_80+) rounds with the
// hardware conversion, two elements per instruction in encode_chunk,
// instead of integer arithmetic: the bf16 baseline step went from 77% to
// 89% of copy bandwidth on the H200. encode_chunk's pair conversion stores
// a NaN as the conversion makes it (0x7fff, whatever the input's sign:
// still a NaN, read back as one), not f32_to_bf16's code (sign | 0x7fc0,
// numeric.BF16FromF32's): a branch for it in every bf16 store cost, H200,
// batch 256, the bf16 baselines 93 -> 91% of copy bandwidth (Nano, Super),
// 85 -> 84% (Qwen3.5-4B), 88 -> 87% (122B), Nano's bf16 aligned flush 350
// -> 384 us, Qwen3.5-4B's 269 -> 278. TestReplayCodecs takes any bf16 NaN
// code.
#ifndef BF16_CVT
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define BF16_CVT 1
#else
#define BF16_CVT 0
#endif
#endif
__device__ __forceinline__ u32 f32_to_bf16(float f)
{
    const u32 b = __float_as_uint(f);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return ((b >> 16) & 0x8000u) | 0x7fc0u;
    }
#if BF16_CVT
    u32 d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(0.0f), "f"(f));
    return d & 0xffffu;
#else
    return (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
#endif
}

// ---- the ring's inputs ----
//
// RING_BF16=1 (replay.Options.Ring bf16; Mamba-2 only so far) keeps the
// ring's input rows (Mamba-2 x and B) as bf16 codes, half the bytes of an
// fp32 ring; the scalars (Δ, decay) stay fp32. The contract is the CPU
// cache's: the cache behaves as an fp32 ring fed the inputs rounded to
// bf16. The host rounds the op's x and B rows first (round_bf16, into the
// cache's own buffers), so every value a kernel takes from the op's inputs
// or from the ring is the same float, and the kernels' arithmetic is the
// fp32 ring's. ring_e is a struct there, not a u16, so that a read of a
// code as a number does not compile: every access goes through ring_ld /
// ring_st, the gathers below (gather_rows and gather_rows4 take either
// element), cp_ring4 / cp_ring16 and cp_rows_as_kept. With
// RING_BF16=0 ring_e is float and those are plain loads, stores and
// cp.async copies: the fp32 modules compile to what they did before it.
#ifndef RING_BF16
#define RING_BF16 0
#endif
// ring_ld reads one element of a ring row as a float, ring_ld4 four
// (16-byte aligned floats, or 8-byte aligned codes), ring_st stores one
// (at p, or at p[i]: an fp32 ring's indexed store compiles as the array
// store it replaced, where p + i moved the group kernels' SASS a little).
__device__ __forceinline__ float ring_ld(const float* p) { return *p; }
__device__ __forceinline__ float4 ring_ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
#if RING_BF16
struct ring_e {
    u16 code;
};
__device__ __forceinline__ float ring_ld(const ring_e* p) { return __uint_as_float((u32)p->code << 16); }
__device__ __forceinline__ void ring_st(ring_e* p, float v) { p->code = (u16)f32_to_bf16(v); }
__device__ __forceinline__ void ring_st(ring_e* p, int i, float v) { p[i].code = (u16)f32_to_bf16(v); }
__device__ __forceinline__ float4 ring_ld4(const ring_e* p)
{
    const uint2 w = *reinterpret_cast<const uint2*>(p);
    return make_float4(bf16_lo(w.x), bf16_hi(w.x), bf16_lo(w.y), bf16_hi(w.y));
}
#else
typedef float ring_e;
__device__ __forceinline__ void ring_st(float* p, float v) { *p = v; }
__device__ __forceinline__ void ring_st(float* p, int i, float v) { p[i] = v; }
#endif

// gather_rows loads this thread's elements of the first n ring entries' rows
// of `width` elements E (float, or a bf16 ring's codes; element idx = tid +
// it*NT: entry idx / width, column idx % width; entry e's row at base +
// ring_at(s, e) * stride), every load in flight at once; zeros past n rows.
// A loop that stores each element where it goes as it loads it waits a
// round trip per element.
template <int IT, typename E>
__device__ __forceinline__ void gather_rows(float (&v)[IT], const E* __restrict__ base, u64 stride, int width, int s,
                                            int n)
{
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int idx = threadIdx.x + it * NT;
        v[it] = idx < width * n ? ring_ld(base + ring_at(s, idx / width) * stride + idx % width) : 0.0f;
    }
}

// gather_rows4 is gather_rows four elements at a time (width and the rows'
// offsets multiples of 4): a quarter of the load instructions and of their
// address arithmetic, which the one-kernel small step issues before its
// first barrier where the rows are 16-byte multiples.
template <int IT, typename E>
__device__ __forceinline__ void gather_rows4(float4 (&v)[IT], const E* __restrict__ base, u64 stride, int width, int s,
                                             int n)
{
    const int w4 = width / 4;
#pragma unroll
    for (int it = 0; it < IT; it++) {
        const int idx = threadIdx.x + it * NT;
        v[it] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (idx < w4 * n) {
            v[it] = ring_ld4(base + ring_at(s, idx / w4) * stride + 4 * (idx % w4));
        }
    }
}

// round_bf16 rounds n floats of src to bf16 (to nearest even) into dst, as
// floats: the op's ring inputs as a bf16 ring keeps them (RING_BF16),
// before the step or verify reads them. Two arrays in one launch (Mamba-2's
// x and B): blockIdx.y 0 takes (dst, src, n), 1 (dst1, src1, n1). Four
// elements a thread, one 16-byte load and store (the caches check that
// src and dst are 16-byte aligned), grid-stride; the last n % 4 one at a
// time.
extern "C" __global__ void round_bf16(float* __restrict__ dst, const float* __restrict__ src, int n,
                                      float* __restrict__ dst1, const float* __restrict__ src1, int n1)
{
    if (blockIdx.y == 1) {
        dst = dst1;
        src = src1;
        n = n1;
    }
    const auto r = [](float v) { return __uint_as_float(f32_to_bf16(v) << 16); };
    for (int i = 4 * (blockIdx.x * blockDim.x + threadIdx.x); i < n; i += 4 * gridDim.x * blockDim.x) {
        if (i + 3 < n) {
            const float4 v = *reinterpret_cast<const float4*>(src + i);
            *reinterpret_cast<float4*>(dst + i) = make_float4(r(v.x), r(v.y), r(v.z), r(v.w));
        } else {
            for (int k = i; k < n; k++) {
                dst[k] = r(src[k]);
            }
        }
    }
}

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

__device__ __forceinline__ void cp_async8(void* smem, const void* gmem)
{
    const u32 sa = (u32)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(sa), "l"(gmem) : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
#if RING_BF16
// A bf16 ring's codes are not floats: its rows go through the gathers and
// cp_ring4 / cp_ring16, which widen them, or cp_rows_as_kept, which copies
// them as codes on purpose (a byte copy of a ring_e* would compile here and
// land codes where floats are read; cp_rows takes floats only).
__device__ void cp_async16(void* smem, const ring_e* gmem) = delete;
__device__ void cp_async4(void* smem, const ring_e* gmem) = delete;
__device__ void cp_async8(void* smem, const ring_e* gmem) = delete;
#endif

// cp_ring4 and cp_ring16 copy one ring element, or four (16-byte aligned in
// shared memory), to shared memory as floats: by cp.async from an fp32 ring,
// widened through registers from a bf16 one.
#if RING_BF16
__device__ __forceinline__ void cp_ring4(float* smem, const ring_e* gmem) { *smem = ring_ld(gmem); }
__device__ __forceinline__ void cp_ring16(float* smem, const ring_e* gmem)
{
    *reinterpret_cast<float4*>(smem) = ring_ld4(gmem);
}
#else
__device__ __forceinline__ void cp_ring4(float* smem, const float* gmem) { cp_async4(smem, gmem); }
__device__ __forceinline__ void cp_ring16(float* smem, const float* gmem) { cp_async16(smem, gmem); }
#endif

// cp_async_commit closes this thread's group of cp.async copies issued
// since the last one; cp_async_wait_group<K> waits until at most K of its
// groups are still in flight.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int K>
__device__ __forceinline__ void cp_async_wait_group()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(K) : "memory");
}

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

// TCMapP is the tensor-core folds' register layout (GDN's TC_FOLD,
// Mamba-2's M2_TC_FOLD; a Map for store_state, write_read_copy and
// nvfp4_write) with each row split into PARTS column parts of COLS/PARTS,
// one warp each: warp w owns rows 16(w % RB) .. +15 (RB = NWARPS/PARTS
// blocks of 16 rows) in part w / RB, its lane (g = lane/4, t = lane%4)
// rows 16(w % RB) + g and + 8 (passes 0, 1) at the part's columns 16c +
// 4t .. +3: four lanes share a row, a 16-element nvfp4 block is one c of
// the four. TCMap (one part) is GDN's, and Mamba-2's where a warp has 16
// rows of its own.
template <int PARTS_>
struct TCMapP {
    static constexpr int PARTS = PARTS_;
    static constexpr int VEC = 4;
    static constexpr int LANES = 4;
    static constexpr int CPL = COLS / PARTS / 16;
    static constexpr int PASSES = 2;
    static constexpr int RB = NWARPS / PARTS;
    __device__ static __forceinline__ int part() { return PARTS == 1 ? 0 : (int)(threadIdx.x >> 5) / RB; }
    __device__ static __forceinline__ int row(int pass)
    {
        const int w = (int)(threadIdx.x >> 5);
        return 16 * (PARTS == 1 ? w : w % RB) + (int)(threadIdx.x & 31) / 4 + 8 * pass;
    }
    __device__ static __forceinline__ int lane() { return (int)(threadIdx.x & 3); }
    __device__ static __forceinline__ int col(int c) { return COLS / PARTS * part() + 16 * c + 4 * lane(); }
};
typedef TCMapP<1> TCMap;

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

// cta_sync is a barrier over the CTA's first NT threads: the whole CTA of
// the kernels that are NT threads, the consumer threads of the pipelined
// folds (a producer warp after them never joins it). The helpers a fold
// calls (block_max) use it, so that the same code serves both.
__device__ __forceinline__ void cta_sync() { asm volatile("bar.sync 15, %0;\n" ::"n"(NT) : "memory"); }

// block_max returns the largest v over the CTA's first NT threads to each of
// them. scratch holds NWARPS floats; the call contains two barriers.
__device__ __forceinline__ float block_max(float v, float* scratch)
{
    v = lanes_max<32>(v);
    if ((threadIdx.x & 31) == 0) {
        scratch[threadIdx.x >> 5] = v;
    }
    cta_sync();
    float m = scratch[0];
#pragma unroll
    for (int w = 1; w < NWARPS; w++) {
        m = fmaxf(m, scratch[w]);
    }
    cta_sync();
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

// FP8_CVT=1 (sm_89+) decodes fp8 with the hardware conversion to f16x2 instead
// of bit arithmetic (fp8 read-copy non-flush step 280 -> 208 us, Nano, H200;
// every e4m3 value is an f16, so the two agree on every code but NaN); NaN
// codes then read as NaN, as numeric.F32FromE4M3 reads them.
#ifndef FP8_CVT
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define FP8_CVT 1
#else
#define FP8_CVT 0
#endif
#endif
// With FP8_CVT, e4m3 is also encoded by the hardware conversion, two
// elements per instruction in encode_chunk: ncu of the Nano fp8 aligned
// flush had e4m3_from_f32's bit arithmetic a fifth of the kernel's stall
// samples, the kernel issue-bound (SM 47%, memory 37%). Round to nearest
// even and saturation agree with e4m3_from_f32 on every float
// (TestReplayCodecs checks the codes and read-backs against numeric).
//
// A NaN input takes the conversion's own NaN code, not e4m3_from_f32's
// (0x7f with the input's sign). Every input there is a product or a
// quotient (v times the inverse scale, an nvfp4 block's maximum over its
// scale), and a NaN out of the GPU's arithmetic is its canonical positive
// NaN, which the conversion turns into a NaN code (TestReplayCodecs on the
// H200: every NaN input of either sign, multiplied by the unit scale, came
// back 0x7f or 0xff, the codes the test takes). A branch to e4m3_from_f32
// a pair, exact for a NaN of any sign, had instruction-fetch stalls on
// that branch 14% of the Nano fp8 flush's samples (its code inline 48
// times: 4392 instructions, 2840 without it); selects on the input's sign
// took 3144. H200, B=256, us, aligned flush / verify T=4, branch ->
// selects -> the conversion alone: Nano fp8 553/272 -> 503/267 ->
// 420/239; Super fp8 531/275 -> 620/294 -> 527/276; Qwen3.5-4B fp8
// 628/300 -> 605/295 -> 582/288.

// e4m3_encode is e4m3_from_f32, by the hardware conversion with FP8_CVT
// (the same code for every float but a negative NaN, which no product of
// the GPU's is), one element, where encode_chunk's pairs do not apply (an
// nvfp4 block scale, a VEC of 1).
__device__ __forceinline__ u32 e4m3_encode(float f)
{
#if FP8_CVT
    unsigned short d;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(0.0f), "f"(f));
    return d & 0xffu;
#else
    return e4m3_from_f32(f);
#endif
}

__device__ __forceinline__ float f16_to_f32(u32 c);

// f32_from_e4m3 decodes an e4m3 code (bits 0-7 of c; NaN codes only with
// FP8_CVT). With FP8_CVT one conversion and a widening: the nvfp4 block
// scales are decoded once per 16 elements, and the bit arithmetic (a
// branch on subnormals, a select on the sign) was 10% of the nvfp4 group
// step's instructions (ncu, Qwen3.5-4B).
__device__ __forceinline__ float f32_from_e4m3(u32 c)
{
#if FP8_CVT
    u32 h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((unsigned short)(c & 0xffu)));
    return f16_to_f32(h2 & 0xffffu);
#else
    const u32 e = (c >> 3) & 15u, m = c & 7u;
    const float mag = e == 0 ? (float)m * 0.001953125f : __uint_as_float(((e + 120u) << 23) | (m << 20));
    return (c & 0x80u) ? -mag : mag;
#endif
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

// ---- matrix formats: element codes, 16-byte chunks, per-matrix scales ----
//
// Fmt<F> encodes and decodes one element of format F (BITS wide). Only fp8
// is scaled: a matrix's elements are stored as e4m3(x·inv) with inv =
// 1/scale, scale = amax/448 (replay's store), and read back as code·scale.

__device__ __forceinline__ u32 f32_to_f16(float f)
{
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float f16_to_f32(u32 c)
{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)c));
    return f;
}

template <int F> struct Fmt;

template <> struct Fmt<FMT_F32> {
    typedef float T;
    static constexpr int BITS = 32;
    static constexpr bool SCALED = false;
    __device__ static __forceinline__ u32 enc(float v, float) { return __float_as_uint(v); }
    __device__ static __forceinline__ float dec(u32 c, float) { return __uint_as_float(c); }
};

template <> struct Fmt<FMT_BF16> {
    typedef u16 T;
    static constexpr int BITS = 16;
    static constexpr bool SCALED = false;
    __device__ static __forceinline__ u32 enc(float v, float) { return f32_to_bf16(v); }
    __device__ static __forceinline__ float dec(u32 c, float) { return __uint_as_float(c << 16); }
};

template <> struct Fmt<FMT_F16> {
    typedef u16 T;
    static constexpr int BITS = 16;
    static constexpr bool SCALED = false;
    __device__ static __forceinline__ u32 enc(float v, float) { return f32_to_f16(v); }
    __device__ static __forceinline__ float dec(u32 c, float) { return f16_to_f32(c); }
};

template <> struct Fmt<FMT_E4M3> {
    typedef u8 T;
    static constexpr int BITS = 8;
    static constexpr bool SCALED = true;
    __device__ static __forceinline__ u32 enc(float v, float inv) { return e4m3_encode(__fmul_rn(v, inv)); }
    __device__ static __forceinline__ float dec(u32 c, float sc) { return __fmul_rn(f32_from_e4m3(c), sc); }
};

// Chunk holds VEC elements of format F packed little-endian (element k at
// bit k·BITS): 1, 2, 4 or a multiple of 4 words.
template <int F, int VEC>
struct Chunk {
    static constexpr int WORDS = (VEC * Fmt<F>::BITS + 31) / 32;
    u32 w[WORDS];
};

template <int WORDS>
__device__ __forceinline__ void load_words(const unsigned char* p, u32* w)
{
    if constexpr (WORDS == 1) {
        w[0] = *reinterpret_cast<const u32*>(p);
    } else if constexpr (WORDS == 2) {
        const uint2 x = *reinterpret_cast<const uint2*>(p);
        w[0] = x.x; w[1] = x.y;
    } else {
#pragma unroll
        for (int i = 0; i < WORDS / 4; i++) {
            const uint4 x = reinterpret_cast<const uint4*>(p)[i];
            w[4 * i] = x.x; w[4 * i + 1] = x.y; w[4 * i + 2] = x.z; w[4 * i + 3] = x.w;
        }
    }
}

// store_words writes whole chunks to global memory (every caller stores a
// state or read-copy matrix). From the plain uint4 store NVVM splits one
// 16-byte chunk of a pass into four 4-byte stores where registers are
// tight (the first chunk of each pass: the GDN bf16 baseline, the Mamba-2
// flush; seen in the PTX of NVRTC 11.8 and in the SASS NVRTC 13 built on
// the H200), four times the L2 sectors for that chunk (ncu: 42% of the
// bf16 GDN baseline's L2 sectors were excess). STORE_V4=1 writes every
// chunk with one st.global.v4; ptxas then needs more registers in some
// kernels (the streamed GDN bf16 baseline measured slower with it), but
// not in the staged baseline steps (BASE_BULK, below: 47 -> 48 registers
// for bf16 GDN), whose modules take it by default; the Go side also sets
// it for the pipelined folds of 2-byte Mamba-2 checkpoints. The memory
// clobber keeps the compiler from moving later loads above the store (a
// fold may read back what it wrote).
#ifndef BASE_BULK
#define BASE_BULK 0 // the baselines' whole-matrix stage (set by the Go side; see base_stage_begin)
#endif
#ifndef STORE_V4
#define STORE_V4 BASE_BULK
#endif
template <int WORDS>
__device__ __forceinline__ void store_words(unsigned char* p, const u32* w)
{
    if constexpr (WORDS == 1) {
        *reinterpret_cast<u32*>(p) = w[0];
    } else if constexpr (WORDS == 2) {
        *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
    } else {
#pragma unroll
        for (int i = 0; i < WORDS / 4; i++) {
#if STORE_V4
            asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p + 16 * i), "r"(w[4 * i]),
                         "r"(w[4 * i + 1]), "r"(w[4 * i + 2]), "r"(w[4 * i + 3])
                         : "memory");
#else
            reinterpret_cast<uint4*>(p)[i] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
#endif
        }
    }
}

// decode_chunk / encode_chunk convert VEC elements between floats and packed
// words; encode_chunk leaves in v what a read gives back.
template <int F, int VEC>
__device__ __forceinline__ void decode_chunk(const u32* w, float* v, float sc)
{
#if FP8_CVT
    if constexpr (F == FMT_E4M3) {
#pragma unroll
        for (int k = 0; k < VEC; k += 2) {
            const unsigned short pair = (unsigned short)(w[k / 4] >> (8 * (k % 4)));
            u32 h2;
            asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(pair));
            v[k] = __fmul_rn(f16_to_f32(h2 & 0xffffu), sc);
            v[k + 1] = __fmul_rn(f16_to_f32(h2 >> 16), sc);
        }
        return;
    }
#endif
    constexpr int B = Fmt<F>::BITS;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        u32 c;
        if constexpr (B == 32) {
            c = w[k];
        } else {
            c = (w[k * B / 32] >> ((k * B) % 32)) & ((1u << B) - 1u);
        }
        v[k] = Fmt<F>::dec(c, sc);
    }
}

template <int F, int VEC, bool PAIRS = true>
__device__ __forceinline__ void encode_chunk(u32* w, float* v, float sc, float inv)
{
    constexpr int B = Fmt<F>::BITS;
#if BF16_CVT
    if constexpr (F == FMT_BF16 && PAIRS) {
        // Two elements per conversion; a NaN as the conversion makes it
        // (f32_to_bf16's comment). (Selects giving f32_to_bf16's NaN code
        // were slower: Nano bf16 aligned flush 384 -> 437 us, Super 458 ->
        // 517.)
#pragma unroll
        for (int k = 0; k < VEC; k += 2) {
            u32 d;
            asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(v[k + 1]), "f"(v[k]));
            w[k / 2] = d;
            v[k] = bf16_lo(d);
            v[k + 1] = bf16_hi(d);
        }
    } else
#endif
#if FP8_CVT
    if constexpr (F == FMT_E4M3 && PAIRS && VEC % 2 == 0) {
        // Two elements per conversion, rounded to nearest even and
        // saturated to +-448 as e4m3_from_f32 does (infinities too); a NaN
        // the conversion's own code (e4m3_encode's comment). The read-back
        // is decode_chunk's.
#pragma unroll
        for (int i = 0; i < Chunk<F, VEC>::WORDS; i++) {
            w[i] = 0;
        }
#pragma unroll
        for (int k = 0; k < VEC; k += 2) {
            const float a = __fmul_rn(v[k], inv), b = __fmul_rn(v[k + 1], inv);
            unsigned short d;
            asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(b), "f"(a));
            u32 pair = d;
            w[k / 4] |= pair << (8 * (k % 4));
        }
        decode_chunk<F, VEC>(w, v, sc);
    } else
#endif
    {
#pragma unroll
        for (int i = 0; i < Chunk<F, VEC>::WORDS; i++) {
            w[i] = 0;
        }
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            const u32 c = Fmt<F>::enc(v[k], inv);
            if constexpr (B == 32) {
                w[k] = c;
            } else {
                w[k * B / 32] |= c << ((k * B) % 32);
            }
            v[k] = Fmt<F>::dec(c, sc);
        }
    }
}

// load_chunk reads elements [e, e+VEC) of a matrix in format F at base.
template <int F, int VEC>
__device__ __forceinline__ void load_chunk(const void* base, u64 e, float* v, float sc)
{
    Chunk<F, VEC> c;
    load_words<Chunk<F, VEC>::WORDS>(reinterpret_cast<const unsigned char*>(base) + e * Fmt<F>::BITS / 8, c.w);
    decode_chunk<F, VEC>(c.w, v, sc);
}

// store_chunk writes elements [e, e+VEC) and leaves in v what was stored.
// PAIRS=false converts bf16 one element at a time (f32_to_bf16: same bits,
// fewer registers).
template <int F, int VEC, bool PAIRS = true>
__device__ __forceinline__ void store_chunk(void* base, u64 e, float* v, float sc, float inv)
{
    Chunk<F, VEC> c;
    encode_chunk<F, VEC, PAIRS>(c.w, v, sc, inv);
    store_words<Chunk<F, VEC>::WORDS>(reinterpret_cast<unsigned char*>(base) + e * Fmt<F>::BITS / 8, c.w);
}

// StateIO<F> moves VEC = 128/BITS consecutive elements (one 16-byte access)
// of a matrix in format F; sc and inv are the matrix's scale and its
// inverse (ignored by unscaled formats).
template <int F>
struct StateIO {
    typedef typename Fmt<F>::T T;
    static constexpr int VEC = 128 / Fmt<F>::BITS;
    static constexpr int BYTES = Fmt<F>::BITS / 8;
    static constexpr bool SCALED = Fmt<F>::SCALED;
    __device__ static __forceinline__ void load(const T* p, u64 e, float* v, float sc) { load_chunk<F, VEC>(p, e, v, sc); }
    // unpack decodes a raw 16-byte chunk (a prefetch kept in registers).
    __device__ static __forceinline__ void unpack(uint4 x, float* v, float sc)
    {
        const u32 w[4] = {x.x, x.y, x.z, x.w};
        decode_chunk<F, VEC>(w, v, sc);
    }
    // store writes v and leaves in v what was stored.
    template <bool PAIRS = true>
    __device__ static __forceinline__ void store(T* p, u64 e, float* v, float sc, float inv)
    {
        store_chunk<F, VEC, PAIRS>(p, e, v, sc, inv);
    }
};

// The in-place baseline steps stream their state pass by pass. BASE_PF
// (fp32 states, unstaged) loads pass p+1 before pass p is updated and
// stored, so two passes' bytes are in flight per thread instead of one. On
// the H200 (B=256) that took the fp32 Mamba-2 baselines from 91% to 95%
// (Nano) and 89% to 93% (Super) of copy bandwidth and left GDN fp32
// unchanged, but cost bf16 26-35% (the extra registers halve the blocks
// per SM). A raw prefetch (16-byte chunks), one or two passes ahead, the
// first asked for before the prologue, lost bf16 4-11% (Qwen3.5-4B 167 ->
// 178-184 us), at 56-78 registers where this path takes 48 (5 blocks of
// 256 threads per SM, not 4). Streaming the passes through 2-4 per-thread
// cp.async buffers in shared memory was slower in every shape (B=256: GDN
// bf16 Qwen3.5-4B 153 -> 155 us, 122B 296 -> 300; Mamba-2 bf16 259 -> 267;
// fp32 496 -> 532-544), so the bf16 GDN baseline does not wait on its pass
// chain.
#define BASE_PF (STATE_FMT == FMT_F32 && !BASE_BULK)

// BASE_EARLY_ON: the streaming baselines without a prefetch or a stage
// (the bf16 states) ask for the first pass's chunks just before the
// prologue's barrier: the warps with no part in the prologue (the token's
// vectors to shared memory, the decay in float64, GDN's two l2 norms) ask
// at once, so a block's state is in flight while it prepares. Pass 0 is
// taken outside the pass loop, whose registers do not change; the step
// kernels then ask for the blocks per SM that 48 registers a thread give
// (5 of 256 threads, 8 of 160), or pass 0's chunks, live through the
// prologue, take GDN to 54 (not an fp8 state's step, which holds its whole
// matrix in registers). GDN also asks for each row's v with the row's
// chunks, where the load of v[r] would be issued after the S.k dot that
// precedes its use (cuobjdump), a second round trip in every pass. ptxas
// 11.8 (sm_90): 48 registers in every bf16 shape, no spills (GDN: 4
// bytes). H200, B=256, against pass 0 loaded in the loop: bf16 baselines
// Qwen3.5-4B 167 -> 156 us (76% -> 81% of copy), Qwen3.5-122B 325 -> 299
// (78% -> 84%), Super 324 -> 321, Nano 267 -> 264 (89% -> 90%).
#define BASE_EARLY_ON (!BASE_PF && !BASE_BULK)
// BASE_ROW: the staged baselines take the token's row (GDN v, Mamba-2 x)
// into shared memory with their prologue (base_row), so a pass does not
// wait a round trip for its row's value.
#define BASE_ROW BASE_BULK
// BASE_REGS sets the registers a thread that bound asks for: 48 gives 5
// blocks of 256 threads an SM (62.5% occupancy, what ncu found the GDN
// bf16 baseline limited by); 40 gives 6, 32 gives 8. GDN modules get 40
// (gdnModule; H200: 82% -> 84% and 84% -> 87% of copy),
// Mamba-2's keep 48 (Nano at 40: 91% -> 77%).
#ifndef BASE_REGS
#define BASE_REGS 48
#endif
#if BASE_BULK
#define BASE_BOUNDS __launch_bounds__(NT, BASE_MINB)
#elif BASE_EARLY_ON && STATE_FMT != FMT_E4M3
#define BASE_BOUNDS __launch_bounds__(NT, 65536 / (NT * BASE_REGS))
#else
#define BASE_BOUNDS __launch_bounds__(NT)
#endif

// stream_passes runs a streaming baseline's passes, update(pass, e, from)
// each: from 1 takes the prefetched pass (BASE_PF), 0 reads the pass itself,
// 2 (pass 0 with BASE_EARLY_ON, outside the loop, so the loop holds no more
// registers) hands it the chunks raw0 asked for before the barrier (unread
// without BASE_EARLY_ON).
template <typename IO, typename MAP, typename U>
__device__ __forceinline__ void stream_passes(const uint4* raw0, U update)
{
    int first = 0;
#if BASE_EARLY_ON
    {
        float e[MAP::CPL][IO::VEC];
#pragma unroll
        for (int c = 0; c < MAP::CPL; c++) {
            IO::unpack(raw0[c], e[c], 1.0f);
        }
        update(0, e, 2);
        first = 1;
    }
#endif
#pragma unroll 1
    for (int pass = first; pass < MAP::PASSES; pass++) {
        float e[MAP::CPL][IO::VEC];
        update(pass, e, BASE_PF ? 1 : 0);
    }
}

// base_row copies the token's row of ROWS floats that a baseline's passes
// read (GDN v, Mamba-2 x) to srow (BASE_ROW), before the prologue's barrier.
__device__ __forceinline__ void base_row(float* srow, const float* __restrict__ row)
{
    for (int i = threadIdx.x; i < ROWS; i += NT) {
        srow[i] = row[i];
    }
}

// The baselines' token vectors (GDN k and q, Mamba-2 B and C) in shared
// memory are read by the LANES lanes of a row VEC elements apart: 32 bytes
// for a 2-byte state, so lanes 0 and 4 of a row would fall in the same
// banks (ncu, unpadded: 50% excess shared-memory wavefronts in the bf16 GDN
// baseline). They are padded as the group verify pads its vectors, 4
// floats after every 32: element e at bvpad(e), a vector BVLEN(n) floats.
// A chunk (VEC <= 16 elements, a divisor of 32) never straddles a pad.
#define BVLEN(n) ((n) + ((n) >> 5) * 4)
__device__ __forceinline__ int bvpad(int e) { return e + (e >> 5) * 4; }

// raw_pass reads this thread's chunks of pass `pass` of a ROWS x COLS
// matrix as they are stored (zeros past the last row), for IO::unpack.
template <typename MAP, typename T>
__device__ __forceinline__ void raw_pass(const T* m, int pass, uint4 (&raw)[MAP::CPL])
{
    const int r = MAP::row(pass);
#pragma unroll
    for (int c = 0; c < MAP::CPL; c++) {
        raw[c] = make_uint4(0, 0, 0, 0);
        if (r < ROWS) {
            raw[c] = *reinterpret_cast<const uint4*>(m + (u64)r * COLS + MAP::col(c));
        }
    }
}

// load_pass reads this thread's chunks of pass `pass` of a ROWS x COLS
// matrix (zeros past the last row).
template <typename IO, typename MAP>
__device__ __forceinline__ void load_pass(const typename IO::T* m, int pass, float (&e)[MAP::CPL][IO::VEC])
{
    const int r = MAP::row(pass);
#pragma unroll
    for (int c = 0; c < MAP::CPL; c++) {
        if (r < ROWS) {
            IO::load(m, (u64)r * COLS + MAP::col(c), e[c], 1.0f);
        } else {
#pragma unroll
            for (int q = 0; q < IO::VEC; q++) {
                e[c][q] = 0.0f;
            }
        }
    }
}

// next_pass moves the prefetched pass into e and starts loading the next.
template <typename IO, typename MAP>
__device__ __forceinline__ void next_pass(const typename IO::T* m, int pass, float (&e)[MAP::CPL][IO::VEC],
                                          float (&en)[MAP::CPL][IO::VEC])
{
#pragma unroll
    for (int c = 0; c < MAP::CPL; c++) {
#pragma unroll
        for (int q = 0; q < IO::VEC; q++) {
            e[c][q] = en[c][q];
        }
    }
    if (pass + 1 < MAP::PASSES) {
        load_pass<IO, MAP>(m, pass + 1, en);
    }
}

// Bytes of one ROWS x COLS matrix in an element format (not nvfp4).
#define FMT_SIZE(f) ((f) == FMT_F32 ? 4 : (f) == FMT_E4M3 ? 1 : 2)

// The fp8 checkpoint's per-matrix scales follow the codes of all STATE_MATS
// matrices in the state buffer (matrix m: [slot][buffer][head]).
__device__ __forceinline__ float* state_scale_at(const void* state, u64 m)
{
#if STATE_FMT == FMT_E4M3
    return reinterpret_cast<float*>(const_cast<unsigned char*>(reinterpret_cast<const unsigned char*>(state)) +
                                    (u64)STATE_MATS * (ROWS * COLS)) + m;
#else
    return nullptr;
#endif
}

__device__ __forceinline__ float state_scale(const void* state, u64 m)
{
#if STATE_FMT == FMT_E4M3
    return *state_scale_at(state, m);
#else
    return 1.0f;
#endif
}

// The read copy of matrix m: nvfp4 codes (scales apart), or bf16 / fp8
// elements (the fp8 scale in the global-scale array), RC_BYTES each.
#if READ_FMT == FMT_NVFP4
#define RC_BYTES (ROWS * COLS / 2)
#elif READ_FMT != FMT_F32
#define RC_BYTES (ROWS * COLS * FMT_SIZE(READ_FMT))
#else
#define RC_BYTES 0
#endif

// finite_abs is |x| for finite x and 0 for Inf and NaN, as
// numeric.QuantizeNVFP4 leaves them out of its maxima.
__device__ __forceinline__ float finite_abs(float x)
{
    const u32 a = __float_as_uint(x) & 0x7fffffffu;
    return a >= 0x7f800000u ? 0.0f : __uint_as_float(a);
}

// finite_max is the running maximum m of finite_abs(x).
__device__ __forceinline__ float finite_max(float m, float x)
{
    return fmaxf(m, finite_abs(x));
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

// nvfp4_write forms its quotients v/d from one reciprocal a chunk instead of a
// division an element: the quantiser's __fdiv_rn is a reciprocal (MUFU.RCP),
// four FMAs, a range check (FCHK) and a branch to a called slow path, an
// element (Nano's fp32 + nvfp4 mamba2_replay_flush: 89 MUFU, 81 FCHK, 89
// calls; 17, 17, 41 with the reciprocal). nv_quotient returns a float with
// RN(v/d)'s e2m1 code, given x = v*sc and d2 = d*sc (sc a power of two that
// puts d2 in [2^-90, 2^90], 1 for every d but absurd matrices) and rd =
// RN(1/d2): q0 = RN(x*rd) is within an ulp of x/d2 = v/d, the remainder x -
// q0*d2 is exact (one fma), and RN(q0 + rem*rd) is RN(v/d) (Markstein's
// theorem: rd correctly rounded, no underflow). Where |q0| < 1/8 the code is
// v's sign alone (|v/d| < 1/4, below e2m1's first midpoint), and q0 has that
// sign: this also covers the remainder's underflow. A NaN remainder (v
// infinite or NaN) keeps q0, which __fdiv_rn gives then too. TestNVFP4Quotient
// checks the same arithmetic in Go against float32 division, bit for bit, and
// TestReplayReadCopyIsNumerics the copies' bytes against package numeric.
// H200, batch 256, aligned nvfp4 flush, against the division: 1-3% faster on
// every shape (122B bf16 1795 -> 1745 us, Super bf16 1695 -> 1653, Nano fp32
// 1364 -> 1355); the flush's time is elsewhere.
__device__ __forceinline__ float nv_quotient(float x, float d2, float rd)
{
    const float q0 = __fmul_rn(x, rd);
    const float rem = __fmaf_rn(-q0, d2, x);
    const float q1 = __fmaf_rn(rem, rd, q0);
    return fabsf(q0) < 0.125f || rem != rem ? q0 : q1;
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
                    amax = finite_max(amax, v[pass][c][k]);
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
                bm = finite_max(bm, v[pass][c][k]);
            }
            bm = lanes_max<BL>(bm);
            u32 s = 0;
            if (g != 0.0f) {
                s = e4m3_encode(__fdiv_rn(bm, sixg));
            }
            const float d = __fmul_rn(f32_from_e4m3(s), g);
            // d outside [2^-90, 2^90] (an absurd matrix): the chunk and d
            // scaled by a power of two first (exact for every element whose
            // code is not its sign alone), so nv_quotient's arithmetic stays
            // clear of underflow; v is rewritten below anyway.
            const float qsc = d < 0x1p-90f ? 0x1p100f : (d > 0x1p90f ? 0x1p-100f : 1.0f);
            if (qsc != 1.0f) {
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    v[pass][c][k] = __fmul_rn(v[pass][c][k], qsc);
                }
            }
            const float d2 = __fmul_rn(d, qsc), rd = __frcp_rn(d2);
            u32 packed = 0;
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                u32 q = 0;
                if (s != 0) {
                    q = e2m1_from_f32(nv_quotient(v[pass][c][k], d2, rd));
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

// ---- stores of a whole matrix held in registers ----
//
// matrix_scale returns (scale, 1/scale) for storing the matrix v (Map SM's
// layout, rows past ROWS zero) in format F: (amax/448, its inverse) for fp8,
// as replay's store computes them, else (1, 1). For fp8 it contains
// barriers: every thread of the CTA must call it.
template <int F, typename SM>
__device__ __forceinline__ float2 matrix_scale(const float (&v)[SM::PASSES][SM::CPL][SM::VEC], float* scratch)
{
    if constexpr (!Fmt<F>::SCALED) {
        return make_float2(1.0f, 1.0f);
    } else {
        float amax = 0.0f;
#pragma unroll
        for (int pass = 0; pass < SM::PASSES; pass++) {
#pragma unroll
            for (int c = 0; c < SM::CPL; c++) {
#pragma unroll
                for (int k = 0; k < SM::VEC; k++) {
                    amax = fmaxf(amax, fabsf(v[pass][c][k]));
                }
            }
        }
        amax = block_max(amax, scratch);
        const float sc = __fdiv_rn(amax, 448.0f);
        return make_float2(sc, sc > 0.0f ? __fdiv_rn(1.0f, sc) : 0.0f);
    }
}

// store_matrix writes v (Map SM's layout) to the matrix at base in format F
// with scale sc.x (inverse sc.y), leaving v as stored. VEC of SM need not be
// F's own: a flush writes an fp8 or bf16 read copy from an fp32 state.
template <int F, typename SM>
__device__ __forceinline__ void store_matrix(float (&v)[SM::PASSES][SM::CPL][SM::VEC], void* base, float2 sc)
{
#pragma unroll
    for (int pass = 0; pass < SM::PASSES; pass++) {
        const int r = SM::row(pass);
        if (r < ROWS) {
#pragma unroll
            for (int c = 0; c < SM::CPL; c++) {
                store_chunk<F, SM::VEC>(base, (u64)r * COLS + SM::col(c), v[pass][c], sc.x, sc.y);
            }
        }
    }
}

// write_read_copy rewrites matrix m's read copy (if any) from the new state
// v, which it may overwrite. Contains barriers (nvfp4, fp8).
template <typename SM>
__device__ __forceinline__ void write_read_copy(float (&v)[SM::PASSES][SM::CPL][SM::VEC], u8* rcodes, u8* rscales,
                                                float* rglobal, u64 m, float* scratch)
{
#if READ_FMT == FMT_NVFP4
    nvfp4_write<SM>(v, rcodes + m * RC_BYTES, rscales + m * (ROWS * COLS / 16), rglobal + m, scratch);
#elif READ_FMT != FMT_F32
    const float2 sc = matrix_scale<READ_FMT, SM>(v, scratch);
    if (Fmt<READ_FMT>::SCALED && threadIdx.x == 0) {
        rglobal[m] = sc.x;
    }
    store_matrix<READ_FMT, SM>(v, rcodes + m * RC_BYTES, sc);
#endif
}

// put_state_scale computes the state format's scale for storing v as
// matrix m (fp8: amax/448, written next to the codes) and returns it with
// its inverse. Contains barriers for fp8.
template <typename SM>
__device__ __forceinline__ float2 put_state_scale(const float (&v)[SM::PASSES][SM::CPL][SM::VEC],
                                                  typename StateIO<STATE_FMT>::T* state, u64 m, float* scratch)
{
    const float2 sc = matrix_scale<STATE_FMT, SM>(v, scratch);
    if (Fmt<STATE_FMT>::SCALED && threadIdx.x == 0) {
        *state_scale_at(state, m) = sc.x;
    }
    return sc;
}

// load_state reads the thread's share of a ROWS x COLS matrix S in the
// state format (scale sc) under map FM into v, each chunk times mul with
// SCALE (the Mamba-2 folds' decay, applied chunk by chunk as it lands);
// rows past ROWS read as zeros. The folds start from it.
template <typename FM, bool SCALE = false>
__device__ __forceinline__ void load_state(const void* S, float sc, float (&v)[FM::PASSES][FM::CPL][FM::VEC],
                                           float mul = 1.0f)
{
#pragma unroll
    for (int pass = 0; pass < FM::PASSES; pass++) {
        const int r = FM::row(pass);
#pragma unroll
        for (int c = 0; c < FM::CPL; c++) {
            if (r < ROWS) {
                load_chunk<STATE_FMT, FM::VEC>(S, (u64)r * COLS + FM::col(c), v[pass][c], sc);
            } else {
#pragma unroll
                for (int k = 0; k < FM::VEC; k++) {
                    v[pass][c][k] = 0.0f;
                }
            }
            if constexpr (SCALE) {
#pragma unroll
                for (int k = 0; k < FM::VEC; k++) {
                    v[pass][c][k] = mul * v[pass][c][k];
                }
            }
        }
    }
}

// store_state writes the new state v of matrix m (Map SM's layout) to the
// state buffer, with its fp8 scale, and leaves v in float32 (the rounded
// copy is a temporary): a flush. Contains barriers for fp8.
template <typename SM>
__device__ __forceinline__ void store_state(const float (&v)[SM::PASSES][SM::CPL][SM::VEC],
                                            typename StateIO<STATE_FMT>::T* state, u64 m, float* scratch)
{
    const float2 sc = put_state_scale<SM>(v, state, m, scratch);
#pragma unroll
    for (int pass = 0; pass < SM::PASSES; pass++) {
        const int r = SM::row(pass);
        if (r < ROWS) {
#pragma unroll
            for (int c = 0; c < SM::CPL; c++) {
                float w[SM::VEC];
#pragma unroll
                for (int k = 0; k < SM::VEC; k++) {
                    w[k] = v[pass][c][k];
                }
                store_chunk<STATE_FMT, SM::VEC>(state + m * (ROWS * COLS), (u64)r * COLS + SM::col(c), w, sc.x, sc.y);
            }
        }
    }
}

// store_state_rounded is store_state leaving v as stored: the naive
// low-precision baseline's next update starts from the rounded state.
template <typename SM>
__device__ __forceinline__ void store_state_rounded(float (&v)[SM::PASSES][SM::CPL][SM::VEC],
                                                    typename StateIO<STATE_FMT>::T* state, u64 m, float* scratch)
{
    store_matrix<STATE_FMT, SM>(v, state + m * (ROWS * COLS), put_state_scale<SM>(v, state, m, scratch));
}

// ---- row dot products from the read copy or the state ----

// fma4 adds v[0..4) . w to acc, one fused multiply-add after another in
// element order: the order every row dot keeps (the kernels are
// bit-identical to each other through it).
__device__ __forceinline__ float fma4(const float* v, float4 w, float acc)
{
    acc = fmaf(v[0], w.x, acc);
    acc = fmaf(v[1], w.y, acc);
    acc = fmaf(v[2], w.z, acc);
    return fmaf(v[3], w.w, acc);
}

//
// The row-dot kernels below (dots_nvfp4, dots_state, smem_row_dots) share
// these per-chunk steps, so the global and shared-memory reads keep one
// order of operations (the pipelined kernels are bit-identical to the per-head ones).

// nvfp4_chunk decodes 16 codes (two words) through lut.
__device__ __forceinline__ void nvfp4_chunk(uint2 w, const float* lut, float (&x)[16])
{
#pragma unroll
    for (int k = 0; k < 8; k++) {
        x[k] = lut[(w.x >> (4 * k)) & 15u];
        x[8 + k] = lut[(w.y >> (4 * k)) & 15u];
    }
}

// acc_nvfp4_chunk adds x · vec_a[col..col+16) times the block scale d to
// acc[a] for the nv vectors (each block's sum first, then one scale).
template <int NV>
__device__ __forceinline__ void acc_nvfp4_chunk(const float (&x)[16], float d, const float* vec, int vstride, int nv,
                                                int col, float (&acc)[NV])
{
#pragma unroll
    for (int a = 0; a < NV; a++) {
        if (a < nv) {
            const float4* vp = reinterpret_cast<const float4*>(vec + a * vstride + col);
            float part = 0.0f;
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const float4 c4 = vp[q];
                part = fma4(x + 4 * q, c4, part);
            }
            acc[a] = fmaf(part, d, acc[a]);
        }
    }
}

// acc_chunk adds x · vec_a[col..col+VEC) to acc[a] for the nv vectors.
template <int NV, int VEC>
__device__ __forceinline__ void acc_chunk(const float (&x)[VEC], const float* vec, int vstride, int nv, int col,
                                          float (&acc)[NV])
{
#pragma unroll
    for (int a = 0; a < NV; a++) {
        if (a < nv) {
            const float4* vp = reinterpret_cast<const float4*>(vec + a * vstride + col);
#pragma unroll
            for (int q = 0; q < VEC / 4; q++) {
                const float4 c4 = vp[q];
                acc[a] = fma4(x + 4 * q, c4, acc[a]);
            }
        }
    }
}

// put_row_sums reduces each vector's partial sums over the row's LANES
// lanes and writes out[a*ROWS + r] from the row's first lane.
template <int LANES, int NV>
__device__ __forceinline__ void put_row_sums(float (&acc)[NV], int nv, int r, bool first, float* out)
{
#pragma unroll
    for (int a = 0; a < NV; a++) {
        if (a < nv) {
            const float v = lanes_sum<LANES>(acc[a]);
            if (r < ROWS && first) {
                out[a * ROWS + r] = v;
            }
        }
    }
}

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
            nvfp4_chunk(w, lut, x);
            acc_nvfp4_chunk<NV>(x, d, vec, vstride, nv, col, acc);
        }
        put_row_sums<RM::LANES, NV>(acc, nv, r, RM::lane() == 0, out);
    }
}

// dots_state is dots_nvfp4 for a matrix in an element format (scale sc).
template <int NV, int FMT>
__device__ __forceinline__ void dots_state(const typename StateIO<FMT>::T* S, float sc,
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
                IO::load(S, (u64)r * COLS + col, x, sc);
            } else {
#pragma unroll
                for (int k = 0; k < IO::VEC; k++) {
                    x[k] = 0.0f;
                }
            }
            acc_chunk<NV, IO::VEC>(x, vec, vstride, nv, col, acc);
        }
        put_row_sums<SM::LANES, NV>(acc, nv, r, SM::lane() == 0, out);
    }
}

// dots_read computes the row dots of matrix m (out[a*ROWS + r] = row_r .
// vec_a) from what a non-flush step reads: the read copy if there is one,
// else the checkpoint.
template <int NV>
__device__ __forceinline__ void dots_read(const typename StateIO<STATE_FMT>::T* state, const u8* rcodes,
                                          const u8* rscales, const float* rglobal, u64 m, const float* vec,
                                          int vstride, int nv, float* out, const float* lut)
{
#if READ_FMT == FMT_NVFP4
    dots_nvfp4<NV>(rcodes + m * RC_BYTES, rscales + m * (ROWS * COLS / 16), rglobal[m], vec, vstride, nv, out, lut);
#elif READ_FMT == FMT_F32
    dots_state<NV, STATE_FMT>(state + m * (ROWS * COLS), state_scale(state, m), vec, vstride, nv, out);
#else
    const float sc = Fmt<READ_FMT>::SCALED ? rglobal[m] : 1.0f;
    dots_state<NV, READ_FMT>(reinterpret_cast<const typename StateIO<READ_FMT>::T*>(rcodes + m * RC_BYTES), sc, vec,
                             vstride, nv, out);
#endif
}

// prefetch_l1 asks for bytes bytes at p in this SM's L1, one request per
// 128-byte line spread over the CTA's first NT threads.
__device__ __forceinline__ void prefetch_l1(const void* p, int bytes)
{
    const char* c = reinterpret_cast<const char*>(p);
    for (int o = (int)threadIdx.x * 128; o < bytes; o += NT * 128) {
        asm volatile("prefetch.global.L1 [%0];" ::"l"(c + o));
    }
}

// prefetch_read asks for what dots_read will read of matrix m (read copy or
// checkpoint) in this SM's L1, one request per 128-byte line spread over
// the CTA. At small batch a step is a chain of dependent round trips
// (slots, hist, ring, state); this takes the state out of the chain.
__device__ __forceinline__ void prefetch_read(const typename StateIO<STATE_FMT>::T* state, const u8* rcodes,
                                              const u8* rscales, u64 m)
{
#if READ_FMT == FMT_F32
    prefetch_l1(state + m * (ROWS * COLS), ROWS * COLS * (int)sizeof(typename StateIO<STATE_FMT>::T));
#else
    prefetch_l1(rcodes + m * RC_BYTES, RC_BYTES);
#endif
#if READ_FMT == FMT_NVFP4
    prefetch_l1(rscales + m * (ROWS * COLS / 16), ROWS * COLS / 16);
#endif
}

// ---- many short dot products at once ----
//
// dot_pairs computes write(pr, a(pr) . b(pr)) for every pair pr in
// [0, npairs) of n-element vectors (n a multiple of 4, 16-byte aligned
// floats; a(pr) may also give a bf16 ring's codes, 8-byte aligned, widened
// as read, ring_ld4; a(pr) may return nullptr to skip a pair; b(pr) is
// asked right after a(pr), on the same thread), 8 lanes per pair: lane l of the eight
// sums float4 chunks l, l+8, ... in order, then the eight reduce by xor
// shuffles (a fixed order: deterministic). nthreads threads (a multiple of
// 32) call it with thread index ti; the loop is warp-uniform, so the
// full-warp shuffles are safe. One round covers nthreads/8 pairs, where one
// warp per pair (v3) needed a 5-level reduction per pair in sequence.
template <typename FA, typename FB, typename FW>
__device__ __forceinline__ void dot_pairs(int npairs, int n, int ti, int nthreads, FA a, FB b, FW write)
{
    const int sub = ti & 7;
    for (int base = 4 * (ti >> 5); base < npairs; base += nthreads / 8) {
        const int pr = base + ((ti & 31) >> 3);
        float acc = 0.0f;
        const auto pa = pr < npairs ? a(pr) : nullptr;
        if (pa != nullptr) {
            const float* pb = b(pr);
            for (int e = 4 * sub; e < n; e += 32) {
                const float4 x = ring_ld4(pa + e);
                const float4 y = *reinterpret_cast<const float4*>(pb + e);
                acc = fmaf(x.x, y.x, acc);
                acc = fmaf(x.y, y.y, acc);
                acc = fmaf(x.z, y.z, acc);
                acc = fmaf(x.w, y.w, acc);
            }
        }
        acc = lanes_sum<8>(acc);
        if (pa != nullptr && sub == 0) {
            write(pr, acc);
        }
    }
}

// ---- tensor cores (sm_80+): TF32 products at float32 accuracy ----
//
// tf32_split writes x = hi + lo + e as two TF32 operands (hi rounded to
// nearest, lo the remainder rounded again): |e| <= 2^-22 |x|, so the three
// products hi*hi + hi*lo + lo*hi ("3xTF32", lo*lo dropped) carry a float32
// product's accuracy to within a few ulp where one TF32 product errs by
// 2^-11. A value exact in TF32 (bf16, fp16: at most 11 significant bits)
// has lo = 0 and needs hi*hi + lo*hi of the other operand only.
__device__ __forceinline__ void tf32_split(float x, u32& hi, u32& lo)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(hi) : "f"(x));
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(lo) : "f"(x - __uint_as_float(hi)));
#else
    hi = __float_as_uint(x);
    lo = 0;
#endif
}

// tf32_split_fast is tf32_split in three instructions: hi rounded on the
// bits (half an ulp of TF32 added to the magnitude, the 13 low bits
// cleared) and lo = x - hi, exact in float32, passed whole: the tensor
// cores read a TF32 operand's upper 19 bits, so lo is truncated there
// (|e| <= 2^-21 |x|) instead of rounded by a second cvt. cvt.rna.tf32.f32
// is several instructions on sm_90: the two conversions were a quarter of
// the bf16 flush's instructions (ncu). gdn_update_tc takes it (H200,
// B=256, against tf32_split: Qwen3.5-4B bf16 aligned flush 587 -> 576 us,
// 122B 1161 -> 1139); in gdn_project_tc it made ptxas 11.8 spill 456 bytes
// where it spilled 120.
__device__ __forceinline__ void tf32_split_fast(float x, u32& hi, u32& lo)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    lo = __float_as_uint(x - __uint_as_float(hi));
#else
    tf32_split(x, hi, lo);
#endif
}

// mma_tf32 is d += A B for one m16n8k8 tile (row-major A, column-major B,
// float32 accumulators) over one warp: with g = lane/4 and t = lane%4, a0..a3
// are A[g][t], A[g+8][t], A[g][t+4], A[g+8][t+4]; b0, b1 are B[t][g],
// B[t+4][g]; d0..d3 are D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1].
__device__ __forceinline__ void mma_tf32(float& d0, float& d1, float& d2, float& d3, u32 a0, u32 a1, u32 a2, u32 a3,
                                         u32 b0, u32 b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// mma_3xtf32 is d += A B from split operands (tf32_split), the small
// products first so that they are not lost against the large one. AEXACT:
// A is exact in TF32 (its lo parts are zero and not read).
template <bool AEXACT>
__device__ __forceinline__ void mma_3xtf32(float& d0, float& d1, float& d2, float& d3, const u32 (&ahi)[4],
                                           const u32 (&alo)[4], u32 bhi0, u32 bhi1, u32 blo0, u32 blo1)
{
    if constexpr (!AEXACT) {
        mma_tf32(d0, d1, d2, d3, alo[0], alo[1], alo[2], alo[3], bhi0, bhi1);
    }
    mma_tf32(d0, d1, d2, d3, ahi[0], ahi[1], ahi[2], ahi[3], blo0, blo1);
    mma_tf32(d0, d1, d2, d3, ahi[0], ahi[1], ahi[2], ahi[3], bhi0, bhi1);
}

// update_tc_tile is one step of a tensor-core rank update (gdn_update_tc,
// mamba2_fold_tc): a chunk's two tiles (p = 0, 1) of 8 columns times one
// step of 8 entries, the B operands at k0 and k1 (entries i0 and i1, zeros
// where in0 or in1 is false) and the A operands (ahi, alo) into the
// accumulators of rows g and g+8 (acc0, acc1: TCMap's reg[.][c]).
// gdn_fold_stream folds with it too, so that its checkpoint is the fold's
// bit for bit.
__device__ __forceinline__ void update_tc_tile(float (&acc0)[4], float (&acc1)[4], const float* k0, const float* k1,
                                               bool in0, bool in1, const u32 (&ahi)[4], const u32 (&alo)[4])
{
    float2 x0 = *reinterpret_cast<const float2*>(k0);
    float2 x1 = *reinterpret_cast<const float2*>(k1);
    if (!in0) {
        x0 = make_float2(0.0f, 0.0f);
    }
    if (!in1) {
        x1 = make_float2(0.0f, 0.0f);
    }
#pragma unroll
    for (int p = 0; p < 2; p++) {
        u32 bhi0, blo0, bhi1, blo1;
        tf32_split_fast(p ? x0.y : x0.x, bhi0, blo0);
        tf32_split_fast(p ? x1.y : x1.x, bhi1, blo1);
        mma_3xtf32<false>(acc0[p], acc0[p + 2], acc1[p], acc1[p + 2], ahi, alo, bhi0, bhi1, blo0, blo1);
    }
}

// mma_16816 is d += A B for one m16n8k16 tile of f16 (BF16: bf16)
// operands (row-major A, column-major B, float32 accumulators) over one
// warp: with g = lane/4 and t = lane%4, a0..a3 hold A[g][2t..2t+1],
// A[g+8][2t..2t+1], A[g][2t+8..2t+9], A[g+8][2t+8..2t+9] and b0, b1 hold
// B[2t..2t+1][g], B[2t+8..2t+9][g] (the lower index in the lower half);
// d0..d3 as mma_tf32's.
template <bool BF16>
__device__ __forceinline__ void mma_16816(float& d0, float& d1, float& d2, float& d3, u32 a0, u32 a1, u32 a2, u32 a3,
                                          u32 b0, u32 b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (BF16) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
            "{%0, %1, %2, %3};"
            : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
#endif
}

// f16x2_of packs lo and hi, rounded to f16, into one word (lo in the
// lower half).
__device__ __forceinline__ u32 f16x2_of(float lo, float hi)
{
    u32 d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

// f16x2_mul is the f16 product of each half of a and b (round to nearest).
__device__ __forceinline__ u32 f16x2_mul(u32 a, u32 b)
{
    u32 d;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
// f16x2_of_e4m3x2 decodes the two e4m3 codes of bits 0-15 of c (the lower
// byte into the lower half); every e4m3 value is an f16.
__device__ __forceinline__ u32 f16x2_of_e4m3x2(u32 c)
{
    u32 h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((unsigned short)c));
    return h2;
}
#endif

// e4m3_of_e2m1 rewrites the eight e2m1 codes of w (code k in bits 4k..4k+3,
// sign in its bit 3) as e4m3 codes of 2^-6 times their values: codes 0, 2,
// 4, 6 in the bytes of lo, 1, 3, 5, 7 in those of hi. An e2m1 code's
// exponent and mantissa bits (e, m) placed as the e4m3 exponent's low bits
// and its mantissa's top bit are 2^(e-7)(1 + m/2) for e > 0 and 2^-6 m/2
// for e = 0: the e2m1 value 2^(e-1)(1 + m/2), or m/2, times 2^-6.
// In PTX, so that the words stay whole: from C the compiler split each
// into 16-bit halves (the conversions read 16 bits), 14 instructions a
// word where these take 7.
__device__ __forceinline__ void e4m3_of_e2m1(u32 w, u32& lo, u32& hi)
{
    asm("{\n\t.reg .b32 a, b;\n\t"
        "shl.b32 a, %2, 2;\n\t"
        "shl.b32 b, %2, 4;\n\t"
        "and.b32 b, b, 0x80808080;\n\t"
        "lop3.b32 %0, a, 0x1c1c1c1c, b, 0xea;\n\t" // (a & mask) | b
        "shr.b32 a, %2, 2;\n\t"
        "and.b32 b, %2, 0x80808080;\n\t"
        "lop3.b32 %1, a, 0x1c1c1c1c, b, 0xea;\n\t"
        "}"
        : "=r"(lo), "=r"(hi)
        : "r"(w));
}

// ---- Hopper pipelines: mbarriers and bulk copies (sm_90+) ----
//
// The streaming kernels (the *_pipe kernels) are persistent: a producer warp
// issues bulk copies (cp.async.bulk, the TMA engine's 1-D form) of each work
// item's state matrix and ring entries into one of NSTAGE shared-memory
// stages and signals the stage's "full" mbarrier; consumer warps compute from
// shared memory and signal its "empty" mbarrier. The state streams without
// passing through registers, and the loads of the next items are in flight
// while an item computes, so no per-item latency (cursors, ring gather,
// barriers, reductions) stands between the state's bytes and the SM.

__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(u64* bar, u32 count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}

// mbar_fence_init makes initialised mbarriers visible to the async proxy
// (the bulk copies); a __syncthreads follows it.
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

__device__ __forceinline__ void mbar_arrive(u64* bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}

// release_stage: a consumer warp is done with its stage (its lanes' reads
// are behind the __syncwarp); lane 0 arrives on the stage's empty barrier.
__device__ __forceinline__ void release_stage(u64* empty)
{
    __syncwarp();
    if ((threadIdx.x & 31) == 0) {
        mbar_arrive(empty);
    }
}

// mbar_arrive_tx arrives and adds bytes to the transfers the phase waits for.
__device__ __forceinline__ void mbar_arrive_tx(u64* bar, u32 bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}

// mbar_wait returns once the phase with the given parity has completed. A
// wait that never ends (a bug) traps after ~2^26 polls instead of hanging the
// device: the launch then fails with an error the host reports.
__device__ __forceinline__ void mbar_wait(u64* bar, u32 parity)
{
    const u32 a = smem_u32(bar);
    for (u32 spins = 0;; spins++) {
        u32 done;
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(a), "r"(parity)
                     : "memory");
        if (done) {
            return;
        }
        if (spins > (1u << 26)) {
            __trap();
        }
    }
}

// bulk_g2s copies bytes (a multiple of 16, both addresses 16-byte aligned)
// from global to shared memory and counts them on bar's transaction count.
__device__ __forceinline__ void bulk_g2s(void* dst, const void* src, u32 bytes, u64* bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}

// cp_async_mbar_arrive makes bar's current phase also wait for this thread's
// cp.async copies issued so far (an arrival counted in the barrier's
// initial count: .noinc).
__device__ __forceinline__ void cp_async_mbar_arrive(u64* bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}

// ---- The baselines' whole-matrix stage (BASE_BULK) ----
//
// BASE_BULK=1 (the Go side sets it with BASE_MINB, the blocks per SM the
// stage's shared memory allows) stages the streaming baseline step's whole
// matrix in dynamic shared memory: thread 0 asks for it with one bulk copy
// before the prologue (the token's vectors, the decay in float64, GDN's l2
// norms), and the passes then read it from shared memory. Without it each
// pass waits a DRAM round trip for its chunks and then runs its chain (the
// dots, their lane reductions, the update, the stores) with nothing of its
// own in flight; BASE_EARLY_ON overlaps only pass 0 with the prologue, and
// a register prefetch (BASE_PF) costs the 2-byte states blocks per SM. With
// the stage a block waits one round trip, under its prologue, and its
// matrix is in flight whole. Measured on the H200 (B=256): only Gated
// DeltaNet fp32 gained (Qwen3.5-4B 283 -> 278 us, 122B 555 -> 547); the
// bf16 steps lost 2-7% (Nano 261 -> 280) and Mamba-2 fp32 2% (a block
// computes nothing until its whole matrix is in, and the stage's shared
// memory bounds the blocks per SM), so planBaseStage turns it on for GDN
// fp32 only.
//
// base_stage_begin starts the copy of the matrix at src into the dynamic
// shared memory, copies the token's row of ROWS floats that the passes
// read (GDN v, Mamba-2 x) from row to srow, and returns the stage; bar (one
// mbarrier) completes when the matrix lands. Call it before a
// __syncthreads that precedes stream_staged (the barrier's initialisation
// and srow must be seen by every thread).
template <typename T>
__device__ __forceinline__ const T* base_stage_begin(const T* src, u64* bar, float* srow, const float* __restrict__ row)
{
    extern __shared__ __align__(128) unsigned char base_dyn[];
    constexpr u32 bytes = ROWS * COLS * sizeof(T);
    if (threadIdx.x == 0) {
        mbar_init(bar, 1);
        mbar_fence_init();
        mbar_arrive_tx(bar, bytes);
        bulk_g2s(base_dyn, src, bytes, bar);
    }
    base_row(srow, row);
    return reinterpret_cast<const T*>(base_dyn);
}

// stream_staged runs a baseline's passes from its stage, update(pass, e, 3)
// each with e read from shared memory, once the copy has landed.
template <typename IO, typename MAP, typename U>
__device__ __forceinline__ void stream_staged(const typename IO::T* stage, u64* bar, U update)
{
    mbar_wait(bar, 0);
#pragma unroll 1
    for (int pass = 0; pass < MAP::PASSES; pass++) {
        float e[MAP::CPL][IO::VEC];
        load_pass<IO, MAP>(stage, pass, e);
        update(pass, e, 3);
    }
}

// base_begin starts a streaming baseline step's passes before its
// prologue's barrier, as the module streams them: the whole-matrix stage
// (BASE_BULK; it returns the stage, with the token's row to srow), nothing
// otherwise.
template <typename T>
__device__ __forceinline__ const T* base_begin(const T* src, u64* bar, float* srow, const float* __restrict__ row)
{
#if BASE_BULK
    return base_stage_begin(src, bar, srow, row);
#else
    return nullptr;
#endif
}

// base_stream runs a streaming baseline step's passes, update(pass, e,
// from) each, from where base_begin put them: the stage, or (none) the
// register passes (stream_passes, with raw0).
template <typename IO, typename MAP, typename U>
__device__ __forceinline__ void base_stream(const typename IO::T* stage, u64* bar, const uint4* raw0, U update)
{
#if BASE_BULK
    stream_staged<IO, MAP>(stage, bar, update);
#else
    stream_passes<IO, MAP>(raw0, update);
#endif
}

// Piece is one contiguous copy into a stage. swz (0 for a plain copy)
// swizzles a cp.async piece's 16-byte units: unit f lands at f ^ ((f >> 3)
// & swz), the layout a reader of rows that spreads each lane's VEC floats
// over 16-byte loads asks for (bsw_unit; the Mamba-2 folds' B rows).
// widen (RING_BF16) marks a bf16 ring's row: src holds bytes/4 bf16 codes,
// which land in dst as bytes/4 floats (produce_stage widens them through
// registers, since neither cp.async nor a bulk copy converts).
struct Piece {
    unsigned char* dst;
    const void* src;
    u32 bytes;
    u32 swz;
    u32 widen;
};

// bsw_unit is the 16-byte unit where unit f of a row swizzled by mask swz
// lies (Piece.swz). Eight lanes reading units f = VEC/4 * lane + q of a
// float row (q fixed) hit the same banks two (VEC 8) or four (VEC 16)
// times over unswizzled; swizzled with swz = VEC/4 - 1 never (the XOR
// moves f within its group of VEC/4 units by bits of f / 8).
__device__ __forceinline__ int bsw_unit(int f, int swz) { return f ^ ((f >> 3) & swz); }

// produce_stage moves a stage's npieces pieces (piece(ci) gives piece ci;
// pieces 0 .. nmat-1 are the matrix) and arms bar: the producer warp calls it
// with all lanes; the stage is full once every byte has landed. bar's
// initial count is 33: lane 0's arrival plus one cp.async arrival per lane.
// The matrix pieces go by bulk copies (TMA), the ring and input pieces by
// 16-byte cp.async: lanes 2l and 2l+1 issue piece l, then 16 on, each
// every other 16-byte unit of the piece. (Each ring piece copied by the
// whole warp in turn, 512 contiguous bytes a cp.async rather than 16 from
// each of 32 rows, was slower: Mamba-2 verify 6-19%, aligned flush up to
// 38%, Nano fp32's 3% faster.)
//
// Two lanes a ring piece: ncu of the Nano bf16 aligned flush with one lane
// a piece, every lane at the same unit of its own row, had each cp.async
// take twice its ideal L2 sectors (16 bytes of each 32-byte sector) and 6x
// its shared-memory wavefronts (rows 320 or 512 bytes apart, the same
// banks). The bytes and their places are the same either way. H200, B=256,
// us, one lane -> two: verify Nano bf16 342 -> 326, Super bf16 348 -> 336,
// Super fp32 497 -> 489; windows Super bf16 215 -> 211, fp32 333 -> 330,
// Nano 1-2 us; aligned flushes Nano fp32 634 -> 614, Super fp32 678 ->
// 657, bf16 573 -> 549. Starting each piece's lanes at a unit rotated by
// the piece (spreading the banks further) gained nothing more; four lanes
// a piece against two, windows and verifies within 1%, fp32 aligned
// flushes 1-2% faster.
#if RING_BF16
// widen_units calls body(piece, k, u, f) for each widened unit f of the
// pieces c0 .. c0+WB-1 (piece(c0+k)) that lane takes: units lane + 32u,
// u < WU, within the piece's bytes.
template <int WB, int WU, typename F, typename Body>
__device__ __forceinline__ void widen_units(int c0, int npieces, int lane, F& piece, Body body)
{
#pragma unroll
    for (int k = 0; k < WB; k++) {
        const Piece pc = c0 + k < npieces ? piece(c0 + k) : Piece{};
#pragma unroll
        for (int u = 0; u < WU; u++) {
            const u32 f = lane + 32 * u;
            if (pc.widen && f < pc.bytes / 16) {
                body(pc, k, u, f);
            }
        }
    }
}
#endif

template <typename F>
__device__ __forceinline__ void produce_stage(u64* bar, int npieces, int nmat, F piece)
{
    const int lane = threadIdx.x & 31;
    u32 tx = 0;
#if RING_BF16
    // A bf16 ring's rows first, widened through registers: the warp takes
    // WB pieces at a time, lane l unit l (+32, ...) of each (four codes an
    // 8-byte load, coalesced across the lanes, then a float4 store where the
    // piece's unit goes, swizzle included), every load of the WB pieces in
    // flight before the first store. The loads wait here, where cp.async
    // would not; WB bounds how many round trips an item's rows take (Nano's
    // flush of 16 entries: 32 rows, four). The stores are the warp's before
    // __syncwarp, and lane 0's arrival below (release) publishes them with
    // the phase the consumers wait for.
    {
        constexpr int WU = ((ROWS > COLS ? ROWS : COLS) / 4 + 31) / 32; // a ring row's units a lane
        constexpr int WB = 8;
        for (int c0 = nmat; c0 < npieces; c0 += WB) {
            uint2 w[WB][WU];
            widen_units<WB, WU>(c0, npieces, lane, piece, [&](const Piece& pc, int k, int u, u32 f) {
                w[k][u] = *reinterpret_cast<const uint2*>(static_cast<const ring_e*>(pc.src) + 4 * f);
            });
            widen_units<WB, WU>(c0, npieces, lane, piece, [&](const Piece& pc, int k, int u, u32 f) {
                *reinterpret_cast<float4*>(pc.dst + 16 * bsw_unit(f, pc.swz)) =
                    make_float4(bf16_lo(w[k][u].x), bf16_hi(w[k][u].x), bf16_lo(w[k][u].y), bf16_hi(w[k][u].y));
            });
        }
        __syncwarp();
    }
#endif
    for (int ci = lane; ci < npieces; ci += 32) {
        if (ci < nmat) {
#if RING_BF16
            const Piece pc = piece(ci);
            tx += pc.widen ? 0 : pc.bytes;
#else
            tx += piece(ci).bytes;
#endif
        }
    }
    tx = __reduce_add_sync(FULL_MASK, tx);
    if (lane == 0) {
        if (tx > 0) {
            mbar_arrive_tx(bar, tx);
        } else {
            mbar_arrive(bar);
        }
    }
    __syncwarp();
    const int sub = lane % 2, grp = lane / 2;
    for (int ci = grp; ci < npieces; ci += 16) {
        const Piece pc = piece(ci);
#if RING_BF16
        if (pc.widen) {
            continue; // widened above
        }
#endif
        if (ci < nmat) {
            if (sub == 0) {
                bulk_g2s(pc.dst, pc.src, pc.bytes, bar);
            }
        } else {
            for (u32 f = sub; f < pc.bytes / 16; f += 2) {
                cp_async16(pc.dst + 16 * bsw_unit(f, pc.swz), static_cast<const unsigned char*>(pc.src) + 16 * f);
            }
        }
    }
    cp_async_mbar_arrive(bar);
}

// The NCW consumer warps form NCW/GW groups of GW warps; group g takes the
// items it = g, g+NGRP, ... (its own stages in turn), so that one group's
// per-item latency (reductions, barriers) overlaps another's. group_sync is
// a barrier over one group only (named barrier 1+g), leaving the producer
// and the other groups free to run ahead.
#ifndef GW
#define GW 4
#endif
#define NGRP (NCW / GW)
#define GCT (GW * 32)
#define group_sync(g) asm volatile("bar.sync %0, %1;\n" ::"r"(1 + (g)), "r"(GCT) : "memory")

// PIPE_MINB is the number of blocks per SM the plan counts on: the
// compiler must keep the pipelined kernels' registers within what that many
// blocks can hold (65536 / (PIPE_MINB * 32 * (NCW+1)) per thread), or the
// SM would run fewer blocks, and so fewer consumer groups, than planned.
#ifndef PIPE_MINB
#define PIPE_MINB 1
#endif

// Each group owns SG = NSTAGE/NGRP stages and takes them in turn, so every
// mbarrier phase is waited for by one group in order (an mbarrier parity
// wait cannot tell a phase two ahead from the one before: groups sharing
// stages round-robin could pass a stage whose copies had not landed).
// stage_of maps a block's item number to its stage and phase parity.
#ifdef NSTAGE
#define SG (NSTAGE / NGRP)
__device__ __forceinline__ void stage_of(int it, int& stg, u32& par)
{
    const int g = it % NGRP, li = it / NGRP;
    stg = g * SG + li % SG;
    par = (u32)(li / SG) & 1u;
}
#endif

// CMap is Map for the consumer warps of a pipelined kernel: thread ct in
// [0, 32*NCW) of NCW warps.
template <int VEC_, int COLS_, int ROWS_, int W_>
struct CMap {
    static constexpr int VEC = VEC_;
    static constexpr int CHUNKS = COLS_ / VEC_;
    static constexpr int LANES = CHUNKS < 8 ? CHUNKS : 8;
    static constexpr int CPL = CHUNKS / LANES;
    static constexpr int RPW = 32 / LANES;
    static constexpr int RPP = W_ * RPW;
    static constexpr int PASSES = (ROWS_ + RPP - 1) / RPP;
    __device__ static __forceinline__ int row(int pass, int ct) { return pass * RPP + (ct >> 5) * RPW + (ct & 31) / LANES; }
    __device__ static __forceinline__ int lane(int ct) { return (ct & 31) % LANES; }
    __device__ static __forceinline__ int col(int c, int ct) { return (c * LANES + lane(ct)) * VEC; }
};

// Bytes of one matrix in shared memory: the read copy's elements (nvfp4:
// codes followed by block scales), or the checkpoint's (16-byte multiples).
// MAT_FMT is the format the non-flush step reads.
#define SMAT_STATE_BYTES (ROWS * COLS * FMT_SIZE(STATE_FMT))
#define SMAT_NVFP4_BYTES (ROWS * COLS / 2 + ROWS * COLS / 16)
#if READ_FMT == FMT_NVFP4
#define SMAT_BYTES SMAT_NVFP4_BYTES
#elif READ_FMT != FMT_F32
#define SMAT_BYTES RC_BYTES
#else
#define SMAT_BYTES SMAT_STATE_BYTES
#endif
#define MAT_FMT (READ_FMT == FMT_F32 ? STATE_FMT : READ_FMT)

// smem_row_dots computes, for the rows of a matrix held in shared memory
// (format MAT_FMT with scale gsc; nvfp4: codes then block scales, global
// scale gsc) and
// nv <= NV vectors vec[a*vstride ...] (shared memory), out[a*ROWS + r] =
// row_r . vec_a (written by the row's first lane). Same order of operations
// as dots_state / dots_nvfp4.
template <int NV, int W>
__device__ __forceinline__ void smem_row_dots(const unsigned char* mat, float gsc, const float* vec, int vstride, int nv,
                                              const float* lut, int ct, float* out)
{
#if READ_FMT == FMT_NVFP4
    typedef CMap<16, COLS, ROWS, W> RM;
    const u8* codes = mat;
    const u8* scales = mat + ROWS * COLS / 2;
#else
    typedef StateIO<MAT_FMT> IO;
    typedef CMap<IO::VEC, COLS, ROWS, W> RM;
    const typename IO::T* S = reinterpret_cast<const typename IO::T*>(mat);
#endif
#pragma unroll
    for (int pass = 0; pass < RM::PASSES; pass++) {
        const int r = RM::row(pass, ct);
        float acc[NV];
#pragma unroll
        for (int a = 0; a < NV; a++) {
            acc[a] = 0.0f;
        }
#pragma unroll
        for (int c = 0; c < RM::CPL; c++) {
            const int col = RM::col(c, ct);
#if READ_FMT == FMT_NVFP4
            uint2 w = make_uint2(0, 0);
            float d = 0.0f;
            if (r < ROWS) {
                const int e = r * COLS + col;
                w = *reinterpret_cast<const uint2*>(codes + e / 2);
                d = __fmul_rn(f32_from_e4m3(scales[e / 16]), gsc);
            }
            float x[16];
            nvfp4_chunk(w, lut, x);
            acc_nvfp4_chunk<NV>(x, d, vec, vstride, nv, col, acc);
#else
            float x[IO::VEC];
            if (r < ROWS) {
                IO::load(S, (u64)r * COLS + col, x, gsc);
            } else {
#pragma unroll
                for (int k = 0; k < IO::VEC; k++) {
                    x[k] = 0.0f;
                }
            }
            acc_chunk<NV, IO::VEC>(x, vec, vstride, nv, col, acc);
#endif
        }
        put_row_sums<RM::LANES, NV>(acc, nv, r, RM::lane(ct) == 0, out);
    }
}

// ---- group streams (the group non-flush steps) ----
//
// A group step block reads the state matrices of several heads that share
// the step's vectors (a Mamba-2 group's heads share C; a GDN key head's
// value heads share k and q) as one stream of NROWS rows of COLS: GMAP (a
// CMap over the block) gives each thread fixed columns, so it holds its
// columns of the vectors in registers, and it loads GPF passes ahead of its
// dots. The dots keep dots_nvfp4's / dots_state's order of operations: the
// group steps are bit-identical to the per-head kernels (the nvfp4 streams on the
// tensor cores, GROUP_TC below, are not).

#if READ_FMT == FMT_NVFP4
#define GVEC 16
#else
#define GVEC (StateIO<MAT_FMT>::VEC)
#endif
// About 128 bytes per thread in flight: fp32 2 passes, bf16 / fp16 4, fp8
// 8, nvfp4 (9 bytes a pass) 12.
#define GPF_DEFAULT(CPL) (READ_FMT == FMT_NVFP4 ? 12 : 8 / (CPL))

// row_sums_scatter reduces each of the NV vectors' partial sums acc[a]
// over a row's LANES lanes and writes vector a's sum to out[a*stride] (a <
// nv; put when the row exists). Where lanes_sum per vector takes
// log2(LANES) shuffles a vector (the GDN group verify's 8 vectors: 24 a
// pass, its shared-memory pipe's largest load after the vectors' reads),
// this halves the vectors each level: a lane keeps half, sends its partner
// the other half and adds what it receives, so 8 vectors over 8 lanes take
// 4 + 2 + 1 shuffles and end one per lane. Every sum pairs the same lanes in
// the same order as lanes_sum's xor butterfly (x_l + x_{l^4} first), and a
// float sum of two values does not depend on their order: the results are
// lanes_sum's bit for bit.
template <int LANES, int NV>
__device__ __forceinline__ void row_sums_scatter(const float (&acc)[NV], int nv, int lane, bool put, float* out,
                                                 int stride)
{
    constexpr int V = NV <= 1 ? 1 : NV <= 2 ? 2 : NV <= 4 ? 4 : NV <= 8 ? 8 : NV <= 16 ? 16 : 32;
    float v[V];
#pragma unroll
    for (int a = 0; a < V; a++) {
        v[a] = a < NV ? acc[a] : 0.0f;
    }
    int base = 0; // this lane keeps vectors [base, base + m)
#pragma unroll
    for (int o = LANES / 2, m = V; o > 0; o >>= 1) {
        if (m > 1) {
            const bool up = (lane & o) != 0;
            const int h = m / 2;
#pragma unroll
            for (int i = 0; i < V / 2; i++) {
                if (i < h) {
                    const float send = up ? v[i] : v[i + h];
                    const float keep = up ? v[i + h] : v[i];
                    v[i] = keep + __shfl_xor_sync(FULL_MASK, send, o);
                }
            }
            base += up ? h : 0;
            m = h;
        } else {
            v[0] += __shfl_xor_sync(FULL_MASK, v[0], o);
        }
    }
    // V >= LANES: each lane holds V/LANES vectors; else LANES/V lanes hold
    // the same one, and the first of them writes it.
    constexpr int M = V >= LANES ? V / LANES : 1;
    const bool writer = V >= LANES || (lane & (LANES / V - 1)) == 0;
#pragma unroll
    for (int i = 0; i < M; i++) {
        if (put && writer && base + i < nv) {
            out[(base + i) * stride] = v[i];
        }
    }
}

// GRaw is one thread's raw bytes of one pass: CPL 16-byte chunks (nvfp4:
// one 8-byte word of codes and its block's scale code).
template <typename GMAP>
struct GRaw {
#if READ_FMT == FMT_NVFP4
    uint2 w;
    u32 sc;
#else
    uint4 w[GMAP::CPL];
#endif
};

// group_load issues the loads of pass `pass` of an NROWS-row stream at mat
// (nvfp4: codes, block scales at scales); rows past the end give zeros.
template <typename GMAP, int NROWS>
__device__ __forceinline__ void group_load(const void* mat, const u8* scales, int pass, GRaw<GMAP>& raw)
{
    const int r = GMAP::row(pass, threadIdx.x);
#if READ_FMT == FMT_NVFP4
    raw.w = make_uint2(0, 0);
    raw.sc = 0;
    if (r < NROWS) {
        const u64 e = (u64)r * COLS + GMAP::col(0, threadIdx.x);
        raw.w = *reinterpret_cast<const uint2*>(static_cast<const u8*>(mat) + e / 2);
        raw.sc = scales[e / 16];
    }
#else
    typedef StateIO<MAT_FMT> IO;
    const typename IO::T* S = static_cast<const typename IO::T*>(mat);
#pragma unroll
    for (int c = 0; c < GMAP::CPL; c++) {
        raw.w[c] = make_uint4(0, 0, 0, 0);
        if (r < NROWS) {
            raw.w[c] = *reinterpret_cast<const uint4*>(S + (u64)r * COLS + GMAP::col(c, threadIdx.x));
        }
    }
#endif
}

// group_dots_by writes out[a*NROWS + r] = row_r . vec_a for the rows of
// pass `pass` and the first nv <= NV vectors, vq(a, c, q) giving vector a's
// four floats at quad q of this thread's chunk c; row r belongs to matrix
// r / RPM, whose scale (nvfp4 global, fp8) is gs[r / RPM]. nv must be the
// same for the whole block (the lanes' shuffles stay uniform).
template <typename GMAP, int NROWS, int RPM, int NV, typename VQ>
__device__ __forceinline__ void group_dots_by(const GRaw<GMAP>& raw, int pass, int nv, VQ vq, const float* gs,
                                              const float* lut, float* out)
{
    const int r = GMAP::row(pass, threadIdx.x);
    const int m = min(r, NROWS - 1) / RPM;
    float acc[NV];
#pragma unroll
    for (int a = 0; a < NV; a++) {
        acc[a] = 0.0f;
    }
#if READ_FMT == FMT_NVFP4
    float x[16];
    nvfp4_chunk(raw.w, lut, x);
    const float d = r < NROWS ? __fmul_rn(f32_from_e4m3(raw.sc), gs[m]) : 0.0f;
#pragma unroll
    for (int a = 0; a < NV; a++) {
        if (a < nv) {
            float part = 0.0f;
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const float4 w = vq(a, 0, q);
                part = fma4(x + 4 * q, w, part);
            }
            acc[a] = fmaf(part, d, acc[a]);
        }
    }
#else
    typedef StateIO<MAT_FMT> IO;
    const float sc = IO::SCALED ? gs[m] : 1.0f;
#pragma unroll
    for (int c = 0; c < GMAP::CPL; c++) {
        float v[GVEC];
        IO::unpack(raw.w[c], v, sc);
#pragma unroll
        for (int a = 0; a < NV; a++) {
            if (a < nv) {
#pragma unroll
                for (int q = 0; q < GVEC / 4; q++) {
                    const float4 w = vq(a, c, q);
                    acc[a] = fma4(v + 4 * q, w, acc[a]);
                }
            }
        }
    }
#endif
    row_sums_scatter<GMAP::LANES, NV>(acc, nv, GMAP::lane(threadIdx.x), r < NROWS, out + r, NROWS);
}

// padded_vec4 reads elements e..e+3 (e a multiple of 4) of vector a of
// COLS floats stored padded, 4 floats after every 32 (group_dots_smem).
__device__ __forceinline__ float4 padded_vec4(const float* vs, int a, int e)
{
    return *reinterpret_cast<const float4*>(vs + a * (COLS + (COLS >> 5) * 4) + e + (e >> 5) * 4);
}

// group_dots_smem_pair is group_dots_smem for the rows of passes pass and
// pass+1 (raw0, raw1) at once: each vector chunk is read from shared memory
// once for both rows, which halves the vectors' reads, the GDN group
// verify's largest shared-memory load. Each row's sums keep group_dots_by's
// order. Element formats only (not nvfp4); rows past the
// end (pass+1 may be) are not written.
#if READ_FMT != FMT_NVFP4
template <typename GMAP, int NROWS, int RPM, int NV>
__device__ __forceinline__ void group_dots_smem_pair(const GRaw<GMAP>& raw0, const GRaw<GMAP>& raw1, int pass,
                                                     const float* vs, int nv, const float* gs, float* out)
{
    typedef StateIO<MAT_FMT> IO;
    const int r0 = GMAP::row(pass, threadIdx.x), r1 = GMAP::row(pass + 1, threadIdx.x);
    const float sc0 = IO::SCALED ? gs[min(r0, NROWS - 1) / RPM] : 1.0f;
    const float sc1 = IO::SCALED ? gs[min(r1, NROWS - 1) / RPM] : 1.0f;
    float acc0[NV], acc1[NV];
#pragma unroll
    for (int a = 0; a < NV; a++) {
        acc0[a] = 0.0f;
        acc1[a] = 0.0f;
    }
#pragma unroll
    for (int c = 0; c < GMAP::CPL; c++) {
        float v0[GVEC], v1[GVEC];
        IO::unpack(raw0.w[c], v0, sc0);
        IO::unpack(raw1.w[c], v1, sc1);
#pragma unroll
        for (int a = 0; a < NV; a++) {
            if (a < nv) {
#pragma unroll
                for (int q = 0; q < GVEC / 4; q++) {
                    const float4 w = padded_vec4(vs, a, GMAP::col(c, threadIdx.x) + 4 * q);
                    acc0[a] = fma4(v0 + 4 * q, w, acc0[a]);
                    acc1[a] = fma4(v1 + 4 * q, w, acc1[a]);
                }
            }
        }
    }
    row_sums_scatter<GMAP::LANES, NV>(acc0, nv, GMAP::lane(threadIdx.x), r0 < NROWS, out + r0, NROWS);
    row_sums_scatter<GMAP::LANES, NV>(acc1, nv, GMAP::lane(threadIdx.x), r1 < NROWS, out + r1, NROWS);
}
#endif

// group_dots is group_dots_by with NV vectors in registers (this thread's
// columns in vr[a], group_vec).
template <typename GMAP, int NROWS, int RPM, int NV>
__device__ __forceinline__ void group_dots(const GRaw<GMAP>& raw, int pass, const float (&vr)[NV][GMAP::CPL][GVEC],
                                           const float* gs, const float* lut, float* out)
{
    group_dots_by<GMAP, NROWS, RPM, NV>(
        raw, pass, NV,
        [&](int a, int c, int q) {
            return make_float4(vr[a][c][4 * q], vr[a][c][4 * q + 1], vr[a][c][4 * q + 2], vr[a][c][4 * q + 3]);
        },
        gs, lut, out);
}

// group_dots_smem is group_dots_by with the vectors in shared memory and
// nv <= NV of them used, for more vectors than registers hold (the GDN group
// verify's 2*TMAX). The vectors are padded, 4 floats after every 32 (vector
// a's element e at vs + a*(COLS + COLS/32*4) + e + e/32*4, 16-byte
// aligned): the lanes of a row read chunks VEC floats apart, which for VEC 8
// or 16 (2-byte and 1-byte reads) would fall 2 or 4 to a bank.
template <typename GMAP, int NROWS, int RPM, int NV>
__device__ __forceinline__ void group_dots_smem(const GRaw<GMAP>& raw, int pass, const float* vs, int nv,
                                                const float* gs, const float* lut, float* out)
{
    group_dots_by<GMAP, NROWS, RPM, NV>(
        raw, pass, nv,
        [&](int a, int c, int q) { return padded_vec4(vs, a, GMAP::col(c, threadIdx.x) + 4 * q); },
        gs, lut, out);
}

// group_vec loads this thread's columns of the COLS-float vector src.
template <typename GMAP>
__device__ __forceinline__ void group_vec(const float* src, float (&vr)[GMAP::CPL][GVEC])
{
#pragma unroll
    for (int c = 0; c < GMAP::CPL; c++) {
#pragma unroll
        for (int q = 0; q < GVEC / 4; q++) {
            const float4 v = *reinterpret_cast<const float4*>(src + GMAP::col(c, threadIdx.x) + 4 * q);
            vr[c][4 * q] = v.x;
            vr[c][4 * q + 1] = v.y;
            vr[c][4 * q + 2] = v.z;
            vr[c][4 * q + 3] = v.w;
        }
    }
}

// cp_rows copies rows [0, rows) of LEN floats by cp.async, row j from
// src + j*stride to dst + j*dstride: 16 bytes a copy when LEN is a multiple of
// 4 (src and stride then 16-byte aligned), else 4. The nth threads of index
// ti share the copies. The group steps stage the ring's rows with it.
template <int LEN>
__device__ __forceinline__ void cp_rows(float* dst, int dstride, const float* src, u64 stride, int rows, int ti, int nth)
{
    if (LEN % 4 == 0) {
        for (int q = ti; q < rows * (LEN / 4); q += nth) {
            const int j = q / (LEN / 4), e = 4 * (q % (LEN / 4));
            cp_async16(dst + j * dstride + e, src + j * stride + e);
        }
    } else {
        for (int q = ti; q < rows * LEN; q += nth) {
            const int j = q / LEN, e = q % LEN;
            cp_async4(dst + j * dstride + e, src + j * stride + e);
        }
    }
}

// cp_rows with the rows packed in dst (dstride LEN; dstride, a multiple
// of 4 floats where LEN is, pads them).
template <int LEN>
__device__ __forceinline__ void cp_rows(float* dst, const float* src, u64 stride, int rows, int ti, int nth)
{
    cp_rows<LEN>(dst, LEN, src, stride, rows, ti, nth);
}

// cp_rows_as_kept copies rows of LEN ring elements to shared memory as the
// ring keeps them, by cp.async: an fp32 ring's with cp_rows, a bf16 ring's
// codes 16 bytes (8 codes) a copy where a row is a multiple of 8 codes,
// else 4 (2 codes). The group step and verify stage their x and B rows so,
// and widen them where they read them (ring_ld, dot_pairs' ring_ld4): the
// copy stays asynchronous (a widening through registers waits a round trip
// where the copy is issued) and takes half the shared memory.
template <int LEN>
__device__ __forceinline__ void cp_rows_as_kept(ring_e* dst, const ring_e* src, u64 stride, int rows, int ti, int nth)
{
#if RING_BF16
    static_assert(LEN % 2 == 0, "a bf16 row of an odd number of codes");
    constexpr int PER = LEN % 8 == 0 ? 8 : 2; // codes a copy
    for (int q = ti; q < rows * (LEN / PER); q += nth) {
        const int j = q / (LEN / PER), e = PER * (q % (LEN / PER));
        const void* from = src + j * stride + e; // the codes as they are (cp_async of a ring_e* is deleted)
        if (PER == 8) {
            cp_async16(dst + j * LEN + e, from);
        } else {
            cp_async4(dst + j * LEN + e, from);
        }
    }
#else
    cp_rows<LEN>(dst, src, stride, rows, ti, nth);
#endif
}

// cp_table copies the first cols floats of rows rows by cp.async, 4 bytes
// a copy: dst[i*dstride + j] = src[i*sstride + j] (the ring's per-head
// scalars of a group of heads).
__device__ __forceinline__ void cp_table(float* dst, int dstride, const float* src, int sstride, int rows, int cols,
                                         int ti, int nth)
{
    for (int idx = ti; idx < rows * cols; idx += nth) {
        const int i = idx / cols, j = idx % cols;
        cp_async4(dst + i * dstride + j, src + i * sstride + j);
    }
}

// dynamic_smem_bytes is the launch's dynamic shared memory.
__device__ __forceinline__ u32 dynamic_smem_bytes()
{
    u32 n;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
    return n;
}

// group_mat points mat (and scl, nvfp4's block scales) at matrix m0, the
// first of a group's, in what the non-flush step reads.
__device__ __forceinline__ void group_mat(const typename StateIO<STATE_FMT>::T* state, const u8* rcodes,
                                          const u8* rscales, u64 m0, const void*& mat, const u8*& scl)
{
#if READ_FMT == FMT_NVFP4
    mat = rcodes + m0 * RC_BYTES;
    scl = rscales + m0 * (ROWS * COLS / 16);
#elif READ_FMT == FMT_F32
    mat = state + m0 * (ROWS * COLS);
    scl = nullptr;
#else
    mat = rcodes + m0 * RC_BYTES;
    scl = nullptr;
#endif
}

// group_start points mat and scl at the stream of matrices m0.. (group_mat)
// and issues its first PF passes into raw.
template <typename GMAP, int NROWS, int PF>
__device__ __forceinline__ void group_start(const typename StateIO<STATE_FMT>::T* state, const u8* rcodes,
                                            const u8* rscales, u64 m0, const void*& mat, const u8*& scl,
                                            GRaw<GMAP> (&raw)[PF])
{
    group_mat(state, rcodes, rscales, m0, mat, scl);
#pragma unroll
    for (int p = 0; p < PF; p++) {
        if (p < GMAP::PASSES) {
            group_load<GMAP, NROWS>(mat, scl, p, raw[p]);
        }
    }
}

// group_scale is matrix m0 + i's scale of what the step reads (nvfp4
// global scale, fp8 scale), 1 for the others and for i >= NM.
template <int NM>
__device__ __forceinline__ float group_scale(const typename StateIO<STATE_FMT>::T* state, const float* rglobal, u64 m0,
                                             int i)
{
    if (i >= NM) {
        return 1.0f;
    }
#if READ_FMT == FMT_NVFP4 || READ_FMT == FMT_E4M3
    return rglobal[m0 + i];
#elif READ_FMT == FMT_F32 && STATE_FMT == FMT_E4M3
    return state_scale(state, m0 + i);
#else
    return 1.0f;
#endif
}

// ---- group streams on the tensor cores (GROUP_TC, VERIFY_TC) ----
//
// With GROUP_TC=1 (the host sets it for nvfp4 and e4m3 matrices on sm_89+) a
// group step's dots run on the tensor cores. For an nvfp4 read copy, a warp
// takes 16 rows at a time (a strip) as mma_16816's A operand: lane (g, t)
// loads rows g and g+8 of the strip, its quarter of the columns (COLS/8 bytes
// of codes each, 16 for COLS 128, and their block scales), rewrites the e2m1
// codes as e4m3 (e4m3_of_e2m1), widens them by the hardware conversion and
// multiplies each by its block scale in f16: e2m1 times e4m3 is exact there
// (at most six significant bits; 2^-6 times it lies in [2^-16, 42], and f16
// holds every multiple of 2^-24 below 2^-14), so A is the read copy's value
// before its global scale, times 2^-6. B's eight columns are the step's NV <=
// 4 vectors, each split in two f16 terms (hi, then the remainder lo, of a
// power of two times the vector: 22 bits; gt_vectors), and zeros; D's columns
// 2a and 2a+1 sum to row . vector a in float32 to its accumulation. Each
// lane's pairs of columns are the ones its decode gives (codes 0 and 2 of a
// word, 4 and 6, 1 and 3, 5 and 7); B takes the same pairs, so the sums are
// the rows' dots in another order. GT_OK says whether it applies here. H200,
// batch 256, the non-flush step against the FMA stream: nvfp4 read copy
// Qwen3.5-4B 93.9 -> 64.4 us, 122B 170 -> 98.5, Nano 142 -> 112, Super 147 ->
// 119; fp8 read copy 4B 81.7 -> 68.1, 122B 132 -> 115, Nano 124 -> 119, Super
// 131 -> 130.
#ifndef GROUP_TC
#define GROUP_TC 0
#endif
// VERIFY_TC=1: the group verify's stream on the tensor cores (gtw_*
// below; the host decides it apart from GROUP_TC).
#ifndef VERIFY_TC
#define VERIFY_TC 0
#endif
#if defined(GNT) && (GROUP_TC || VERIFY_TC) && (COLS == 64 || COLS == 128) && defined(__CUDA_ARCH__)
#if READ_FMT == FMT_NVFP4 && __CUDA_ARCH__ >= 890
#define GT_NVFP4 1
#elif MAT_FMT == FMT_BF16 && __CUDA_ARCH__ >= 800
#define GT_BF16 1
#elif MAT_FMT == FMT_E4M3 && __CUDA_ARCH__ >= 890
#define GT_E4M3 1
#endif
#endif
#ifndef GT_E4M3
#define GT_E4M3 0
#endif
#ifndef GT_NVFP4
#define GT_NVFP4 0
#endif
#ifndef GT_BF16
#define GT_BF16 0
#endif
#if GROUP_TC && GT_BF16
#error "GROUP_TC: nvfp4 and e4m3 matrices only (bf16: VERIFY_TC)"
#endif
#if GT_NVFP4 || GT_BF16 || GT_E4M3
#define GT_NWARP (GNT / 32)
// GT_SPW_OF: the strips a warp takes of NROWS rows (warp w: w, w + GT_NWARP, ...).
#define GT_SPW_OF(NROWS) ((NROWS / 16 + GT_NWARP - 1) / GT_NWARP)
// GT_PASSES_OF: a warp's passes of an NROWS-row stream: a strip each for
// nvfp4 and e4m3, two (half its columns each) for bf16.
#define GT_PASSES_OF(NROWS) ((GT_BF16 ? 2 : 1) * GT_SPW_OF(NROWS))

// bf16x2_of packs lo and hi, rounded to bf16, into one word (lo in the
// lower half).
__device__ __forceinline__ u32 bf16x2_of(float lo, float hi)
{
    u32 d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

// The f16 vector terms of the nvfp4 and e4m3 streams: A is 2^-GT_ASHIFT
// times the matrix's values (nvfp4: its e2m1-to-e4m3 rewrite; e4m3 codes
// widen as they are), and a lane's B register k of 8 columns pairs columns
// GT_PC(k) and GT_PC(k) + GT_PS, the pairs its decode gives (nvfp4: codes 0
// and 2, 1 and 3, 4 and 6, 5 and 7 of a word; e4m3: 0 and 1, 2 and 3 of
// each word of four).
#define GT_ASHIFT (GT_NVFP4 ? 6 : 0)
#define GT_PC(k) (GT_NVFP4 ? 4 * ((k) >> 1) + ((k) & 1) : 2 * (k))
#define GT_PS (GT_NVFP4 ? 2 : 1)
// GT_EMIN: the least exponent gt_pow2 holds, where both its powers of two
// are normal floats.
#define GT_EMIN (-113 - GT_ASHIFT > -114 ? -113 - GT_ASHIFT : -114)

// gt_pow2 gives, for a vector whose largest magnitude (bits big) lies in
// [2^e, 2^(e+1)), up = 2^(13-e), which takes it to [2^13, 2^14) (no f16
// term overflows and the remainders stay clear of f16's subnormals), and
// post = 2^(e-13+GT_ASHIFT), which takes D back to the dots. e is held in
// [GT_EMIN, 127]: a vector below 2^GT_EMIN is scaled by 2^(13-GT_EMIN)
// alone (its remainders then in f16's subnormals), one with an Inf or NaN
// gives non-finite dots, as the FMA stream's would.
__device__ __forceinline__ void gt_pow2(u32 big, float& up, float& post)
{
    const int e = min(max((int)(big >> 23) - 127, GT_EMIN), 127);
    up = __uint_as_float((u32)(127 + 13 - e) << 23);
    post = __uint_as_float((u32)(127 - 13 + GT_ASHIFT + e) << 23);
}

// GTRaw and gt_load are the format's (below): a lane's share of a pass
// and the loads that fill it.
struct GTRaw;
template <int NROWS>
__device__ __forceinline__ void gt_load(const u8* mat, const u8* scl, int i, GTRaw& raw);

// gt_load_words loads W words (W a multiple of 4, by 16-byte loads) of
// rows g and g+8 of this warp's strip st of an NROWS-row stream of
// ES-byte elements at mat, from element off of the lane's quarter of each
// row, into w (zeros past the rows): the bf16 and e4m3 streams'
// gt_load.
template <int NROWS, int ES, int W>
__device__ __forceinline__ void gt_load_words(const u8* mat, int off, int st, u32 (&w)[2][W])
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int h = 0; h < 2; h++) {
#pragma unroll
        for (int j = 0; j < W; j++) {
            w[h][j] = 0;
        }
        if (st < NROWS / 16) {
            const int r = 16 * st + (lane >> 2) + 8 * h;
            const uint4* p = reinterpret_cast<const uint4*>(mat + ES * ((u64)r * COLS + (lane & 3) * (COLS / 4) + off));
#pragma unroll
            for (int q = 0; q < W / 4; q++) {
                const uint4 v = p[q];
                w[h][4 * q] = v.x;
                w[h][4 * q + 1] = v.y;
                w[h][4 * q + 2] = v.z;
                w[h][4 * q + 3] = v.w;
            }
        }
    }
}

// gt_run runs dots(raw, i) for every pass i of the warp's share of an
// NROWS-row stream, raw holding the first PF (gt_start), each pass's loads
// issued PF passes before its dots.
template <int NROWS, int PF, class Dots>
__device__ __forceinline__ void gt_run(const void* mat, const u8* scl, GTRaw (&raw)[PF], Dots dots)
{
    constexpr int PASSES = GT_PASSES_OF(NROWS);
#pragma unroll 1
    for (int base = 0; base < PASSES; base += PF) {
#pragma unroll
        for (int p = 0; p < PF; p++) {
            const int i = base + p;
            if (i < PASSES) {
                dots(raw[p], i);
                if (i + PF < PASSES) {
                    gt_load<NROWS>(static_cast<const u8*>(mat), scl, i + PF, raw[p]);
                }
            }
        }
    }
}

// ---- the group verify's stream on the tensor cores (VERIFY_TC) ----
//
// A verify's stream takes up to eight vectors (GDN: the drafts' k, then
// their q; Mamba-2: the drafts' C). B's eight columns are the vectors
// themselves, and each vector's terms (nvfp4: two f16 terms of a power of
// two times it, as gt_vectors; bf16: three bf16 terms) go into the same
// accumulators, one mma a term: D's column a is row . vector a. The B
// operands are formed once an item, in shared memory in the order the
// lanes read them (gtw_vectors: GTW_FLOATS floats), and each strip reads
// its lane's 8 bytes a tile and term (LDS.64, no bank conflicts). The FMA
// verify stream read every vector chunk from shared memory for every row
// chunk, which bounded the bf16 verify (ncu).
#define GTW_TERMS (GT_BF16 ? 3 : 2)
#define GTW_MS (COLS / 16) // k16 tiles of a row
#define GTW_POST (GTW_TERMS * GTW_MS * 64)     // the vectors' factors, after the operands
#define GTW_FLOATS (GTW_POST + 8)

// gtw_vectors writes the B operands of vectors a < nv at vec + a*vstride
// (shared or global memory; zeros for a >= nv) and their factors to sw
// (GTW_FLOATS floats of shared memory), a warp a vector: lane l forms the
// operands lane (g, t) = (a, l & 3) reads for tile l >> 2, in its columns
// (gt_vectors' pairs; the bf16 stream's are the stored pairs). The block
// synchronises before reading them.
__device__ __forceinline__ void gtw_vectors(const float* vec, int vstride, int nv, float* sw)
{
    const int lane = threadIdx.x & 31, t = lane & 3, m = lane >> 2;
    // the four columns of tile m in quarter t: nvfp4 pairs 0 and 2, 1 and
    // 3 of the half word m; e4m3 and bf16 0 and 1, 2 and 3
    const int c = t * (COLS / 4) + 4 * m;
    uint2* B = reinterpret_cast<uint2*>(sw);
    for (int a = threadIdx.x >> 5; a < 8; a += GT_NWARP) {
        float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (a < nv && 4 * m < COLS / 4) {
            x = *reinterpret_cast<const float4*>(vec + a * vstride + c);
        }
        float post = 1.0f;
        uint2 b[GTW_TERMS];
        if constexpr (GT_NVFP4 || GT_E4M3) {
            u32 big = max(max(__float_as_uint(x.x) & 0x7fffffffu, __float_as_uint(x.y) & 0x7fffffffu),
                          max(__float_as_uint(x.z) & 0x7fffffffu, __float_as_uint(x.w) & 0x7fffffffu));
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                big = max(big, __shfl_xor_sync(FULL_MASK, big, o));
            }
            float up;
            gt_pow2(big, up, post);
            const float y[4] = {up * x.x, up * x.y, up * x.z, up * x.w};
            // b0 and b1 of the tile: registers 0 and 1 of gt_vectors' pairs
            const int c0 = GT_PC(0), c1 = GT_PC(1);
            const u32 h0 = f16x2_of(y[c0], y[c0 + GT_PS]), h1 = f16x2_of(y[c1], y[c1 + GT_PS]);
            b[0] = make_uint2(h0, h1);
            b[GTW_TERMS - 1] =
                make_uint2(f16x2_of(y[c0] - f16_to_f32(h0 & 0xffffu), y[c0 + GT_PS] - f16_to_f32(h0 >> 16)),
                           f16x2_of(y[c1] - f16_to_f32(h1 & 0xffffu), y[c1 + GT_PS] - f16_to_f32(h1 >> 16)));
        } else {
            float y[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
            for (int term = 0; term < GTW_TERMS; term++) {
                // the term-th bf16 term: what the earlier ones leave, rounded
                const u32 p0 = bf16x2_of(y[0], y[1]), p1 = bf16x2_of(y[2], y[3]);
                b[term] = make_uint2(p0, p1);
                y[0] -= __uint_as_float(p0 << 16);
                y[1] -= __uint_as_float(p0 & 0xffff0000u);
                y[2] -= __uint_as_float(p1 << 16);
                y[3] -= __uint_as_float(p1 & 0xffff0000u);
            }
        }
        if (m < GTW_MS) {
#pragma unroll
            for (int term = 0; term < GTW_TERMS; term++) {
                B[(term * GTW_MS + m) * 32 + 4 * a + t] = b[term];
            }
        }
        if (lane == 0) {
            sw[GTW_POST + a] = post;
        }
    }
}

// gtw_dots (the format's, below) and gtw_stream: the verify's dots of
// every pass of the warp, nv vectors (gtw_vectors' operands at sw).
template <int NROWS, int RPM>
__device__ __forceinline__ void gtw_dots(const GTRaw& raw, int i, const float* sw, int nv, const float* gs, float* out,
                                         float (&d)[4]);
template <int NROWS, int RPM, int PF>
__device__ __forceinline__ void gtw_stream(const void* mat, const u8* scl, GTRaw (&raw)[PF], const float* sw, int nv,
                                           const float* gs, float* out)
{
    static_assert(!GT_BF16 || PF % 2 == 0, "a bf16 strip's two passes in one unrolled step");
    float d[4];
    gt_run<NROWS>(mat, scl, raw, [&](const GTRaw& r, int i) { gtw_dots<NROWS, RPM>(r, i, sw, nv, gs, out, d); });
}

// gtw_write writes strip st's dots from D (lane (g, t): rows g and g+8,
// vectors 2t and 2t+1) to out[a*NROWS + r] for a < nv, times row r's
// matrix scale gs[r / RPM] and vector a's factor.
template <int NROWS, int RPM>
__device__ __forceinline__ void gtw_write(const float (&d)[4], int st, const float* sw, int nv, const float* gs,
                                          float* out)
{
    const int lane = threadIdx.x & 31, a = 2 * (lane & 3), r = 16 * st + (lane >> 2);
    const float sc = gs[(16 * st) / RPM];
    if (a < nv) {
        const float p = __fmul_rn(sc, sw[GTW_POST + a]);
        out[a * NROWS + r] = d[0] * p;
        out[a * NROWS + r + 8] = d[2] * p;
    }
    if (a + 1 < nv) {
        const float p = __fmul_rn(sc, sw[GTW_POST + a + 1]);
        out[(a + 1) * NROWS + r] = d[1] * p;
        out[(a + 1) * NROWS + r + 8] = d[3] * p;
    }
}
#endif

#if GT_NVFP4 || GT_E4M3
// GTVec is a lane's B operands (register k of 8 columns j: b[4j + k],
// gt_vectors) and, for lane (g, t) with t < NV, the factor that takes D's
// columns 2t, 2t+1 back to vector t's dots before the matrix's global
// scale.
struct GTVec {
    u32 b[COLS / 8];
    float post;
};

// gt_vectors forms this lane's B operands: for g = lane/4 < 2NV, vector
// g/2 (at vec + (g/2)*vstride: shared or global memory) times gt_pow2's
// power of two, split in f16 hi terms for even g and the remainders' lo
// terms for odd g, at the columns of the lane's quarter its decode pairs
// (GT_PC, GT_PS); zeros for g >= 2NV.
template <int NV>
__device__ __forceinline__ void gt_vectors(const float* vec, int vstride, GTVec& bv)
{
    const int lane = threadIdx.x & 31, g = lane >> 2;
    const float* v = vec + min(g >> 1, NV - 1) * vstride + (lane & 3) * (COLS / 4);
    float x[COLS / 32][8];
    u32 big = 0; // the largest |x| as bits (orders as the magnitudes do; NaN above Inf)
#pragma unroll
    for (int j = 0; j < COLS / 32; j++) {
        const float4 x0 = *reinterpret_cast<const float4*>(v + 8 * j);
        const float4 x1 = *reinterpret_cast<const float4*>(v + 8 * j + 4);
        x[j][0] = x0.x, x[j][1] = x0.y, x[j][2] = x0.z, x[j][3] = x0.w;
        x[j][4] = x1.x, x[j][5] = x1.y, x[j][6] = x1.z, x[j][7] = x1.w;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            big = max(big, __float_as_uint(x[j][k]) & 0x7fffffffu);
        }
    }
    // over the vector's four quarters (lanes 4g..4g+3)
    big = max(big, __shfl_xor_sync(FULL_MASK, big, 1));
    big = max(big, __shfl_xor_sync(FULL_MASK, big, 2));
    float up, post;
    gt_pow2(big, up, post);
#pragma unroll
    for (int j = 0; j < COLS / 32; j++) {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int c = GT_PC(k);
            const float lo = up * x[j][c], hi = up * x[j][c + GT_PS];
            u32 h = f16x2_of(lo, hi);
            if (g & 1) {
                h = f16x2_of(lo - f16_to_f32(h & 0xffffu), hi - f16_to_f32(h >> 16));
            }
            bv.b[4 * j + k] = g < 2 * NV ? h : 0u;
        }
    }
    // lane (g, t) takes vector t's factor from lane (2t, 0)
    bv.post = __shfl_sync(FULL_MASK, post, 8 * min(lane & 3, NV - 1));
}

// gt_write writes strip st's dots from D (columns 2t and 2t+1: vector t's
// two terms) to out[t*NROWS + r] for t < NV, times row r's matrix scale
// gs[r / RPM] and the vector's factor.
template <int NROWS, int RPM, int NV>
__device__ __forceinline__ void gt_write(float d0, float d1, float d2, float d3, int st, const GTVec& bv, const float* gs,
                                         float* out)
{
    const int lane = threadIdx.x & 31, t = lane & 3;
    if (t < NV) {
        const int r = 16 * st + (lane >> 2);
        const float post = __fmul_rn(gs[(16 * st) / RPM], bv.post);
        out[t * NROWS + r] = (d0 + d1) * post;
        out[t * NROWS + r + 8] = (d2 + d3) * post;
    }
}
#endif

#if GT_NVFP4
#define GT_OK 1
#define GT_NW (COLS / 32) // words of codes a lane holds of a row

// GTRaw is one lane's share of one strip: rows g and g+8, their codes and
// block scale codes, each as loaded (combining the scales' loads into one
// word made every strip wait for its loads where it issued them: ncu,
// 19% of the GDN step's stall samples on that line).
struct GTRaw {
    u32 w[2][GT_NW];
    u32 sc[2];
};

// gt_load issues the loads of this warp's strip i of an NROWS-row stream
// (codes, block scales at scl; zeros past the rows).
template <int NROWS>
__device__ __forceinline__ void gt_load(const u8* codes, const u8* scl, int i, GTRaw& raw)
{
    const int lane = threadIdx.x & 31, st = (threadIdx.x >> 5) + GT_NWARP * i;
#pragma unroll
    for (int h = 0; h < 2; h++) {
#pragma unroll
        for (int j = 0; j < GT_NW; j++) {
            raw.w[h][j] = 0;
        }
        raw.sc[h] = 0;
        if (st < NROWS / 16) {
            const int r = 16 * st + (lane >> 2) + 8 * h;
            const u8* p = codes + (u64)r * (COLS / 2) + (lane & 3) * (COLS / 8);
            const u8* q = scl + (u64)r * (COLS / 16) + (lane & 3) * (COLS / 64);
            if constexpr (GT_NW == 4) {
                const uint4 v = *reinterpret_cast<const uint4*>(p);
                raw.w[h][0] = v.x;
                raw.w[h][1] = v.y;
                raw.w[h][2] = v.z;
                raw.w[h][3] = v.w;
                raw.sc[h] = *reinterpret_cast<const u16*>(q);
            } else {
                const uint2 v = *reinterpret_cast<const uint2*>(p);
                raw.w[h][0] = v.x;
                raw.w[h][1] = v.y;
                raw.sc[h] = *q;
            }
        }
    }
}

// gt_scales widens a strip's block scales (rows g and g+8, two each for
// COLS 128) to f16, each in both halves of a word.
__device__ __forceinline__ void gt_scales(const GTRaw& raw, u32 (&s2)[2][2])
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const u32 hs = f16x2_of_e4m3x2(raw.sc[h]);
        s2[h][0] = __byte_perm(hs, 0u, 0x1010);
        s2[h][1] = __byte_perm(hs, 0u, 0x3232);
    }
}

// gt_decode forms word j's A operands of rows g and g+8: the codes
// rewritten as e4m3 (2^-6 times their values), widened and times their
// block scale in f16, pairs a[h] = codes (0, 2), (4, 6), (1, 3), (5, 7).
__device__ __forceinline__ void gt_decode(const GTRaw& raw, int j, const u32 (&s2)[2][2], u32 (&a)[2][4])
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        u32 lo, hi;
        e4m3_of_e2m1(raw.w[h][j], lo, hi);
        const u32 sc = s2[h][GT_NW == 4 ? j >> 1 : 0];
        a[h][0] = f16x2_mul(f16x2_of_e4m3x2(lo), sc);
        a[h][1] = f16x2_mul(f16x2_of_e4m3x2(lo >> 16), sc);
        a[h][2] = f16x2_mul(f16x2_of_e4m3x2(hi), sc);
        a[h][3] = f16x2_mul(f16x2_of_e4m3x2(hi >> 16), sc);
    }
}

// gt_dots writes row r . vector a of this warp's strip i to out[a*NROWS + r]
// for a < NV (row r's matrix scale gs[r / RPM]; RPM a multiple of 16).
template <int NROWS, int RPM, int NV>
__device__ __forceinline__ void gt_dots(const GTRaw& raw, int i, const GTVec& bv, const float* gs, float* out)
{
    const int st = (threadIdx.x >> 5) + GT_NWARP * i;
    if (st >= NROWS / 16) {
        return;
    }
    u32 s2[2][2];
    gt_scales(raw, s2);
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
#pragma unroll
    for (int j = 0; j < GT_NW; j++) {
        u32 a[2][4];
        gt_decode(raw, j, s2, a);
        mma_16816<false>(d0, d1, d2, d3, a[0][0], a[1][0], a[0][2], a[1][2], bv.b[4 * j], bv.b[4 * j + 1]);
        mma_16816<false>(d0, d1, d2, d3, a[0][1], a[1][1], a[0][3], a[1][3], bv.b[4 * j + 2], bv.b[4 * j + 3]);
    }
    gt_write<NROWS, RPM, NV>(d0, d1, d2, d3, st, bv, gs, out);
}

// gt_stream runs the dots of every strip of the warp (gt_run).
template <int NROWS, int RPM, int NV, int PF>
__device__ __forceinline__ void gt_stream(const void* mat, const u8* scl, GTRaw (&raw)[PF], const GTVec& bv,
                                          const float* gs, float* out)
{
    gt_run<NROWS>(mat, scl, raw, [&](const GTRaw& r, int i) { gt_dots<NROWS, RPM, NV>(r, i, bv, gs, out); });
}

// gtw_dots is gt_dots for up to eight vectors (gtw_vectors' B operands at
// sw, nv of them), each vector's two terms one mma each into the same
// accumulators.
template <int NROWS, int RPM>
__device__ __forceinline__ void gtw_dots(const GTRaw& raw, int i, const float* sw, int nv, const float* gs, float* out,
                                         float (&d)[4])
{
    const int lane = threadIdx.x & 31, st = (threadIdx.x >> 5) + GT_NWARP * i;
    if (st >= NROWS / 16) {
        return;
    }
    u32 s2[2][2];
    gt_scales(raw, s2);
    const uint2* B = reinterpret_cast<const uint2*>(sw) + lane;
    d[0] = d[1] = d[2] = d[3] = 0.0f;
#pragma unroll
    for (int j = 0; j < GT_NW; j++) {
        u32 a[2][4];
        gt_decode(raw, j, s2, a);
#pragma unroll
        for (int term = 0; term < GTW_TERMS; term++) {
            const uint2 b0 = B[(term * GTW_MS + 2 * j) * 32], b1 = B[(term * GTW_MS + 2 * j + 1) * 32];
            mma_16816<false>(d[0], d[1], d[2], d[3], a[0][0], a[1][0], a[0][2], a[1][2], b0.x, b0.y);
            mma_16816<false>(d[0], d[1], d[2], d[3], a[0][1], a[1][1], a[0][3], a[1][3], b1.x, b1.y);
        }
    }
    gtw_write<NROWS, RPM>(d, st, sw, nv, gs, out);
}

#elif GT_BF16
// The group verify's stream for a bf16 matrix read as stored (a bf16
// checkpoint, or a bf16 read copy; VERIFY_TC). The stored bf16 pairs are
// mma_16816's A operand as loaded: no decode. A warp takes a strip of 16
// rows in two passes of half its columns each (lane (g, t): rows g and
// g+8, columns t*COLS/4 + h*COLS/8 + [0, COLS/8) in pass h, COLS/16 words
// a row); B's columns are the vectors, each in three bf16 terms (24 bits;
// bf16 has float32's range, so no scaling: gtw_vectors). (The group step
// on this stream, C or k and q as B's columns, was correct and slower:
// H200, B=256, Nano 166 -> 176 us non-flush, Qwen3.5-4B 97.5 -> 108.)
#define GT_OK 1
#define GT_HW (COLS / 16) // words a lane holds of a row in one pass

struct GTRaw {
    u32 w[2][GT_HW];
};

// gt_load issues the loads of this warp's pass i (strip i/2, half i%2) of
// an NROWS-row bf16 stream at mat (zeros past the rows).
template <int NROWS>
__device__ __forceinline__ void gt_load(const u8* mat, const u8*, int i, GTRaw& raw)
{
    gt_load_words<NROWS, 2>(mat, (i & 1) * (COLS / 8), (threadIdx.x >> 5) + GT_NWARP * (i >> 1), raw.w);
}

// gtw_dots adds this warp's pass i, up to eight vectors (gtw_vectors' B
// operands at sw, nv of them; each vector's three terms one mma each into
// the same accumulators), to d (zeroed for a strip's first pass) and,
// after its second, writes the strip's dots (gtw_write).
template <int NROWS, int RPM>
__device__ __forceinline__ void gtw_dots(const GTRaw& raw, int i, const float* sw, int nv, const float* gs, float* out,
                                         float (&d)[4])
{
    const int lane = threadIdx.x & 31, st = (threadIdx.x >> 5) + GT_NWARP * (i >> 1), half = i & 1;
    if (st >= NROWS / 16) {
        return;
    }
    if (half == 0) {
        d[0] = d[1] = d[2] = d[3] = 0.0f;
    }
    const uint2* B = reinterpret_cast<const uint2*>(sw) + lane;
#pragma unroll
    for (int j = 0; j < GT_HW / 2; j++) {
        const int m = half * (GT_HW / 2) + j;
#pragma unroll
        for (int term = 0; term < GTW_TERMS; term++) {
            const uint2 b = B[(term * GTW_MS + m) * 32];
            mma_16816<true>(d[0], d[1], d[2], d[3], raw.w[0][2 * j], raw.w[1][2 * j], raw.w[0][2 * j + 1],
                            raw.w[1][2 * j + 1], b.x, b.y);
        }
    }
    if (half == 1) {
        gtw_write<NROWS, RPM>(d, st, sw, nv, gs, out);
    }
}
#elif GT_E4M3
// GROUP_TC=1 / VERIFY_TC=1 for an e4m3 matrix (an fp8 read copy or
// checkpoint). The codes widen to
// f16 exactly by the hardware conversion (e4m3's 3 mantissa bits and
// exponents 2^-9..2^8 lie inside f16) and are mma_16816's A operand; the
// matrix's scale comes after the mma with the rows' (gs). Lane (g, t)
// loads rows g and g+8 of a strip, its quarter's COLS/4 bytes each (one
// pass a strip); word j's codes 0 and 1 are the tile's k positions 2t,
// 2t+1 and codes 2 and 3 positions 2t+8, 2t+9, B pairing the same columns
// (GT_PC, GT_PS). B's vectors are f16 terms of gt_pow2's power of two, as
// the nvfp4 stream's (GT_ASHIFT 0: A is the values themselves).
#define GT_OK 1
#define GT_EW (COLS / 16) // words of four codes a lane holds of a row

struct GTRaw {
    u32 w[2][GT_EW];
};

// gt_load issues the loads of this warp's strip i of an NROWS-row stream
// of e4m3 codes (zeros past the rows).
template <int NROWS>
__device__ __forceinline__ void gt_load(const u8* codes, const u8*, int i, GTRaw& raw)
{
    gt_load_words<NROWS, 1>(codes, 0, (threadIdx.x >> 5) + GT_NWARP * i, raw.w);
}

// gt_mma adds word j's tile (rows g and g+8, its four codes) times B
// operands b0, b1 to d.
__device__ __forceinline__ void gt_mma(const GTRaw& raw, int j, u32 b0, u32 b1, float& d0, float& d1, float& d2,
                                       float& d3)
{
    mma_16816<false>(d0, d1, d2, d3, f16x2_of_e4m3x2(raw.w[0][j]), f16x2_of_e4m3x2(raw.w[1][j]),
                     f16x2_of_e4m3x2(raw.w[0][j] >> 16), f16x2_of_e4m3x2(raw.w[1][j] >> 16), b0, b1);
}

// gt_dots writes row r . vector a of this warp's strip i to out[a*NROWS + r]
// for a < NV (row r's matrix scale gs[r / RPM]; RPM a multiple of 16).
template <int NROWS, int RPM, int NV>
__device__ __forceinline__ void gt_dots(const GTRaw& raw, int i, const GTVec& bv, const float* gs, float* out)
{
    const int st = (threadIdx.x >> 5) + GT_NWARP * i;
    if (st >= NROWS / 16) {
        return;
    }
    float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
#pragma unroll
    for (int j = 0; j < GT_EW; j++) {
        gt_mma(raw, j, bv.b[2 * j], bv.b[2 * j + 1], d0, d1, d2, d3);
    }
    gt_write<NROWS, RPM, NV>(d0, d1, d2, d3, st, bv, gs, out);
}

// gt_stream runs the dots of every strip of the warp (gt_run).
template <int NROWS, int RPM, int NV, int PF>
__device__ __forceinline__ void gt_stream(const void* mat, const u8* scl, GTRaw (&raw)[PF], const GTVec& bv,
                                          const float* gs, float* out)
{
    gt_run<NROWS>(mat, scl, raw, [&](const GTRaw& r, int i) { gt_dots<NROWS, RPM, NV>(r, i, bv, gs, out); });
}

// gtw_dots is gt_dots for up to eight vectors (gtw_vectors' B operands at
// sw, nv of them), each vector's two terms one mma each into the same
// accumulators.
template <int NROWS, int RPM>
__device__ __forceinline__ void gtw_dots(const GTRaw& raw, int i, const float* sw, int nv, const float* gs, float* out,
                                         float (&d)[4])
{
    const int lane = threadIdx.x & 31, st = (threadIdx.x >> 5) + GT_NWARP * i;
    if (st >= NROWS / 16) {
        return;
    }
    const uint2* B = reinterpret_cast<const uint2*>(sw) + lane;
    d[0] = d[1] = d[2] = d[3] = 0.0f;
#pragma unroll
    for (int j = 0; j < GT_EW; j++) {
#pragma unroll
        for (int term = 0; term < GTW_TERMS; term++) {
            const uint2 b = B[(term * GTW_MS + j) * 32];
            gt_mma(raw, j, b.x, b.y, d[0], d[1], d[2], d[3]);
        }
    }
    gtw_write<NROWS, RPM>(d, st, sw, nv, gs, out);
}
#endif
#ifndef GT_OK
#define GT_OK 0
#endif
#if GT_OK
// gt_start points mat and scl at the stream of matrices m0.. (group_mat)
// and issues its first PF passes into raw.
template <int NROWS, int PF>
__device__ __forceinline__ void gt_start(const typename StateIO<STATE_FMT>::T* state, const u8* rcodes,
                                         const u8* rscales, u64 m0, const void*& mat, const u8*& scl, GTRaw (&raw)[PF])
{
    group_mat(state, rcodes, rscales, m0, mat, scl);
#pragma unroll
    for (int p = 0; p < PF; p++) {
        if (p < GT_PASSES_OF(NROWS)) {
            gt_load<NROWS>(static_cast<const u8*>(mat), scl, p, raw[p]);
        }
    }
}
#endif

// ---- cursors: the per-slot decisions live on the device ----
//
// A step kernel reads hist[slot] and decides flush or not per slot; the
// step's last kernel (step_done), or these kernels, then move the cursors,
// so a whole decode step can be captured in a CUDA graph with no host round
// trip.

// OVERLAP=1 (the host plans it, replay.go planOverlap: on for Gated
// DeltaNet) runs a decode step's flush kernel on a second stream beside its
// non-flush kernel instead of before it: the two take disjoint slots, a
// flush item is a latency-bound chain (GDN: B=256 staggered windows spent
// 44 us of a 208 us step in it) and the non-flush stream is
// bandwidth-bound, so each hides the other. Both kernels then count their
// blocks (done[0] the non-flush kernel, done[1] the flush), the last block
// of each counts its kernel on done[2], and the block that makes it 2
// moves the cursors. The group steps take their items from a counter
// (done[3]: queue_ask) rather than by their block's index, so blocks that
// start late, behind the flush's, take fewer.
#ifndef OVERLAP
#define OVERLAP 0
#endif

// reset_done resets the block counters (step_done's, OVERLAP's).
__device__ __forceinline__ void reset_done(int* done)
{
    if (threadIdx.x == 0) {
        *done = 0;
        if (OVERLAP) {
            done[1] = 0;
            done[2] = 0;
            done[3] = 0;
        }
    }
}

// advance_cursor is cursor_step's rule for slot s, whose cursor was n.
__device__ __forceinline__ void advance_cursor(int* hist, int* pending, int s, int n, int L)
{
    hist[s] = n + 1 >= L ? 0 : n + 1;
    pending[s] = 0;
}

// move_cursors advances the cursors of a replay decode step's slots
// (cursor_step's rule) and resets the block counters; one block calls it,
// its threads from first on, stride apart.
__device__ __forceinline__ void move_cursors(int* hist, int* pending, int* done, const int* slots, int batch, int L,
                                             int first = threadIdx.x, int stride = blockDim.x)
{
    for (int b = first; b < batch; b += stride) {
        const int s = slots[b];
        advance_cursor(hist, pending, s, hist[s], L);
    }
    reset_done(done);
}

// step_done moves the cursors of a replay decode step's slots (cursor_step's
// rule) once every block of the step's last kernel has read them, so a step
// needs no cursor kernel: each block, when done, counts itself on *done; the
// last one resets the count and moves the cursors. Every thread of every
// block calls it, once, at the end. With OVERLAP the flush kernel calls it
// too (side 1), and the cursors move when both kernels have finished.
__device__ __forceinline__ void step_done(int* hist, int* pending, int* done, const int* slots, int batch, int L,
                                          int side = 0)
{
    __shared__ int last;
    __syncthreads(); // the block's reads of hist are behind it
    if (threadIdx.x == 0) {
        __threadfence();
        bool l = atomicAdd(done + side, 1) == (int)(gridDim.x * gridDim.y) - 1;
        if (OVERLAP && l) {
            __threadfence();
            l = atomicAdd(done + 2, 1) == 1; // the second kernel to finish
        }
        last = l;
    }
    __syncthreads();
    if (!last) {
        return;
    }
    __threadfence();
    move_cursors(hist, pending, done, slots, batch, L);
}

// FL_FEW=n (0 off): a flush kernel's blocks count
// the step's flushing slots first (flushing_slots) and, when their items
// are fewer than n a block of the grid (a staggered step's sixteenth of
// the slots, not an aligned flush), leave the items to the first FL_KEEP
// blocks (the Go side: one an SM) and end at once, so that the non-flush
// kernel beside them (OVERLAP) starts on the SMs' other room at the step's
// start instead of after the flush's resident grid. gdn_flush_stream
// takes it (on mamba2_flush_pipe it measured slower). FL_FEW_BATCH
// is the least batch it applies to (the Go side: 256; at B=64 an aligned
// GDN bf16 flush's 2048 items counted as few and ran 77 -> 175 us on one
// block an SM).
#ifndef FL_FEW
#define FL_FEW 0
#endif
#ifndef FL_KEEP
#define FL_KEEP 132
#endif
#ifndef FL_FEW_BATCH
#define FL_FEW_BATCH 256
#endif

// flushing_slots returns the number of the step's batch rows whose slot
// flushes (its window fills: hist + 1 >= L) to each of the block's THREADS
// threads, every one of which calls it (one barrier per THREADS rows).
template <int THREADS>
__device__ __forceinline__ int flushing_slots(int batch, const int* __restrict__ hist, const int* __restrict__ slots,
                                              int L)
{
    int flushing = 0;
    for (int b0 = 0; b0 < batch; b0 += THREADS) {
        const int bq = b0 + (int)threadIdx.x;
        flushing += __syncthreads_count(bq < batch && hist[slots[bq]] + 1 >= L);
    }
    return flushing;
}

// flush_few says whether a flush kernel's step is FL_FEW's case: batch
// from FL_FEW_BATCH, a grid past FL_KEEP blocks, and the step's flushing
// slots' items (per_slot a slot) fewer than FL_FEW a block. Every one of
// the block's THREADS threads calls it (flushing_slots' barriers; the
// first two conditions are the same for all).
template <int THREADS>
__device__ __forceinline__ bool flush_few(int batch, const int* __restrict__ hist, const int* __restrict__ slots,
                                          int L, int per_slot)
{
    return batch >= FL_FEW_BATCH && (int)gridDim.x > FL_KEEP &&
           flushing_slots<THREADS>(batch, hist, slots, L) * per_slot < FL_FEW * (int)gridDim.x;
}

// flush_done ends a decode step's flush kernel: with OVERLAP it counts
// the kernel's blocks beside the non-flush kernel's (step_done, side 1),
// otherwise nothing (the non-flush kernel, after it on the stream, moves
// the cursors). Every thread of every block calls it, once, at the end.
__device__ __forceinline__ void flush_done(int* hist, int* pending, int* done, const int* slots, int batch, int L)
{
#if OVERLAP
    step_done(hist, pending, done, slots, batch, L, 1);
#endif
}

#if OVERLAP
// The group steps' item queue (OVERLAP): a block takes its first item by
// its index, the later ones from the counter *ctr (item gridDim.x + the
// count). Thread 0 asks (queue_ask) while the block works on an item and
// puts the answer in q[k & 1] (queue_put) just before the item's last
// barrier, after which the block reads it; the atomic's round trip stalls
// nobody. q alternates so a slow thread's read of one answer never meets
// the write of the next (an item may have no other barrier).
__device__ __forceinline__ int queue_ask(int* ctr)
{
    return threadIdx.x == 0 ? (int)gridDim.x + atomicAdd(ctr, 1) : 0;
}

__device__ __forceinline__ void queue_put(int* q, int k, int asked)
{
    if (threadIdx.x == 0) {
        q[k & 1] = asked;
    }
}

// queue_start returns a block's second item, asked for before its first
// (the group steps' queue one ahead: the next item is known while one
// runs); the answers then alternate from q[0].
__device__ __forceinline__ int queue_start(int* q, int* ctr)
{
    const int asked = queue_ask(ctr);
    queue_put(q, 1, asked);
    __syncthreads();
    return q[1];
}
#endif

// work_items calls work(head, b) for every item i = blockIdx.x +
// k*gridDim.x (head i % heads of batch row i / heads) for which need(b),
// and flush_items for those whose slot's window fills at this step (hist +
// 1 >= L). The flush kernel runs on a grid of the blocks the GPU holds at
// once: its threads read NT items' cursors in one round trip, list the
// flushing items in shared memory, and the block flushes them in turn.
// Launched as one block per (head, batch row), it paid a block launch and
// two dependent loads for every item of every step, flushing or not.
// (Asking for the next item's checkpoint in L2 while one flushes lost
// 1-10%.) Any grid gives the same work.
template <typename P, typename F>
__device__ __forceinline__ void work_items(int batch, int heads, P need, F work)
{
    __shared__ int list[NT];
    __shared__ int count;
    const int items = batch * heads;
    for (int base = blockIdx.x; base < items; base += NT * gridDim.x) {
        if (threadIdx.x == 0) {
            count = 0;
        }
        __syncthreads();
        const int i = base + (int)threadIdx.x * gridDim.x;
        if (i < items && need(i / heads)) {
            list[atomicAdd(&count, 1)] = i;
        }
        __syncthreads();
        const int c = count;
        for (int k = 0; k < c; k++) {
            work(list[k] % heads, list[k] / heads);
            __syncthreads(); // its shared tables are read before the next one's
        }
        __syncthreads(); // count and list are read before the next chunk's
    }
}

template <typename F>
__device__ __forceinline__ void flush_items(const int* slots, const int* hist, int batch, int heads, int L, F flush)
{
    work_items(batch, heads, [&](int b) { return hist[slots[b]] + 1 >= L; }, flush);
}

// ---- the pipelined folds (flush and early fold): the shared skeleton ----
//
// A pipelined fold kernel runs on persistent blocks of NT consumer threads
// (the layer's fold code, Map SM, cta_sync) and one producer warp after
// them. The producer (fold_produce) reads the cursors of 32 items at once
// and, for each item that folds, in order, waits for the stage its
// consumers freed last, writes the item's scalars (an Item with an int t:
// entries folded, -1 ends the block's work) and fills the stage: the
// checkpoint by one bulk copy, the ring and input rows by cp.async
// (produce_stage). The consumers (fold_consume) take the stages in the same
// order: one group, so every mbarrier phase is waited for in turn. The
// flush kernel of work_items paid each item's chain of dependent loads
// (cursor, ring, checkpoint) before its bytes moved; here the next items'
// bytes are in flight while one item folds.
//
// Defines from the host: FNSTAGE stages of FSTAGE_BYTES each (dynamic
// shared memory) and FMINB blocks per SM (the register bound).
#ifdef FNSTAGE
#ifndef FMINB
#define FMINB 1
#endif
__device__ __forceinline__ void fold_stage_of(int it, int& stg, u32& par)
{
    stg = it % FNSTAGE;
    par = (u32)(it / FNSTAGE) & 1u;
}

// fold_init initialises the stages' barriers: full counts the producer's
// lane 0 and its 32 lanes' cp.async arrivals, empty the consumer warps.
// Every thread of the block calls it.
__device__ __forceinline__ void fold_init(u64* full, u64* empty)
{
    if (threadIdx.x == 0) {
        for (int k = 0; k < FNSTAGE; k++) {
            mbar_init(full + k, 33);
            mbar_init(empty + k, NWARPS);
        }
        mbar_fence_init();
    }
    __syncthreads();
}

// fold_locate fills the head of item i (head i % HEADS of batch row i /
// HEADS: the Item's fields b, h, s, n and t, the entries folded) and says
// whether it folds: a flush when the slot's window fills at this step
// (hist + 1 >= L, the current token folded too), else an early fold of a
// verify of counts[b] (or T) drafts over a ring of L entries.
template <bool FLUSH, int HEADS, typename Item>
__device__ __forceinline__ bool fold_locate(int i, const int* __restrict__ slots, const int* __restrict__ hist,
                                            const int* __restrict__ counts, int T, int L, Item& m)
{
    m.b = i / HEADS;
    m.h = i % HEADS;
    m.s = slots[m.b];
    m.n = hist[m.s];
    m.t = FLUSH ? m.n + 1 : m.n;
    return FLUSH ? m.n + 1 >= L : FOLDS_EARLY(m.n, counts ? counts[m.b] : T, L);
}

// fold_produce is the producer warp's loop over the block's items i =
// blockIdx.x + k*gridDim.x < nitems: prep(i, item) fills this lane's item
// and says whether it folds; npieces(item) and piece(item, stage, ci) give
// the stage's pieces, piece 0 the checkpoint.
template <typename Item, typename Prep, typename Count, typename PieceF>
__device__ __forceinline__ void fold_produce(int nitems, Item* items, unsigned char* stages, u64* full,
                                             u64* empty, Prep prep, Count npieces, PieceF piece)
{
    static_assert(sizeof(Item) % 4 == 0, "items move between lanes as 32-bit words");
    const int lane = threadIdx.x & 31;
    const int grid = (int)gridDim.x;
    int it = 0;
    for (int base = blockIdx.x; base < nitems; base += 32 * grid) {
        const int i = base + lane * grid;
        Item mine{};
        const bool fold = i < nitems && prep(i, mine);
        for (u32 mask = __ballot_sync(FULL_MASK, fold); mask != 0; mask &= mask - 1) {
            const int k = __ffs(mask) - 1;
            Item m;
            const u32* src = reinterpret_cast<const u32*>(&mine);
            u32* dst = reinterpret_cast<u32*>(&m);
#pragma unroll
            for (int w = 0; w < (int)(sizeof(Item) / 4); w++) {
                dst[w] = __shfl_sync(FULL_MASK, src[w], k);
            }
            int stg;
            u32 par;
            fold_stage_of(it++, stg, par);
            mbar_wait(empty + stg, par ^ 1);
            if (lane == 0) {
                items[stg] = m;
            }
            unsigned char* sg = stages + stg * FSTAGE_BYTES;
            produce_stage(full + stg, npieces(m), 1, [&](int ci) { return piece(m, sg, ci); });
        }
    }
    int stg;
    u32 par;
    fold_stage_of(it, stg, par);
    mbar_wait(empty + stg, par ^ 1);
    if (lane == 0) {
        items[stg].t = -1;
    }
    produce_stage(full + stg, 0, 0, [&](int) { return Piece{}; });
}

// fold_consume is the consumer threads' loop: body(item, stage) for each
// item in turn (the item in shared memory, valid until its stage is
// released after body), until the producer's end marker (t < 0), and
// returns the items folded.
template <typename Item, typename Body>
__device__ __forceinline__ int fold_consume(const Item* items, unsigned char* stages, u64* full, u64* empty, Body body)
{
    for (int it = 0;; it++) {
        int stg;
        u32 par;
        fold_stage_of(it, stg, par);
        mbar_wait(full + stg, par);
        if (items[stg].t < 0) {
            return it;
        }
        body(items[stg], stages + stg * FSTAGE_BYTES);
        release_stage(empty + stg);
    }
}
#endif

// fold_items calls fold(head, b) for the items whose slot folds its history
// early in a verify of cnt = counts[b] (or T) drafts over a ring of R
// entries (the *_replay_fold_items kernels).
template <typename F>
__device__ __forceinline__ void fold_items(const int* slots, const int* hist, const int* counts, int T, int R,
                                           int batch, int heads, F fold)
{
    work_items(batch, heads, [&](int b) { return FOLDS_EARLY(hist[slots[b]], counts ? counts[b] : T, R); }, fold);
}

// step_count and step_finish split step_done for the one-kernel small-batch
// step, where the counter's round trip would otherwise sit at the end of the
// step's critical path: a block counts itself as soon as its threads have
// read the cursors (step_count, after a barrier that follows those reads;
// thread 0 gets whether it was the last), works, and at its end the last
// block moves the cursors (step_finish). The cursors are only read at the
// start, so moving them once every block has read them is enough.
// Thread 0 of the last block, the one thread that knows it is last, moves
// the cursors alone (a small step's batch is a few slots), without two
// barriers to tell the block's other threads (ncu, batch 1: the barriers'
// shared flag took 3% of the small step's stall samples).
__device__ __forceinline__ bool step_count(int* done)
{
    if (threadIdx.x != 0) {
        return false;
    }
    return atomicAdd(done, 1) == (int)(gridDim.x * gridDim.y) - 1;
}

__device__ __forceinline__ void step_finish(bool last, int* hist, int* pending, int* done, const int* slots,
                                            int batch, int L)
{
    if (last) {
        move_cursors(hist, pending, done, slots, batch, L, 0, 1);
    }
}

// SPLIT_VERIFY=1 (the Go side sets it for the modules of split heads) compiles
// a small batch's verify into the module of split heads too (HSPLIT in
// replay_mamba2.cu and replay_gdn.cu): each of its rows needs the head's ring
// vectors and scalars and that row of the state alone, as the small step's do.
#ifndef SPLIT_VERIFY
#define SPLIT_VERIFY 0
#endif

// The early verifies (*_verify_small_early, gdn_replay_verify_early; the
// template's VEARLY) give the small batches' verify the small step's early
// start (its EARLY, and the token's inputs before the cursor): the drafts'
// inputs, every ring entry's scalars and the state in L1 are asked for right
// after slots[b], before hist[s], so the chain is slots -> {hist, inputs, ring
// scalars, state} -> ring rows -> outputs, where the verify waited for slots,
// hist, the ring scalars, the drafts' inputs (two or three round trips), then
// the state, one after the other. Their inputs are stored where the verify's
// own loads put them: the outputs are bit for bit the same. They hold more
// registers (ptxas 11.8: Nano 98 -> 128, GDN 128 -> 160-172), so the launch
// takes them only where their grid fits the GPU at once (earlyVerify.pick).
// H200, batch 1, us a verify: Nano fp32 13.6 -> 13.5, Super 12.3 -> 12.0,
// Qwen3.5-4B 13.6 -> 13.0, bf16 14.8 -> 14.2; Qwen3.5-122B at batch 4 (256
// blocks of whole heads, one an SM) 28.2 -> 35.3.

// SCALARS_EARLY=1 (mamba2Module sets it): the early verifies compute the
// drafts' per-step scalars (Mamba-2 delta and decay, GDN exp(g) and beta:
// float64 softplus, exp, sigmoid) from the inputs asked for early, right after
// hist[s] is asked for, where they waited behind the ring's scalars and any
// early fold (ncu, batch 1: a third of the stall samples at barriers, warps
// waiting for a few threads' serial float64 work). The same functions of the
// same inputs: bit for bit the same outputs (TestReplayVerifyEarlyMatchesLate
// under it). ptxas 11.8: the split modules' kernels keep their registers
// (Qwen3.5-4B in 4: 95), but the whole heads' went from 156 registers to 128
// with 48 / 80 bytes of spills (Qwen3.5-4B fp32; Nano fp32 12 / 8 -> 24 / 20).
// H200, batch 1, against the scalars formed late, us a verify: Mamba-2 0.2-0.4
// faster in all four rows (Nano fp32 13.4 -> 13.0, Super 11.9 -> 11.5), GDN
// within 0.2 either way; batch 4 unchanged.
#ifndef SCALARS_EARLY
#define SCALARS_EARLY 0
#endif

// verify_done ends the one-kernel small-batch verify (*_replay_verify_small):
// cursor_verify's cursor move, made by the verify kernel's last block
// instead of a kernel of its own (at batch 1 each kernel of a verify round
// costs a launch's latency: the round was verify, cursor and commit kernels
// against the baseline's verify and commit). Every block counts itself at
// its end, after its threads' reads of the cursors; the last one resets the
// count and moves the cursors. hist is the verify's read-only cursor array:
// no block writes it before every block has counted itself.
__device__ __forceinline__ void verify_done(const int* hist, int* pending, int* done, const int* slots,
                                            const int* counts, int T, int batch, int R)
{
    __shared__ int last;
    __syncthreads(); // the block's reads of hist are behind it
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(done, 1) == (int)(gridDim.x * gridDim.y) - 1;
    }
    __syncthreads();
    if (!last) {
        return;
    }
    __threadfence();
    int* h = const_cast<int*>(hist);
    for (int b = threadIdx.x; b < batch; b += blockDim.x) {
        const int s = slots[b];
        const int cnt = counts ? counts[b] : T;
        if (FOLDS_EARLY(h[s], cnt, R)) {
            h[s] = 0;
        }
        pending[s] = cnt;
    }
    if (threadIdx.x == 0) {
        *done = 0;
    }
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
        if (FOLDS_EARLY(n, cnt, R)) {
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

// ---- prefill ----

// A prefill kernel (mamba2_prefill, gdn_prefill) stages its inputs in
// shared memory PREFILL_CHUNK rows at a time.
#define PREFILL_CHUNK 16

// prefill_store ends a prefill kernel's head: replay mode stores the
// checkpoint and its read copy, baseline mode an fp32 state (a rounded
// state was stored after every input). Barriers inside for fp8 and nvfp4.
template <typename SM>
__device__ __forceinline__ void prefill_store(float (&S)[SM::PASSES][SM::CPL][SM::VEC],
                                              typename StateIO<STATE_FMT>::T* state, u8* rcodes, u8* rscales,
                                              float* rglobal, u64 mat, int replay, float* scratch)
{
    if (replay) {
        store_state<SM>(S, state, mat, scratch);
        write_read_copy<SM>(S, rcodes, rscales, rglobal, mat, scratch);
    } else if (STATE_FMT == FMT_F32) {
        store_state<SM>(S, state, mat, scratch);
    }
}

#if PREFILL_MODULE
// prefill_done: after a Prefill the slots' rings are empty (replay: every
// entry folded into the checkpoint with the inputs) and no drafts are
// pending. A kernel of its own: the prefill's blocks of one slot all read
// the history first.
extern "C" __global__ void prefill_done(int* __restrict__ hist, int* __restrict__ pending,
                                        const int* __restrict__ slots, int batch, int replay)
{
    const int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= batch) {
        return;
    }
    const int s = slots[b];
    if (replay) {
        hist[s] = 0;
    }
    pending[s] = 0;
}

// conv_prefill computes the outputs of counts[b] (or T) consecutive inputs
// of slot b ([b][T][C] rows; the rest neither read nor written), each
// seeing the window and the inputs before it, in conv_apply's order of
// operations, and makes the last K-1 of window and inputs the window.
// Thread (channel, chunk, slot) computes CONV_PREFILL_CHUNK consecutive
// outputs of one channel, keeping its last K-1 inputs in registers: a
// prompt spreads over chunks, not just channels. Only chunk 0 reads the
// window (a chunk is at least K long), and it alone writes the new one
// after its own reads, from the inputs and its registers. Grid:
// (ceil(C/blockDim), ceil(T/CONV_PREFILL_CHUNK), batch); K <= 8.
#define CONV_PREFILL_CHUNK 64
extern "C" __global__ void conv_prefill(float* __restrict__ win, const float* __restrict__ w,
    const float* __restrict__ bias, const int* __restrict__ slots, const int* __restrict__ counts,
    const float* __restrict__ in, float* __restrict__ out, int batch, int T, int C, int K, int rows)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.z;
    if (c >= C || b >= batch) {
        return;
    }
    const int n = counts ? counts[b] : T;
    const int t0 = blockIdx.y * CONV_PREFILL_CHUNK, t1 = min(n, t0 + CONV_PREFILL_CHUNK);
    float* base = win + (long long)slots[b] * rows * C + c;
    const float* src = in + (long long)b * T * C + c;
    float* dst = out + (long long)b * T * C + c;
    // x(t): input t, the window's rows at t < 0.
    auto at = [&](int t) { return t < 0 ? base[(t + K - 1) * C] : src[(long long)t * C]; };
    float wk[8], x[8]; // x[k]: the input K-1-k steps before the next output
#pragma unroll
    for (int k = 0; k < 8; k++) {
        wk[k] = k < K ? w[c * K + k] : 0.0f;
        x[k] = 0.0f;
    }
    if (t0 < t1) {
#pragma unroll
        for (int k = 0; k < 7; k++) {
            if (k < K - 1) {
                x[k] = at(t0 - (K - 1) + k);
            }
        }
        const float b0 = bias != nullptr ? bias[c] : 0.0f;
        for (int t = t0; t < t1; t++) {
            const float xt = src[(long long)t * C];
            float sum = b0;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                if (k == K - 1) {
                    x[k] = xt;
                }
                if (k < K) {
                    sum = __fadd_rn(sum, __fmul_rn(wk[k], x[k]));
                }
            }
            dst[(long long)t * C] = sum;
#pragma unroll
            for (int k = 0; k < 7; k++) {
                if (k < K - 1) {
                    x[k] = x[k + 1];
                }
            }
        }
    }
    if (blockIdx.y != 0) {
        return;
    }
    // The new window, oldest first: rows n .. n+K-2 of (window, inputs),
    // each read before any row it could overwrite is written.
    for (int r = 0; r < K - 1; r++) {
        base[r * C] = at(n - (K - 1) + r);
    }
}
#endif
