// replay_mamba2.cu: the Mamba-2 state cache on the GPU (compiled after
// replay_common.cu). One CTA per (head, batch row): grid (NHEADS, batch).
//
// The layer's defines from the Go planner (mamba2Module; replay_common.cu's
// header lists the shared ones):
//   NHEADS, NGROUPS  heads and groups (ROWS = P head dim, COLS = N state size)
//   M2_TC_FOLD   1: the pipelined folds' rank update on the tensor cores
//   VFOLD_DOTS   1: a verify's pipelined early folds also form the group
//                verify's dots of the folding slots (fp32 checkpoints)
//   GROUP_EARLY  1: the group step asks for its per-token inputs early
//
// Layouts are package replay's: state [slot][buffer][head][P][N] (fp8: then
// one float32 scale per matrix); read copy [slot][head] of P*N elements
// (nvfp4: codes [P*N/2], scales [slot][head][P*N/16]; nvfp4 and fp8: a
// float32 scale per matrix in rglobal [slot][head]);
// ring per slot of RMAX entries: x [H*P], B [G*N]; ring scalars per slot and
// head of RMAXP entries: delta, a = exp(delta*A).
// Inputs rows: x [row][H*P], B and C [row][G*N], dt [row][H]; outputs y [row][H*P].
// A = -exp(A_log) and dt_bias are float64 like the CPU cache's; dtMin > 0
// clamps delta from below (replay.Mamba2Input.DtMin), 0 leaves it alone.

#define P ROWS
#define N COLS
#define HPG (NHEADS / NGROUPS)
#define CSTRIDE (RMAX + 1) // odd row stride of the rank-update coefficients: no bank conflicts

typedef StateIO<STATE_FMT> SIO;
typedef SIO::T ST;
typedef Map<SIO::VEC, COLS, ROWS> SM;

// HSPLIT > 1 builds the small-batch module of a cache whose heads' P rows
// are split into HSPLIT heads of P/HSPLIT rows each (replay.go
// planHeadSplit; NHEADS and ROWS are given split): every row of a head's
// state, ring x rows and output depends on that row and the head's group
// vectors and scalars alone, and the split heads' rows are contiguous
// where the whole head's were, so only the per-head scalars (dt, dt_bias,
// A, D, the ring's delta and decay) are indexed by the real head, HEAD(h)
// of NHEADS_REAL. As replay_gdn.cu's HSPLIT.
#ifndef HSPLIT
#define HSPLIT 1
#endif
#define NHEADS_REAL (NHEADS / HSPLIT)
#define HEAD(h) ((h) / HSPLIT)

// rs_at indexes the ring's per-head scalars (delta, exp(delta*A)), laid out
// [slot][head][RMAXP] so one head's entries are contiguous (one bulk copy).
__device__ __forceinline__ u64 rs_at(int s, int h, int e) { return ((u64)s * NHEADS_REAL + HEAD(h)) * RMAXP + e; }

// decay_weights writes W[j] = delta[j] * prod_{j<m<t} decay[m] for j < t
// (float64 products from the last entry down, rounded to float32 like the
// CPU cache) and returns prod_{m<t} decay[m]. The loop runs over the whole
// ring, unrolled, so the loads leave the chain of products.
__device__ __forceinline__ float decay_weights(const float* delta, const float* decay, int t, float* W)
{
    double suf = 1.0;
#pragma unroll
    for (int j = RMAX - 1; j >= 0; j--) {
        if (j < t) {
            W[j] = (float)((double)delta[j] * suf);
            suf *= (double)decay[j];
        }
    }
    return (float)suf;
}

// mamba2_fold applies the flush of docs/DESIGN.md 2.1 to the matrix S of one
// head:
//
//	S <- decay*S + sum_{j<t} coef[p][j] * B_j        coef[p][j] = Delta_j e^{L_t-L_j} x_j[p]
//
// with B_j in sB[j*N...] and coef[p][j] = coef(p, j), reading S from
// src (in the state format, scale sc0: matrix mat of the state buffer, or
// its copy in a stage of the pipelined fold), writes S (matrix mat of the
// state buffer) back in the state format and, with a read copy, rewrites
// the copy. With OUT it also writes S_new[p] . C_k for the first nout of
// NOUT vectors C_k (sC + k*N; the fp32 S, before any rounding) through
// sink(p, k, dot), called by one lane a row. Barriers inside: every thread
// calls it.
// BSW: the B rows in sB are swizzled by 16-byte units (bsw_unit with
// mask VEC/4 - 1, as the pipelined folds' producer stores them), so a
// warp's loads of B never meet in a bank (unswizzled, the bf16 flush's
// B loads took twice their ideal wavefronts and held the kernel on
// shared-memory throughput: ncu).
// mamba2_fold_dot returns the dot of row FM::row(pass) of the folded e
// with C (swizzled as B is, mask QSW) over the lanes of the row that FM
// shares (under M2TCMap, one column part's).
template <typename FM, int QSW>
__device__ __forceinline__ float mamba2_fold_dot(const float (&e)[FM::PASSES][FM::CPL][FM::VEC], int pass,
                                                 const float* sC)
{
    const float4* c4 = reinterpret_cast<const float4*>(sC);
    float acc = 0.0f;
#pragma unroll
    for (int c = 0; c < FM::CPL; c++) {
#pragma unroll
        for (int q = 0; q < FM::VEC / 4; q++) {
            acc = fma4(&e[pass][c][4 * q], c4[bsw_unit(FM::col(c) / 4 + q, QSW)], acc);
        }
    }
    return lanes_sum<FM::LANES>(acc);
}

template <bool OUT, bool BSW = false, int NOUT = 1, typename Coef, typename Sink>
__device__ __forceinline__ void mamba2_fold(const ST* S, float sc0, ST* state, u8* rcodes, u8* rscales, float* rglobal,
                                            u64 mat, int t, float decay, const float* sB, Coef coef, const float* sC,
                                            Sink sink, float* scratch, int nout = 1)
{
    constexpr int VEC = SM::VEC;
    constexpr int QSW = BSW ? VEC / 4 - 1 : 0;
    // The thread's whole share of the matrix in registers: each B_j chunk
    // read from shared memory then feeds every pass (rows p, p+RPP, ...),
    // so the rank update is not bound by shared-memory bandwidth.
    float e[SM::PASSES][SM::CPL][VEC];
    load_state<SM, true>(S, sc0, e, decay);
    for (int j = 0; j < t; j++) {
        float cj[SM::PASSES];
#pragma unroll
        for (int pass = 0; pass < SM::PASSES; pass++) {
            const int r = SM::row(pass);
            cj[pass] = r < ROWS ? coef(r, j) : 0.0f;
        }
#pragma unroll
        for (int c = 0; c < SM::CPL; c++) {
            const float4* bj = reinterpret_cast<const float4*>(sB + j * N);
#pragma unroll
            for (int q = 0; q < VEC / 4; q++) {
                const float4 b4 = bj[bsw_unit(SM::col(c) / 4 + q, QSW)];
#pragma unroll
                for (int pass = 0; pass < SM::PASSES; pass++) {
                    e[pass][c][4 * q] = fmaf(cj[pass], b4.x, e[pass][c][4 * q]);
                    e[pass][c][4 * q + 1] = fmaf(cj[pass], b4.y, e[pass][c][4 * q + 1]);
                    e[pass][c][4 * q + 2] = fmaf(cj[pass], b4.z, e[pass][c][4 * q + 2]);
                    e[pass][c][4 * q + 3] = fmaf(cj[pass], b4.w, e[pass][c][4 * q + 3]);
                }
            }
        }
    }
    if (OUT) {
#pragma unroll
        for (int pass = 0; pass < SM::PASSES; pass++) {
            const int r = SM::row(pass);
#pragma unroll
            for (int k = 0; k < NOUT; k++) {
                if (k < nout) {
                    // NOUT > 1 (VFOLD_DOTS): C_k rows N floats apart.
                    const float acc = mamba2_fold_dot<SM, QSW>(e, pass, sC + k * N);
                    if (r < ROWS && SM::lane() == 0) {
                        sink(r, k, acc);
                    }
                }
            }
        }
    }
    store_state<SM>(e, state, mat, scratch);
    write_read_copy<SM>(e, rcodes, rscales, rglobal, mat, scratch);
}

// M2_TC_FOLD=1 (mamba2FoldPlan: 2-byte checkpoints, and fp32 ones whose warps
// take whole rows) folds the pipelined folds' items with mamba2_fold_tc: the
// rank update on the tensor cores (3xTF32, the accuracy of float32 products),
// as GDN's TC_FOLD does. Skipping the rank update altogether took the Nano
// bf16 aligned flush 570 -> 373 us: the FMA update is a third of the flush,
// and ncu had the flush latency-bound with its issue slots the first stall
// (selected 21%, not selected 15%). H200, B=256, us, FMA -> tensor cores:
// aligned flush Nano bf16 568 -> 391, Super bf16 547 -> 471, Nano fp32 618 ->
// 609, Super fp32 (two column parts) 654 -> 675. Where it applies: rows in
// blocks of 16 that the consumer warps divide into (M2TCMap: Nemotron-3-Nano's
// 80 rows on 5 warps, one part; Super's 64 rows on 8 warps, two column parts
// of 64), and parts a multiple of 16 columns. The sums run in another order
// than mamba2_fold's, so the outputs differ from the other kernels' in the
// last bits.
#ifndef M2_TC_FOLD
#define M2_TC_FOLD 0
#endif
// VFOLD_DOTS=1 (the host sets it for fp32 checkpoints without a read copy
// whose verify's early folds run on mamba2_fold_pipe and whose group
// verify follows): a verify's early fold also forms S'_p . C_k for the
// slot's cnt drafts from the folded matrix in its registers and writes
// them to y, where mamba2_group_verify_item takes them instead of
// streaming S' again (in the bench's staggered verify a quarter of the
// slots fold, so a quarter of the group verify's state reads). The fold's
// stage then holds TMAX rows of C. Its dots sum in the fold's order, not
// the group verify's. An fp32 checkpoint is read back as the fold holds
// it; a 2-byte one would be rounded first, which this code does not do
// (the #error at FS_X). H100, fp32 verify, against the stream: B=256 Nano
// 610 -> 552 us, Super 649 -> 580; B=512 1200 -> 1078, 1283 -> 1141.
#ifndef VFOLD_DOTS
#define VFOLD_DOTS 0
#endif
// (Nested tests: no division in an #if whose divisor may be zero.)
#define M2_TC_FOLD_ON 0
#define M2_TC_PARTS 1
#if M2_TC_FOLD && ROWS >= 16 && ROWS % 16 == 0 && NWARPS >= ROWS / 16 && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#if NWARPS % (ROWS / 16) == 0 && COLS % (NWARPS / (ROWS / 16) * 16) == 0
#undef M2_TC_FOLD_ON
#undef M2_TC_PARTS
#define M2_TC_FOLD_ON 1
#define M2_TC_PARTS (NWARPS / (ROWS / 16))
#endif
#endif
#if M2_TC_FOLD_ON
typedef TCMapP<M2_TC_PARTS> M2TCMap;
#endif
// The tensor-core fold's B rows in the stage.
// update_tc_tile's B operands are float2s of four rows 8ks + lt, 512 bytes
// apart packed (N = 128): the same banks, four wavefronts where one does
// (ncu, Nano bf16 aligned flush: LDS.64 two thirds of the kernel's
// shared-memory wavefronts, 4x their ideal, L1 at 88% of its throughput).
// A B row padded by 8 floats starts 8 banks on from the last, so a warp's
// four rows cover the banks twice: the ideal. H200, B=256, us, against
// packed rows in the same run: aligned flush Nano bf16 423 -> 391, Super
// bf16 497 -> 471; verify Super bf16 332 -> 325, Nano fp32 465 -> 461.
// The checkpoint's rows padded too (16 elements, one bulk copy a row, as
// GDN's FL_PAD) was slower everywhere: Nano bf16 flush 391 -> 578, fp32
// 609 -> 968 (the producer's 80 bulk copies an item).
#define M2_BROW (M2_TC_FOLD_ON ? N + 8 : N)

// load_state_rot loads the tensor-core fold's checkpoint from the stage with
// each row's chunks rotated. A warp's TCMap load is 8 rows (g) of 4 lanes,
// each row's 4 lanes one segment of 16*e bytes, and packed rows (N*e bytes
// apart, a multiple of 128) put all 8 segments on the same banks: 8 wavefronts
// for fp32's 512 bytes (ideal 4), 8 for bf16's 256 (ideal 2), 8 for fp8's 128
// (ideal 1); ncu of the Nano bf16 flush had these loads a third of the excess
// shared wavefronts before B's rows were padded. Row g reads chunk c ^ (g % K)
// at step c, K = 128 / (16*e) segments to a 128-byte line (at most CPL): the 8
// rows then spread over K segments. Conditional swaps of the raw words (one
// bit of g % K at a time: an XOR permutation is its own inverse) put each
// chunk back at its c before decoding. H200, B=256, us, rows in order ->
// rotated: Nano fp8 flush 582 -> 554, verify 290 -> 273; Super fp8 flush 549
// -> 531; Nano bf16 flush 387 -> 382, Super bf16 468 -> 457, verify 325 ->
// 321; fp32 the same (Super fp32 stays on FMA: 648 -> 651 forced onto the
// tensor cores with it, as 669 without).

#if M2_TC_FOLD_ON
// load_state_rot is load_state<TM, true> (the decay applied chunk by
// chunk) with the rotated reads above; every row of TM is a real row
// (M2_TC_FOLD_ON needs ROWS a multiple of 16).
template <typename TM>
__device__ __forceinline__ void load_state_rot(const ST* S, float sc, float (&v)[TM::PASSES][TM::CPL][TM::VEC], float mul)
{
    typedef Chunk<STATE_FMT, TM::VEC> C;
    constexpr int SEG = 16 * FMT_SIZE(STATE_FMT);
    constexpr int K = 128 / SEG < TM::CPL ? 128 / SEG : TM::CPL;
    static_assert(K >= 1 && (K & (K - 1)) == 0 && TM::CPL % K == 0, "load_state_rot: K a power of two dividing CPL");
    const int rot = ((int)(threadIdx.x & 31) >> 2) & (K - 1);
#pragma unroll
    for (int pass = 0; pass < TM::PASSES; pass++) {
        const int r = TM::row(pass);
        C raw[TM::CPL];
#pragma unroll
        for (int c = 0; c < TM::CPL; c++) {
            // Chunk c ^ rot of the row: its columns lie 16 * (c ^ rot) on
            // from chunk 0's (TM::col(c) = base + 16c).
            const int col = TM::col(0) + 16 * (c ^ rot);
            load_words<C::WORDS>(reinterpret_cast<const unsigned char*>(S) + ((u64)r * COLS + col) * Fmt<STATE_FMT>::BITS / 8,
                                 raw[c].w);
        }
#pragma unroll
        for (int b = 1; b < K; b <<= 1) {
            const bool sw = (rot & b) != 0;
#pragma unroll
            for (int c = 0; c < TM::CPL; c++) {
                if ((c & b) == 0) {
#pragma unroll
                    for (int w = 0; w < C::WORDS; w++) {
                        const u32 x = raw[c].w[w], y = raw[c | b].w[w];
                        raw[c].w[w] = sw ? y : x;
                        raw[c | b].w[w] = sw ? x : y;
                    }
                }
            }
        }
#pragma unroll
        for (int c = 0; c < TM::CPL; c++) {
            decode_chunk<STATE_FMT, TM::VEC>(raw[c].w, v[pass][c], sc);
#pragma unroll
            for (int k = 0; k < TM::VEC; k++) {
                v[pass][c][k] = mul * v[pass][c][k];
            }
        }
    }
}

// mamba2_fold_tc is mamba2_fold with the checkpoint in M2TCMap's
// registers: S <- decay*S, then the rank-t update as tiles of m16n8k8
// (update_tc_tile: A[r][j] = coef(r, j) for 16 rows a warp, B = B_j at
// the tile's columns of the warp's part, K the t entries in steps of 8,
// zeros past t), then the dot with C (each lane's columns, then its row's
// four lanes: one partial dot a part and vector, sink(p, part, k, dot);
// nout of NOUT vectors as mamba2_fold's) and the stores.
// BSW: C swizzled by SM's unit mask, as the producer wrote it; B rows
// M2_BROW floats apart, unswizzled.
template <bool OUT, bool BSW, int NOUT = 1, typename Coef, typename Sink>
__device__ __forceinline__ void mamba2_fold_tc(const ST* S, float sc0, ST* state, u8* rcodes, u8* rscales,
                                               float* rglobal, u64 mat, int t, float decay, const float* sB,
                                               Coef coef, const float* sC, Sink sink, float* scratch, int nout = 1)
{
    typedef M2TCMap TM;
    constexpr int QSW = BSW ? SM::VEC / 4 - 1 : 0;
    constexpr int KS = (RMAX + 7) / 8;
    const int lane = threadIdx.x & 31, g = lane >> 2, lt = lane & 3;
    const int r0 = TM::row(0), u0 = COLS / TM::PARTS / 4 * TM::part(); // the part's first 16-byte unit
    float e[TM::PASSES][TM::CPL][4];
    load_state_rot<TM>(S, sc0, e, decay);
    // Tile (c, p)'s logical column n = 2t'+q is the part's column 16c +
    // 4t' + p + 2q (update_tc_tile, gdn_update_tc): lane g's B operand is
    // the float2 at 16c + 4(g>>1) + 2(g&1), in 16-byte unit 4c + (g>>1).
    for (int ks = 0; ks < KS; ks++) {
        if (8 * ks < t) {
            const int i0 = 8 * ks + lt, i1 = i0 + 4;
            const bool in0 = i0 < t, in1 = i1 < t;
            const float a[4] = {
                in0 ? coef(r0, i0) : 0.0f,
                in0 ? coef(r0 + 8, i0) : 0.0f,
                in1 ? coef(r0, i1) : 0.0f,
                in1 ? coef(r0 + 8, i1) : 0.0f,
            };
            u32 ahi[4], alo[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                tf32_split_fast(a[k], ahi[k], alo[k]);
            }
            // Rows past t (their A is zero) read row 0 instead: the stage
            // holds RMAX rows of B, and 8*KS may pass it.
            // B rows M2_BROW floats apart, unswizzled (the producer's B
            // pieces, mamba2_fold_pipe_impl).
            const float* b0 = sB + (in0 ? i0 : 0) * M2_BROW + 2 * (g & 1);
            const float* b1 = sB + (in1 ? i1 : 0) * M2_BROW + 2 * (g & 1);
#pragma unroll
            for (int c = 0; c < TM::CPL; c++) {
                const int u = 4 * (u0 + 4 * c + (g >> 1));
                update_tc_tile(e[0][c], e[1][c], b0 + u, b1 + u, in0, in1, ahi, alo);
            }
        }
    }
    if (OUT) {
#pragma unroll
        for (int pass = 0; pass < TM::PASSES; pass++) {
#pragma unroll
            for (int k = 0; k < NOUT; k++) {
                if (k < nout) {
                    const float acc = mamba2_fold_dot<TM, QSW>(e, pass, sC + k * N);
                    if (lt == 0) {
                        sink(TM::row(pass), TM::part(), k, acc);
                    }
                }
            }
        }
    }
    store_state<TM>(e, state, mat, scratch);
    write_read_copy<TM>(e, rcodes, rscales, rglobal, mat, scratch);
}
#endif

// mamba2_replay_step is one decode step of the replay cache, in two kernels
// launched back to back over every (head, batch row); each reads the slot's
// history cursor n and takes the CTAs of its kind, the others return at once:
//   - mamba2_replay_nonflush (n+1 < L): appends the input at ring entry n and
//     writes y = e^{L_t} (S0 . C) + sum_j Delta_j e^{L_t-L_j} (B_j . C) x_j + D x,
//     reading S0 from the read copy if there is one, else the checkpoint;
//   - mamba2_replay_flush (n+1 >= L): folds the whole ring, current token
//     included, into the checkpoint (and read copy) and writes y = S_new . C + D x.
// Two kernels rather than one branch: the flush holds its share of the new
// state in registers, which would cap the occupancy of the light non-flush
// CTAs. At small batches, where launches rather than occupancy cost, one
// kernel (MODE 2) takes both kinds. Ring entries are gathered into shared
// memory with all loads in flight at once (one round trip, not one per
// entry). MODE: 0 non-flush slots, 1 flush slots, 2 both. The step's last
// kernel moves the cursors (step_done). The trailing int* is unused: the
// function's signature is part of its shared memory's name in the PTX.
template <int MODE>
__device__ __forceinline__ bool mamba2_step(ST* state, u8* rcodes, u8* rscales, float* rglobal,
                                            ring_e* __restrict__ ringX, ring_e* __restrict__ ringB,
                                            float* __restrict__ ringDt, float* __restrict__ ringA,
                                            const int* __restrict__ hist, const int* __restrict__ slots,
                                            const float* __restrict__ x, const float* __restrict__ B,
                                            const float* __restrict__ C, const float* __restrict__ dt,
                                            float* __restrict__ y, const double* __restrict__ A,
                                            const double* __restrict__ dtb, const float* __restrict__ D,
                                            float dtMin, int L, int* done, int h, int b, int* = nullptr)
{
    __shared__ __align__(16) float sC[N];
    __shared__ __align__(16) float sB[RMAX * N];
    __shared__ float sX[P * CSTRIDE]; // x_j[p]; the flush turns it into w_j x_j[p]
    __shared__ float sDot[P];
    __shared__ float sW[RMAX];
    __shared__ float sBC[RMAX];
    __shared__ float sDelta[RMAX];
    __shared__ float sDecay[RMAX];
    __shared__ float sE;
    __shared__ float sLut[16];
    __shared__ float sScratch[NWARPS];

    const int g = h / HPG;
    const int tid = threadIdx.x;
    // EARLY (the small-batch kernel): the state is asked for in L1 and the
    // whole ring (RMAX entries, the unused ones ignored) is loaded without
    // waiting for hist[s], so the step's chain is slots -> {hist, ring,
    // state} -> y rather than slots -> hist -> ring -> state -> y.
    constexpr bool EARLY = MODE == 2 && RMAX <= NT;
    const int s = slots[b];
    const float* xt = x + ((u64)b * NHEADS + h) * P;
    const float* Bt = B + ((u64)b * NGROUPS + g) * N;
    // The token's inputs do not depend on the slot's cursor: asked for
    // first, so that neither they nor thread 0's float64 decay wait for
    // hist[s] (ncu, batch 1, asked for after it: the small step waited a
    // round trip for hist, then one for dt, then ran the float64 chain
    // while the block's other warps sat at the barrier).
    constexpr int XTI = (P + NT - 1) / NT, NTI = (N + NT - 1) / NT;
    float xtv[XTI], btv[NTI], ctv[NTI];
    row_regs(xtv, xt, P);
    row_regs(btv, Bt, N);
    row_regs(ctv, C + ((u64)b * NGROUPS + g) * N, N);
    const float dhv = MODE != 1 ? D[HEAD(h)] : 0.0f; // not the flush items: their registers
    float dtv = 0.0f;
    double dtbv = 0.0, av = 0.0;
    if (tid == 0) {
        dtv = dt[(u64)b * NHEADS_REAL + HEAD(h)];
        dtbv = dtb[HEAD(h)];
        av = A[HEAD(h)];
    }
    const u64 mat = (u64)s * NHEADS + h;
    if (EARLY) {
        prefetch_read(state, rcodes, rscales, mat);
    }
    const int n = hist[s];
    const int t = n + 1;
    const int ngather = EARLY ? RMAX : n;
    const bool FLUSH = MODE == 2 ? t >= L : MODE == 1;
    if (MODE != 2 && (t >= L) != FLUSH) {
        return false;
    }

    // Gather the ring: every load first, then the shared-memory stores
    // (16 bytes a load in the small step, RV4).
    constexpr bool RV4 = EARLY && P % 4 == 0 && N % 4 == 0;
    constexpr int XIT = RV4 ? 1 : (P * RMAX + NT - 1) / NT;
    constexpr int BIT = RV4 ? 1 : (N * RMAX + NT - 1) / NT;
    constexpr int XIT4 = RV4 ? (P / 4 * RMAX + NT - 1) / NT : 1;
    constexpr int BIT4 = RV4 ? (N / 4 * RMAX + NT - 1) / NT : 1;
    float xv[XIT], bv[BIT];
    float4 xv4[XIT4], bv4[BIT4];
    if constexpr (RV4) {
        gather_rows4<XIT4>(xv4, ringX + (u64)h * P, NHEADS * P, P, s, ngather);
        gather_rows4<BIT4>(bv4, ringB + (u64)g * N, NGROUPS * N, N, s, ngather);
    } else {
#pragma unroll
        for (int it = 0; it < XIT; it++) {
            const int idx = tid + it * NT;
            xv[it] = 0.0f;
            if (idx < P * ngather) {
                xv[it] = ring_ld(ringX + (ring_at(s, idx / P) * NHEADS + h) * P + idx % P);
            }
        }
#pragma unroll
        for (int it = 0; it < BIT; it++) {
            const int idx = tid + it * NT;
            bv[it] = 0.0f;
            if (idx < N * ngather) {
                bv[it] = ring_ld(ringB + (ring_at(s, idx / N) * NGROUPS + g) * N + idx % N);
            }
        }
    }
    float dj = 0.0f, aj = 0.0f; // ring scalars of entry tid (EARLY)
    if (EARLY && tid < RMAX) {
        dj = ringDt[rs_at(s, h, tid)];
        aj = ringA[rs_at(s, h, tid)];
    }
    if (tid == 0) {
        const float delta = fmaxf((float)softplus_d((double)dtv + dtbv), dtMin);
        const float a = (float)exp((double)delta * av);
        sDelta[n] = delta;
        sDecay[n] = a;
        if (!FLUSH) {
            ringDt[rs_at(s, h, n)] = delta;
            ringA[rs_at(s, h, n)] = a;
        }
    }
    ring_scalars(sDelta, sDecay, ringDt, ringA, tid, n, EARLY, dj, aj, [&](int i) { return rs_at(s, h, i); });
#pragma unroll
    for (int it = 0; it < XTI; it++) {
        const int p = tid + it * NT;
        if (p < P) {
            sX[p * CSTRIDE + n] = xtv[it];
            if (!FLUSH) {
                ring_st(ringX + (ring_at(s, n) * NHEADS + h) * P + p, xtv[it]);
            }
        }
    }
#pragma unroll
    for (int it = 0; it < NTI; it++) {
        const int i = tid + it * NT;
        if (i < N) {
            sB[n * N + i] = btv[it];
            if (!FLUSH && h % HPG == 0) {
                ring_st(ringB + (ring_at(s, n) * NGROUPS + g) * N + i, btv[it]);
            }
            sC[i] = ctv[it];
        }
    }
    if constexpr (RV4) {
#pragma unroll
        for (int it = 0; it < XIT4; it++) {
            const int idx = tid + it * NT;
            if (idx < P / 4 * n) {
                const int j = idx / (P / 4), p = 4 * (idx % (P / 4));
                sX[p * CSTRIDE + j] = xv4[it].x;
                sX[(p + 1) * CSTRIDE + j] = xv4[it].y;
                sX[(p + 2) * CSTRIDE + j] = xv4[it].z;
                sX[(p + 3) * CSTRIDE + j] = xv4[it].w;
            }
        }
#pragma unroll
        for (int it = 0; it < BIT4; it++) {
            const int idx = tid + it * NT;
            if (idx < N / 4 * n) {
                reinterpret_cast<float4*>(sB)[idx] = bv4[it];
            }
        }
    } else {
#pragma unroll
        for (int it = 0; it < XIT; it++) {
            const int idx = tid + it * NT;
            if (idx < P * n) {
                sX[(idx % P) * CSTRIDE + idx / P] = xv[it];
            }
        }
#pragma unroll
        for (int it = 0; it < BIT; it++) {
            const int idx = tid + it * NT;
            if (idx < N * n) {
                sB[idx] = bv[it];
            }
        }
    }
#if READ_FMT == FMT_NVFP4
    init_e2m1_lut(sLut);
#endif
    __syncthreads();
    const bool last = MODE == 2 && step_count(done);
    // Decay products from each entry to the current one (docs/DESIGN.md 2.1),
    // as products of the per-step decays in float64 like the CPU cache.
    if (tid == 0) {
        sE = decay_weights(sDelta, sDecay, t, sW);
    }
    if (!FLUSH) {
        // B_j . C, eight lanes per ring entry.
        dot_pairs(
            t, N, tid, NT, [&](int j) -> const float* { return sB + j * N; }, [&](int) { return (const float*)sC; },
            [&](int j, float v) { sBC[j] = v; });
        dots_read<1>(state, rcodes, rscales, rglobal, mat, sC, 0, 1, sDot, sLut);
        __syncthreads();
        const float e = sE, dh = MODE != 1 ? dhv : D[HEAD(h)];
        for (int p = tid; p < P; p += NT) {
            float yv = e * sDot[p] + dh * sX[p * CSTRIDE + n];
            for (int j = 0; j < t; j++) {
                yv = fmaf(sW[j] * sBC[j], sX[p * CSTRIDE + j], yv);
            }
            y[((u64)b * NHEADS + h) * P + p] = yv;
        }
        return last;
    }
    __syncthreads();
    for (int idx = tid; idx < P * t; idx += NT) {
        const int p = idx / t, j = idx % t;
        sX[p * CSTRIDE + j] = sW[j] * sX[p * CSTRIDE + j];
    }
    __syncthreads();
    mamba2_fold<true>(state + mat * (P * N), state_scale(state, mat), state, rcodes, rscales, rglobal, mat, t, sE, sB,
                      [&](int p, int j) { return sX[p * CSTRIDE + j]; }, sC, [&](int p, int, float d) { sDot[p] = d; },
                      sScratch);
    __syncthreads();
    if (MODE != 1) {
#pragma unroll
        for (int it = 0; it < XTI; it++) {
            const int p = tid + it * NT;
            if (p < P) {
                y[((u64)b * NHEADS + h) * P + p] = sDot[p] + dhv * xtv[it];
            }
        }
        return last;
    }
    const float dh = D[HEAD(h)];
    for (int p = tid; p < P; p += NT) {
        y[((u64)b * NHEADS + h) * P + p] = sDot[p] + dh * xt[p];
    }
    return last;
}

// mamba2_nonflush_pf is the non-flush step (mamba2_step<0>'s outputs,
// bit for bit) with the state traffic issued first (the per-head kernels): the CTA's whole
// share of the checkpoint is loaded into registers (raw 16-byte chunks) as
// soon as hist[s] says the slot does not flush, and the ring gather, C, and
// the ring's delta / decay go to shared memory by cp.async in the same round
// trip; the current token's x, B, dt (which depend on the batch row only) are
// loaded before slots[b]. Dependent chain: slots -> hist -> {state, ring} ->
// y, one global round trip shorter than v3 (slots -> hist -> ring -> state).
__device__ __forceinline__ void mamba2_nonflush_pf(ST* state, ring_e* __restrict__ ringX, ring_e* __restrict__ ringB,
                                                   float* __restrict__ ringDt, float* __restrict__ ringA,
                                                   const int* __restrict__ hist, const int* __restrict__ slots,
                                                   const float* __restrict__ x, const float* __restrict__ B,
                                                   const float* __restrict__ C, const float* __restrict__ dt,
                                                   float* __restrict__ y, const double* __restrict__ A,
                                                   const double* __restrict__ dtb, const float* __restrict__ D,
                                                   float dtMin, int L)
{
    __shared__ __align__(16) float sC[N];
    __shared__ __align__(16) float sB[RMAX * N];
    __shared__ float sX[P * CSTRIDE];
    __shared__ float sDot[P];
    __shared__ float sW[RMAX];
    __shared__ float sBC[RMAX];
    __shared__ float sDelta[RMAX];
    __shared__ float sDecay[RMAX];
    __shared__ float sE;

    constexpr int VEC = SM::VEC;
    constexpr int XT = (P + NT - 1) / NT;
    constexpr int BT = (N + NT - 1) / NT;
    const int h = blockIdx.x, b = blockIdx.y, g = h / HPG;
    const int tid = threadIdx.x;
    const float* xt = x + ((u64)b * NHEADS + h) * P;
    const float* Bt = B + ((u64)b * NGROUPS + g) * N;

    // The current token: independent of the slot, in flight with slots[b].
    float xc[XT], bc[BT];
    row_regs(xc, xt, P);
    row_regs(bc, Bt, N);
    double dtv = 0.0, dtbh = 0.0, Ah = 0.0;
    if (tid == 0) {
        dtv = (double)dt[(u64)b * NHEADS + h];
        dtbh = dtb[h];
        Ah = A[h];
    }
    const float dh = D[h];

    const int s = slots[b];
    const int n = hist[s];
    const int t = n + 1;
    if (t >= L) {
        return;
    }
    const u64 mat = (u64)s * NHEADS + h;
    const ST* S = state + mat * (P * N);

    // The state first: every chunk of this thread in flight at once.
    uint4 raw[SM::PASSES][SM::CPL];
#pragma unroll
    for (int pass = 0; pass < SM::PASSES; pass++) {
        const int r = SM::row(pass);
#pragma unroll
        for (int c = 0; c < SM::CPL; c++) {
            raw[pass][c] = make_uint4(0, 0, 0, 0);
            if (r < ROWS) {
                raw[pass][c] = *reinterpret_cast<const uint4*>(S + (u64)r * N + SM::col(c));
            }
        }
    }
    // The ring and C straight to shared memory, in the same round trip.
    for (int q = tid; q < N / 4; q += NT) {
        cp_async16(sC + 4 * q, C + ((u64)b * NGROUPS + g) * N + 4 * q);
    }
    for (int q = tid; q < n * (N / 4); q += NT) {
        const int j = q / (N / 4), i = 4 * (q % (N / 4));
        cp_ring16(sB + j * N + i, ringB + (ring_at(s, j) * NGROUPS + g) * N + i);
    }
    for (int idx = tid; idx < P * n; idx += NT) {
        const int j = idx / P, p = idx % P;
        cp_ring4(sX + p * CSTRIDE + j, ringX + (ring_at(s, j) * NHEADS + h) * P + p);
    }
    for (int j = tid; j < n; j += NT) {
        cp_async4(sDelta + j, ringDt + rs_at(s, h, j));
        cp_async4(sDecay + j, ringA + rs_at(s, h, j));
    }
    // Append the current token at entry n.
#pragma unroll
    for (int it = 0; it < XT; it++) {
        const int p = tid + it * NT;
        if (p < P) {
            sX[p * CSTRIDE + n] = xc[it];
            ring_st(ringX + (ring_at(s, n) * NHEADS + h) * P + p, xc[it]);
        }
    }
#pragma unroll
    for (int it = 0; it < BT; it++) {
        const int i = tid + it * NT;
        if (i < N) {
            sB[n * N + i] = bc[it];
            if (h % HPG == 0) {
                ring_st(ringB + (ring_at(s, n) * NGROUPS + g) * N + i, bc[it]);
            }
        }
    }
    if (tid == 0) {
        const float delta = fmaxf((float)softplus_d(dtv + dtbh), dtMin);
        const float a = (float)exp((double)delta * Ah);
        sDelta[n] = delta;
        sDecay[n] = a;
        ringDt[rs_at(s, h, n)] = delta;
        ringA[rs_at(s, h, n)] = a;
    }
    cp_async_wait_all();
    __syncthreads();
    // S0 . C from the registers (dots_state's order of operations).
#pragma unroll
    for (int pass = 0; pass < SM::PASSES; pass++) {
        const int r = SM::row(pass);
        float acc = 0.0f;
#pragma unroll
        for (int c = 0; c < SM::CPL; c++) {
            const int col = SM::col(c);
            float v[VEC];
            SIO::unpack(raw[pass][c], v, 1.0f);
            const float4* vp = reinterpret_cast<const float4*>(sC + col);
#pragma unroll
            for (int q = 0; q < VEC / 4; q++) {
                const float4 c4 = vp[q];
                acc = fmaf(v[4 * q], c4.x, acc);
                acc = fmaf(v[4 * q + 1], c4.y, acc);
                acc = fmaf(v[4 * q + 2], c4.z, acc);
                acc = fmaf(v[4 * q + 3], c4.w, acc);
            }
        }
        acc = lanes_sum<SM::LANES>(acc);
        if (r < ROWS && SM::lane() == 0) {
            sDot[r] = acc;
        }
    }
    // B_j . C, eight lanes per ring entry; the last warp's lane 0 also
    // forms the decay products (float64, like the CPU cache).
    dot_pairs(
        t, N, tid, NT, [&](int j) -> const float* { return sB + j * N; }, [&](int) { return (const float*)sC; },
        [&](int j, float v) { sBC[j] = v; });
    if (tid == NT - 32) {
        double suf = 1.0;
        for (int j = t - 1; j >= 0; j--) {
            sW[j] = (float)((double)sDelta[j] * suf);
            suf *= (double)sDecay[j];
        }
        sE = (float)suf;
    }
    __syncthreads();
    const float e = sE;
    for (int p = tid; p < P; p += NT) {
        float yv = e * sDot[p] + dh * sX[p * CSTRIDE + n];
        for (int j = 0; j < t; j++) {
            yv = fmaf(sW[j] * sBC[j], sX[p * CSTRIDE + j], yv);
        }
        y[((u64)b * NHEADS + h) * P + p] = yv;
    }
}

#define MAMBA2_STEP_PARAMS                                                                                        \
    ST *state, u8 *rcodes, u8 *rscales, float *rglobal, ring_e *__restrict__ ringX, ring_e *__restrict__ ringB,     \
        float *__restrict__ ringDt, float *__restrict__ ringA, int *__restrict__ hist,                             \
        const int *__restrict__ slots, const float *__restrict__ x, const float *__restrict__ B,                  \
        const float *__restrict__ C, const float *__restrict__ dt, float *__restrict__ y,                         \
        const double *__restrict__ A, const double *__restrict__ dtb, const float *__restrict__ D, float dtMin,    \
        int L, int *__restrict__ pending, int *__restrict__ done, int batch
#define MAMBA2_STEP_ARGS state, rcodes, rscales, rglobal, ringX, ringB, ringDt, ringA, hist, slots, x, B, C, dt, y, A, dtb, D, dtMin, L, done

// The decode step's kernels share one parameter list: the flush kernel runs
// first, then the non-flush kernel (this one, or mamba2_pipe_step), whose
// last block moves the cursors; below a few slots one kernel does all three.
#if WHOLE_REPLAY // the split module takes only the small step
extern "C" __global__ void __launch_bounds__(NT) mamba2_replay_nonflush(MAMBA2_STEP_PARAMS)
{
#if READ_FMT != FMT_F32 || STATE_FMT == FMT_E4M3
    mamba2_step<0>(MAMBA2_STEP_ARGS, blockIdx.x, blockIdx.y);
#else
    mamba2_nonflush_pf(state, ringX, ringB, ringDt, ringA, hist, slots, x, B, C, dt, y, A, dtb, D, dtMin, L);
#endif
    step_done(hist, pending, done, slots, batch, L);
}
#endif

// One flush item, not inlined: inlined into flush_items' loop, the compiler
// kept values across items and the kernel took 200-250 registers instead of
// about 110 (half the blocks per SM). FLUSH_MINB bounds the registers for
// that many blocks per SM, about what a one-block-per-item flush has: 96
// registers at 160 threads (Nano, no spills); at 256 threads (Super) 80,
// or 128 for an nvfp4 read copy, whose quantiser spills at 80.
#define FLUSH_MINB (NT <= 160 ? 4 : READ_FMT == FMT_NVFP4 ? 2 : 3)
__device__ __noinline__ void mamba2_flush_item(MAMBA2_STEP_PARAMS, int h, int b)
{
    mamba2_step<1>(MAMBA2_STEP_ARGS, h, b);
}

#if WHOLE_REPLAY // the split module takes only the small step
extern "C" __global__ void __launch_bounds__(NT, FLUSH_MINB) mamba2_replay_flush(MAMBA2_STEP_PARAMS)
{
    flush_items(slots, hist, batch, NHEADS, L, [&](int h, int b) {
        mamba2_flush_item(state, rcodes, rscales, rglobal, ringX, ringB, ringDt, ringA, hist, slots, x, B, C, dt, y, A, dtb, D,
                          dtMin, L, pending, done, batch, h, b);
    });
    flush_done(hist, pending, done, slots, batch, L);
}
#endif

#if REPLAY_KERNELS
extern "C" __global__ void __launch_bounds__(NT) mamba2_replay_step_small(MAMBA2_STEP_PARAMS)
{
    const bool last = mamba2_step<2>(MAMBA2_STEP_ARGS, blockIdx.x, blockIdx.y);
    step_finish(last, hist, pending, done, slots, batch, L);
}
#endif

// mamba2_stage_ring puts the first n ring entries of head h of slot s into
// shared memory for a fold or a verify: x_j[p] at sX[p*CSTRIDE + j], B_j at
// sB[j*N..], every load of both in flight at once (gather_rows).
__device__ __forceinline__ void mamba2_stage_ring(float* sX, float* sB, const ring_e* __restrict__ ringX,
                                                  const ring_e* __restrict__ ringB, int s, int h, int n)
{
    constexpr int XIT = (P * RMAX + NT - 1) / NT;
    constexpr int BIT = (N * RMAX + NT - 1) / NT;
    float xv[XIT], bv[BIT];
    gather_rows<XIT>(xv, ringX + (u64)h * P, NHEADS * P, P, s, n);
    gather_rows<BIT>(bv, ringB + (u64)(h / HPG) * N, NGROUPS * N, N, s, n);
#pragma unroll
    for (int it = 0; it < XIT; it++) {
        const int idx = threadIdx.x + it * NT;
        if (idx < P * n) {
            sX[(idx % P) * CSTRIDE + idx / P] = xv[it];
        }
    }
#pragma unroll
    for (int it = 0; it < BIT; it++) {
        const int idx = threadIdx.x + it * NT;
        if (idx < N * n) {
            sB[idx] = bv[it];
        }
    }
}

// mamba2_replay_verify computes the outputs of cnt = counts[b] (or T) draft
// inputs per slot from the checkpoint (or read copy) and the ring, without
// writing the checkpoint (docs/DESIGN.md 2.3). Draft k of batch row b is input
// row b*T+k and goes to ring entry n+k. If the committed history n plus 2*cnt
// would overflow the ring, the history is folded first (early flush) and the
// drafts start a new window. cursor_verify then moves the cursors; commit
// accepts a prefix. PART 1 takes only the slots that fold early (the kernel
// before mamba2_pipe_verify), PART 2 only their early folds (the kernel
// before mamba2_group_verify, which takes every slot).
// VEARLY (mamba2_replay_verify_small_early, replay_common.cu): the
// drafts' x, B, C and dt, the ring's scalars of every entry and the state
// in L1 asked for before the slot's cursor.
template <int PART, bool VEARLY = false>
__device__ __forceinline__ void
mamba2_verify_impl(ST* state, u8* rcodes, u8* rscales, float* rglobal,
                     ring_e* __restrict__ ringX, ring_e* __restrict__ ringB, float* __restrict__ ringDt,
                     float* __restrict__ ringA, const int* __restrict__ hist, const int* __restrict__ slots,
                     const int* __restrict__ counts, int T,
                     const float* __restrict__ x, const float* __restrict__ B, const float* __restrict__ C,
                     const float* __restrict__ dt, float* __restrict__ y, const double* __restrict__ A,
                     const double* __restrict__ dtb, const float* __restrict__ D, float dtMin, int R, int h, int b)
{
    __shared__ __align__(16) float sCk[TMAX * N];
    __shared__ __align__(16) float sB[RMAX * N];
    __shared__ float sCoef[P * CSTRIDE];
    __shared__ float sDot[TMAX * P];
    __shared__ float sWk[TMAX * RMAX];
    __shared__ float sBC[TMAX * RMAX];
    __shared__ float sEk[TMAX];
    __shared__ float sDelta[RMAX];
    __shared__ float sDecay[RMAX];
    __shared__ float sLut[16];
    __shared__ float sScratch[NWARPS];

    const int g = h / HPG;
    const int tid = threadIdx.x;
    const int s = slots[b];
    // VE: every draft row up to T (the input holds batch*T rows) and every
    // ring entry's scalars, whatever the cursor and count say; they are
    // stored below where the verify's own loads would have put them.
    constexpr bool VE = VEARLY && PART == 0 && RMAX <= NT;
    constexpr int XD = VE ? (TMAX * P + NT - 1) / NT : 1, BD = VE ? (TMAX * N + NT - 1) / NT : 1;
    float xd[XD];
    float2 bcd[BD];
    float dtd = 0.0f, dj = 0.0f, aj = 0.0f;
    double dtbd = 0.0, Ad = 0.0;
    if constexpr (VE) {
#pragma unroll
        for (int it = 0; it < XD; it++) {
            const int idx = tid + it * NT;
            xd[it] = idx < T * P ? x[(((u64)b * T + idx / P) * NHEADS + h) * P + idx % P] : 0.0f;
        }
#pragma unroll
        for (int it = 0; it < BD; it++) {
            const int idx = tid + it * NT;
            const u64 e = (((u64)b * T + idx / N) * NGROUPS + g) * N + idx % N;
            bcd[it] = idx < T * N ? make_float2(B[e], C[e]) : make_float2(0.0f, 0.0f);
        }
        if (tid < T) {
            dtd = dt[((u64)b * T + tid) * NHEADS_REAL + HEAD(h)];
            if (SCALARS_EARLY) {
                dtbd = dtb[HEAD(h)];
                Ad = A[HEAD(h)];
            }
        }
        if (tid < RMAX) {
            dj = ringDt[rs_at(s, h, tid)];
            aj = ringA[rs_at(s, h, tid)];
        }
        prefetch_read(state, rcodes, rscales, (u64)s * NHEADS + h);
    }
    int n = hist[s];
    const int cnt = counts ? counts[b] : T;
    const u64 mat = (u64)s * NHEADS + h;
    if (PART != 0 && !FOLDS_EARLY(n, cnt, R)) {
        return; // mamba2_pipe_verify or mamba2_group_verify takes it
    }
    // SCALARS_EARLY (replay_common.cu): draft tid's delta and decay while
    // hist[s] and counts[b] are in flight.
    float deltad = 0.0f, ad = 0.0f;
    if constexpr (VE && SCALARS_EARLY) {
        if (tid < T) {
            deltad = fmaxf((float)softplus_d((double)dtd + dtbd), dtMin);
            ad = (float)exp((double)deltad * Ad);
        }
    }

    ring_scalars(sDelta, sDecay, ringDt, ringA, tid, n, VE, dj, aj, [&](int i) { return rs_at(s, h, i); });
    if (FOLDS_EARLY(n, cnt, R)) {
        // Early flush of the committed history; drafts are never folded.
        // The ring's B and x rows with every load in flight at once (a loop
        // of load-then-store waited a round trip per element it took:
        // 21 of them per block, most of the fold's time), x_j kept raw in
        // sCoef until the weights are known.
        mamba2_stage_ring(sCoef, sB, ringX, ringB, s, h, n);
        __syncthreads();
        if (tid == 0) {
            double suf = 1.0;
            for (int j = n - 1; j >= 0; j--) {
                sWk[j] = (float)((double)sDelta[j] * suf);
                suf *= (double)sDecay[j];
            }
            sEk[0] = (float)suf;
        }
        __syncthreads();
        for (int idx = tid; idx < P * n; idx += NT) {
            const int p = idx / n, j = idx % n;
            sCoef[p * CSTRIDE + j] = sWk[j] * sCoef[p * CSTRIDE + j];
        }
        __syncthreads();
        mamba2_fold<false>(state + mat * (P * N), state_scale(state, mat), state, rcodes, rscales, rglobal, mat, n, sEk[0],
                           sB, [&](int p, int j) { return sCoef[p * CSTRIDE + j]; }, nullptr, [](int, int, float) {},
                           sScratch);
        if (PART == 2) {
            return; // mamba2_group_verify reads the new checkpoint like any other slot's
        }
        // The barrier makes the new checkpoint and read copy, read back
        // below like any other slot's, visible to the whole CTA.
        __syncthreads();
        n = 0;
    }
    if constexpr (PART == 2) {
        return; // unreachable, but unseen by the compiler (gdn_verify_impl's FOLD_ONLY)
    }
    // Append the drafts.
    if (tid < cnt) {
        const int k = tid;
        float delta = deltad, a = ad;
        if constexpr (!(VE && SCALARS_EARLY)) {
            const float dtk = VE ? dtd : dt[((u64)b * T + k) * NHEADS_REAL + HEAD(h)];
            delta = fmaxf((float)softplus_d((double)dtk + dtb[HEAD(h)]), dtMin);
            a = (float)exp((double)delta * A[HEAD(h)]);
        }
        sDelta[n + k] = delta;
        sDecay[n + k] = a;
        ringDt[rs_at(s, h, n + k)] = delta;
        ringA[rs_at(s, h, n + k)] = a;
    }
    // The committed ring entries, next to the drafts (which also enter the
    // ring).
    mamba2_stage_ring(sCoef, sB, ringX, ringB, s, h, n);
    if constexpr (VE) {
        // The drafts' x, B and C, asked for at the start.
#pragma unroll
        for (int it = 0; it < XD; it++) {
            const int idx = tid + it * NT;
            if (idx < cnt * P) {
                const int k = idx / P, p = idx % P;
                ring_st(ringX + (ring_at(s, n + k) * NHEADS + h) * P + p, xd[it]);
                sCoef[p * CSTRIDE + n + k] = xd[it];
            }
        }
#pragma unroll
        for (int it = 0; it < BD; it++) {
            const int idx = tid + it * NT;
            if (idx < cnt * N) {
                const int k = idx / N, i = idx % N;
                if (h % HPG == 0) {
                    ring_st(ringB + (ring_at(s, n + k) * NGROUPS + g) * N + i, bcd[it].x);
                }
                sB[(n + k) * N + i] = bcd[it].x;
                sCk[idx] = bcd[it].y;
            }
        }
    } else {
        // The drafts' x, B and C, every load in flight at once.
        load_then_store<(TMAX * P + NT - 1) / NT, NT>(
            cnt * P, [&](int idx) { return x[(((u64)b * T + idx / P) * NHEADS + h) * P + idx % P]; },
            [&](int idx, float xv) {
                const int k = idx / P, p = idx % P;
                ring_st(ringX + (ring_at(s, n + k) * NHEADS + h) * P + p, xv);
                sCoef[p * CSTRIDE + n + k] = xv;
            });
        load_then_store<(TMAX * N + NT - 1) / NT, NT>(
            cnt * N,
            [&](int idx) {
                const u64 e = (((u64)b * T + idx / N) * NGROUPS + g) * N + idx % N;
                return make_float2(B[e], C[e]);
            },
            [&](int idx, float2 bc) {
                const int k = idx / N, i = idx % N;
                if (h % HPG == 0) {
                    ring_st(ringB + (ring_at(s, n + k) * NGROUPS + g) * N + i, bc.x);
                }
                sB[(n + k) * N + i] = bc.x;
                sCk[idx] = bc.y;
            });
    }
#if READ_FMT == FMT_NVFP4
    init_e2m1_lut(sLut);
#endif
    __syncthreads();
    if (tid < cnt) {
        const int k = tid, tk = n + k + 1;
        double suf = 1.0;
        for (int j = tk - 1; j >= 0; j--) {
            sWk[k * RMAX + j] = (float)((double)sDelta[j] * suf);
            suf *= (double)sDecay[j];
        }
        sEk[k] = (float)suf;
    }
    // B_j . C_k for every draft k and entry j <= n+k, eight lanes per pair.
    const int ne = n + cnt;
    dot_pairs(
        cnt * ne, N, tid, NT,
        [&](int pr) -> const float* { return pr % ne <= n + pr / ne ? sB + (pr % ne) * N : nullptr; },
        [&](int pr) -> const float* { return sCk + (pr / ne) * N; },
        [&](int pr, float v) { sBC[(pr / ne) * RMAX + pr % ne] = v; });
    dots_read<TMAX>(state, rcodes, rscales, rglobal, mat, sCk, N, cnt, sDot, sLut);
    __syncthreads();
    const float dh = D[HEAD(h)];
    for (int idx = tid; idx < cnt * P; idx += NT) {
        const int k = idx / P, p = idx % P;
        // sCoef[p][n+k] holds draft k's x[p] (stored above), not re-read
        // from global memory.
        float yv = sEk[k] * sDot[k * P + p] + dh * sCoef[p * CSTRIDE + n + k];
        for (int j = 0; j <= n + k; j++) {
            const float xj = sCoef[p * CSTRIDE + j];
            yv = fmaf(sWk[k * RMAX + j] * sBC[k * RMAX + j], xj, yv);
        }
        y[(((u64)b * T + k) * NHEADS + h) * P + p] = yv;
    }
}

#define MAMBA2_VERIFY_PARAMS                                                                                      \
    ST *state, u8 *rcodes, u8 *rscales, float *rglobal, ring_e *__restrict__ ringX, ring_e *__restrict__ ringB,     \
        float *__restrict__ ringDt, float *__restrict__ ringA, const int *__restrict__ hist,                       \
        const int *__restrict__ slots, const int *__restrict__ counts, int T, const float *__restrict__ x,        \
        const float *__restrict__ B, const float *__restrict__ C, const float *__restrict__ dt,                   \
        float *__restrict__ y, const double *__restrict__ A, const double *__restrict__ dtb,                      \
        const float *__restrict__ D, float dtMin, int R
#define MAMBA2_VERIFY_ARGS state, rcodes, rscales, rglobal, ringX, ringB, ringDt, ringA, hist, slots, counts, T, x, B, C, dt, y, A, dtb, D, dtMin, R

#if WHOLE_REPLAY // the split module takes only the small step (and verify)
extern "C" __global__ void __launch_bounds__(NT) mamba2_replay_verify(MAMBA2_VERIFY_PARAMS)
{
    mamba2_verify_impl<0>(MAMBA2_VERIFY_ARGS, blockIdx.x, blockIdx.y);
}
#endif

// mamba2_replay_verify_small is the verify of a small batch in one kernel:
// mamba2_replay_verify, then its last block moves the cursors (verify_done).
// With SPLIT_VERIFY the split module has it too (the drafts' dt, dt_bias,
// A and D by the real head, as in the small step).
#if REPLAY_KERNELS && (HSPLIT == 1 || SPLIT_VERIFY)
extern "C" __global__ void __launch_bounds__(NT)
    mamba2_replay_verify_small(MAMBA2_VERIFY_PARAMS, int* __restrict__ pending, int* __restrict__ done, int batch)
{
    mamba2_verify_impl<0>(MAMBA2_VERIFY_ARGS, blockIdx.x, blockIdx.y);
    verify_done(hist, pending, done, slots, counts, T, batch, R);
}

// mamba2_replay_verify_small_early is mamba2_replay_verify_small with its
// inputs asked for before the slot's cursor (replay_common.cu).
extern "C" __global__ void __launch_bounds__(NT)
    mamba2_replay_verify_small_early(MAMBA2_VERIFY_PARAMS, int* __restrict__ pending, int* __restrict__ done, int batch)
{
    mamba2_verify_impl<0, true>(MAMBA2_VERIFY_ARGS, blockIdx.x, blockIdx.y);
    verify_done(hist, pending, done, slots, counts, T, batch, R);
}
#endif

// mamba2_replay_verify_fold is mamba2_replay_verify for the slots that fold
// their history early; the others return at once (mamba2_pipe_verify's).
#if WHOLE_REPLAY // the split module takes only the small step
extern "C" __global__ void __launch_bounds__(NT) mamba2_replay_verify_fold(MAMBA2_VERIFY_PARAMS)
{
    mamba2_verify_impl<1>(MAMBA2_VERIFY_ARGS, blockIdx.x, blockIdx.y);
}
#endif

// mamba2_replay_fold_items folds the committed history of the slots that
// fold early, nothing else: mamba2_group_verify then takes every slot, those
// from their new checkpoint (read back from L2 or memory: cheaper than the
// one-block-per-head verify after the fold; Super bf16 verify 723 -> 595 us
// at B=256, T=4 on the H200). It runs on a grid of the blocks the GPU holds
// at once: work_items, the flush kernel's scheme, over the items that fold.
__device__ __noinline__ void mamba2_fold_early_item(MAMBA2_VERIFY_PARAMS, int h, int b)
{
    mamba2_verify_impl<2>(MAMBA2_VERIFY_ARGS, h, b);
}

#if WHOLE_REPLAY // the split module takes only the small step
extern "C" __global__ void __launch_bounds__(NT, FLUSH_MINB) mamba2_replay_fold_items(MAMBA2_VERIFY_PARAMS, int batch)
{
    fold_items(slots, hist, counts, T, R, batch, NHEADS, [&](int h, int b) { mamba2_fold_early_item(MAMBA2_VERIFY_ARGS, h, b); });
}
#endif

// mamba2_baseline is the in-place recurrence every step (docs/DESIGN.md 1.1):
// S = exp(Delta A) S + Delta x (x) B; y = S . C + D x. With verify it runs cnt
// drafts from the state buffer cur[s] and writes draft k's state to buffer
// (cur+1+k) % nb (one full state per draft, as vLLM and SGLang do); commit
// then selects the accepted one. A state in bf16 is rounded after every
// update ("naive low precision"). The state is held in registers throughout.
template <bool VERIFY>
__device__ __forceinline__ void mamba2_baseline(ST* state, const int* __restrict__ cur, const int* __restrict__ slots,
                const int* __restrict__ counts, int T, int nb,
                const float* __restrict__ x, const float* __restrict__ B, const float* __restrict__ C,
                const float* __restrict__ dt, float* __restrict__ y, const double* __restrict__ A,
                const double* __restrict__ dtb, const float* __restrict__ D, float dtMin)
{
    constexpr int NV = BVLEN(N); // a padded vector (bvpad)
    __shared__ __align__(16) float sBk[TMAX * NV];
    __shared__ __align__(16) float sCk[TMAX * NV];
    __shared__ float sDot[TMAX * P];
    __shared__ float sDelta[TMAX];
    __shared__ float sDecay[TMAX];
    __shared__ float sScratch[NWARPS];
    __shared__ float sXk[BASE_ROW ? P : 1]; // BASE_ROW: the step's x
    __shared__ __align__(8) u64 sBar;        // BASE_BULK: the stage's copy

    constexpr int VEC = SM::VEC;
    const int h = blockIdx.x, b = blockIdx.y, g = h / HPG;
    const int tid = threadIdx.x;
    const int s = slots[b];
    const int cnt = VERIFY ? (counts ? counts[b] : T) : 1;
    const int T1 = VERIFY ? T : 1;
    const int c0 = cur[s];
    const u64 srcm = ((u64)s * nb + c0) * NHEADS + h;
    ST* src = state + srcm * (P * N);
    const ST* stage = nullptr;
    if (!VERIFY && !SIO::SCALED) {
        stage = base_begin(src, &sBar, sXk, x + ((u64)b * NHEADS + h) * P);
    }

    if (tid < cnt) {
        const int k = tid;
        const double delta = fmax(softplus_d((double)dt[((u64)b * T1 + k) * NHEADS + h] + dtb[h]), (double)dtMin);
        sDelta[k] = (float)delta;
        sDecay[k] = (float)exp(delta * A[h]);
    }
    for (int idx = tid; idx < cnt * N; idx += NT) {
        const int k = idx / N, i = idx % N;
        sBk[k * NV + bvpad(i)] = B[(((u64)b * T1 + k) * NGROUPS + g) * N + i];
        sCk[k * NV + bvpad(i)] = C[(((u64)b * T1 + k) * NGROUPS + g) * N + i];
    }
    uint4 raw0[SM::CPL]; // pass 0 as stored, asked for before the barrier (BASE_EARLY_ON)
    if (BASE_EARLY_ON && !VERIFY && !SIO::SCALED) {
        raw_pass<SM>(src, 0, raw0);
    }
    __syncthreads();
    if (!VERIFY && !SIO::SCALED) {
        // One step in place: stream the state pass by pass (few registers,
        // many CTAs in flight), no copy of it held. (An fp8 state needs the
        // new matrix's amax before it can store: it takes the other path.)
        const float a = sDecay[0], delta = sDelta[0];
        const float* xk = x + ((u64)b * NHEADS + h) * P;
#if BASE_PF
        float en[SM::CPL][VEC];
        load_pass<SIO, SM>(src, 0, en);
#endif
        // update streams pass `pass`, its chunks read where `from` says:
        // 0 inside the row test, 1 the prefetched pass (BASE_PF), 2 e as given.
        auto update = [&](int pass, float (&e)[SM::CPL][VEC], int from) {
            const int r = SM::row(pass);
            float acc = 0.0f;
#if BASE_PF
            if (from == 1) {
                next_pass<SIO, SM>(src, pass, e, en);
            }
#endif
            if (r < ROWS) {
                if (from == 0) {
#pragma unroll
                    for (int c = 0; c < SM::CPL; c++) {
                        SIO::load(src, (u64)r * N + SM::col(c), e[c], 1.0f);
                    }
                }
                const float xc = delta * (BASE_ROW ? sXk[r] : xk[r]);
#pragma unroll
                for (int c = 0; c < SM::CPL; c++) {
                    const int col = SM::col(c), pc = bvpad(col);
#pragma unroll
                    for (int q = 0; q < VEC; q++) {
                        const float v = a * e[c][q] + xc * sBk[pc + q];
                        e[c][q] = v;
                        acc = fmaf(v, sCk[pc + q], acc);
                    }
                    SIO::store(src, (u64)r * N + col, e[c], 1.0f, 1.0f);
                }
            }
            acc = lanes_sum<SM::LANES>(acc);
            if (r < ROWS && SM::lane() == 0) {
                sDot[r] = acc;
            }
        };
        base_stream<SIO, SM>(stage, &sBar, raw0, update);
    } else {
        const float sc0 = state_scale(state, srcm);
        float S[SM::PASSES][SM::CPL][VEC];
        load_state<SM>(src, sc0, S);
        for (int k = 0; k < cnt; k++) {
            const u64 dstm = VERIFY ? ((u64)s * nb + (c0 + 1 + k) % nb) * NHEADS + h : srcm;
            ST* dst = state + dstm * (P * N);
            const float a = sDecay[k], delta = sDelta[k];
            const float* xk = x + (((u64)b * T1 + k) * NHEADS + h) * P;
#pragma unroll
            for (int pass = 0; pass < SM::PASSES; pass++) {
                const int r = SM::row(pass);
                const float xc = r < ROWS ? delta * xk[r] : 0.0f;
                float acc = 0.0f;
#pragma unroll
                for (int c = 0; c < SM::CPL; c++) {
                    const int col = SM::col(c);
#pragma unroll
                    for (int e = 0; e < VEC; e++) {
                        const float v = a * S[pass][c][e] + xc * sBk[k * NV + bvpad(col) + e];
                        S[pass][c][e] = v;
                        acc = fmaf(v, sCk[k * NV + bvpad(col) + e], acc);
                    }
                    if (!SIO::SCALED && r < ROWS) {
                        // bf16 one element per conversion here: the pair
                        // conversion costs this register-held path
                        // occupancy (verify baseline Nano 1048 us with
                        // pairs, 959 with single conversions, 1006 with
                        // integer rounding).
                        SIO::template store<false>(dst, (u64)r * N + col, S[pass][c], 1.0f, 1.0f);
                    }
                }
                acc = lanes_sum<SM::LANES>(acc);
                if (r < ROWS && SM::lane() == 0) {
                    sDot[k * P + r] = acc;
                }
            }
            if (SIO::SCALED) { // fp8: one scale per new matrix, so one store after the update
                store_state_rounded<SM>(S, state, dstm, sScratch);
            }
        }
    }
    __syncthreads();
    const float dh = D[h];
    for (int idx = tid; idx < cnt * P; idx += NT) {
        const int k = idx / P, p = idx % P;
        y[(((u64)b * T1 + k) * NHEADS + h) * P + p] = sDot[k * P + p] + dh * x[(((u64)b * T1 + k) * NHEADS + h) * P + p];
    }
}

#define MAMBA2_BASELINE_PARAMS                                                                                    \
    ST *state, const int *__restrict__ cur, const int *__restrict__ slots, const int *__restrict__ counts, int T, \
        int nb, const float *__restrict__ x, const float *__restrict__ B, const float *__restrict__ C,            \
        const float *__restrict__ dt, float *__restrict__ y, const double *__restrict__ A,                        \
        const double *__restrict__ dtb, const float *__restrict__ D, float dtMin
#define MAMBA2_BASELINE_ARGS state, cur, slots, counts, T, nb, x, B, C, dt, y, A, dtb, D, dtMin

// The baseline kernels also set the slots' pending drafts (0 after a step,
// the count after a verify; commit reads them): one launch per operation.
#if BASELINE_KERNELS // baseline modules alone, never split
extern "C" __global__ void BASE_BOUNDS mamba2_baseline_step(MAMBA2_BASELINE_PARAMS, int* __restrict__ pending)
{
    mamba2_baseline<false>(MAMBA2_BASELINE_ARGS);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        pending[slots[blockIdx.y]] = 0;
    }
}
#endif

#if BASELINE_KERNELS // baseline modules alone, never split
extern "C" __global__ void __launch_bounds__(NT) mamba2_baseline_verify(MAMBA2_BASELINE_PARAMS, int* __restrict__ pending)
{
    mamba2_baseline<true>(MAMBA2_BASELINE_ARGS);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        pending[slots[blockIdx.y]] = counts ? counts[blockIdx.y] : T;
    }
}
#endif

// ---- the pipelined (persistent, bulk-copy) non-flush step and verify ----
//
// mamba2_pipe computes what mamba2_step<0> (VERIFY false: slots whose
// window does not fill) or mamba2_replay_verify (VERIFY true: slots with no
// early fold) compute, bit for bit, for every (batch row, head) item
// i = blockIdx.x + k*gridDim.x. Warp 0 is the producer: it reads the cursors
// of 32 items at once (one round trip for slots, counts and dt, one for hist
// and the nvfp4 global scale), then per item waits for a free stage and bulk-
// copies the checkpoint (or read copy), the ring's x, B, delta and decay rows
// and the new tokens' x, B, C into it. The NCW consumer warps take the
// stages in order: append the new tokens to the ring, form the decay
// weights and B_j . C_k, the row dots S0 . C_k from shared memory, then y.
// Items of the other kind (flush or early fold) pass through a stage with no
// copies; the flush / fold kernel takes them.
//
// Defines from the host: NCW (consumer warps), NSTAGE, STAGE_BYTES and
// SCR_BYTES (checked against the layout below).

#ifdef NSTAGE
#if RING_BF16
// Its producer, widening a bf16 ring's rows, spilled at the kernels'
// register bound (ptxas sm_90, Nano bf16 + nvfp4 verify at 56 registers:
// 48 -> 128-248 bytes); a bf16 ring takes the group and per-head kernels.
#error "the pipelined step and verify copy fp32 ring rows"
#endif
#define ST_X (((SMAT_BYTES) + 15) / 16 * 16)
#define ST_B (ST_X + RMAX * P * 4)
#define ST_C (ST_B + RMAX * N * 4)
#define ST_D (ST_C + TMAX * N * 4)
#define ST_A (ST_D + RMAXP * 4)
#define ST_END (ST_A + RMAXP * 4)
static_assert(ST_END <= STAGE_BYTES, "stage layout larger than STAGE_BYTES");

struct M2Scratch {
    float W[TMAX * RMAX];  // W[k][j] = Delta_j prod_{j<m<=n+k} a_m
    float BC[TMAX * RMAX]; // B_j . C_k
    float E[TMAX];         // prod_{m<=n+k} a_m
    float nd[TMAX];        // the new tokens' Delta and a (producer)
    float na[TMAX];
    float dot[TMAX * P]; // S0 . C_k
    float gsc;           // nvfp4 global scale
    float dh;            // D[h]
    int s, n, cnt, b, h, skip;
};
static_assert(sizeof(M2Scratch) <= SCR_BYTES, "scratch larger than SCR_BYTES");

template <bool VERIFY>
__device__ __forceinline__ void mamba2_pipe(const ST* __restrict__ state, const u8* __restrict__ rcodes,
                                            const u8* __restrict__ rscales, const float* __restrict__ rglobal,
                                            ring_e* __restrict__ ringX, ring_e* __restrict__ ringB,
                                            float* __restrict__ ringDt, float* __restrict__ ringA,
                                            const int* __restrict__ hist, const int* __restrict__ slots,
                                            const int* __restrict__ counts, int T, const float* __restrict__ x,
                                            const float* __restrict__ B, const float* __restrict__ C,
                                            const float* __restrict__ dt, float* __restrict__ y,
                                            const double* __restrict__ A, const double* __restrict__ dtb,
                                            const float* __restrict__ D, float dtMin, int L, int batch)
{
    extern __shared__ __align__(128) unsigned char dsm[];
    unsigned char* stages = dsm;
    unsigned char* scrBase = dsm + NSTAGE * STAGE_BYTES;
    u64* full = reinterpret_cast<u64*>(scrBase + NSTAGE * SCR_BYTES);
    u64* empty = full + NSTAGE;
    float* lut = reinterpret_cast<float*>(empty + NSTAGE);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int T1 = VERIFY ? T : 1;
    const int items = batch * NHEADS;
    if (tid == 0) {
        for (int k = 0; k < NSTAGE; k++) {
            mbar_init(full + k, 33);
            mbar_init(empty + k, GW);
        }
        mbar_fence_init();
    }
#if READ_FMT == FMT_NVFP4
    init_e2m1_lut(lut);
#endif
    __syncthreads();

    if (warp == 0) {
        int it = 0;
        for (int base = blockIdx.x; base < items; base += 32 * gridDim.x) {
            const int i = base + lane * gridDim.x;
            int s = 0, n = 0, cnt = 0, b = 0, h = 0, skip = 1;
            float gs = 0.0f, dh = 0.0f, nd[TMAX], na[TMAX];
            if (i < items) {
                b = i / NHEADS;
                h = i % NHEADS;
                s = slots[b];
                cnt = VERIFY ? (counts ? counts[b] : T) : 1;
                float dv[TMAX];
#pragma unroll
                for (int k = 0; k < TMAX; k++) {
                    dv[k] = k < T1 ? dt[((u64)b * T1 + k) * NHEADS + h] : 0.0f;
                }
                const double dtbh = dtb[h], Ah = A[h];
                dh = D[h];
                n = hist[s];
#if READ_FMT == FMT_NVFP4 || READ_FMT == FMT_E4M3
                gs = rglobal[(u64)s * NHEADS + h];
#elif READ_FMT == FMT_F32 && STATE_FMT == FMT_E4M3
                gs = state_scale(state, (u64)s * NHEADS + h);
#endif
                skip = VERIFY ? FOLDS_EARLY(n, cnt, L) : (n + 1 >= L);
#pragma unroll
                for (int k = 0; k < TMAX; k++) {
                    nd[k] = na[k] = 0.0f;
                    if (k < cnt) {
                        const float delta = fmaxf((float)softplus_d((double)dv[k] + dtbh), dtMin);
                        nd[k] = delta;
                        na[k] = (float)exp((double)delta * Ah);
                    }
                }
            }
            for (int k = 0; k < 32 && base + k * (int)gridDim.x < items; k++, it++) {
                const int ks = __shfl_sync(FULL_MASK, s, k), kn = __shfl_sync(FULL_MASK, n, k);
                const int kc = __shfl_sync(FULL_MASK, cnt, k), kb = __shfl_sync(FULL_MASK, b, k);
                const int kh = __shfl_sync(FULL_MASK, h, k), kskip = __shfl_sync(FULL_MASK, skip, k);
                const float kgs = __shfl_sync(FULL_MASK, gs, k), kdh = __shfl_sync(FULL_MASK, dh, k);
                int stg;
                u32 par;
                stage_of(it, stg, par);
                mbar_wait(empty + stg, par ^ 1);
                M2Scratch* m = reinterpret_cast<M2Scratch*>(scrBase + stg * SCR_BYTES);
#pragma unroll
                for (int q = 0; q < TMAX; q++) {
                    const float d = __shfl_sync(FULL_MASK, nd[q], k), a = __shfl_sync(FULL_MASK, na[q], k);
                    if (lane == 0) {
                        m->nd[q] = d;
                        m->na[q] = a;
                    }
                }
                if (lane == 0) {
                    m->s = ks;
                    m->n = kn;
                    m->cnt = kc;
                    m->b = kb;
                    m->h = kh;
                    m->skip = kskip;
                    m->gsc = kgs;
                    m->dh = kdh;
                }
                if (kskip) {
                    if (lane == 0) {
                        mbar_arrive(full + stg);
                    }
                    cp_async_mbar_arrive(full + stg);
                    continue;
                }
                const int g = kh / HPG, ne = kn + kc;
                unsigned char* sg = stages + stg * STAGE_BYTES;
                const u64 mat = (u64)ks * NHEADS + kh;
#if READ_FMT == FMT_NVFP4
                constexpr int NS = 2;
#else
                constexpr int NS = 1;
#endif
                const int npieces = NS + 2 * ne + kc + (kn > 0 ? 2 : 0);
                produce_stage(full + stg, npieces, NS, [&](int ci) -> Piece {
                    if (ci < NS) {
#if READ_FMT == FMT_NVFP4
                        if (ci == 0) {
                            return Piece{sg, rcodes + mat * RC_BYTES, P * N / 2};
                        }
                        return Piece{sg + P * N / 2, rscales + mat * (P * N / 16), P * N / 16};
#elif READ_FMT != FMT_F32
                        return Piece{sg, rcodes + mat * RC_BYTES, RC_BYTES};
#else
                        return Piece{sg, state + mat * (P * N), SMAT_STATE_BYTES};
#endif
                    }
                    int c = ci - NS;
                    if (c < ne) {
                        const float* src = c < kn ? ringX + (ring_at(ks, c) * NHEADS + kh) * P
                                                  : x + (((u64)kb * T1 + (c - kn)) * NHEADS + kh) * P;
                        return Piece{sg + ST_X + c * P * 4, src, P * 4};
                    }
                    c -= ne;
                    if (c < ne) {
                        const float* src = c < kn ? ringB + (ring_at(ks, c) * NGROUPS + g) * N
                                                  : B + (((u64)kb * T1 + (c - kn)) * NGROUPS + g) * N;
                        return Piece{sg + ST_B + c * N * 4, src, N * 4};
                    }
                    c -= ne;
                    if (c < kc) {
                        return Piece{sg + ST_C + c * N * 4, C + (((u64)kb * T1 + c) * NGROUPS + g) * N, N * 4};
                    }
                    c -= kc;
                    return Piece{sg + (c == 0 ? ST_D : ST_A), (c == 0 ? ringDt : ringA) + rs_at(ks, kh, 0), RMAXP * 4};
                });
            }
        }
        return;
    }

    static_assert(NCW % GW == 0 && NSTAGE % NGRP == 0, "consumer warps must form whole groups");
    const int grp = (tid - 32) / GCT, ct = (tid - 32) % GCT;
    int it = grp;
    for (int i = blockIdx.x + grp * gridDim.x; i < items; i += NGRP * gridDim.x, it += NGRP) {
        int stg;
        u32 par;
        stage_of(it, stg, par);
        mbar_wait(full + stg, par);
        M2Scratch* m = reinterpret_cast<M2Scratch*>(scrBase + stg * SCR_BYTES);
        if (m->skip) {
            release_stage(empty + stg);
            continue;
        }
        const unsigned char* sg = stages + stg * STAGE_BYTES;
        const float* sX = reinterpret_cast<const float*>(sg + ST_X);
        const float* sB = reinterpret_cast<const float*>(sg + ST_B);
        const float* sCk = reinterpret_cast<const float*>(sg + ST_C);
        const float* sD = reinterpret_cast<const float*>(sg + ST_D);
        const float* sA = reinterpret_cast<const float*>(sg + ST_A);
        const int s = m->s, n = m->n, cnt = m->cnt, b = m->b, h = m->h, g = h / HPG, ne = n + cnt;
        // Append the new tokens to the ring.
        for (int idx = ct; idx < cnt * P; idx += GCT) {
            const int k = idx / P, p = idx % P;
            ring_st(ringX + (ring_at(s, n + k) * NHEADS + h) * P + p, sX[(n + k) * P + p]);
        }
        if (h % HPG == 0) {
            for (int idx = ct; idx < cnt * N; idx += GCT) {
                const int k = idx / N, e = idx % N;
                ring_st(ringB + (ring_at(s, n + k) * NGROUPS + g) * N + e, sB[(n + k) * N + e]);
            }
        }
        if (ct < cnt) {
            ringDt[rs_at(s, h, n + ct)] = m->nd[ct];
            ringA[rs_at(s, h, n + ct)] = m->na[ct];
        }
        // Decay weights: W[k][j] = Delta_j prod_{m=n+k..j+1} a_m (the CPU
        // cache's suffix products, in the same order), E[k] = prod over all.
        for (int pr = ct; pr < cnt * (ne + 1); pr += GCT) {
            const int k = pr / (ne + 1), j = pr % (ne + 1), tk = n + k + 1;
            if (j <= tk) {
                double suf = 1.0;
                const int lo = j == tk ? 0 : j + 1;
                for (int mm = tk - 1; mm >= lo; mm--) {
                    suf *= (double)(mm < n ? sA[mm] : m->na[mm - n]);
                }
                if (j == tk) {
                    m->E[k] = (float)suf;
                } else {
                    const float dj = j < n ? sD[j] : m->nd[j - n];
                    m->W[k * RMAX + j] = (float)((double)dj * suf);
                }
            }
        }
        // B_j . C_k, eight lanes per pair.
        dot_pairs(
            cnt * ne, N, ct, GCT,
            [&](int pr) -> const float* { return pr % ne <= n + pr / ne ? sB + (pr % ne) * N : nullptr; },
            [&](int pr) -> const float* { return sCk + (pr / ne) * N; },
            [&](int pr, float v) { m->BC[(pr / ne) * RMAX + pr % ne] = v; });
        smem_row_dots<VERIFY ? TMAX : 1, GW>(sg, m->gsc, sCk, N, cnt, lut, ct, m->dot);
        group_sync(grp);
        const float dh = m->dh;
        for (int idx = ct; idx < cnt * P; idx += GCT) {
            const int k = idx / P, p = idx % P;
            float yv = m->E[k] * m->dot[k * P + p] + dh * sX[(n + k) * P + p];
            #pragma unroll 4
            for (int j = 0; j <= n + k; j++) {
                yv = fmaf(m->W[k * RMAX + j] * m->BC[k * RMAX + j], sX[j * P + p], yv);
            }
            y[(((u64)b * T1 + k) * NHEADS + h) * P + p] = yv;
        }
        release_stage(empty + stg);
    }
}

// mamba2_pipe_step: the non-flush slots of a decode step (mamba2_replay_flush
// takes the others, before it); L is the window. Its last block moves the
// cursors.
#if WHOLE_REPLAY // the split module takes only the small step
extern "C" __global__ void __launch_bounds__(32 * (NCW + 1), PIPE_MINB) mamba2_pipe_step(MAMBA2_STEP_PARAMS)
{
    mamba2_pipe<false>(state, rcodes, rscales, rglobal, ringX, ringB, ringDt, ringA, hist, slots, nullptr, 1, x, B, C,
                       dt, y, A, dtb, D, dtMin, L, batch);
    step_done(hist, pending, done, slots, batch, L);
}
#endif

// mamba2_pipe_verify: the verify of slots with no early fold
// (mamba2_replay_verify_fold takes the others); R is the ring size.
#if WHOLE_REPLAY // the split module takes only the small step
extern "C" __global__ void __launch_bounds__(32 * (NCW + 1), PIPE_MINB)
mamba2_pipe_verify(ST* state, u8* rcodes, u8* rscales, float* rglobal, ring_e* __restrict__ ringX,
                   ring_e* __restrict__ ringB, float* __restrict__ ringDt, float* __restrict__ ringA,
                   const int* __restrict__ hist, const int* __restrict__ slots, const int* __restrict__ counts, int T,
                   const float* __restrict__ x, const float* __restrict__ B, const float* __restrict__ C,
                   const float* __restrict__ dt, float* __restrict__ y, const double* __restrict__ A,
                   const double* __restrict__ dtb, const float* __restrict__ D, float dtMin, int R, int batch)
{
    mamba2_pipe<true>(state, rcodes, rscales, rglobal, ringX, ringB, ringDt, ringA, hist, slots, counts, T, x, B, C,
                      dt, y, A, dtb, D, dtMin, R, batch);
}
#endif
#endif

// ---- the group-major non-flush step ----
//
// mamba2_group_step computes what mamba2_step<0> computes for the slots that
// do not flush, bit for bit (but for a stream on the tensor cores, GROUP_TC
// below), with one block per (group, batch row) instead of one per (head,
// batch row): the HPG heads of a group share C, the ring's B rows and the B_j
// . C dots, so the block reads and forms them once, and the heads' HPG*P state
// rows (contiguous in the checkpoint and the read copy) are one stream that
// every thread reads GPF passes ahead, with its columns of C in registers, the
// way the in-place baselines stream theirs. the per-head kernel (one 20 KB bf16 matrix per
// block) and the pipelined one (one item per consumer group at a time) paid a chain of round
// trips and barriers per head; here a block pays it once per HPG heads and
// streams meanwhile.
//
// Order of work for an item: the ring's B rows and per-head scalars by
// cp.async (one group), its x rows into dynamic shared memory (a second),
// the stream and its row dots (its first GPF passes were issued during the
// previous item), then the next item's cursor, first passes and C, and
// only then, while those are in flight, the decay weights, B_j . C and y,
// the current token going to the ring on the way (GROUP_EARLY's B row and
// scalars after the stream, its x rows with y). A flush slot's item skips
// all but the next item's loads (mamba2_replay_flush took it).
//
// Defines from the host: GNT (threads per block), GROUP_EARLY. GPF
// (passes in flight per thread) and GMINB (blocks per SM for the register
// bound) follow from the module.
#ifdef GNT
#define GROWS (HPG * P)
typedef CMap<GVEC, N, GROWS, GNT / 32> GM;
typedef GRaw<GM> GR;
#define GMINB (512 / GNT)
#define GPF GPF_DEFAULT(GM::CPL)
// GROUP_TC=1 (mamba2Module sets it for nvfp4 and e4m3 matrices on
// sm_89+): the stream's dots on the tensor cores (gt_stream,
// replay_common.cu), C as B's columns 0-1, two strips in flight a warp.
// Not group_dots' order of operations: this step is not bit for bit the per-head
// kernels' (the tests compare it within a bound).
#if GT_OK && GROUP_TC && P % 16 == 0
#define MTC_ON 1
#else
#define MTC_ON 0
#endif

// GROUP_EARLY=1 (mamba2Module sets it where the group step's tables fit): the
// group step asks for an item's per-token inputs with the ring's first
// cp.async group, before its stream, and uses them after it: the current
// token's B row (sBt, appended to sB and the ring after the stream), the
// heads' dt, dt_bias and A (the float64 delta / decay chain after the stream,
// on the threads that form the decay weights, beside B_j . C) and D (the
// outputs). Without it each is a global load that its use waits for where it
// is asked: the B row's append (a round trip), the chain's dt and dt_bias (a
// second) and its A, asked for halfway through the chain (a third), all before
// the stream's first barrier, and D in the output loop (a fourth, after the
// stream): cuobjdump of Nano's fp32 group step shows each load's first use a
// few instructions after it. Meanwhile the block has only its first GPF passes
// in flight (32 KB of a Nano fp32 item's 491, issued during the previous
// item), so each wait is streaming lost; at ~1 us a loaded round trip against
// ~35 us an item (Nano fp32, batch 256) or ~21 (bf16), three or four of them
// are several percent of the step. The same values and operations in the same
// order: bit for bit. H200, batch 256, against GROUP_EARLY=0: non-flush Nano
// fp32 270 -> 263 us, bf16 163 -> 156, Super 287 -> 279, 172 -> 163; with an
// nvfp4 read copy 112 -> 106 (Nano), 117-118 -> 109-110 (Super); windows 1-4%
// faster. mamba2Module sets it where the group step's tables still fit
// (mamba2GroupPlan).
//
// The same for the group verify (its drafts' B and C rows, dt, dt_bias,
// A and D by cp.async before its cursor, the chain after the ring's wait)
// measured slower: verify Nano fp32 459 -> 475 us, bf16 296 -> 306, Super
// 486 -> 491, 319 -> 326 (all T drafts' rows copied whatever the count,
// and the chain no longer beside the drafts' loads).
#ifndef GROUP_EARLY
#define GROUP_EARLY 0
#endif

// group_scalars forms a token's delta and decay for one head from its dt,
// the head's dt_bias and A (float64, mamba2_step's order) and writes both
// to the item's tables (del, dec: the head's row at the token's entry) and
// to the ring (rs: rs_at of the slot, head and entry).
__device__ __forceinline__ void group_scalars(float dtv, double dtbv, double av, float dtMin, float* del, float* dec,
                                              float* __restrict__ ringDt, float* __restrict__ ringA, u64 rs)
{
    const float delta = fmaxf((float)softplus_d((double)dtv + dtbv), dtMin);
    const float a = (float)exp((double)delta * av);
    *del = delta;
    *dec = a;
    ringDt[rs] = delta;
    ringA[rs] = a;
}

// group_x loads the current token's x rows of group g, batch row b (xc[k]:
// output tid + k*GNT).
template <int OUTS>
__device__ __forceinline__ void group_x(const float* x, int b, int g, float (&xc)[OUTS])
{
    const float* xt = x + ((u64)b * NHEADS + g * HPG) * P;
#pragma unroll
    for (int k = 0; k < OUTS; k++) {
        const int o = threadIdx.x + k * GNT;
        xc[k] = o < GROWS ? xt[o] : 0.0f;
    }
}


// mamba2_group_step: persistent blocks take the items (group g, batch row
// b), i = g + NGROUPS*b, in turn (i = blockIdx.x + k*gridDim.x). While an
// item's y is formed, the next item's cursors, first passes and C are
// already in flight, so a block's stream does not stop between items.
#if WHOLE_REPLAY // the split module takes only the small step
extern "C" __global__ void __launch_bounds__(GNT, GMINB) mamba2_group_step(MAMBA2_STEP_PARAMS)
{
    __shared__ __align__(16) float sC[N];
    // The ring's B rows as the ring keeps them (a bf16 ring's codes, by
    // cp.async, widened where dot_pairs reads them), then the current
    // token's, which round_bf16 rounded (so a bf16 code holds it exactly).
    __shared__ __align__(16) ring_e sB[RMAX * N];
    __shared__ float sDot[GROWS];
    __shared__ float sW[HPG * RMAX];
    __shared__ float sDelta[HPG * RMAX];
    __shared__ float sDecay[HPG * RMAX];
    __shared__ float sBC[RMAX];
    __shared__ float sE[HPG];
    __shared__ float sGs[HPG];
    __shared__ float sLut[16];
#if GROUP_EARLY
    // An item's per-token inputs (GROUP_EARLY): the current token's B row,
    // the heads' dt, dt_bias, A and D, by cp.async with the ring's.
    __shared__ __align__(16) float sBt[N];
    __shared__ double sDtb[HPG], sA[HPG];
    __shared__ float sDt[HPG], sD[HPG];
#endif
    // The ring's x rows of the group, entries [0, xcap), as the ring keeps
    // them (a bf16 ring's codes copied as they are, widened where read): as
    // many as the launch's dynamic shared memory holds (the host sizes it
    // for a whole window); entries past it are read from global memory.
    extern __shared__ __align__(16) ring_e sXr[];
    static_assert(HPG <= GNT, "one thread per head of a group");

    const int tid = threadIdx.x, items = batch * NGROUPS;
    constexpr int OUTS = (GROWS + GNT - 1) / GNT;
    const int xcap = (int)(dynamic_smem_bytes() / (u32)(GROWS * sizeof(ring_e)));
#if READ_FMT == FMT_NVFP4 && !MTC_ON
    init_e2m1_lut(sLut);
#endif

    // The first item: inputs, cursors, scale and first passes.
    int i = blockIdx.x, g = i % NGROUPS, b = i / NGROUPS, s = 0, n = L;
    float xc[OUTS], gs = 1.0f;
#if MTC_ON
    GTVec bv; // C's B operands (gt_vectors)
    GTRaw raw[2]; // strips in flight a warp (as gdn_group_step's)
#else
    float cr[1][GM::CPL][GVEC];
    GR raw[GPF];
#endif
    if (i < items) {
        group_x(x, b, g, xc);
#if MTC_ON
        gt_vectors<1>(C + ((u64)b * NGROUPS + g) * N, N, bv);
#else
        group_vec<GM>(C + ((u64)b * NGROUPS + g) * N, cr[0]);
#endif
        s = slots[b];
        const void* mat;
        const u8* scl;
#if MTC_ON
        gt_start<GROWS>(state, rcodes, rscales, (u64)s * NHEADS + g * HPG, mat, scl, raw);
#else
        group_start<GM, GROWS>(state, rcodes, rscales, (u64)s * NHEADS + g * HPG, mat, scl, raw);
#endif
        n = hist[s];
        gs = group_scale<HPG>(state, rglobal, (u64)s * NHEADS + g * HPG, tid);
    }
#if OVERLAP
    // The item queue, one ahead: the next item is known at an item's start
    // (its cursor and first passes go out during this one's y).
    __shared__ int sQ[2];
    int nextQ = queue_start(sQ, done + 3), it = 0;
#endif
    while (i < items) {
#if OVERLAP
        const int h0 = g * HPG, next = nextQ;
        const int asked = queue_ask(done + 3);
#else
        const int h0 = g * HPG, next = i + gridDim.x;
#endif
        const int gN = next % NGROUPS, bN = next / NGROUPS;
        const int sN = next < items ? slots[bN] : 0; // needed after the stream
        const bool nonflush = n + 1 < L;             // else mamba2_replay_flush took the slot
        const u64 m0 = (u64)s * NHEADS + h0;
        const ring_e* xr = ringX + (u64)h0 * P;
        const int xs = min(n, xcap); // ring x entries staged in shared memory
        if (nonflush) {
            // The ring straight to shared memory: B rows, the heads' delta
            // and decay (one cp.async group), then the x rows (a second).
            const float* Ct = C + ((u64)b * NGROUPS + g) * N;
            for (int q = tid; q < N / 4; q += GNT) {
                cp_async16(sC + 4 * q, Ct + 4 * q);
            }
            cp_rows_as_kept<N>(sB, ringB + (ring_at(s, 0) * NGROUPS + g) * N, NGROUPS * N, n, tid, GNT);
            cp_table(sDelta, RMAX, ringDt + rs_at(s, h0, 0), RMAXP, HPG, n, tid, GNT);
            cp_table(sDecay, RMAX, ringA + rs_at(s, h0, 0), RMAXP, HPG, n, tid, GNT);
#if GROUP_EARLY
            // This item's per-token inputs with the ring's first group; each
            // thread reads after the stream what it copied (its wait makes
            // its own copies visible to it).
            cp_rows<N>(sBt, B + ((u64)b * NGROUPS + g) * N, 0, 1, tid, GNT);
            if (tid < HPG) {
                const int h = h0 + tid;
                cp_async4(sDt + tid, dt + (u64)b * NHEADS + h);
                cp_async8(sDtb + tid, dtb + h);
                cp_async8(sA + tid, A + h);
                cp_async4(sD + tid, D + h);
            }
#endif
            cp_async_commit();
            cp_rows_as_kept<GROWS>(sXr, xr + ring_at(s, 0) * (NHEADS * P), NHEADS * P, xs, tid, GNT);
            cp_async_commit();
#if !GROUP_EARLY
            // The current token appended to the ring.
            const float* Bt = B + ((u64)b * NGROUPS + g) * N;
            for (int e = tid; e < N; e += GNT) {
                const float v = Bt[e];
                ring_st(sB, n * N + e, v);
                ring_st(ringB + (ring_at(s, n) * NGROUPS + g) * N + e, v);
            }
#endif
            if (tid < HPG) {
#if !GROUP_EARLY
                const int h = h0 + tid;
                group_scalars(dt[(u64)b * NHEADS + h], dtb[h], A[h], dtMin, sDelta + tid * RMAX + n,
                              sDecay + tid * RMAX + n, ringDt, ringA, rs_at(s, h, n));
#endif
                sGs[tid] = gs;
            }
            __syncthreads(); // sGs, sLut
            // The stream: pass p's loads were issued GPF passes before its
            // dots (the first GPF during the previous item).
            const void* mat;
            const u8* scl;
            group_mat(state, rcodes, rscales, m0, mat, scl);
#if MTC_ON
            gt_stream<GROWS, P, 1>(mat, scl, raw, bv, sGs, sDot);
#else
            for (int base = 0; base < GM::PASSES; base += GPF) {
#pragma unroll
                for (int k = 0; k < GPF; k++) {
                    const int pass = base + k;
                    if (pass < GM::PASSES) {
                        group_dots<GM, GROWS, P, 1>(raw[k], pass, cr, sGs, sLut, sDot);
                        if (pass + GPF < GM::PASSES) {
                            group_load<GM, GROWS>(mat, scl, pass + GPF, raw[k]);
                        }
                    }
                }
            }
#endif
        }
        // The next item's cursor, first passes, C and scale, in flight while
        // this item's y is formed.
        int nN = L;
        float gsN = 1.0f;
        if (next < items) {
            nN = hist[sN];
            const u64 m0N = (u64)sN * NHEADS + gN * HPG;
            const void* mat;
            const u8* scl;
#if MTC_ON
            gt_start<GROWS>(state, rcodes, rscales, m0N, mat, scl, raw);
            gt_vectors<1>(C + ((u64)bN * NGROUPS + gN) * N, N, bv);
#else
            group_start<GM, GROWS>(state, rcodes, rscales, m0N, mat, scl, raw);
            group_vec<GM>(C + ((u64)bN * NGROUPS + gN) * N, cr[0]);
#endif
            gsN = group_scale<HPG>(state, rglobal, m0N, tid);
        }
        if (nonflush) {
            cp_async_wait_group<1>();
#if GROUP_EARLY
            // The current token's B row appended, from what this thread
            // copied before the stream (cp_rows' units: four floats a
            // thread where N allows; its wait made them visible to it).
            {
                constexpr int U = N % 4 == 0 ? 4 : 1;
                for (int q = tid; q < N / U; q += GNT) {
#pragma unroll
                    for (int k = 0; k < U; k++) {
                        const int e = U * q + k;
                        const float v = sBt[e];
                        ring_st(sB, n * N + e, v);
                        ring_st(ringB + (ring_at(s, n) * NGROUPS + g) * N + e, v);
                    }
                }
            }
#endif
            __syncthreads();
            // Decay products (float64, mamba2_step's order), one thread per
            // head from the last warp down, while the first warps form
            // B_j . C for the group, eight lanes per entry. With
            // GROUP_EARLY each of those threads first forms its head's
            // delta and decay from the copies (the float64 chain beside
            // the dots, not before the barrier), which its weights then
            // read in its own program order.
            const int t = n + 1;
            for (int hh = GNT - 1 - tid; hh < HPG; hh += GNT) {
#if GROUP_EARLY
                group_scalars(sDt[hh], sDtb[hh], sA[hh], dtMin, sDelta + hh * RMAX + n, sDecay + hh * RMAX + n,
                              ringDt, ringA, rs_at(s, h0 + hh, n));
#endif
                sE[hh] = decay_weights(sDelta + hh * RMAX, sDecay + hh * RMAX, t, sW + hh * RMAX);
            }
            dot_pairs(
                t, N, tid, GNT, [&](int j) -> const ring_e* { return sB + j * N; },
                [&](int) { return (const float*)sC; }, [&](int j, float v) { sBC[j] = v; });
            cp_async_wait_all();
            __syncthreads();
            // y = e * (S0 . C) + D x + sum_j W_j (B_j . C) x_j (mamba2_step's
            // order), the x rows from shared memory where staged.
#pragma unroll
            for (int k = 0; k < OUTS; k++) {
                const int o = tid + k * GNT;
                if (o < GROWS) {
                    const int hh = o / P;
#if GROUP_EARLY
                    float yv = sE[hh] * sDot[o] + sD[hh] * xc[k];
#else
                    float yv = sE[hh] * sDot[o] + D[h0 + hh] * xc[k];
#endif
                    for (int j = 0; j < xs; j++) {
                        yv = fmaf(sW[hh * RMAX + j] * sBC[j], ring_ld(&sXr[j * GROWS + o]), yv);
                    }
                    for (int j = xs; j < n; j++) {
                        yv = fmaf(sW[hh * RMAX + j] * sBC[j], ring_ld(xr + ring_at(s, j) * (NHEADS * P) + o), yv);
                    }
                    yv = fmaf(sW[hh * RMAX + n] * sBC[n], xc[k], yv);
                    y[((u64)b * NHEADS + h0) * P + o] = yv;
                    // The current token's x to the ring here, not before the
                    // stream: xc is the previous item's last load (group_x),
                    // and a store before the stream's barrier waited for it.
                    // Nothing in this kernel reads entry n of a non-flush
                    // slot's ring.
                    ring_st(ringX + (ring_at(s, n) * NHEADS + h0) * P + o, xc[k]);
                }
            }
        }
        if (next < items) {
            group_x(x, bN, gN, xc);
        }
#if OVERLAP
        queue_put(sQ, it, asked);
#endif
        __syncthreads(); // this item's tables are read before the next item's gathers
#if OVERLAP
        nextQ = sQ[it & 1];
        it++;
#endif
        i = next;
        g = gN;
        b = bN;
        s = sN;
        n = nN;
        gs = gsN;
    }
    step_done(hist, pending, done, slots, batch, L);
}
#endif

// ---- the group verify ----
//
// mamba2_group_verify computes what mamba2_pipe_verify (and the per-head kernel's
// mamba2_replay_verify) compute for the slots with no early fold, bit for
// bit, with one block per (group, batch row) like mamba2_group_step: the
// group's state rows are read once for the cnt drafts' C_k (TMAX vectors in
// registers), B_j . C_k is formed once per group, the decay products once
// per head. Blocks take items in turn, each a call that is not inlined.
// The Go side takes it from two items per SM (groupStep.verifyMin; below
// that the pipelined verify spreads the heads over more blocks).
#if TMAX > 1
// GVTC_ON: the stream on the tensor cores (VERIFY_TC; gtw_stream in
// replay_common.cu), the drafts' C as B's columns. Its sums are not
// mamba2_pipe_verify's order of operations.
#if GT_OK && VERIFY_TC && P % 16 == 0 && TMAX <= 8
#define GVTC_ON 1
// sB: the ring's B rows, then the tensor cores' operands (gtw_vectors)
#define GVB_FLOATS (RMAX * N > GTW_FLOATS ? RMAX * N : GTW_FLOATS)
#else
#define GVTC_ON 0
#define GVB_FLOATS (RMAX * N)
#endif
__device__ __noinline__ void mamba2_group_verify_item(ST* state, u8* rcodes, u8* rscales, float* rglobal,
                                                      ring_e* __restrict__ ringX, ring_e* __restrict__ ringB,
                                                      float* __restrict__ ringDt, float* __restrict__ ringA,
                                                      const int* __restrict__ hist, const int* __restrict__ slots,
                                                      const int* __restrict__ counts, int T,
                                                      const float* __restrict__ x, const float* __restrict__ B,
                                                      const float* __restrict__ C, const float* __restrict__ dt,
                                                      float* __restrict__ y, const double* __restrict__ A,
                                                      const double* __restrict__ dtb, const float* __restrict__ D,
                                                      float dtMin, int R, int g, int b)
{
    __shared__ __align__(16) float sCk[TMAX * N];
    // The ring's B rows, then the drafts', as the ring keeps them (sBr: a
    // bf16 ring's codes, by cp.async, widened where dot_pairs reads them;
    // the drafts' rows round_bf16 rounded, so a code holds each exactly);
    // then (GVTC_ON) the tensor cores' operands, floats.
    __shared__ __align__(16) float sB[GVB_FLOATS];
    ring_e* const sBr = reinterpret_cast<ring_e*>(sB);
    __shared__ float sDot[TMAX * GROWS];          // S0 . C_k
    // per head: W[j][k] = Delta_j prod_{j<m<=n+k} a_m, then times B_j . C_k
    __shared__ __align__(16) float sW[HPG * RMAX * TMAX];
    __shared__ float sBC[TMAX * RMAX]; // B_j . C_k
    __shared__ float sE[HPG * TMAX];              // per head: prod_{m<=n+k} a_m
    __shared__ float sDelta[HPG * RMAX];
    __shared__ float sDecay[HPG * RMAX];
    __shared__ float sGs[HPG];
    __shared__ float sLut[16];
    extern __shared__ __align__(16) ring_e sXr[]; // the ring's x rows, entries [0, xcap), as the ring keeps them

    const int tid = threadIdx.x, h0 = g * HPG;
    const int s = slots[b];
    const u64 m0 = (u64)s * NHEADS + h0;
    const void* mat;
    const u8* scl;
#if GVTC_ON
    GTRaw raw[2]; // passes in flight: strips (nvfp4, e4m3), half strips (bf16)
    gt_start<GROWS>(state, rcodes, rscales, m0, mat, scl, raw);
#else
    GR raw[GPF];
    group_start<GM, GROWS>(state, rcodes, rscales, m0, mat, scl, raw);
#endif
    int n = hist[s];
    const int cnt = counts ? counts[b] : T;
    // VFOLD_DOTS: mamba2_fold_pipe wrote a folding slot's S'_p . C_k to y.
    const bool foldDots = VFOLD_DOTS && FOLDS_EARLY(n, cnt, R);
    if (FOLDS_EARLY(n, cnt, R)) {
        n = 0; // the early folds folded the slot's history: a new checkpoint, the drafts from entry 0
    }
    const int ne = n + cnt;
    const int xs = min(n, (int)(dynamic_smem_bytes() / (u32)(GROWS * sizeof(ring_e))));
    const ring_e* xr = ringX + (u64)h0 * P;
    // The ring: B rows and the heads' delta / decay (one cp.async group),
    // then the x rows (a second, waited for after the stream).
    cp_rows_as_kept<N>(sBr, ringB + (ring_at(s, 0) * NGROUPS + g) * N, NGROUPS * N, n, tid, GNT);
    cp_table(sDelta, RMAX, ringDt + rs_at(s, h0, 0), RMAXP, HPG, n, tid, GNT);
    cp_table(sDecay, RMAX, ringA + rs_at(s, h0, 0), RMAXP, HPG, n, tid, GNT);
    cp_async_commit();
    cp_rows_as_kept<GROWS>(sXr, xr + ring_at(s, 0) * (NHEADS * P), NHEADS * P, xs, tid, GNT);
    cp_async_commit();
    // The drafts appended to the ring at entries n.., their C and B kept
    // (their x rows go to the ring with y, below).
    load_then_store<(TMAX * N + GNT - 1) / GNT, GNT>(
        cnt * N,
        [&](int idx) {
            const u64 e = (((u64)b * T + idx / N) * NGROUPS + g) * N + idx % N;
            return make_float2(B[e], C[e]);
        },
        [&](int idx, float2 bc) {
            const int k = idx / N, e = idx % N;
            ring_st(sBr, (n + k) * N + e, bc.x);
            ring_st(ringB + (ring_at(s, n + k) * NGROUPS + g) * N + e, bc.x);
            sCk[idx] = bc.y;
        });
    for (int idx = tid; idx < HPG * cnt; idx += GNT) {
        const int hh = idx / cnt, k = idx % cnt, h = h0 + hh;
        group_scalars(dt[((u64)b * T + k) * NHEADS + h], dtb[h], A[h], dtMin, sDelta + hh * RMAX + n + k,
                      sDecay + hh * RMAX + n + k, ringDt, ringA, rs_at(s, h, n + k));
    }
    if (tid < HPG) {
        sGs[tid] = group_scale<HPG>(state, rglobal, m0, tid);
    }
#if READ_FMT == FMT_NVFP4 && !GVTC_ON
    init_e2m1_lut(sLut);
#endif
    cp_async_wait_group<1>();
    __syncthreads();
    // Decay weights (mamba2_pipe's products, in its order), per head and
    // draft, on the last threads: one running suffix product a (head, draft),
    // from a_{n+k} down, is the same float64 products in the same order as
    // each weight's own loop (which took 9% of the verify's stall samples,
    // Nano bf16). B_j . C_k for the group, eight lanes per pair.
    for (int idx = GNT - 1 - tid; idx < HPG * cnt; idx += GNT) {
        const int hh = idx / cnt, k = idx % cnt;
        const float* sA = sDecay + hh * RMAX;
        double suf = 1.0;
        for (int j = n + k; j >= 0; j--) {
            sW[(hh * RMAX + j) * TMAX + k] = (float)((double)sDelta[hh * RMAX + j] * suf);
            suf *= (double)sA[j];
        }
        sE[hh * TMAX + k] = (float)suf;
    }
    dot_pairs(
        cnt * ne, N, tid, GNT,
        [&](int pr) -> const ring_e* { return pr % ne <= n + pr / ne ? sBr + (pr % ne) * N : nullptr; },
        [&](int pr) -> const float* { return sCk + (pr / ne) * N; },
        [&](int pr, float v) { sBC[(pr / ne) * RMAX + pr % ne] = v; });
    // The outputs' ring weights W[j][k] (B_j . C_k), once an item: every
    // output row formed the same float product (bit for bit the same y),
    // two shared loads and a multiply a term (13% of the stall samples).
    auto weights = [&]() {
        for (int idx = tid; idx < HPG * ne * cnt; idx += GNT) {
            const int hh = idx / (ne * cnt), j = idx / cnt % ne, k = idx % cnt;
            if (j <= n + k) {
                sW[(hh * RMAX + j) * TMAX + k] *= sBC[k * RMAX + j];
            }
        }
    };
    // The stream: S0 . C_k for the drafts (vectors past cnt are zero).
#if GVTC_ON
    // The operands where the ring's B rows were, once the dots read them.
    __syncthreads();
    gtw_vectors(sCk, N, cnt, sB);
    weights();
    __syncthreads();
    if (!foldDots) {
        gtw_stream<GROWS, P>(mat, scl, raw, sB, cnt, sGs, sDot);
    }
#else
    __syncthreads(); // dot_pairs' B_j . C_k
    weights();
    float vr[TMAX][GM::CPL][GVEC];
#pragma unroll
    for (int k = 0; k < TMAX; k++) {
        if (k < cnt) {
            group_vec<GM>(sCk + k * N, vr[k]);
        } else {
#pragma unroll
            for (int c = 0; c < GM::CPL; c++) {
#pragma unroll
                for (int e = 0; e < GVEC; e++) {
                    vr[k][c][e] = 0.0f;
                }
            }
        }
    }
#pragma unroll 1
    for (int base = 0; base < (foldDots ? 0 : GM::PASSES); base += GPF) {
#pragma unroll
        for (int p = 0; p < GPF; p++) {
            const int pass = base + p;
            if (pass < GM::PASSES) {
                group_dots<GM, GROWS, P, TMAX>(raw[p], pass, vr, sGs, sLut, sDot);
                if (pass + GPF < GM::PASSES) {
                    group_load<GM, GROWS>(mat, scl, pass + GPF, raw[p]);
                }
            }
        }
    }
#endif
    if (foldDots) {
        // The fold's dots in place of the stream's (its first passes,
        // asked for above, go unused).
        for (int i = tid; i < cnt * GROWS; i += GNT) {
            const int k = i / GROWS, o = i % GROWS;
            sDot[k * GROWS + o] = y[(((u64)b * T + k) * NHEADS + h0) * P + o];
        }
    }
    // The drafts' x rows, a thread's rows for every draft, asked for at once
    // (they go to the ring below, and into y): one round trip per item.
    constexpr int OUTS = (GROWS + GNT - 1) / GNT;
    const float* xd = x + ((u64)b * T * NHEADS + h0) * P; // draft k's rows at k * NHEADS * P
    float xdk[OUTS][TMAX];
#pragma unroll
    for (int u = 0; u < OUTS; u++) {
        const int o = tid + u * GNT;
#pragma unroll
        for (int k = 0; k < TMAX; k++) {
            xdk[u][k] = o < GROWS && k < cnt ? xd[(u64)k * (NHEADS * P) + o] : 0.0f;
        }
    }
    cp_async_wait_all();
    __syncthreads();
    // y (mamba2_pipe's order): x_j from the ring (shared memory where
    // staged) for j < n, the drafts' inputs for j >= n. A thread takes its
    // rows o for every draft, so each x_j is read once for the cnt sums
    // (each sum still adds its terms in ascending j).
#pragma unroll
    for (int u = 0; u < OUTS; u++) {
        const int o = tid + u * GNT;
        if (o >= GROWS) {
            continue;
        }
        const int hh = o / P;
        const float* W = sW + hh * RMAX * TMAX;
        float yv[TMAX];
#pragma unroll
        for (int k = 0; k < TMAX; k++) {
            if (k < cnt) {
                yv[k] = sE[hh * TMAX + k] * sDot[k * GROWS + o] + D[h0 + hh] * xdk[u][k];
                ring_st(ringX + (ring_at(s, n + k) * NHEADS + h0) * P + o, xdk[u][k]);
            }
        }
        auto term = [&](int j, float xj) {
#pragma unroll
            for (int k = 0; k < TMAX; k++) {
                if (k < cnt && j <= n + k) {
                    yv[k] = fmaf(W[j * TMAX + k], xj, yv[k]);
                }
            }
        };
        for (int j = 0; j < xs; j++) {
            term(j, ring_ld(&sXr[j * GROWS + o]));
        }
#pragma unroll 4
        for (int j = xs; j < n; j++) {
            term(j, ring_ld(xr + ring_at(s, j) * (NHEADS * P) + o));
        }
#pragma unroll
        for (int e = 0; e < TMAX; e++) {
            if (e < cnt) {
                term(n + e, xdk[u][e]);
            }
        }
#pragma unroll
        for (int k = 0; k < TMAX; k++) {
            if (k < cnt) {
                y[(((u64)b * T + k) * NHEADS + h0) * P + o] = yv[k];
            }
        }
    }
}

#if WHOLE_REPLAY // the split module takes only the small step
extern "C" __global__ void __launch_bounds__(GNT, GMINB)
mamba2_group_verify(ST* state, u8* rcodes, u8* rscales, float* rglobal, ring_e* __restrict__ ringX,
                    ring_e* __restrict__ ringB, float* __restrict__ ringDt, float* __restrict__ ringA,
                    const int* __restrict__ hist, const int* __restrict__ slots, const int* __restrict__ counts, int T,
                    const float* __restrict__ x, const float* __restrict__ B, const float* __restrict__ C,
                    const float* __restrict__ dt, float* __restrict__ y, const double* __restrict__ A,
                    const double* __restrict__ dtb, const float* __restrict__ D, float dtMin, int R,
                    int batch)
{
    for (int i = blockIdx.x; i < batch * NGROUPS; i += gridDim.x) {
        mamba2_group_verify_item(state, rcodes, rscales, rglobal, ringX, ringB, ringDt, ringA, hist, slots, counts, T, x,
                                 B, C, dt, y, A, dtb, D, dtMin, R, i % NGROUPS, i / NGROUPS);
        __syncthreads(); // the item's tables are read before the next one's
    }
}
#endif
#endif
#endif

// ---- the pipelined flush and early fold ----
//
// mamba2_flush_pipe flushes the slots whose window fills at this step (what
// mamba2_replay_flush does, bit for bit: mamba2_step<1>'s order of
// operations), mamba2_fold_pipe folds the history of the slots that fold early
// in a verify (mamba2_replay_fold_items', mamba2_verify_impl<2>'s order), on
// the pipelined folds' skeleton (replay_common.cu, fold_produce): a stage
// holds the checkpoint in the state format, the x and B rows of the t entries
// folded (the ring's, then the current token's for a flush) and C. The
// producer's lane of an item also forms its decay weights (decay_weights, the
// float64 products) from the ring's delta and decay rows, so the consumers go
// from the stage's full barrier straight into mamba2_fold, each coefficient
// W_j x_j[p] formed where the rank update needs it (the same float32 product
// as the coefficient table's). (With the weights formed by one consumer thread
// and a coefficient table, Nano's aligned flush took 1063 us against the
// work_items kernel's 758.)
#ifdef FNSTAGE
// VFOLD_DOTS reads the folded matrix as an fp32 checkpoint stores it (the
// host sets it for those alone).
#if VFOLD_DOTS && (STATE_FMT != FMT_F32 || READ_FMT != FMT_F32 || TMAX < 2)
#error "VFOLD_DOTS: fp32 checkpoints without a read copy, and drafts"
#endif
#define FS_X (((SMAT_STATE_BYTES) + 15) / 16 * 16)
#define FS_B (FS_X + RMAX * P * 4)
#define FS_C (FS_B + RMAX * M2_BROW * 4)
#define FS_END (FS_C + (VFOLD_DOTS ? TMAX : 1) * N * 4)
static_assert(FS_END <= FSTAGE_BYTES, "fold stage layout larger than FSTAGE_BYTES");
// The stage's B rows and C swizzled for mamba2_fold's loads (its BSW; the
// producer moves ring pieces by cp.async, which can swizzle where a bulk
// copy cannot): M2_C_SWZ, C's and mamba2_fold's B pieces' mask;
// mamba2_fold_tc reads B from padded rows, unswizzled.
#define M2_C_SWZ (SM::VEC / 4 - 1)
#define M2_B_SWZ (M2_TC_FOLD_ON ? 0 : M2_C_SWZ)

// M2Fold is one item of a pipelined fold: slot, history, batch row, head,
// entries folded (fold_locate's), the fp8 checkpoint's scale, D[h], the decay
// product E and the weights W_j of the entries folded.
struct M2Fold {
    int s, n, b, h, t;
    float sc, dh, e;
    float w[RMAX];
#if VFOLD_DOTS
    int k; // the verify's drafts (last, so the other fields keep their places)
#endif
};

// m2_drafts is a verify fold item's drafts whose dots it forms (VFOLD_DOTS),
// else 0.
__device__ __forceinline__ int m2_drafts(const M2Fold& m)
{
#if VFOLD_DOTS
    return m.k;
#else
    return 0;
#endif
}

// m2_parts_sum is row p's dot from its column parts' partial dots
// (d[part * P + p], M2_TC_FOLD), in part order.
__device__ __forceinline__ float m2_parts_sum(const float* d, int p)
{
    float dot = d[p];
#pragma unroll
    for (int part = 1; part < M2_TC_PARTS; part++) {
        dot += d[part * P + p];
    }
    return dot;
}

template <bool FLUSH>
__device__ __forceinline__ void
mamba2_fold_pipe_impl(ST* state, u8* rcodes, u8* rscales, float* rglobal, const ring_e* __restrict__ ringX,
                      const ring_e* __restrict__ ringB, const float* __restrict__ ringDt, const float* __restrict__ ringA,
                      const int* __restrict__ hist, const int* __restrict__ slots, const int* __restrict__ counts, int T,
                      const float* __restrict__ x, const float* __restrict__ B, const float* __restrict__ C,
                      const float* __restrict__ dt, float* __restrict__ y, const double* __restrict__ A,
                      const double* __restrict__ dtb, const float* __restrict__ D, float dtMin, int L, int batch,
                      int& folded)
{
    extern __shared__ __align__(128) unsigned char dsm[];
    // A partial dot a column part (M2_TC_FOLD), a vector (VFOLD_DOTS: the
    // drafts' C_k): sDot[(k * M2_TC_PARTS + part) * P + p].
    constexpr int NOUT = FLUSH || !VFOLD_DOTS ? 1 : TMAX;
    __shared__ float sDot[P * M2_TC_PARTS * NOUT];
    __shared__ float sScratch[NWARPS];
    __shared__ M2Fold items[FNSTAGE];
    __shared__ u64 full[FNSTAGE], empty[FNSTAGE];
    fold_init(full, empty);
    if (threadIdx.x >= NT) {
        fold_produce(
            batch * NHEADS, items, dsm, full, empty,
            [&](int i, M2Fold& m) -> bool {
                const bool fold = fold_locate<FLUSH, NHEADS>(i, slots, hist, counts, T, L, m);
                if (fold) {
                    // The weights as mamba2_step<1> and mamba2_verify_impl
                    // form them, every ring scalar asked for at once.
                    float delta = 0.0f, a = 0.0f;
                    if (FLUSH) {
                        delta = fmaxf((float)softplus_d((double)dt[(u64)m.b * NHEADS + m.h] + dtb[m.h]), dtMin);
                        a = (float)exp((double)delta * A[m.h]);
                        m.dh = D[m.h];
                    }
                    float dl[RMAX], dc[RMAX];
#pragma unroll
                    for (int j = 0; j < RMAX; j++) {
                        dl[j] = dc[j] = 0.0f;
                        if (j < m.n) {
                            dl[j] = ringDt[rs_at(m.s, m.h, j)];
                            dc[j] = ringA[rs_at(m.s, m.h, j)];
                        } else if (FLUSH && j == m.n) {
                            dl[j] = delta;
                            dc[j] = a;
                        }
                    }
                    m.e = decay_weights(dl, dc, m.t, m.w);
                    m.sc = state_scale(state, (u64)m.s * NHEADS + m.h);
#if VFOLD_DOTS
                    m.k = FLUSH ? 0 : counts ? counts[m.b] : T;
#endif
                }
                return fold;
            },
            [&](const M2Fold& m) { return 1 + 2 * m.t + (FLUSH ? 1 : m2_drafts(m)); },
            [&](const M2Fold& m, unsigned char* sg, int ci) -> Piece {
                const int g = m.h / HPG;
                if (ci == 0) {
                    return Piece{sg, state + ((u64)m.s * NHEADS + m.h) * (P * N), SMAT_STATE_BYTES};
                }
                int c = ci - 1;
                // The ring's entries (widened from a bf16 ring), then the
                // current token's from the op.
                if (c < m.t) {
                    const void* src = c < m.n ? (const void*)(ringX + (ring_at(m.s, c) * NHEADS + m.h) * P)
                                              : (const void*)(x + ((u64)m.b * NHEADS + m.h) * P);
                    return Piece{sg + FS_X + c * P * 4, src, P * 4, 0, RING_BF16 && c < m.n};
                }
                c -= m.t;
                if (c < m.t) {
                    const void* src = c < m.n ? (const void*)(ringB + (ring_at(m.s, c) * NGROUPS + g) * N)
                                              : (const void*)(B + ((u64)m.b * NGROUPS + g) * N);
                    return Piece{sg + FS_B + c * M2_BROW * 4, src, N * 4, M2_B_SWZ, RING_BF16 && c < m.n};
                }
                if (FLUSH || !VFOLD_DOTS) { // the token's C (a flush)
                    return Piece{sg + FS_C, C + ((u64)m.b * NGROUPS + g) * N, N * 4, M2_C_SWZ};
                }
                c -= m.t; // draft c's C (VFOLD_DOTS)
                return Piece{sg + FS_C + c * N * 4, C + (((u64)m.b * T + c) * NGROUPS + g) * N, N * 4,
                             M2_C_SWZ};
            });
        return;
    }
    folded = fold_consume(items, dsm, full, empty, [&](const M2Fold& m, unsigned char* sg) {
        const float* sX = reinterpret_cast<const float*>(sg + FS_X);
        const int t = m.t;
        float* yh = y + ((u64)m.b * NHEADS + m.h) * P;
        // A flush's one vector (the token's C), a verify's drafts' C_k
        // (VFOLD_DOTS), or none.
        constexpr bool OUT = FLUSH || NOUT > 1;
        const int nout = FLUSH ? 1 : m2_drafts(m);
#if M2_TC_FOLD_ON
        mamba2_fold_tc<OUT, true, NOUT>(
            reinterpret_cast<const ST*>(sg), m.sc, state, rcodes, rscales, rglobal, (u64)m.s * NHEADS + m.h, t, m.e,
            reinterpret_cast<const float*>(sg + FS_B), [&](int p, int j) { return m.w[j] * sX[j * P + p]; },
            reinterpret_cast<const float*>(sg + FS_C),
            [&](int p, int part, int k, float d) { sDot[(k * M2_TC_PARTS + part) * P + p] = d; }, sScratch, nout);
#else
        mamba2_fold<OUT, true, NOUT>(
            reinterpret_cast<const ST*>(sg), m.sc, state, rcodes, rscales, rglobal, (u64)m.s * NHEADS + m.h, t, m.e,
            reinterpret_cast<const float*>(sg + FS_B), [&](int p, int j) { return m.w[j] * sX[j * P + p]; },
            reinterpret_cast<const float*>(sg + FS_C), [&](int p, int k, float d) { sDot[k * P + p] = d; }, sScratch,
            nout);
#endif
        if (NOUT > 1) {
            // The drafts' S'_p . C_k to y, where the group verify takes
            // them (its item of this slot reads no state); the second
            // barrier as the flush's below.
            cta_sync();
            for (int i = threadIdx.x; i < nout * P; i += NT) {
                const int k = i / P, p = i % P;
                y[(((u64)m.b * T + k) * NHEADS + m.h) * P + p] = m2_parts_sum(sDot + k * M2_TC_PARTS * P, p);
            }
            cta_sync();
        }
        if (FLUSH) {
            // The fold's row dots to every thread; the second barrier keeps
            // the next item's fold from writing sDot before all are read.
            // (y written by the lane that holds each row's dot, with no
            // barrier between items, measured slower: bf16 aligned flush
            // 573 -> 604 us Nano, 578 -> 617 Super.)
            cta_sync();
            for (int p = threadIdx.x; p < P; p += NT) {
                yh[p] = m2_parts_sum(sDot, p) + m.dh * sX[m.n * P + p];
            }
            cta_sync();
        }
    });
}

// mamba2_flush_pipe: the flush of a decode step (in place of
// mamba2_replay_flush, before the non-flush kernel); L is the window.
// (gdn_flush_stream's FL_FEW here, a staggered step's few items on one
// block an SM beside the group step with OVERLAP, took the windows 2-7%
// slower at FL_FEW=8 and 16; at 4 a staggered step's 1536-2048 items did
// not count as few.)
#if WHOLE_REPLAY // the split module takes only the small step
extern "C" __global__ void __launch_bounds__(NT + 32, FMINB) mamba2_flush_pipe(MAMBA2_STEP_PARAMS)
{
    int folded;
    mamba2_fold_pipe_impl<true>(state, rcodes, rscales, rglobal, ringX, ringB, ringDt, ringA, hist, slots, nullptr, 1,
                                x, B, C, dt, y, A, dtb, D, dtMin, L, batch, folded);
    flush_done(hist, pending, done, slots, batch, L);
}
#endif

// mamba2_fold_pipe: a verify's early folds (in place of
// mamba2_replay_fold_items, before the group verify); R is the ring size.
#if WHOLE_REPLAY // the split module takes only the small step
extern "C" __global__ void __launch_bounds__(NT + 32, FMINB) mamba2_fold_pipe(MAMBA2_VERIFY_PARAMS, int batch)
{
    int folded;
    mamba2_fold_pipe_impl<false>(state, rcodes, rscales, rglobal, ringX, ringB, ringDt, ringA, hist, slots, counts, T,
                                 x, B, C, dt, y, A, dtb, D, dtMin, R, batch, folded);
}
#endif
#endif

// mamba2_prefill runs counts[b] (or T) consecutive inputs of slot slots[b]
// through the recurrence (the contract's Prefill): one CTA per (head,
// batch row) keeps the head's state in registers, steps a replay slot's
// pending ring entries first (their outputs were written when they were
// appended), then the inputs, PREFILL_CHUNK rows at a time through shared
// memory, each writing y = S.C + D x from the float32 state. Replay mode
// stores the checkpoint (and its read copy) once, at the end;
// baseline mode rounds the state after every input, as its step does
// (an fp32 state is stored once). prefill_done then moves the cursors.
#if PREFILL_MODULE
extern "C" __global__ void __launch_bounds__(NT)
    mamba2_prefill(ST* state, u8* rcodes, u8* rscales, float* rglobal, const ring_e* __restrict__ ringX,
                   const ring_e* __restrict__ ringB, const float* __restrict__ ringDt, const float* __restrict__ ringA,
                   const int* __restrict__ hist, const int* __restrict__ cur, int nb, int replay,
                   const int* __restrict__ slots, const int* __restrict__ counts, int T, const float* __restrict__ x,
                   const float* __restrict__ B, const float* __restrict__ C, const float* __restrict__ dt,
                   float* __restrict__ y, const double* __restrict__ A, const double* __restrict__ dtb,
                   const float* __restrict__ D, float dtMin)
{
    constexpr int NV = BVLEN(N); // a padded vector (bvpad)
    constexpr int KC = PREFILL_CHUNK;
    __shared__ __align__(16) float sB[KC * NV];
    __shared__ __align__(16) float sC[KC * NV];
    __shared__ float sX[KC * P];
    __shared__ float sDot[KC * P];
    __shared__ float sDelta[KC];
    __shared__ float sDecay[KC];
    __shared__ float sScratch[NWARPS];

    constexpr int VEC = SM::VEC;
    const int h = blockIdx.x, b = blockIdx.y, g = h / HPG;
    const int tid = threadIdx.x;
    const int s = slots[b];
    const int cnt = counts ? counts[b] : T;
    const int n = replay ? hist[s] : 0;
    const u64 mat = replay ? (u64)s * NHEADS + h : ((u64)s * nb + cur[s]) * NHEADS + h;
    const bool rounds = !replay && STATE_FMT != FMT_F32;
    float S[SM::PASSES][SM::CPL][VEC];
    load_state<SM>(state + mat * (P * N), state_scale(state, mat), S);
    const float dh = D[h];
    for (int k0 = -n; k0 < cnt; k0 += KC) {
        const int m = min(KC, cnt - k0);
        __syncthreads(); // the last chunk's rows are read
        if (tid < m) {
            const int k = k0 + tid;
            if (k < 0) {
                sDelta[tid] = ringDt[rs_at(s, h, n + k)];
                sDecay[tid] = ringA[rs_at(s, h, n + k)];
            } else {
                const float delta =
                    fmaxf((float)softplus_d((double)dt[((u64)b * T + k) * NHEADS + h] + dtb[h]), dtMin);
                sDelta[tid] = delta;
                sDecay[tid] = (float)exp((double)delta * A[h]);
            }
        }
        for (int idx = tid; idx < m * N; idx += NT) {
            const int kk = idx / N, i = idx % N, k = k0 + kk;
            if (k < 0) {
                sB[kk * NV + bvpad(i)] = ring_ld(ringB + (ring_at(s, n + k) * NGROUPS + g) * N + i);
            } else {
                sB[kk * NV + bvpad(i)] = B[(((u64)b * T + k) * NGROUPS + g) * N + i];
                sC[kk * NV + bvpad(i)] = C[(((u64)b * T + k) * NGROUPS + g) * N + i];
            }
        }
        for (int idx = tid; idx < m * P; idx += NT) {
            const int kk = idx / P, p = idx % P, k = k0 + kk;
            sX[kk * P + p] = k < 0 ? ring_ld(ringX + (ring_at(s, n + k) * NHEADS + h) * P + p)
                                   : x[(((u64)b * T + k) * NHEADS + h) * P + p];
        }
        __syncthreads();
        for (int kk = 0; kk < m; kk++) {
            const bool out = k0 + kk >= 0; // the same for the whole block
            const float a = sDecay[kk], delta = sDelta[kk];
#pragma unroll
            for (int pass = 0; pass < SM::PASSES; pass++) {
                const int r = SM::row(pass);
                const float xc = r < ROWS ? delta * sX[kk * P + r] : 0.0f;
                float acc = 0.0f;
#pragma unroll
                for (int c = 0; c < SM::CPL; c++) {
                    const int pc = kk * NV + bvpad(SM::col(c));
#pragma unroll
                    for (int e = 0; e < VEC; e++) {
                        const float v = a * S[pass][c][e] + xc * sB[pc + e];
                        S[pass][c][e] = v;
                        acc = fmaf(v, sC[pc + e], acc);
                    }
                }
                if (out) {
                    acc = lanes_sum<SM::LANES>(acc);
                    if (r < ROWS && SM::lane() == 0) {
                        sDot[kk * P + r] = acc;
                    }
                }
            }
            if (rounds) {
                store_state_rounded<SM>(S, state, mat, sScratch);
            }
        }
        __syncthreads();
        for (int idx = tid; idx < m * P; idx += NT) {
            const int kk = idx / P, p = idx % P, k = k0 + kk;
            if (k >= 0) {
                y[(((u64)b * T + k) * NHEADS + h) * P + p] = sDot[kk * P + p] + dh * sX[kk * P + p];
            }
        }
    }
    prefill_store<SM>(S, state, rcodes, rscales, rglobal, mat, replay, sScratch);
}
#endif

// ---- the chunked prefill (Mamba-2's SSD form, docs/DESIGN.md 2.3c) ----
//
// A prompt of T inputs runs in chunks of CQ positions. Within a chunk, with
// cum_i the inclusive sum of log-decays Delta_t*A from the chunk's start,
// the state after input i is
//
//	S_i = e^{cum_i} S_0 + sum_{j<=i} e^{cum_i - cum_j} Delta_j x_j B_j^T
//
// so y_i = S_i C_i + D x_i is e^{cum_i} (S_0 C_i) plus sum_j M_ij x_j with
// M_ij = (C_i . B_j) Delta_j e^{cum_i - cum_j} (j <= i), and the chunk ends
// in S = e^{cum_last} S_0 + sum_j Delta_j e^{cum_last - cum_j} x_j B_j^T:
// matrix products, not CQ dependent rank-one steps. Three kernels:
// mamba2_chunk_gram forms each chunk's C B^T per group (shared by the
// group's heads), mamba2_chunk_scan walks the chunks of one head's rows
// [p0, p0+CPS) with that slice of the state in registers, and
// mamba2_chunk_store stores the final float32 state as prefill_store does.
// The scan's products run on the tensor cores in 3xTF32 (float32
// accuracy); the decays' sums are float64, each exponent a float64
// difference rounded once.
#if PREFILL_MODULE
#define CQ 64          // positions a chunk
#define CPS 16         // state rows (of P) a scan block
#define CNT 256        // threads a gram or scan block
#define CN4 (N + 4)    // row stride of staged B, C and state rows: float4 rows, no bank conflicts
#define CQ4 (CQ + 4)   // row stride of M and the staged x columns
#define CNCH ((N + 127) / 128)

// chunk_rows stages rows [k0, k0+m) of a group's B or C (zeros past m) as
// dst [CQ][CN4].
__device__ __forceinline__ void chunk_rows(float* dst, const float* __restrict__ src, int b, int T, int k0, int m,
                                           int g)
{
    for (int idx = threadIdx.x; idx < CQ * (N / 4); idx += CNT) {
        const int i = idx / (N / 4), n = 4 * (idx % (N / 4));
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (i < m) {
            v = *reinterpret_cast<const float4*>(src + (((u64)b * T + k0 + i) * NGROUPS + g) * N + n);
        }
        *reinterpret_cast<float4*>(dst + i * CN4 + n) = v;
    }
}

// mamba2_chunk_gram writes G = C B^T of chunk c of slot b's group g, [CQ][CQ]
// at gram[((b*nchunks + c)*NGROUPS + g)*CQ*CQ], zeros past the slot's count.
// Grid (nchunks, NGROUPS, batch); dynamic shared memory 2*CQ*CN4 floats.
extern "C" __global__ void __launch_bounds__(CNT)
    mamba2_chunk_gram(const int* __restrict__ counts, int T, const float* __restrict__ B,
                      const float* __restrict__ C, float* __restrict__ gram, int nchunks)
{
    extern __shared__ __align__(16) float smem[];
    float* sC = smem;
    float* sB = smem + CQ * CN4;
    const int c = blockIdx.x, g = blockIdx.y, b = blockIdx.z, t = threadIdx.x;
    const int cnt = counts ? counts[b] : T;
    const int k0 = c * CQ;
    if (k0 >= cnt) {
        return;
    }
    const int m = min(CQ, cnt - k0);
    chunk_rows(sC, C, b, T, k0, m, g);
    chunk_rows(sB, B, b, T, k0, m, g);
    __syncthreads();
    // Thread (i, j = t%4 + 4k): lanes of a warp read 8 rows of C and share
    // the 4 rows of B of each k.
    const int i = t >> 2, j0 = t & 3;
    float acc[CQ / 4];
#pragma unroll
    for (int k = 0; k < CQ / 4; k++) {
        acc[k] = 0.0f;
    }
    for (int n = 0; n < N; n += 4) {
        const float4 cv = *reinterpret_cast<const float4*>(sC + i * CN4 + n);
#pragma unroll
        for (int k = 0; k < CQ / 4; k++) {
            const float4 bv = *reinterpret_cast<const float4*>(sB + (j0 + 4 * k) * CN4 + n);
            acc[k] = fmaf(cv.x, bv.x, fmaf(cv.y, bv.y, fmaf(cv.z, bv.z, fmaf(cv.w, bv.w, acc[k]))));
        }
    }
    float* out = gram + (((u64)b * nchunks + c) * NGROUPS + g) * (CQ * CQ) + i * CQ;
#pragma unroll
    for (int k = 0; k < CQ / 4; k++) {
        out[j0 + 4 * k] = acc[k];
    }
}

// mamba2_chunk_scan runs state rows [p0, p0+CPS) of head h of slot b
// (p0 = CPS*blockIdx.x; grid (ceil(P/CPS), NHEADS, batch)) through the
// replay ring's pending entries (replay mode) one at a time, then through
// counts[b] (or T) inputs a chunk at a time, writing each input's outputs
// y of those rows, and leaves the final float32 state rows in fin
// [b][head][P][N]. The chunk's three products run on the tensor cores in
// 3xTF32 (mma_3xtf32: float32 accuracy), each warp one m16n8 tile of the
// outputs and CNR n8 tiles of the state, which stays in its accumulators
// from chunk to chunk. Dynamic shared memory: mamba2ChunkScanSmem
// (prefill.go).
#define CNR ((N / 8 + CNT / 32 - 1) / (CNT / 32)) // state tiles a warp
extern "C" __global__ void __launch_bounds__(CNT)
    mamba2_chunk_scan(const ST* state, const ring_e* __restrict__ ringX, const ring_e* __restrict__ ringB,
                      const float* __restrict__ ringDt, const float* __restrict__ ringA,
                      const int* __restrict__ hist, const int* __restrict__ cur, int nb, int replay,
                      const int* __restrict__ slots, const int* __restrict__ counts, int T,
                      const float* __restrict__ x, const float* __restrict__ C, const float* __restrict__ dt,
                      float* __restrict__ y, const double* __restrict__ A, const double* __restrict__ dtb,
                      const float* __restrict__ D, float dtMin, const float* __restrict__ gram, int nchunks,
                      const float* __restrict__ B, float* __restrict__ fin)
{
    extern __shared__ __align__(16) float smem[];
    float* sCB = smem;               // [CQ][CN4]: the chunk's C rows, then its B rows
    float* sM = sCB + CQ * CN4;      // [CQ][CQ4]: M
    float* sXT = sM + CQ * CQ4;      // [CPS][CQ4]: x_j[p0+p]
    float* sXW = sXT + CPS * CQ4;    // [CPS][CQ4]: Delta_j e^{cum_last-cum_j} x_j[p0+p]
    float* sS = sXW + CPS * CQ4;     // [CPS][CN4]: the state rows at the chunk's start
    double* sCum = reinterpret_cast<double*>(sS + CPS * CN4); // [CQ] per-warp inclusive sums
    float* sDelta = reinterpret_cast<float*>(sCum + CQ);        // [CQ]
    float* sE = sDelta + CQ;                                     // [CQ] e^{cum_i}

    const int p0 = blockIdx.x * CPS, h = blockIdx.y, b = blockIdx.z, g = h / HPG;
    const int t = threadIdx.x, warp = t >> 5, lg = (t & 31) >> 2, lt = t & 3;
    const int s = slots[b];
    const int cnt = counts ? counts[b] : T;
    const int nr = replay ? hist[s] : 0;
    const u64 mat = replay ? (u64)s * NHEADS + h : ((u64)s * nb + cur[s]) * NHEADS + h;
    const double Ah = A[h], dtbh = dtb[h];
    const float dh = D[h];

    // The state rows, loaded and run through the ring's pending entries
    // (S = a S + (Delta x) B, as the step computes them) by thread (row up,
    // columns un + 128r .. +7), then staged for the accumulators.
    {
        const int up = t >> 4, un = (t & 15) * 8, prow = p0 + up;
        float S[CNCH][8];
        const float sc = state_scale(state, mat);
#pragma unroll
        for (int r = 0; r < CNCH; r++) {
            const int n0 = un + 128 * r;
            if (prow < P && n0 < N) {
                load_chunk<STATE_FMT, 8>(state + mat * (P * N), (u64)prow * N + n0, S[r], sc);
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    S[r][e] = 0.0f;
                }
            }
        }
        for (int e = 0; e < nr; e++) {
            const float a = ringA[rs_at(s, h, e)];
            const float xc =
                prow < P ? ringDt[rs_at(s, h, e)] * ring_ld(ringX + (ring_at(s, e) * NHEADS + h) * P + prow) : 0.0f;
            const ring_e* rb = ringB + (ring_at(s, e) * NGROUPS + g) * N;
#pragma unroll
            for (int r = 0; r < CNCH; r++) {
                const int n0 = un + 128 * r;
                if (n0 < N) {
#pragma unroll
                    for (int k = 0; k < 8; k++) {
                        S[r][k] = a * S[r][k] + xc * ring_ld(rb + n0 + k);
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < CNCH; r++) {
            const int n0 = un + 128 * r;
            if (n0 < N) {
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    sS[up * CN4 + n0 + k] = S[r][k];
                }
            }
        }
    }
    __syncthreads();
    // acc[r]: the state tile of columns 8*nt .. +7, nt = warp + 8r, in
    // mma_tf32's D layout: rows lg and lg+8 of the slice, columns 2lt, 2lt+1.
    float acc[CNR][4];
#pragma unroll
    for (int r = 0; r < CNR; r++) {
        const int n = 8 * (warp + (CNT / 32) * r) + 2 * lt;
        const bool on = n < N;
        acc[r][0] = on ? sS[lg * CN4 + n] : 0.0f;
        acc[r][1] = on ? sS[lg * CN4 + n + 1] : 0.0f;
        acc[r][2] = on ? sS[(lg + 8) * CN4 + n] : 0.0f;
        acc[r][3] = on ? sS[(lg + 8) * CN4 + n + 1] : 0.0f;
    }

    const int mt = warp >> 1, pt = warp & 1; // the warp's output tile: rows 16mt.., state rows 8pt..
    for (int k0 = 0, c = 0; k0 < cnt; k0 += CQ, c++) {
        const int m = min(CQ, cnt - k0);
        __syncthreads(); // the last chunk's B rows and state rows are read
        if (t < CQ) {
            double la = 0.0;
            float delta = 0.0f;
            if (t < m) {
                delta = fmaxf((float)softplus_d((double)dt[((u64)b * T + k0 + t) * NHEADS + h] + dtbh), dtMin);
                la = (double)delta * Ah;
            }
            sDelta[t] = delta;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const double v = __shfl_up_sync(FULL_MASK, la, o);
                if ((t & 31) >= o) {
                    la += v;
                }
            }
            sCum[t] = la;
        }
        for (int idx = t; idx < CPS * CQ; idx += CNT) {
            const int j = idx / CPS, p = idx % CPS; // consecutive threads, consecutive x
            sXT[p * CQ4 + j] = j < m && p0 + p < P ? x[(((u64)b * T + k0 + j) * NHEADS + h) * P + p0 + p] : 0.0f;
        }
        chunk_rows(sCB, C, b, T, k0, m, g);
        __syncthreads();
        // cum_i: the two warps' sums joined.
        auto cum = [&](int i) { return sCum[i] + (i >= 32 ? sCum[31] : 0.0); };
        const double last = cum(CQ - 1); // rows past m add nothing
        const float* G = gram + (((u64)b * nchunks + c) * NGROUPS + g) * (CQ * CQ);
        for (int idx = t; idx < CQ * CQ; idx += CNT) {
            const int i = idx / CQ, j = idx % CQ;
            sM[i * CQ4 + j] = j <= i && i < m ? G[idx] * sDelta[j] * expf((float)(cum(i) - cum(j))) : 0.0f;
        }
        for (int idx = t; idx < CPS * CQ; idx += CNT) {
            const int p = idx / CQ, j = idx % CQ;
            sXW[p * CQ4 + j] = sDelta[j] * expf((float)(last - cum(j))) * sXT[p * CQ4 + j];
        }
        if (t < CQ) {
            sE[t] = expf((float)cum(t));
        }
        __syncthreads();
        // Outputs: y_i[p] = e^{cum_i} (C_i . S_0[p]) + sum_{j<=i} M_ij x_j[p] + D x_i[p].
        {
            float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            const float* ca = sCB + (16 * mt + lg) * CN4 + lt;
            const float* sb = sS + (8 * pt + lg) * CN4 + lt;
            for (int k = 0; k < N; k += 8) {
                u32 ahi[4], alo[4], bhi0, bhi1, blo0, blo1;
                tf32_split(ca[k], ahi[0], alo[0]);
                tf32_split(ca[8 * CN4 + k], ahi[1], alo[1]);
                tf32_split(ca[k + 4], ahi[2], alo[2]);
                tf32_split(ca[8 * CN4 + k + 4], ahi[3], alo[3]);
                tf32_split(sb[k], bhi0, blo0);
                tf32_split(sb[k + 4], bhi1, blo1);
                mma_3xtf32<false>(o[0], o[1], o[2], o[3], ahi, alo, bhi0, bhi1, blo0, blo1);
            }
            const int i0 = 16 * mt + lg, i1 = i0 + 8;
            o[0] *= sE[i0];
            o[1] *= sE[i0];
            o[2] *= sE[i1];
            o[3] *= sE[i1];
            const float* ma = sM + i0 * CQ4 + lt;
            const float* xb = sXT + (8 * pt + lg) * CQ4 + lt;
            for (int k = 0; k < 16 * (mt + 1); k += 8) { // M is zero past the diagonal
                u32 ahi[4], alo[4], bhi0, bhi1, blo0, blo1;
                tf32_split(ma[k], ahi[0], alo[0]);
                tf32_split(ma[8 * CQ4 + k], ahi[1], alo[1]);
                tf32_split(ma[k + 4], ahi[2], alo[2]);
                tf32_split(ma[8 * CQ4 + k + 4], ahi[3], alo[3]);
                tf32_split(xb[k], bhi0, blo0);
                tf32_split(xb[k + 4], bhi1, blo1);
                mma_3xtf32<false>(o[0], o[1], o[2], o[3], ahi, alo, bhi0, bhi1, blo0, blo1);
            }
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = e < 2 ? i0 : i1, pl = 8 * pt + 2 * lt + (e & 1), p = p0 + pl;
                if (i < m && p < P) {
                    y[(((u64)b * T + k0 + i) * NHEADS + h) * P + p] = o[e] + dh * sXT[pl * CQ4 + i];
                }
            }
        }
        __syncthreads(); // C and the old state rows are read
        chunk_rows(sCB, B, b, T, k0, m, g);
        __syncthreads();
        // The state: S = e^{cum_last} S + sum_j (Delta_j e^{cum_last-cum_j} x_j[p]) B_j.
        {
            const float dq = expf((float)last);
#pragma unroll
            for (int r = 0; r < CNR; r++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    acc[r][e] *= dq;
                }
            }
            const float* wa = sXW + lg * CQ4 + lt;
            for (int k = 0; k < m; k += 8) {
                u32 ahi[4], alo[4];
                tf32_split(wa[k], ahi[0], alo[0]);
                tf32_split(wa[8 * CQ4 + k], ahi[1], alo[1]);
                tf32_split(wa[k + 4], ahi[2], alo[2]);
                tf32_split(wa[8 * CQ4 + k + 4], ahi[3], alo[3]);
#pragma unroll
                for (int r = 0; r < CNR; r++) {
                    const int n = 8 * (warp + (CNT / 32) * r) + lg;
                    if (n < N) {
                        u32 bhi0, bhi1, blo0, blo1;
                        tf32_split(sCB[(k + lt) * CN4 + n], bhi0, blo0);
                        tf32_split(sCB[(k + lt + 4) * CN4 + n], bhi1, blo1);
                        mma_3xtf32<false>(acc[r][0], acc[r][1], acc[r][2], acc[r][3], ahi, alo, bhi0, bhi1, blo0, blo1);
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < CNR; r++) {
                const int n = 8 * (warp + (CNT / 32) * r) + 2 * lt;
                if (n < N) {
                    sS[lg * CN4 + n] = acc[r][0];
                    sS[lg * CN4 + n + 1] = acc[r][1];
                    sS[(lg + 8) * CN4 + n] = acc[r][2];
                    sS[(lg + 8) * CN4 + n + 1] = acc[r][3];
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < CNR; r++) {
        const int n = 8 * (warp + (CNT / 32) * r) + 2 * lt;
        if (n < N) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int p = p0 + lg + 8 * (e >> 1);
                if (p < P) {
                    fin[(((u64)b * NHEADS + h) * P + p) * N + n + (e & 1)] = acc[r][e];
                }
            }
        }
    }
}

// mamba2_chunk_store stores the chunked prefill's final float32 states fin
// [b][head][P][N] as prefill_store does: replay mode the checkpoint and its
// read copy, baseline mode (fp32 states only) the current buffer. Grid
// (NHEADS, batch), NT threads.
extern "C" __global__ void __launch_bounds__(NT)
    mamba2_chunk_store(ST* state, u8* rcodes, u8* rscales, float* rglobal, const int* __restrict__ cur, int nb,
                       int replay, const int* __restrict__ slots, const float* __restrict__ fin)
{
    __shared__ float sScratch[NWARPS];
    const int h = blockIdx.x, b = blockIdx.y;
    const int s = slots[b];
    const u64 mat = replay ? (u64)s * NHEADS + h : ((u64)s * nb + cur[s]) * NHEADS + h;
    float S[SM::PASSES][SM::CPL][SM::VEC];
    const float* src = fin + ((u64)b * NHEADS + h) * (P * N);
#pragma unroll
    for (int pass = 0; pass < SM::PASSES; pass++) {
        const int r = SM::row(pass);
#pragma unroll
        for (int c = 0; c < SM::CPL; c++) {
#pragma unroll
            for (int e = 0; e < SM::VEC; e++) {
                S[pass][c][e] = r < ROWS ? src[(u64)r * COLS + SM::col(c) + e] : 0.0f;
            }
        }
    }
    prefill_store<SM>(S, state, rcodes, rscales, rglobal, mat, replay, sScratch);
}
#endif
