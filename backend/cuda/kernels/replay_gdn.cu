// replay_gdn.cu: the Gated DeltaNet state cache on the GPU (compiled after
// replay_common.cu). One CTA per (value head, batch row): grid (NVH, batch).
//
// The layer's defines from the Go planner (gdnModule; replay_common.cu's
// header lists the shared ones):
//   NKH, NVH     key and value heads
//   L2EPS        the l2norm epsilon
//   TC_FOLD      1: gdn_fold's products on the tensor cores (TC_FOLD_ON)
//   FOLD_CACHED  1: the folds take the ring's cached u (FOLD_CACHED_ON);
//                0 with replay.Options.ExactFold
//   FOLD_STREAM  1: the verify's early folds by gdn_fold_stream, FS_WARPS
//                strips a block, FS_DB 1 for two buffers
//   FLUSH_STREAM 1: the decode step's flush by gdn_flush_stream, FL_WARPS
//                strips a block, FL_PAD 1 for padded shared rows
//
// ROWS = dv, COLS = dk: the state of value head j is stored transposed, dv
// rows of dk (package replay's layout), so S^T v is one dot product per row.
// Layouts: state [slot][buffer][head][dv][dk]; read copy as for Mamba-2;
// ring per slot of RMAX entries: k (l2-normalised) [NKH*dk], v [NVH*dv],
// u [NVH*dv]; per slot and value head RMAXP entries of exp(g) and of beta.
// Input rows: q, k [NKH*dk] (before the normalisation), v [NVH*dv], a, b
// [NVH] (raw); outputs o [NVH*dv].

#define DK COLS
#define DV ROWS
#define VPK (NVH / NKH)
#define VROWS (RMAX + 1 > 2 * TMAX ? RMAX + 1 : 2 * TMAX)

typedef StateIO<STATE_FMT> SIO;
typedef SIO::T ST;
typedef Map<SIO::VEC, COLS, ROWS> SM;

// HSPLIT > 1 builds the small-batch module of a cache whose value heads'
// dv rows are split into HSPLIT heads of dv/HSPLIT rows each (replay.go
// planHeadSplit; NVH and ROWS are given split): every row of a value
// head's state, ring v and u rows and output is computed from that row and
// the head's vectors and scalars alone, and the split heads' rows are
// contiguous where the whole head's were, so only the per-head scalars
// (a, b, A, dt_bias, the ring's exp(g) and beta) are indexed by the real
// head, HEAD(j) of NVH_REAL. More blocks for a batch of one (Qwen3.5-4B:
// 32 value heads on 132 SMs).
#ifndef HSPLIT
#define HSPLIT 1
#endif
#define NVH_REAL (NVH / HSPLIT)
#define HEAD(j) ((j) / HSPLIT)

// rs_at indexes the ring's per-head scalars (exp(g), beta), laid out
// [slot][value head][RMAXP] so one head's entries are contiguous.
__device__ __forceinline__ u64 rs_at(int s, int j, int e) { return ((u64)s * NVH_REAL + HEAD(j)) * RMAXP + e; }

// l2norm_warp writes src * (float32(1/sqrt(sum src^2 + eps)) * scale) to dst
// (element i at bvpad(i) with PAD), the sum in float64 as the CPU cache
// does. One warp calls it.
template <bool PAD = false>
__device__ __forceinline__ void l2norm_warp(float* dst, const float* __restrict__ src, float scale)
{
    const int lane = threadIdx.x & 31;
    double ss = 0.0;
    for (int i = lane; i < DK; i += 32) {
        const double v = (double)src[i];
        ss += v * v;
    }
    ss = warp_sum_d(ss);
    const float r = (float)(1.0 / sqrt(ss + L2EPS)) * scale;
    for (int i = lane; i < DK; i += 32) {
        dst[PAD ? bvpad(i) : i] = src[i] * r;
    }
}

// L2V is a lane's share of a DK-float vector (elements lane + 32m).
#define L2V ((DK + 31) / 32)

// l2norm_load reads a lane's share of src (zeros past DK) and l2norm_scale
// forms the vector's scale from it, as l2norm_warp does: a step asks for the
// token's vectors before its cursor and writes them where the cursor says.
__device__ __forceinline__ void l2norm_load(const float* __restrict__ src, float (&xv)[L2V])
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int m = 0; m < L2V; m++) {
        xv[m] = lane + 32 * m < DK ? src[lane + 32 * m] : 0.0f;
    }
}

__device__ __forceinline__ float l2norm_scale(const float (&xv)[L2V], float scale)
{
    double ss = 0.0;
#pragma unroll
    for (int m = 0; m < L2V; m++) {
        const double v = (double)xv[m];
        ss += v * v;
    }
    ss = warp_sum_d(ss);
    return (float)(1.0 / sqrt(ss + L2EPS)) * scale;
}

// Shared memory of the replay kernels.
struct GDNShared {
    float vec[VROWS * DK];    // vectors the state is projected on
    float proj[VROWS * DV];   // S^T vec; the fold turns row i into u'_i in place
    float gram[VROWS * VROWS];
    float wt[RMAX * RMAX];    // fold weights gamma_i/gamma_l
    float eg[RMAX];           // fold: gamma_i (decay through entry i)
    float coef[RMAX];         // fold: gamma_t/gamma_i
    float decay[RMAX];        // ring exp(g)
    float beta[RMAX];
    float ws[TMAX * (RMAX + 1)]; // output path: decay products per draft
    float gam[TMAX];
    float ud[TMAX * DV];      // verify: the drafts' corrected updates
    float gt;
    float lut[16];
    float scratch[NWARPS];
};

// gdn_fold is the exact flush (docs/DESIGN.md 2.2, replay.GDNCache.fold) of
// the t ring entries whose normalised keys are vec[0..t-1] (rows of DK;
// and, when q_slot >= 0, q in row q_slot) into the checkpoint of one value
// head, read from S (in the state format, scale sc0: matrix mat of the
// state buffer). It recomputes every corrected update from the raw v, g,
// beta on the high-precision checkpoint (but with CACHED, below):
//
//	u'_i = beta_i (v_i - [g_i S0^T k_i + sum_{l<i} (g_i/g_l)(k_l.k_i) u'_l])
//	S0  <- g_t S0 + sum_i (g_t/g_i) k_i (x) u'_i
//
// (g_i = the product of the per-step decays exp(g) through entry i, in
// float64 as the CPU fold takes them: no exp, no division), writes S (and
// the read copy) back, and with q_slot >= 0 writes o = S_new^T q to out.
// v_i[m] is vring[i*vstride + m] for i < nring and vcur[m] for i = nring.
// sh holds the fold's tables (GDNShared's proj, gram, wt, eg, coef, decay,
// beta, gt, scratch). Barriers inside (cta_sync): each of the first NT
// threads calls it.
// tri_pair maps pair pr of gdn_fold's gram dots to (i, l): pairs below
// tri = t(t-1)/2 are the keys' (i, l), l < i < t, row by row; the rest are
// q's (t, l), l < t.
__device__ __forceinline__ int2 tri_pair(int pr, int tri, int t)
{
    if (pr >= tri) {
        return make_int2(t, pr - tri);
    }
    int i = (int)((1.0f + sqrtf(1.0f + 8.0f * (float)pr)) * 0.5f);
    i -= i * (i - 1) / 2 > pr;       // float rounding, either way
    i += (i + 1) * i / 2 <= pr;
    return make_int2(i, pr - i * (i - 1) / 2);
}

// TC_FOLD=1 (where it applies: a block of 16 rows a warp, dk a multiple of 16,
// sm_80+; gdnModule sets it for 2-byte checkpoints without a read copy, where
// it measured faster) runs gdn_fold's two matrix products on the tensor cores
// (mma.sync m16n8k8, TF32 in, float32 accumulators; 3xTF32, see tf32_split, so
// that a float32 checkpoint keeps float32 accuracy): the projections P = S0
// [k_1..k_t, q] (rows x vectors, summed over dk) and the rank-t update S0 <-
// g_t S0 + U K (U = the rows' coef_i u'_i, summed over the t entries). The
// checkpoint stays in registers through both, in the layout TCMap names: each
// warp owns 16 rows, and its lane (g = lane/4, t = lane%4) holds rows g and
// g+8 at columns 16c + 4t .. +3, one 16-byte run per row and c (whole 32-byte
// sectors per warp). Either product reads those registers as its fragments,
// with the sum's order (dk in the projections, the columns' order in the
// update) permuted so that no value moves between lanes. The split modules
// (fewer rows a block) and other shapes keep the FMA fold; results differ from
// it in the last bits (sums in another order).
#ifndef TC_FOLD
#define TC_FOLD 0
#endif
#if TC_FOLD && ROWS == 16 * NWARPS && COLS % 16 == 0 && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define TC_FOLD_ON 1
#else
#define TC_FOLD_ON 0
#endif
// TC_AEXACT: the checkpoint's values are exact in TF32 (bf16, fp16; an fp8
// one is scaled by a float32), so the projections skip its lo products.
#define TC_AEXACT (STATE_FMT == FMT_BF16 || STATE_FMT == FMT_F16)

#if TC_FOLD_ON
typedef TCMap FM;
#else
typedef SM FM;
#endif

// gdn_project_tc writes proj[a][r] = S0[r] . vec_a for a < nv from the
// checkpoint in TCMap's registers: tiles of 8 vectors on the tensor cores
// (k-step (c, h) takes the lane's columns 16c + 4t + 2h and +1 as its
// logical k = t and t+4, for A and B alike); a last vector alone (the
// flush's q, vector t+1 of t+1) by FMA and the four lanes' sums, where a
// tile would be seven-eighths padding.
__device__ __forceinline__ void gdn_project_tc(const float (&reg)[TCMap::PASSES][TCMap::CPL][4], const float* vec,
                                               int nv, float* proj)
{
    constexpr int NTILES = (VROWS + 7) / 8;
    const int lane = threadIdx.x & 31, g = lane >> 2, lt = lane & 3;
    const int r0 = TCMap::row(0);
    const int ntc = (nv + 6) >> 3;
    float acc[NTILES][4];
#pragma unroll
    for (int nt = 0; nt < NTILES; nt++) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            acc[nt][e] = 0.0f;
        }
    }
#pragma unroll
    for (int c = 0; c < TCMap::CPL; c++) {
        float4 b[NTILES];
#pragma unroll
        for (int nt = 0; nt < NTILES; nt++) {
            // Rows past nv (a tile's padding) read the last vector again:
            // their columns of P are not stored.
            if (nt < ntc) {
                b[nt] = *reinterpret_cast<const float4*>(vec + min(8 * nt + g, nv - 1) * DK + 16 * c + 4 * lt);
            }
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            u32 ahi[4], alo[4];
            const float a[4] = {reg[0][c][2 * h], reg[1][c][2 * h], reg[0][c][2 * h + 1], reg[1][c][2 * h + 1]};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                if constexpr (TC_AEXACT) {
                    ahi[e] = __float_as_uint(a[e]);
                    alo[e] = 0;
                } else {
                    tf32_split(a[e], ahi[e], alo[e]);
                }
            }
#pragma unroll
            for (int nt = 0; nt < NTILES; nt++) {
                if (nt < ntc) {
                    u32 bhi0, blo0, bhi1, blo1;
                    tf32_split(h ? b[nt].z : b[nt].x, bhi0, blo0);
                    tf32_split(h ? b[nt].w : b[nt].y, bhi1, blo1);
                    mma_3xtf32<TC_AEXACT>(acc[nt][0], acc[nt][1], acc[nt][2], acc[nt][3], ahi, alo, bhi0, bhi1, blo0,
                                          blo1);
                }
            }
        }
    }
#pragma unroll
    for (int nt = 0; nt < NTILES; nt++) {
        const int a = 8 * nt + 2 * lt;
        if (nt < ntc && a < nv) {
            proj[a * DV + r0] = acc[nt][0];
            proj[a * DV + r0 + 8] = acc[nt][2];
        }
        if (nt < ntc && a + 1 < nv) {
            proj[(a + 1) * DV + r0] = acc[nt][1];
            proj[(a + 1) * DV + r0 + 8] = acc[nt][3];
        }
    }
    for (int a = 8 * ntc; a < nv; a++) {
        float s0 = 0.0f, s1 = 0.0f;
#pragma unroll
        for (int c = 0; c < TCMap::CPL; c++) {
            const float4 v4 = *reinterpret_cast<const float4*>(vec + a * DK + 16 * c + 4 * lt);
            s0 = fma4(reg[0][c], v4, s0);
            s1 = fma4(reg[1][c], v4, s1);
        }
        s0 = lanes_sum<4>(s0);
        s1 = lanes_sum<4>(s1);
        if (lt == 0) {
            proj[a * DV + r0] = s0;
            proj[a * DV + r0 + 8] = s1;
        }
    }
}

// gdn_update_tc is the rank-t update S0 <- gt S0 + sum_i (coef_i u'_i) (x)
// k_i on the tensor cores, S0 in TCMap's registers as the accumulators:
// tile (c, p) of 8 columns maps its logical column 2t'+e to 16c + 4t' + p
// + 2e, so that a lane's accumulators D[g][2t], D[g][2t+1] (and row g+8)
// are its own registers reg[.][c][p] and reg[.][c][p+2]; B = k_i at those
// columns (p = 0, 1: one float2), A[r][i] = coef_i u'_i[r] (proj row i).
// K is the t entries in steps of 8, zeros past t (A and B both: the rows
// of vec past t may hold anything).
__device__ __forceinline__ void gdn_update_tc(float (&reg)[TCMap::PASSES][TCMap::CPL][4], const float* vec, int t,
                                              const float* proj, const float* coef, float gt)
{
    constexpr int KS = (RMAX + 7) / 8;
    const int lane = threadIdx.x & 31, g = lane >> 2, lt = lane & 3;
    const int r0 = TCMap::row(0);
#pragma unroll
    for (int pass = 0; pass < TCMap::PASSES; pass++) {
#pragma unroll
        for (int c = 0; c < TCMap::CPL; c++) {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                reg[pass][c][k] = gt * reg[pass][c][k];
            }
        }
    }
    const int bcol = 4 * (g >> 1) + 2 * (g & 1);
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        if (8 * ks < t) {
            const int i0 = 8 * ks + lt, i1 = i0 + 4;
            const bool in0 = i0 < t, in1 = i1 < t;
            const float a[4] = {
                in0 ? coef[i0] * proj[i0 * DV + r0] : 0.0f,
                in0 ? coef[i0] * proj[i0 * DV + r0 + 8] : 0.0f,
                in1 ? coef[i1] * proj[i1 * DV + r0] : 0.0f,
                in1 ? coef[i1] * proj[i1 * DV + r0 + 8] : 0.0f,
            };
            u32 ahi[4], alo[4];
#pragma unroll
            for (int e = 0; e < 4; e++) {
                tf32_split_fast(a[e], ahi[e], alo[e]);
            }
            const float* k0 = vec + (in0 ? i0 : 0) * DK + bcol;
            const float* k1 = vec + (in1 ? i1 : 0) * DK + bcol;
#pragma unroll
            for (int c = 0; c < TCMap::CPL; c++) {
                update_tc_tile(reg[0][c], reg[1][c], k0 + 16 * c, k1 + 16 * c, in0, in1, ahi, alo);
            }
        }
    }
}

// FOLD_CACHED=1 (replay.Options.FoldsCachedU; the Go side defines it
// from the options, -DFOLD_CACHED=0 with ExactFold) folds the ring's cached
// u'_i (ringU) where the module has no read copy, recomputing only the
// flush's own token: the fold is then the non-flush step's arithmetic
// (S0^T k_t, S0^T q, one recurrence row) plus the rank-t update, where the
// exact fold projects S0 on every ring key and reruns the whole
// recurrence. Without a read copy the cached u'_i were formed from this
// same checkpoint (every non-flush step and verify reads the checkpoint
// itself), so they equal the recomputed ones up to the order of float32
// sums (replay's TestGDNFoldCachedNoDrift: 1024 steps, checkpoint error
// 4.6e-7 against the exact fold's 3.2e-7); docs/DESIGN.md 2.2's exact fold
// exists because a read copy's error would otherwise enter the
// checkpoint, and with a read copy (FOLD_CACHED_ON off) the fold stays
// exact. H200, B=256, against the exact fold, us: Qwen3.5-4B aligned
// flush fp32 622 -> 463, bf16 579 -> 414, window 204 -> 193, 146 -> 130;
// 122B flush 1221 -> 908, 1140 -> 810, window 358 -> 338, 250 -> 223;
// verify bf16 471 -> 443, 704 -> 649 (fp32 within 1%).
#ifndef FOLD_CACHED
#define FOLD_CACHED 1
#endif
#define FOLD_CACHED_ON (FOLD_CACHED && READ_FMT == FMT_F32)

// fold_project writes proj[a][r] = S0[r] . vec_a for a0 <= a < nv from the
// checkpoint in MAP's registers by FMA, two vectors at a time (one
// vector's chain of loads, FMAs and the lanes' shuffles left the SM idle
// between steps), each vector chunk read from shared memory once for all
// the thread's rows.
template <typename MAP>
__device__ __forceinline__ void fold_project(const float (&reg)[MAP::PASSES][MAP::CPL][MAP::VEC], const float* vec,
                                             int a0, int nv, float* proj)
{
    constexpr int VEC = MAP::VEC;
#pragma unroll 2
    for (int a = a0; a < nv; a++) {
        float acc[MAP::PASSES];
#pragma unroll
        for (int pass = 0; pass < MAP::PASSES; pass++) {
            acc[pass] = 0.0f;
        }
#pragma unroll
        for (int c = 0; c < MAP::CPL; c++) {
            const float4* vp = reinterpret_cast<const float4*>(vec + a * DK + MAP::col(c));
#pragma unroll
            for (int q = 0; q < VEC / 4; q++) {
                const float4 v4 = vp[q];
#pragma unroll
                for (int pass = 0; pass < MAP::PASSES; pass++) {
                    acc[pass] = fmaf(reg[pass][c][4 * q], v4.x, acc[pass]);
                    acc[pass] = fmaf(reg[pass][c][4 * q + 1], v4.y, acc[pass]);
                    acc[pass] = fmaf(reg[pass][c][4 * q + 2], v4.z, acc[pass]);
                    acc[pass] = fmaf(reg[pass][c][4 * q + 3], v4.w, acc[pass]);
                }
            }
        }
#pragma unroll
        for (int pass = 0; pass < MAP::PASSES; pass++) {
            const int r = MAP::row(pass);
            const float sum = lanes_sum<MAP::LANES>(acc[pass]);
            if (r < ROWS && MAP::lane() == 0) {
                proj[a * DV + r] = sum;
            }
        }
    }
}

// With CACHED (FOLD_CACHED_ON's callers), vring holds the ring's cached
// u'_i (ringU's rows), not v_i, for i < nring: only entry nring, where
// nring < t (the flush's token, v_t in vcur), is formed by the
// recurrence, from the cached ones. vring may be sh.proj itself (the
// verify's early fold stages the u rows there): the recurrence reads rows
// i < nring of it and writes each element back unchanged, and writes rows
// >= nring, which it never reads through vring, so its __restrict__ holds
// for every access that could be reordered.
template <bool CACHED = false, typename SH>
__device__ __forceinline__ void gdn_fold(SH& sh, const float* vec, const ST* S, float sc0, ST* state, u8* rcodes,
                                         u8* rscales, float* rglobal, u64 mat, int t, int q_slot,
                                         const float* __restrict__ vring, u64 vstride, int nring,
                                         const float* __restrict__ vcur, float* __restrict__ out)
{
    constexpr int VEC = SM::VEC;
    const int tid = threadIdx.x;
    const int nv = q_slot >= 0 ? t + 1 : t;
    float reg[FM::PASSES][FM::CPL][FM::VEC];
    // The checkpoint in registers; S0^T vec_a for every vector, each vector
    // chunk read from shared memory once for all the thread's rows.
    load_state<FM>(S, sc0, reg);
    // CACHED: only the vectors from nring on (the flush's key, q).
#if TC_FOLD_ON
    if (!CACHED) {
        gdn_project_tc(reg, vec, nv, sh.proj);
    } else {
        fold_project<FM>(reg, vec, nring, nv, sh.proj);
    }
#else
    fold_project<FM>(reg, vec, CACHED ? nring : 0, nv, sh.proj);
#endif
    // Decays as products of the per-step exp(g), one entry i per thread of
    // the last warps (the others start the dots meanwhile):
    // wt[i][l] = prod_{m=l+1..i} a_m, eg[i] = prod_{m<=i} a_m,
    // coef[i] = prod_{m=i+1..t-1} a_m, gt = prod_{m<t} a_m. The loops run
    // over the whole ring, unrolled, so the loads leave the chains of
    // products (same order as rolled loops over the window).
    for (int i = NT - 1 - tid; i < t; i += NT) {
        double w = 1.0, c = 1.0;
#pragma unroll
        for (int l = RMAX - 2; l >= 0; l--) {
            if (l < i) {
                w *= (double)sh.decay[l + 1];
                sh.wt[i * RMAX + l] = (float)w;
            }
        }
#pragma unroll
        for (int m = 1; m < RMAX; m++) {
            if (m > i && m < t) {
                c *= (double)sh.decay[m];
            }
        }
        sh.eg[i] = (float)(w * (double)sh.decay[0]);
        sh.coef[i] = (float)c;
    }
    if (tid == NT - 1 - t % NT) { // the next thread down
        double gp = 1.0;
#pragma unroll
        for (int m = 0; m < RMAX; m++) {
            if (m < t) {
                gp *= (double)sh.decay[m];
            }
        }
        sh.gt = (float)gp;
    }
    // k_l . vec_i for l < min(i, t), eight lanes per pair: the t(t-1)/2 key
    // pairs (i, l), then t pairs of q (i = t) if there is a q, stored by pair
    // (gram[i(i-1)/2 + l], q's at gram[tri + l]). Each pair's (i, l) is formed
    // once: the first functor keeps vec_i for the second, which dot_pairs asks
    // right after it. (Formed in all three, tri_pair's square root and fix-ups
    // were 6-8% of the flush's instructions: ncu.) CACHED: only the recomputed
    // entry's pairs (t-1, l) where nring = t-1, then q's, stored where the
    // exact fold stores them.
    const int tri = t * (t - 1) / 2;
    const int kp = !CACHED ? tri : nring < t ? t - 1 : 0;
    const float* vi = nullptr;
    dot_pairs(
        kp + (nv - t) * t, DK, tid, NT,
        [&](int pr) -> const float* {
            const int2 il = !CACHED ? tri_pair(pr, tri, t) : pr < kp ? make_int2(t - 1, pr) : make_int2(t, pr - kp);
            vi = vec + il.x * DK;
            return vec + il.y * DK;
        },
        [&](int) -> const float* { return vi; },
        [&](int pr, float v) { sh.gram[!CACHED ? pr : pr < kp ? (t - 1) * (t - 2) / 2 + pr : tri + pr - kp] = v; });
    cta_sync();
    // u'_i in order, one value index m per thread; proj row i becomes u'_i.
    // The u'_l stay in registers (the loops unrolled over the window, every
    // index fixed): the recurrence's only dependences are its FMAs, and the
    // weights, the same for every m, are broadcast loads the compiler issues
    // ahead. (Rolled, with u'_l read back from shared memory, this loop was a
    // third of a Qwen3.5-4B flush.)
    for (int m = tid; m < DV; m += NT) {
        // v_i[m] for every entry, all loads in flight at once.
        float u[RMAX];
#pragma unroll
        for (int i = 0; i < RMAX; i++) {
            u[i] = 0.0f;
            if (i < nring) {
                u[i] = vring[(u64)i * vstride + m];
            } else if (i < t) {
                u[i] = vcur[m];
            }
        }
#pragma unroll
        for (int i = 0; i < RMAX; i++) {
            if (i < t) {
                if (!CACHED || i >= nring) {
                    float ui = u[i] - sh.eg[i] * sh.proj[i * DV + m];
#pragma unroll
                    for (int l = 0; l < i; l++) {
                        const float w = sh.wt[i * RMAX + l] * sh.gram[i * (i - 1) / 2 + l];
                        ui = fmaf(-w, u[l], ui);
                    }
                    u[i] = ui * sh.beta[i];
                }
                sh.proj[i * DV + m] = u[i];
            }
        }
        if (q_slot >= 0) {
            float o = sh.gt * sh.proj[t * DV + m];
#pragma unroll
            for (int i = 0; i < RMAX; i++) {
                if (i < t) {
                    const float w = sh.coef[i] * sh.gram[tri + i];
                    o = fmaf(w, u[i], o);
                }
            }
            out[m] = o;
        }
    }
    cta_sync();
    // S_m <- g_t S_m + sum_i (coef_i u'_i[m]) k_i, from the registers; each
    // k_i chunk feeds every pass.
#if TC_FOLD_ON
    gdn_update_tc(reg, vec, t, sh.proj, sh.coef, sh.gt);
#else
    const float gt = sh.gt;
#pragma unroll
    for (int pass = 0; pass < SM::PASSES; pass++) {
#pragma unroll
        for (int c = 0; c < SM::CPL; c++) {
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                reg[pass][c][k] = gt * reg[pass][c][k];
            }
        }
    }
    for (int i = 0; i < t; i++) {
        float rc[SM::PASSES];
#pragma unroll
        for (int pass = 0; pass < SM::PASSES; pass++) {
            const int r = SM::row(pass);
            rc[pass] = r < ROWS ? sh.coef[i] * sh.proj[i * DV + r] : 0.0f;
        }
#pragma unroll
        for (int c = 0; c < SM::CPL; c++) {
            const float4* kp = reinterpret_cast<const float4*>(vec + i * DK + SM::col(c));
#pragma unroll
            for (int q = 0; q < VEC / 4; q++) {
                const float4 k4 = kp[q];
#pragma unroll
                for (int pass = 0; pass < SM::PASSES; pass++) {
                    reg[pass][c][4 * q] = fmaf(rc[pass], k4.x, reg[pass][c][4 * q]);
                    reg[pass][c][4 * q + 1] = fmaf(rc[pass], k4.y, reg[pass][c][4 * q + 1]);
                    reg[pass][c][4 * q + 2] = fmaf(rc[pass], k4.z, reg[pass][c][4 * q + 2]);
                    reg[pass][c][4 * q + 3] = fmaf(rc[pass], k4.w, reg[pass][c][4 * q + 3]);
                }
            }
        }
    }
#endif
    store_state<FM>(reg, state, mat, sh.scratch);
    write_read_copy<FM>(reg, rcodes, rscales, rglobal, mat, sh.scratch);
}

// decay_suffix writes ws[i] = prod_{i<m<=last} decay[m] for i <= last
// (float64 products from the last entry down, rounded to float32 like the
// CPU cache) and returns prod_{m<=last} decay[m]. The loop runs over the
// whole ring, unrolled, so the loads leave the chain of products.
__device__ __forceinline__ float decay_suffix(const float* decay, int last, float* ws)
{
    double suf = 1.0;
#pragma unroll
    for (int i = RMAX - 1; i >= 0; i--) {
        if (i <= last) {
            ws[i] = (float)suf;
            suf *= (double)decay[i];
        }
    }
    return (float)suf;
}

// gdn_scalars computes the decay exp(g), g = -exp(A_log) softplus(a + dt_bias)
// rounded to float32 first, and beta of one input row as the CPU cache does.
__device__ __forceinline__ void gdn_scalars(float a, float b, double negA, double dtb, float* eg, float* beta)
{
    const float gf = (float)(negA * softplus_d((double)a + dtb));
    *eg = (float)exp((double)gf);
    *beta = (float)sigmoid_d((double)b);
}

// gdn_replay_step is one decode step of the replay cache, in two kernels
// launched back to back over every (value head, batch row), each taking the
// CTAs of its kind (see mamba2_replay_step for why two):
//   - gdn_replay_nonflush: normalises q and k, appends k, v, exp(g), beta at
//     ring entry n, and writes u_t = beta (v - [g_t S0^T k + sum_{i<t} (g_t/g_i)(k_i.k) u_i]),
//     o = g_t S0^T q + sum_{i<=t} (g_t/g_i)(k_i.q) u_i (docs/DESIGN.md 2.2), S0 read
//     from the read copy if there is one; u_t is cached in the ring;
//   - gdn_replay_flush: the exact fold of the whole window, current token
//     included, and o = S_new^T q.
// The ring's keys and cached updates are gathered into shared memory with all
// loads in flight at once. MODE: 0 non-flush slots, 1 flush slots, 2 both
// (one kernel for small batches). The trailing int* is unused: the
// function's signature is part of its shared memory's name in the PTX.
template <int MODE>
__device__ __forceinline__ bool gdn_step(ST* state, u8* rcodes, u8* rscales, float* rglobal,
                                         float* __restrict__ ringK, float* __restrict__ ringV,
                                         float* __restrict__ ringA, float* __restrict__ ringBeta,
                                         float* __restrict__ ringU, const int* __restrict__ hist,
                                         const int* __restrict__ slots, const float* __restrict__ q,
                                         const float* __restrict__ k, const float* __restrict__ v,
                                         const float* __restrict__ a, const float* __restrict__ bb,
                                         float* __restrict__ o, const double* __restrict__ negA,
                                         const double* __restrict__ dtb, float qscale, int L, int* done, int j, int b,
                                         int* = nullptr)
{
    __shared__ __align__(16) GDNShared sh;
    const int kh = j / VPK;
    const int tid = threadIdx.x, warp = tid >> 5;
    // EARLY (the small-batch kernel): state asked for in L1, the whole ring
    // loaded before hist[s] is back (as mamba2_step does).
    constexpr bool EARLY = MODE == 2 && RMAX <= NT;
    const int s = slots[b];
    // The token's inputs first, before the cursor (as mamba2_step): warp 0
    // normalises k, warp 1 q, thread 0 forms exp(g) and beta (float64).
    float tv[L2V];
    if (warp < 2) { // NT >= 64
        l2norm_load(warp == 0 ? k + ((u64)b * NKH + kh) * DK : q + ((u64)b * NKH + kh) * DK, tv);
    }
    float av = 0.0f, bv = 0.0f;
    double negAv = 0.0, dtbv = 0.0;
    if (tid == 0) {
        av = a[(u64)b * NVH_REAL + HEAD(j)];
        bv = bb[(u64)b * NVH_REAL + HEAD(j)];
        negAv = negA[HEAD(j)];
        dtbv = dtb[HEAD(j)];
    }
    constexpr int VTI = (DV + NT - 1) / NT;
    float vtv[VTI]; // the token's v row
    row_regs(vtv, v + ((u64)b * NVH + j) * DV, DV);
    const u64 mat = (u64)s * NVH + j;
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
    // Vector rows: the flush keeps k_0..k_n, q; the non-flush k_n, q, then the
    // ring keys k_0..k_{n-1} from row 2 (and the ring's u_i in proj rows 2..,
    // next to S0^T k and S0^T q in rows 0 and 1). The flush's fold reads the
    // cached u from the ring itself (FOLD_CACHED_ON): gathered here with the
    // keys, into proj rows 0..n-1, as the verify's early fold does, the flush
    // was the same or slower (H200, B=256: aligned flush 466 -> 466 us fp32,
    // 414 -> 423 bf16, windows 192 -> 193, 130 -> 132).
    const int kslot = FLUSH ? n : 0, qslot = FLUSH ? t : 1, kbase = FLUSH ? 0 : 2;
    const float* vt = v + ((u64)b * NVH + j) * DV;
    float* ot = o + ((u64)b * NVH + j) * DV;

    // The ring's keys and u rows, 16 bytes a load in the small step (RV4).
    constexpr bool RV4 = EARLY && DK % 4 == 0 && DV % 4 == 0;
    constexpr int KIT = RV4 ? 1 : (DK * RMAX + NT - 1) / NT;
    constexpr int UIT = MODE == 1 || RV4 ? 1 : (DV * RMAX + NT - 1) / NT;
    constexpr int KIT4 = RV4 ? (DK / 4 * RMAX + NT - 1) / NT : 1;
    constexpr int UIT4 = RV4 ? (DV / 4 * RMAX + NT - 1) / NT : 1;
    float kv[KIT], uv[UIT];
    float4 kv4[KIT4], uv4[UIT4];
    if constexpr (RV4) {
        gather_rows4<KIT4>(kv4, ringK + (u64)kh * DK, NKH * DK, DK, s, ngather);
        gather_rows4<UIT4>(uv4, ringU + (u64)j * DV, NVH * DV, DV, s, ngather);
    } else {
#pragma unroll
        for (int it = 0; it < KIT; it++) {
            const int idx = tid + it * NT;
            kv[it] = 0.0f;
            if (idx < ngather * DK) {
                kv[it] = ringK[(ring_at(s, idx / DK) * NKH + kh) * DK + idx % DK];
            }
        }
        if (EARLY || !FLUSH) {
#pragma unroll
            for (int it = 0; it < UIT; it++) {
                const int idx = tid + it * NT;
                uv[it] = 0.0f;
                if (idx < ngather * DV) {
                    uv[it] = ringU[(ring_at(s, idx / DV) * NVH + j) * DV + idx % DV];
                }
            }
        }
    }
    float egj = 0.0f, betaj = 0.0f; // ring scalars of entry tid (EARLY)
    if (EARLY && tid < RMAX) {
        egj = ringA[rs_at(s, j, tid)];
        betaj = ringBeta[rs_at(s, j, tid)];
    }
    if (warp < 2) {
        const float r = l2norm_scale(tv, warp == 0 ? 1.0f : qscale);
        float* dst = sh.vec + (warp == 0 ? kslot : qslot) * DK;
        const int lane = tid & 31;
#pragma unroll
        for (int m = 0; m < L2V; m++) {
            if (lane + 32 * m < DK) {
                dst[lane + 32 * m] = tv[m] * r;
            }
        }
    }
    if (tid == 0) {
        float eg, beta;
        gdn_scalars(av, bv, negAv, dtbv, &eg, &beta);
        sh.decay[n] = eg;
        sh.beta[n] = beta;
        if (!FLUSH) {
            ringA[rs_at(s, j, n)] = eg;
            ringBeta[rs_at(s, j, n)] = beta;
        }
    }
    ring_scalars(sh.decay, sh.beta, ringA, ringBeta, tid, n, EARLY, egj, betaj, [&](int i) { return rs_at(s, j, i); });
    if (!FLUSH) {
#pragma unroll
        for (int it = 0; it < VTI; it++) {
            const int m = tid + it * NT;
            if (m < DV) {
                ringV[(ring_at(s, n) * NVH + j) * DV + m] = vtv[it];
            }
        }
    }
    if constexpr (RV4) {
#pragma unroll
        for (int it = 0; it < KIT4; it++) {
            const int idx = tid + it * NT;
            if (idx < n * (DK / 4)) {
                reinterpret_cast<float4*>(sh.vec + kbase * DK)[idx] = kv4[it];
            }
        }
        if (!FLUSH) {
#pragma unroll
            for (int it = 0; it < UIT4; it++) {
                const int idx = tid + it * NT;
                if (idx < n * (DV / 4)) {
                    reinterpret_cast<float4*>(sh.proj + 2 * DV)[idx] = uv4[it];
                }
            }
        }
    } else {
#pragma unroll
        for (int it = 0; it < KIT; it++) {
            const int idx = tid + it * NT;
            if (idx < n * DK) {
                sh.vec[kbase * DK + idx] = kv[it];
            }
        }
        if (!FLUSH) {
#pragma unroll
            for (int it = 0; it < UIT; it++) {
                const int idx = tid + it * NT;
                if (idx < n * DV) {
                    sh.proj[2 * DV + idx] = uv[it];
                }
            }
        }
    }
#if READ_FMT == FMT_NVFP4
    init_e2m1_lut(sh.lut);
#endif
    __syncthreads();
    const bool last = MODE == 2 && step_count(done);
    if (FLUSH) {
        gdn_fold<FOLD_CACHED_ON>(sh, sh.vec, state + mat * (DV * DK), state_scale(state, mat), state, rcodes, rscales,
                                 rglobal, mat, t, qslot, (FOLD_CACHED_ON ? ringU : ringV) + ((u64)s * RMAX * NVH + j) * DV,
                                 (u64)NVH * DV, n, vt, ot);
        return last;
    }
    if (j % VPK == 0) {
        for (int e = tid; e < DK; e += NT) {
            ringK[(ring_at(s, n) * NKH + kh) * DK + e] = sh.vec[e];
        }
    }
    // k_i . k and k_i . q over the window, eight lanes per entry and vector.
    dot_pairs(
        2 * t, DK, tid, NT,
        [&](int pr) -> const float* {
            const int i = pr >> 1;
            return (pr & 1) == 0 && i == n ? nullptr : sh.vec + (i < n ? (2 + i) * DK : 0);
        },
        [&](int pr) -> const float* { return sh.vec + (pr & 1) * DK; },
        [&](int pr, float v) { sh.gram[(pr & 1) * VROWS + (pr >> 1)] = v; });
    if (tid == 0) {
        double suf = 1.0;
        for (int i = n; i >= 0; i--) {
            sh.ws[i] = (float)suf;
            suf *= (double)sh.decay[i];
        }
        sh.gam[0] = (float)suf;
    }
    dots_read<2>(state, rcodes, rscales, rglobal, mat, sh.vec, DK, 2, sh.proj, sh.lut);
    __syncthreads();
    const float gam = sh.gam[0], beta = sh.beta[n];
#pragma unroll
    for (int it = 0; it < VTI; it++) {
        const int m = tid + it * NT;
        if (m >= DV) {
            break;
        }
        float ut = vtv[it] - gam * sh.proj[m];
        float ov = gam * sh.proj[DV + m];
        for (int i = 0; i < n; i++) {
            const float ui = sh.proj[(2 + i) * DV + m];
            ut = fmaf(-(sh.ws[i] * sh.gram[i]), ui, ut);
            ov = fmaf(sh.ws[i] * sh.gram[VROWS + i], ui, ov);
        }
        ut = ut * beta;
        ov = fmaf(sh.ws[n] * sh.gram[VROWS + n], ut, ov);
        ringU[(ring_at(s, n) * NVH + j) * DV + m] = ut;
        ot[m] = ov;
    }
    return last;
}

#define GDN_STEP_PARAMS                                                                                          \
    ST *state, u8 *rcodes, u8 *rscales, float *rglobal, float *__restrict__ ringK, float *__restrict__ ringV,    \
        float *__restrict__ ringA, float *__restrict__ ringBeta, float *__restrict__ ringU,                      \
        int *__restrict__ hist, const int *__restrict__ slots, const float *__restrict__ q,                      \
        const float *__restrict__ k, const float *__restrict__ v, const float *__restrict__ a,                   \
        const float *__restrict__ bb, float *__restrict__ o, const double *__restrict__ negA,                     \
        const double *__restrict__ dtb, float qscale, int L, int *__restrict__ pending, int *__restrict__ done,  \
        int batch
#define GDN_STEP_ARGS state, rcodes, rscales, rglobal, ringK, ringV, ringA, ringBeta, ringU, hist, slots, q, k, v, a, bb, o, negA, dtb, qscale, L, done

// As for Mamba-2: the flush kernel first, then the non-flush kernel (this
// one or gdn_pipe_step), whose last block moves the cursors; one kernel
// below a few slots.
#if WHOLE_REPLAY // the split module takes only the small step
extern "C" __global__ void __launch_bounds__(NT) gdn_replay_nonflush(GDN_STEP_PARAMS)
{
    gdn_step<0>(GDN_STEP_ARGS, blockIdx.x, blockIdx.y);
    step_done(hist, pending, done, slots, batch, L);
}
#endif

// One flush item, not inlined: inlined into flush_items' loop, the compiler
// kept values across items and the kernel took 160-250 registers instead of
// 110-130 (half the blocks per SM). FLUSH_MINB bounds the registers for
// that many blocks per SM: 128 at 256 threads, what the one-block-per-item
// flush had.
#define FLUSH_MINB (512 / NT)
__device__ __noinline__ void gdn_flush_item(GDN_STEP_PARAMS, int j, int b)
{
    gdn_step<1>(GDN_STEP_ARGS, j, b);
}

#if WHOLE_REPLAY // the split module takes only the small step
extern "C" __global__ void __launch_bounds__(NT, FLUSH_MINB) gdn_replay_flush(GDN_STEP_PARAMS)
{
    flush_items(slots, hist, batch, NVH, L, [&](int j, int b) {
        gdn_flush_item(state, rcodes, rscales, rglobal, ringK, ringV, ringA, ringBeta, ringU, hist, slots, q, k, v, a, bb, o,
                       negA, dtb, qscale, L, pending, done, batch, j, b);
    });
    flush_done(hist, pending, done, slots, batch, L);
}
#endif

#if REPLAY_KERNELS
extern "C" __global__ void __launch_bounds__(NT) gdn_replay_step_small(GDN_STEP_PARAMS)
{
    const bool last = gdn_step<2>(GDN_STEP_ARGS, blockIdx.x, blockIdx.y);
    step_finish(last, hist, pending, done, slots, batch, L);
}
#endif

// gdn_replay_verify computes the outputs of cnt = counts[b] (or T) drafts per
// slot from the checkpoint (or read copy) and the ring (docs/DESIGN.md 2.3: the UT
// transform solved by forward substitution), appending them at ring entries
// n.., without writing the checkpoint. An early fold of the committed history
// runs first when n + 2*cnt would overflow the ring. FOLD_ONLY (the kernel
// before gdn_group_verify) runs only the early folds; gdn_group_verify then
// takes every slot, those from their new checkpoint.
#define GDN_VERIFY_PARAMS                                                                                          \
    ST *state, u8 *rcodes, u8 *rscales, float *rglobal, float *__restrict__ ringK, float *__restrict__ ringV,      \
        float *__restrict__ ringA, float *__restrict__ ringBeta, float *__restrict__ ringU,                        \
        const int *__restrict__ hist, const int *__restrict__ slots, const int *__restrict__ counts, int T,         \
        const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,                     \
        const float *__restrict__ a, const float *__restrict__ bb, float *__restrict__ o,                          \
        const double *__restrict__ negA, const double *__restrict__ dtb, float qscale, int R
#define GDN_VERIFY_ARGS                                                                                            \
    state, rcodes, rscales, rglobal, ringK, ringV, ringA, ringBeta, ringU, hist, slots, counts, T, q, k, v, a, bb, \
        o, negA, dtb, qscale, R
// gdn_stage_keys copies the first n ring keys of key head kh of slot s to
// vec (entry i at vec[i*DK]), every load in flight at once; with U, also
// the first n cached u rows of value head j to urows (entry i at
// urows[i*DV]), in the same batch of loads.
template <bool U = false>
__device__ __forceinline__ void gdn_stage_keys(float* vec, const float* __restrict__ ringK, int s, int kh, int n,
                                               float* urows = nullptr, const float* __restrict__ ringU = nullptr,
                                               int j = 0)
{
    load_then_store<(RMAX * (DK + (U ? DV : 0)) + NT - 1) / NT, NT>(
        n * (DK + (U ? DV : 0)),
        [&](int idx) {
            const int iu = idx - n * DK;
            return !U || iu < 0 ? ringK[(ring_at(s, idx / DK) * NKH + kh) * DK + idx % DK]
                                : ringU[(ring_at(s, iu / DV) * NVH + j) * DV + iu % DV];
        },
        [&](int idx, float x) {
            if (!U || idx < n * DK) {
                vec[idx] = x;
            } else {
                urows[idx - n * DK] = x;
            }
        });
}

// VEARLY (gdn_replay_verify_early, replay_common.cu): the drafts' k, q
// (a lane's share of each, as the small step's l2norm_load), v, a and b,
// every ring entry's exp(g) and beta and the state in L1 asked for before
// the slot's cursor.

template <bool FOLD_ONLY, bool VEARLY = false>
__device__ __forceinline__ void gdn_verify_impl(GDN_VERIFY_PARAMS, int j, int b)
{
    __shared__ __align__(16) GDNShared sh;
    const int kh = j / VPK;
    const int tid = threadIdx.x, warp = tid >> 5;
    const int s = slots[b];
    // VE: every draft row up to T (the inputs hold batch*T rows) and every
    // ring entry's scalars, whatever the cursor and count say; stored below
    // where the verify's own loads would have put them, bit for bit.
    // Vector w of a warp's share is k_w (w < T) or q_(w-T).
    constexpr bool VE = VEARLY && !FOLD_ONLY && RMAX <= NT;
    constexpr int VPW = VE ? (2 * TMAX + NWARPS - 1) / NWARPS : 1;
    constexpr int VD = VE ? (TMAX * DV + NT - 1) / NT : 1;
    float kq[VPW][L2V], vd[VD];
    float ad = 0.0f, bd = 0.0f, egj = 0.0f, betaj = 0.0f;
    double nAd = 0.0, dbd = 0.0;
    if constexpr (VE) {
#pragma unroll
        for (int c = 0; c < VPW; c++) {
            const int w = warp + c * NWARPS;
            const float* src = w < T ? k + (((u64)b * T + w) * NKH + kh) * DK : q + (((u64)b * T + w - T) * NKH + kh) * DK;
            if (w < 2 * T) {
                l2norm_load(src, kq[c]);
            }
        }
#pragma unroll
        for (int it = 0; it < VD; it++) {
            const int idx = tid + it * NT;
            vd[it] = idx < T * DV ? v[(((u64)b * T + idx / DV) * NVH + j) * DV + idx % DV] : 0.0f;
        }
        if (tid < T) {
            ad = a[((u64)b * T + tid) * NVH_REAL + HEAD(j)];
            bd = bb[((u64)b * T + tid) * NVH_REAL + HEAD(j)];
            nAd = negA[HEAD(j)];
            dbd = dtb[HEAD(j)];
        }
        if (tid < RMAX) {
            egj = ringA[rs_at(s, j, tid)];
            betaj = ringBeta[rs_at(s, j, tid)];
        }
        prefetch_read(state, rcodes, rscales, (u64)s * NVH + j);
    }
    int n = hist[s];
    const int cnt = counts ? counts[b] : T;
    const u64 mat = (u64)s * NVH + j;
    if (FOLD_ONLY && !FOLDS_EARLY(n, cnt, R)) {
        return; // gdn_group_verify takes it
    }
    // SCALARS_EARLY: draft tid's exp(g) and beta (float64 softplus, exp
    // and sigmoid) while hist[s] and counts[b] are in flight, not after the
    // ring's scalars, the early fold and the keys' staging.
    float egd = 0.0f, betad = 0.0f;
    if constexpr (VE && SCALARS_EARLY) {
        if (tid < T) {
            gdn_scalars(ad, bd, nAd, dbd, &egd, &betad);
        }
    }

    ring_scalars(sh.decay, sh.beta, ringA, ringBeta, tid, n, VE, egj, betaj, [&](int i) { return rs_at(s, j, i); });
    if (FOLDS_EARLY(n, cnt, R)) {
        // The ring's keys and, folding the cached u (FOLD_CACHED_ON), its u
        // rows into proj rows 0..n-1, where the fold's recurrence reads them
        // (not from the ring after its projections: a round trip between two
        // barriers). H200, B=256: verify 409 -> 384 us (Qwen3.5-4B fp32), 442
        // -> 424 (bf16), 724 -> 674 (122B fp32), 650 -> 613 (bf16).
        gdn_stage_keys<FOLD_CACHED_ON>(sh.vec, ringK, s, kh, n, sh.proj, ringU, j);
        __syncthreads();
        gdn_fold<FOLD_CACHED_ON>(sh, sh.vec, state + mat * (DV * DK), state_scale(state, mat), state, rcodes, rscales,
                                 rglobal, mat, n, -1, FOLD_CACHED_ON ? sh.proj : ringV + ((u64)s * RMAX * NVH + j) * DV,
                                 FOLD_CACHED_ON ? (u64)DV : (u64)NVH * DV, n, nullptr, nullptr);
        if (FOLD_ONLY) {
            return; // gdn_group_verify reads the new checkpoint like any other slot's
        }
        // New checkpoint and read copy visible to the CTA, read back below.
        __syncthreads();
        n = 0;
    }
    if constexpr (FOLD_ONLY) {
        // Unreachable (a slot that does not fold returned above), but the
        // compiler does not see it: without this return the fold kernel
        // (gdn_replay_fold_items) carried the verify's code below and its
        // registers (ptxas 11.8, Qwen3.5-4B: fp32 a 128-byte stack frame
        // and 48 / 68 bytes of spill stores / loads -> none; bf16 96 and
        // 8 / 8 -> 8 and 8 / 8).
        return;
    }
    // The committed ring keys to vec rows 2cnt.. (n + 2cnt <= R after any
    // early fold, so they fit), then the drafts' k and q normalised:
    // vec[d] = k_d, vec[cnt+d] = q_d.
    gdn_stage_keys(sh.vec + 2 * cnt * DK, ringK, s, kh, n);
    if constexpr (VE) {
        // l2norm_warp's arithmetic on the lane's share asked for early:
        // k_d to vec row d, q_d to row cnt + d.
        const int lane = tid & 31;
#pragma unroll
        for (int c = 0; c < VPW; c++) {
            const int w = warp + c * NWARPS;
            const bool isk = w < T;
            const int d = isk ? w : w - T;
            if (w < 2 * T && d < cnt) {
                const float r = l2norm_scale(kq[c], isk ? 1.0f : qscale);
                float* dst = sh.vec + (isk ? d : cnt + d) * DK;
#pragma unroll
                for (int m = 0; m < L2V; m++) {
                    if (lane + 32 * m < DK) {
                        dst[lane + 32 * m] = kq[c][m] * r;
                    }
                }
            }
        }
    } else {
        for (int w = warp; w < 2 * cnt; w += NWARPS) {
            const int d = w % cnt;
            if (w < cnt) {
                l2norm_warp(sh.vec + d * DK, k + (((u64)b * T + d) * NKH + kh) * DK, 1.0f);
            } else {
                l2norm_warp(sh.vec + w * DK, q + (((u64)b * T + d) * NKH + kh) * DK, qscale);
            }
        }
    }
    if (tid < cnt) {
        const int d = tid;
        float eg, beta;
        if constexpr (VE && SCALARS_EARLY) {
            eg = egd;
            beta = betad;
        } else if constexpr (VE) {
            gdn_scalars(ad, bd, nAd, dbd, &eg, &beta);
        } else {
            gdn_scalars(a[((u64)b * T + d) * NVH_REAL + HEAD(j)], bb[((u64)b * T + d) * NVH_REAL + HEAD(j)],
                        negA[HEAD(j)], dtb[HEAD(j)], &eg, &beta);
        }
        sh.decay[n + d] = eg;
        sh.beta[n + d] = beta;
        ringA[rs_at(s, j, n + d)] = eg;
        ringBeta[rs_at(s, j, n + d)] = beta;
    }
    if constexpr (VE) {
#pragma unroll
        for (int it = 0; it < VD; it++) {
            const int idx = tid + it * NT;
            if (idx < cnt * DV) {
                ringV[(ring_at(s, n + idx / DV) * NVH + j) * DV + idx % DV] = vd[it];
            }
        }
    } else {
        load_then_store<(TMAX * DV + NT - 1) / NT, NT>(
            cnt * DV, [&](int idx) { return v[(((u64)b * T + idx / DV) * NVH + j) * DV + idx % DV]; },
            [&](int idx, float vv) { ringV[(ring_at(s, n + idx / DV) * NVH + j) * DV + idx % DV] = vv; });
    }
#if READ_FMT == FMT_NVFP4
    init_e2m1_lut(sh.lut);
#endif
    __syncthreads();
    if (j % VPK == 0) {
        for (int idx = tid; idx < cnt * DK; idx += NT) {
            const int d = idx / DK, e = idx % DK;
            ringK[(ring_at(s, n + d) * NKH + kh) * DK + e] = sh.vec[idx];
        }
    }
    // gram[d][i] = k_i . k_d (i < n+d), gram[TMAX+d][i] = k_i . q_d
    // (i <= n+d), eight lanes per pair, every vector in shared memory.
    const int W = n + cnt;
    dot_pairs(
        2 * cnt * W, DK, tid, NT,
        [&](int pr) -> const float* {
            const int row = pr / W, i = pr % W, d = row % cnt;
            if (row >= cnt ? i > n + d : i >= n + d) {
                return nullptr;
            }
            return sh.vec + (i < n ? 2 * cnt + i : i - n) * DK;
        },
        [&](int pr) -> const float* { return sh.vec + (pr / W) * DK; },
        [&](int pr, float v) {
            const int row = pr / W;
            sh.gram[((row >= cnt ? TMAX : 0) + row % cnt) * VROWS + pr % W] = v;
        });
    if (tid < cnt) {
        const int d = tid;
        double suf = 1.0;
        for (int i = n + d; i >= 0; i--) {
            sh.ws[d * (RMAX + 1) + i] = (float)suf;
            suf *= (double)sh.decay[i];
        }
        sh.gam[d] = (float)suf;
    }
    dots_read<2 * TMAX>(state, rcodes, rscales, rglobal, mat, sh.vec, DK, 2 * cnt, sh.proj, sh.lut);
    __syncthreads();
    for (int m = tid; m < DV; m += NT) {
        float uloc[RMAX]; // the ring's u_i[m], all loads in flight at once
#pragma unroll
        for (int i = 0; i < RMAX; i++) {
            uloc[i] = i < n ? ringU[(ring_at(s, i) * NVH + j) * DV + m] : 0.0f;
        }
        for (int d = 0; d < cnt; d++) {
            const int tp = n + d;
            const float gam = sh.gam[d];
            const float* ws = sh.ws + d * (RMAX + 1);
            const float* gk = sh.gram + d * VROWS;
            const float* gq = sh.gram + (TMAX + d) * VROWS;
            float ut = v[(((u64)b * T + d) * NVH + j) * DV + m] - gam * sh.proj[d * DV + m];
            float ov = gam * sh.proj[(cnt + d) * DV + m];
            // Indexed by the loop variable, uloc is an 80-byte local array
            // (ptxas 11.8, Qwen3.5-4B): each ringU load waits at its store
            // to local memory. The loop unrolled over the ring keeps uloc in
            // registers (156 fp32 / 166 bf16), but the early verify was
            // slower so on the H200 (batch 1 Qwen3.5-4B fp32 13.9 against
            // 13.0 us a verify, bf16 14.9 against 14.1; 122B 15.0 / 14.2,
            // 16.4 / 15.6; batch 4 0.7-2.8 us slower).
            for (int i = 0; i < tp; i++) {
                const float ui = i < n ? uloc[i] : sh.ud[(i - n) * DV + m];
                ut = fmaf(-(ws[i] * gk[i]), ui, ut);
                ov = fmaf(ws[i] * gq[i], ui, ov);
            }
            ut = ut * sh.beta[tp];
            ov = fmaf(ws[tp] * gq[tp], ut, ov);
            sh.ud[d * DV + m] = ut;
            ringU[(ring_at(s, tp) * NVH + j) * DV + m] = ut;
            o[(((u64)b * T + d) * NVH + j) * DV + m] = ov;
        }
    }
}

// With SPLIT_VERIFY the split module has gdn_replay_verify too (the
// drafts' a, b, A and dt_bias by the real head, as in the small step).
#if REPLAY_KERNELS && (HSPLIT == 1 || SPLIT_VERIFY)
extern "C" __global__ void __launch_bounds__(NT) gdn_replay_verify(GDN_VERIFY_PARAMS)
{
    gdn_verify_impl<false>(GDN_VERIFY_ARGS, blockIdx.x, blockIdx.y);
}

// gdn_replay_verify_early is gdn_replay_verify with its inputs asked for
// before the slot's cursor, for small batches (replay_common.cu).
extern "C" __global__ void __launch_bounds__(NT) gdn_replay_verify_early(GDN_VERIFY_PARAMS)
{
    gdn_verify_impl<false, true>(GDN_VERIFY_ARGS, blockIdx.x, blockIdx.y);
}
#endif

// gdn_replay_fold_items folds the committed history of the slots that fold
// early on a grid of the blocks the GPU holds at once: each block reads NT
// items' cursors at once and folds the ones that fold early in turn
// (work_items, the flush kernel's scheme; 2-5% faster verifies than one
// block per (value head, batch row), four in five of them returning at
// once in a verify of 4 drafts).
__device__ __noinline__ void gdn_fold_early_item(GDN_VERIFY_PARAMS, int j, int b)
{
    gdn_verify_impl<true>(GDN_VERIFY_ARGS, j, b);
}

#if WHOLE_REPLAY // the split module takes only the small step
extern "C" __global__ void __launch_bounds__(NT, FLUSH_MINB) gdn_replay_fold_items(GDN_VERIFY_PARAMS, int batch)
{
    fold_items(slots, hist, counts, T, R, batch, NVH, [&](int j, int b) { gdn_fold_early_item(GDN_VERIFY_ARGS, j, b); });
}
#endif

// ---- the verify's early folds, streamed (FOLD_STREAM) ----
//
// gdn_fold_stream folds the history of the slots that fold early in a
// verify where that fold is the rank-n update from the ring's cached u on
// the tensor cores (FOLD_CACHED_ON, TC_FOLD_ON):
//
//	S0 <- g_n S0 + sum_{i<n} (coef_i u_i) (x) k_i
//
// with gdn_fold's operands, the same mma sequence for each 16-row strip
// (gdn_update_tc's: the strip's A fragments coef_i u_i, B the keys, the
// entries in steps of 8, zeros past n) and store_state's rounding, so the
// new checkpoint is gdn_replay_fold_items' bit for bit. That kernel holds
// a whole matrix in the registers of 256 threads (two blocks an SM) and
// waits through each item's chain of cursor, ring and barrier round trips
// before its loads (the folds ran at about half of copy bandwidth). Here
// an item is FS_WARPS strips of 16 rows of one value head: each warp's
// strip comes into shared memory by one bulk copy, the item's keys by the
// block's cp.async, and no state sits in registers beyond the chunk being
// updated, so several blocks an SM keep their strips in flight. The next
// item's decays and cached u are asked for before this one folds, and with
// FS_DB (2-byte checkpoints) its strips and keys too, into a second
// buffer. Every block reads the cursors of the whole batch (fs_list,
// FS_CHUNK slots at a time), lists the folding slots in order and takes
// every gridDim.x-th item of the list, so the blocks' shares differ by at
// most one item. FOLD_STREAM is set by the Go side (gdnModule) where these
// conditions hold. H200, B=256, T=4, against gdn_replay_fold_items: the
// verify 386 -> 362 us (Qwen3.5-4B fp32), 286 -> 258 (bf16); 122B 675 ->
// 628, 468 -> 411. The next item asked for ahead and FS_DB then: 4B bf16
// 253 -> 249, 122B bf16 411 -> 398 (fp32 within 1%).
#ifndef FOLD_STREAM
#define FOLD_STREAM 0
#endif
#ifndef FLUSH_STREAM
#define FLUSH_STREAM 0
#endif
#ifndef FS_WARPS
#define FS_WARPS 4
#endif
// FL_WARPS: gdn_flush_stream's warps a block, strips of 16 rows each (the
// Go side: 8 for 2-byte checkpoints, FS_WARPS otherwise).
#ifndef FL_WARPS
#define FL_WARPS FS_WARPS
#endif
// FS_CHUNK: the slots whose cursors a block of W warps lists at a time
// (FS_CHUNK_OF(W): at most its threads; tests set a few, so that a small
// batch spans several chunks).
#ifdef FS_CHUNK
#define FS_CHUNK_OF(W) (FS_CHUNK)
#else
#define FS_CHUNK_OF(W) (32 * (W))
#endif
#if (FOLD_STREAM || FLUSH_STREAM) && HSPLIT == 1
#if !(TC_FOLD_ON && FOLD_CACHED_ON && STATE_FMT != FMT_E4M3 && __CUDA_ARCH__ >= 900)
#error "FOLD_STREAM, FLUSH_STREAM: need the tensor-core fold of cached u (TC_FOLD_ON, FOLD_CACHED_ON), an unscaled checkpoint and sm_90"
#endif
#if FOLD_STREAM && !(DV % (16 * FS_WARPS) == 0 && FS_CHUNK_OF(FS_WARPS) <= 32 * FS_WARPS)
#error "FOLD_STREAM: DV must be a multiple of 16*FS_WARPS and FS_CHUNK at most 32*FS_WARPS"
#endif
#if FLUSH_STREAM && !(DV % (16 * FL_WARPS) == 0 && FS_CHUNK_OF(FL_WARPS) <= 32 * FL_WARPS)
#error "FLUSH_STREAM: DV must be a multiple of 16*FL_WARPS and FS_CHUNK at most 32*FL_WARPS"
#endif
#define FS_ROWS (16 * FS_WARPS)
// FL_PAD=1 (the Go side sets it for 2-byte checkpoints beside 64-thread group
// steps) pads gdn_flush_stream's shared rows so that a warp's TCMap loads fall
// in distinct banks: a strip row by 16 elements (the next row's four lanes
// start 8 banks on for 2-byte rows, whose 8-byte loads a half warp takes as
// one wavefront), a key row by 8 floats (update_tc_tile's float2 loads of rows
// 8ks + lt). Packed, every row of a strip or of the keys starts at bank 0
// (rows of 256 bytes, keys of 512): a strip load took four wavefronts where
// one does, a key load four, and the flush reads its strip twice (projections,
// update). The rows then come by one bulk copy each (lanes 0-15 of the warp).
// H200, B=256, against packed rows, us: bf16 aligned flush Qwen3.5-4B 302 ->
// 271, 122B 579 -> 532, staggered windows 120 -> 113 but 122B 198 -> 202 (its
// non-flush step, whose graph holds the empty flush beside it, 170 -> 176: the
// padded flush's 50 KB blocks); fp32 (16-byte loads, two-way conflicts) flush
// 362 -> 371, 699 -> 711; the verify's early folds (gdn_fold_stream) padded
// too, bf16 verify 248 -> 253, 397 -> 413: they keep packed rows.
#ifndef FL_PAD
#define FL_PAD 0
#endif
// FL_FEW (replay_common.cu, flushing_slots) for gdn_flush_stream: the
// flush's resident grid (four blocks an SM) held every SM for the
// staggered step's first 18-42 us (block timelines). Bounding the grid to
// 132 blocks took the Qwen3.5-4B fp32 window 177 -> 174 us but its aligned
// flush 359 -> 850; FL_FEW applies to the staggered steps alone. (Blocks
// taking their items from an atomic counter, not by block index, cost the
// flush queued first its atomics: bf16 aligned flush 269 -> 297 us,
// Qwen3.5-4B, window 113 -> 120.)
#define FS_SROW(P) (DK + ((P) ? 16 : 0)) // a strip row in shared memory, elements
#define FS_KROW(P) (DK + ((P) ? 8 : 0))  // a key row in shared memory, floats
#define FS_STRIP_BYTES(P) (16 * FS_SROW(P) * FMT_SIZE(STATE_FMT)) // a warp's 16 rows in shared memory
// FS_DB=1 (the Go side sets it for 2-byte checkpoints) gives each block
// two buffers of strips and keys: the next item's copies are in flight
// while one folds, where with one buffer they wait for its end.
#ifndef FS_DB
#define FS_DB 0
#endif
#define FS_NB (FS_DB ? 2 : 1)
#define FS_KS ((RMAX + 7) / 8) // gdn_update_tc's steps of 8 entries

// fs_list lists the slots of batch rows [base, base + FS_CHUNK_OF(W)) for
// which need(row, history) holds, in batch order (ballots, not atomics:
// every block must list them alike), with their histories (sSlot, sN) and,
// where sB is not null, their batch rows, and returns how many. Barriers
// inside: every thread of the block (W warps) calls it.
template <int W, typename P>
__device__ __forceinline__ int fs_list(int base, int batch, const int* __restrict__ slots, const int* hist, P need,
                                       int* sSlot, int* sN, int* sB, int* sCount)
{
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int bq = base + tid;
    int s = 0, n = 0;
    bool f = false;
    if (tid < FS_CHUNK_OF(W) && bq < batch) {
        s = slots[bq];
        n = hist[s];
        f = need(bq, n);
    }
    const u32 ball = __ballot_sync(FULL_MASK, f);
    if (lane == 0) {
        sCount[warp] = __popc(ball);
    }
    __syncthreads();
    int off = 0, total = 0;
#pragma unroll
    for (int w = 0; w < W; w++) {
        off += w < warp ? sCount[w] : 0;
        total += sCount[w];
    }
    if (f) {
        const int at = off + __popc(ball & ((1u << lane) - 1u));
        sSlot[at] = s;
        sN[at] = n;
        if (sB != nullptr) {
            sB[at] = bq;
        }
    }
    __syncthreads();
    return total;
}

// fs_update_strip is the rank-t update of a warp's strip (gdn_update_tc's
// operands and order: S0 <- gt S0, then update_tc_tile over the entries in
// steps of 8, keys the rows of k_i) from its shared-memory copy, stored to
// rows row0.. of the matrix at dst.
template <bool P>
__device__ __forceinline__ void fs_update_strip(const unsigned char* strip, ST* dst, int row0, const float* keys,
                                                int t, float gt, const u32 (&ahi)[FS_KS][4], const u32 (&alo)[FS_KS][4])
{
    const int lane = threadIdx.x & 31, g = lane >> 2, lt = lane & 3;
    const int bcol = 4 * (g >> 1) + 2 * (g & 1);
#pragma unroll 2
    for (int cc = 0; cc < DK / 16; cc++) {
        float x[2][4];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            load_chunk<STATE_FMT, 4>(strip, (u64)(g + 8 * h) * FS_SROW(P) + 16 * cc + 4 * lt, x[h], 1.0f);
#pragma unroll
            for (int e = 0; e < 4; e++) {
                x[h][e] = gt * x[h][e];
            }
        }
#pragma unroll
        for (int ks = 0; ks < FS_KS; ks++) {
            if (8 * ks < t) {
                const int i0 = 8 * ks + lt, i1 = i0 + 4;
                const bool in0 = i0 < t, in1 = i1 < t;
                update_tc_tile(x[0], x[1], keys + (in0 ? i0 : 0) * FS_KROW(P) + bcol + 16 * cc,
                               keys + (in1 ? i1 : 0) * FS_KROW(P) + bcol + 16 * cc, in0, in1, ahi[ks], alo[ks]);
            }
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            store_chunk<STATE_FMT, 4>(dst, (u64)(row0 + g + 8 * h) * DK + 16 * cc + 4 * lt, x[h], 1.0f, 1.0f);
        }
    }
}

// fs_chains forms gdn_fold's float64 decay chains on one warp, lane m
// holding entry m's decay d: lane i's coef_i = prod_{i<m<t} d_m and every
// lane's g = prod_{m<t} d_m, in ascending m (gdn_fold's order), each factor
// by a shuffle (the same floats a shared table of the decays gives).
__device__ __forceinline__ void fs_chains(float d, int t, double& c, double& gp)
{
    const int lane = threadIdx.x & 31;
    c = 1.0;
    gp = 1.0;
#pragma unroll
    for (int m = 0; m < RMAX; m++) {
        const double dm = (double)__shfl_sync(FULL_MASK, d, m & 31);
        if (m > lane && m < t) {
            c *= dm;
        }
        if (m < t) {
            gp *= dm;
        }
    }
}

// FSItem is one item of gdn_fold_stream as a lane holds it: the slot, its
// history n, the value head and part, and the loads its prologue waits on
// (asked for before the item before it folds, with FS_DB): the decay of
// entry lane and the cached u of the lane's A operands (rows g and g+8 of
// the warp's strip, entries 8ks + lt and + 4).
struct FSItem {
    int s, n, j, part;
    float dec;
    float uu[FS_KS][4];
};

template <int W>
__device__ __forceinline__ FSItem fs_item(const int* sSlot, const int* sN, int li, int warp, int lane,
                                          const float* __restrict__ ringA, const float* __restrict__ ringU)
{
    constexpr int PARTS = DV / (16 * W);
    constexpr int PER = NVH * PARTS;
    const int g = lane >> 2, lt = lane & 3;
    FSItem it;
    it.s = sSlot[li / PER];
    it.n = sN[li / PER];
    it.j = li % PER / PARTS;
    it.part = li % PARTS;
    const int row = it.part * 16 * W + 16 * warp + g;
#pragma unroll
    for (int ks = 0; ks < FS_KS; ks++) {
        const int i0 = 8 * ks + lt, i1 = i0 + 4;
        const float* u0 = ringU + (ring_at(it.s, i0) * NVH + it.j) * DV + row;
        const float* u1 = ringU + (ring_at(it.s, i1) * NVH + it.j) * DV + row;
        it.uu[ks][0] = i0 < it.n ? u0[0] : 0.0f;
        it.uu[ks][1] = i0 < it.n ? u0[8] : 0.0f;
        it.uu[ks][2] = i1 < it.n ? u1[0] : 0.0f;
        it.uu[ks][3] = i1 < it.n ? u1[8] : 0.0f;
    }
    it.dec = lane < it.n && lane < RMAX ? ringA[rs_at(it.s, it.j, lane)] : 0.0f;
    return it;
}

// fs_issue asks for item it's strips (lane 0 of each of the W warps, one
// bulk copy on the warp's barrier) into strip buffer sbuf and its ring keys
// into kbuf (the block's cp.async, one group). The buffers' last reads are
// behind a __syncthreads, as the pipelined folds' consumers release a
// stage.
template <int W, bool P>
__device__ __forceinline__ void fs_issue(const ST* state, const float* __restrict__ ringK, const FSItem& it,
                                         unsigned char* sbuf, float* kbuf, u64* bar, int tid)
{
    const int warp = tid >> 5;
    if ((tid & 31) == 0) {
        const u64 e = ((u64)it.s * NVH + it.j) * (DV * DK) + (u64)(it.part * 16 * W + 16 * warp) * DK;
        mbar_arrive_tx(bar, 16 * DK * FMT_SIZE(STATE_FMT));
        if (!P) {
            bulk_g2s(sbuf + warp * FS_STRIP_BYTES(P),
                     reinterpret_cast<const unsigned char*>(state) + e * FMT_SIZE(STATE_FMT), FS_STRIP_BYTES(P), bar);
        }
    }
    if (P) {
        // A row a lane (the expected bytes are on the barrier first: a
        // copy that lands before them would still leave its phase open,
        // but the order costs nothing).
        __syncwarp();
        if ((tid & 31) < 16) {
            const int r = tid & 31;
            const u64 e = ((u64)it.s * NVH + it.j) * (DV * DK) + (u64)(it.part * 16 * W + 16 * warp + r) * DK;
            bulk_g2s(sbuf + warp * FS_STRIP_BYTES(P) + r * FS_SROW(P) * FMT_SIZE(STATE_FMT),
                     reinterpret_cast<const unsigned char*>(state) + e * FMT_SIZE(STATE_FMT), DK * FMT_SIZE(STATE_FMT),
                     bar);
        }
    }
    cp_rows<DK>(kbuf, FS_KROW(P), ringK + (ring_at(it.s, 0) * NKH + it.j / VPK) * DK, NKH * DK, it.n, tid, 32 * W);
    cp_async_commit();
}

// fs_ahead reads item li of the list (fs_item) and asks for its copies
// (fs_issue) into buffer b: its strips at dyn's b-th, its keys at kbuf
// (that buffer's), on the W warps' barriers bar[b].
template <int W, bool P>
__device__ __forceinline__ FSItem fs_ahead(const int* sSlot, const int* sN, int li, int b, const ST* state,
                                           const float* __restrict__ ringA, const float* __restrict__ ringU,
                                           const float* __restrict__ ringK, unsigned char* dyn, float* kbuf,
                                           u64 (*bar)[W])
{
    const int tid = threadIdx.x, warp = tid >> 5;
    const FSItem it = fs_item<W>(sSlot, sN, li, warp, tid & 31, ringA, ringU);
    fs_issue<W, P>(state, ringK, it, dyn + b * (W * FS_STRIP_BYTES(P)), kbuf, &bar[b][warp], tid);
    return it;
}

#if FOLD_STREAM
// gdn_fold_stream (above): its registers are bounded for 4 blocks an SM (ptxas
// 11.8, Qwen3.5-4B: 125-129 registers unbounded, 126-128 without spills at 4;
// shared memory allows 5 blocks of one fp32 buffer, 4 of two bf16 ones).
extern "C" __global__ void __launch_bounds__(32 * FS_WARPS, 4) gdn_fold_stream(GDN_VERIFY_PARAMS, int batch)
{
    constexpr int NTH = 32 * FS_WARPS;
    constexpr int PER = NVH * (DV / FS_ROWS); // items a folding slot
    extern __shared__ __align__(128) unsigned char fs_dyn[]; // FS_NB buffers of FS_WARPS strips
    __shared__ __align__(16) float sK[FS_NB][RMAX * DK];     // the items' ring keys
    __shared__ __align__(8) u64 sBar[FS_NB][FS_WARPS];
    __shared__ int sSlot[NTH], sN[NTH]; // the chunk's folding slots and their histories
    __shared__ int sCount[FS_WARPS];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, lt = lane & 3;
    if (lane < FS_NB) {
        mbar_init(&sBar[lane][warp], 1);
        mbar_fence_init();
    }
    __syncwarp();
    u32 parity = 0; // bit k: the phase of buffer k's next copy
    int seen = 0;   // folding items listed before this chunk of slots
    for (int base = 0; base < batch; base += FS_CHUNK_OF(FS_WARPS)) {
        const int total = fs_list<FS_WARPS>(
            base, batch, slots, hist, [&](int bq, int n) { return FOLDS_EARLY(n, counts ? counts[bq] : T, R); }, sSlot,
            sN, nullptr, sCount);
        const int items = total * PER;
        const int grid = (int)gridDim.x;
        // Item li's copies into buffer b (fs_ahead).
        auto ahead = [&](int li, int b) {
            const FSItem it =
                fs_ahead<FS_WARPS, false>(sSlot, sN, li, b, state, ringA, ringU, ringK, fs_dyn, sK[b], sBar);
            return it;
        };
        int li = ((int)blockIdx.x - seen % grid + grid) % grid;
        int kb = 0; // the buffer of the block's next item
        FSItem next;
        if (li < items) {
            next = ahead(li, 0);
        }
        for (; li < items; li += grid) {
            const FSItem it = next;
            const int cb = kb, n = it.n;
            const bool more = li + grid < items;
            cp_async_wait_all();
            __syncthreads(); // its keys; every warp is done with the item before
            if (FS_NB == 2 && more) {
                next = ahead(li + grid, cb ^ 1);
            }
            // gdn_fold's float64 chains, in its order: coef_i (lane i) and
            // g_n (every lane).
            double c, gp;
            fs_chains(it.dec, n, c, gp);
            const float coef = (float)c, gt = (float)gp;
            u32 ahi[FS_KS][4], alo[FS_KS][4];
#pragma unroll
            for (int ks = 0; ks < FS_KS; ks++) {
                const int i0 = 8 * ks + lt, i1 = i0 + 4;
                const float c0 = __shfl_sync(FULL_MASK, coef, i0 & 31), c1 = __shfl_sync(FULL_MASK, coef, i1 & 31);
                const float a[4] = {
                    i0 < n ? c0 * it.uu[ks][0] : 0.0f,
                    i0 < n ? c0 * it.uu[ks][1] : 0.0f,
                    i1 < n ? c1 * it.uu[ks][2] : 0.0f,
                    i1 < n ? c1 * it.uu[ks][3] : 0.0f,
                };
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    tf32_split_fast(a[e], ahi[ks][e], alo[ks][e]);
                }
            }
            mbar_wait(&sBar[cb][warp], (parity >> cb) & 1);
            parity ^= 1u << cb;
            const unsigned char* const strip =
                fs_dyn + cb * (FS_WARPS * FS_STRIP_BYTES(false)) + warp * FS_STRIP_BYTES(false);
            fs_update_strip<false>(strip, state + ((u64)it.s * NVH + it.j) * (DV * DK), it.part * FS_ROWS + 16 * warp,
                                   sK[cb], n, gt, ahi, alo);
            if (FS_NB == 1 && more) {
                __syncthreads(); // the keys and strips read before the next item's copies
                next = ahead(li + grid, 0);
            }
            kb = (kb + 1) % FS_NB;
        }
        seen += items;
        __syncthreads(); // the list read, every item folded, before the next chunk's
    }
}
#endif // FOLD_STREAM

#if FLUSH_STREAM
// fs_tables forms a flush item's scalar tables on one warp, lane i for
// entry i: the token's exp(g) and beta (gdn_scalars, lane 31), the entry
// decays (dec: the ring's entry lane, fs_item's; the token's at n), then
// gdn_fold's float64 chains in its loops and order, each factor by a
// shuffle (the same floats as gdn_fold's shared decay table gives them): wt and
// eg of entry n (lane n), coef_i (lanes i <= n, fs_chains) and g_t (lane
// 0).
__device__ __forceinline__ void fs_tables(float dec, int n, float a, float b, double negA, double dtb, float* sWt,
                                          float* sCoef, float* sEg, float* sGt, float* sBeta)
{
    const int lane = threadIdx.x & 31, t = n + 1;
    float eg = 0.0f, beta = 0.0f;
    if (lane == 31) {
        gdn_scalars(a, b, negA, dtb, &eg, &beta);
        *sBeta = beta;
    }
    eg = __shfl_sync(FULL_MASK, eg, 31);
    const float d = lane < n ? dec : eg; // entry lane's decay (lanes past t unused)
    const int i = lane;
    double w = 1.0, c, gp;
#pragma unroll
    for (int l = RMAX - 2; l >= 0; l--) {
        const double dl = (double)__shfl_sync(FULL_MASK, d, (l + 1) & 31);
        if (l < i && i < t) {
            w *= dl;
            if (i == n) {
                sWt[l] = (float)w;
            }
        }
    }
    fs_chains(d, t, c, gp);
    const double d0 = (double)__shfl_sync(FULL_MASK, d, 0);
    if (i == n) {
        *sEg = (float)(w * d0);
    }
    if (i < t) {
        sCoef[i] = (float)c;
    }
    if (lane == 0) {
        *sGt = (float)gp;
    }
}

// gdn_flush_stream is gdn_replay_flush where the flush is the fold from
// cached u on the tensor cores (the conditions gdn_fold_stream takes), in
// gdn_fold_stream's items: every part of that flush is a row's own given
// the item's vectors and tables (S0[r].k_n and S0[r].q, u'_n[r] from the
// row's cached u, o[r], the rank update of row r), so a warp flushes its
// strip of 16 rows from shared memory. The block forms the item's tables
// as gdn_step and gdn_fold do (the token's k and q normalised into rows n
// and t of the keys, its exp(g) and beta, the gram dots of k_n and q, the
// float64 decay chains); each warp then projects its rows (fold_project's
// order under TCMap), forms u'_n and o for them (lanes lt = 0 and 1, rows
// g and g+8), and updates them with gdn_update_tc's operands and order, so
// the checkpoint and outputs are gdn_replay_flush's bit for bit. The Go
// side takes it where it applies; H200, B=256, the aligned flush against
// gdn_replay_flush, us: Qwen3.5-4B fp32 464 -> 366, bf16 411 -> 359; 122B
// 912 -> 708, 808 -> 701. Its items are FL_WARPS strips (8 for 2-byte
// checkpoints: bf16 aligned flush 364 -> 302, 122B 708 -> 573, against 4).
// Its registers are bounded for 4 blocks an SM (at eight warps, 64
// registers: no spills, ptxas 11.8).
extern "C" __global__ void __launch_bounds__(32 * FL_WARPS, 4) gdn_flush_stream(GDN_STEP_PARAMS)
{
    constexpr int NTH = 32 * FL_WARPS;
    constexpr int FL_ROWS = 16 * FL_WARPS;    // an item's rows
    constexpr int PER = NVH * (DV / FL_ROWS); // items a flushing slot
    constexpr int CPL = DK / 16;              // TCMap's chunks of a row
    extern __shared__ __align__(128) unsigned char fs_dyn[]; // FL_WARPS strips
    __shared__ __align__(16) float sVec[(RMAX + 1) * FS_KROW(FL_PAD)]; // k_0..k_n, then q in row t = n+1
    __shared__ float sWt[RMAX], sCoef[RMAX], sGK[RMAX], sGQ[RMAX];
    __shared__ float sEg, sBeta, sGt;
    __shared__ __align__(8) u64 sBar[1][FL_WARPS];
    __shared__ int sSlot[NTH], sN[NTH], sB[NTH];
    __shared__ int sCount[FL_WARPS];
#if FL_FEW
    // sFew: 0, every block takes items; 1, the step's items go to the
    // first FL_KEEP blocks, this one among them; 2, this block takes none
    // (it lists nothing: its loop ends at once). Read from shared memory:
    // kept in registers across the item loop they spilled the bf16
    // flush's 64 more (ptxas 11.8: 168 bytes against 72).
    __shared__ int sFew;
    const bool few = flush_few<NTH>(batch, hist, slots, L, PER);
    if (threadIdx.x == 0) {
        sFew = few ? ((int)blockIdx.x >= FL_KEEP ? 2 : 1) : 0;
    }
    __syncthreads();
    const int listed = sFew == 2 ? 0 : batch; // the batch rows the block lists
#else
    const int listed = batch;
#endif
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, lt = lane & 3;
    const unsigned char* const strip = fs_dyn + warp * FS_STRIP_BYTES(FL_PAD);
    if (lane == 0) {
        mbar_init(&sBar[0][warp], 1);
        mbar_fence_init();
    }
    __syncwarp();
    u32 parity = 0; // the phase of the strips' next copy
    int seen = 0;   // flushing items listed before this chunk of slots
    for (int base = 0; base < listed; base += FS_CHUNK_OF(FL_WARPS)) {
        const int total =
            fs_list<FL_WARPS>(base, batch, slots, hist, [&](int, int n) { return n + 1 >= L; }, sSlot, sN, sB, sCount);
        const int items = total * PER;
#if FL_FEW
        const int grid = sFew == 1 ? FL_KEEP : (int)gridDim.x; // the blocks that take items
#else
        const int grid = (int)gridDim.x;
#endif
        const int r = ((int)blockIdx.x - seen % grid + grid) % grid;
        for (int li = r; li < items; li += grid) {
            // The item's strips and ring keys (keys 0..n-1 in rows 0..n-1)
            // asked for, the A operands' cached u and the entry decays
            // loaded (fs_item: lane i of each warp holds entry i's). One
            // buffer: two (FS_DB, the next item's copies in flight during
            // this one) measured no faster for bf16 and slower for fp32.
            const FSItem it =
                fs_ahead<FL_WARPS, FL_PAD>(sSlot, sN, li, 0, state, ringA, ringU, ringK, fs_dyn, sVec, sBar);
            const int s = it.s, n = it.n, j = it.j, b = sB[li / PER], kh = j / VPK;
            const int t = n + 1;
            const u64 mat = (u64)s * NVH + j;
            const int row0 = it.part * FL_ROWS + 16 * warp; // the warp's strip
            // The token's k (warp 0) and q (warp 1) normalised as gdn_step
            // does, its exp(g) and beta (the last thread), the ring's decays.
            if (warp < 2) {
                float tv[L2V];
                l2norm_load(warp == 0 ? k + ((u64)b * NKH + kh) * DK : q + ((u64)b * NKH + kh) * DK, tv);
                const float r = l2norm_scale(tv, warp == 0 ? 1.0f : qscale);
                float* dst = sVec + (warp == 0 ? n : t) * FS_KROW(FL_PAD);
#pragma unroll
                for (int m = 0; m < L2V; m++) {
                    if (lane + 32 * m < DK) {
                        dst[lane + 32 * m] = tv[m] * r;
                    }
                }
            }
            // The item's scalar tables by the last warp, before the keys'
            // barrier: formed after it on the block's last threads, the
            // others waited there (ncu: 10.5% of the flush's stall
            // samples); by the warp, 4B fp32 aligned flush 377 -> 360 us,
            // 122B 722 -> 695, bf16 even.
            if (warp == FL_WARPS - 1) {
                fs_tables(it.dec, n, a[(u64)b * NVH + j], bb[(u64)b * NVH + j], negA[j], dtb[j], sWt, sCoef, &sEg, &sGt,
                          &sBeta);
            }
            // The cached u of this lane's recurrence row (lanes lt < 2: row
            // g + 8 lt) and v_t of that row.
            const int rr = row0 + g + 8 * (lt & 1);
            float ur[RMAX];
#pragma unroll
            for (int i = 0; i < RMAX; i++) {
                ur[i] = lt < 2 && i < n ? ringU[(ring_at(s, i) * NVH + j) * DV + rr] : 0.0f;
            }
            const float vr = lt < 2 ? v[((u64)b * NVH + j) * DV + rr] : 0.0f;
            cp_async_wait_all();
            __syncthreads(); // the keys, the token's vectors and scalars
            // gdn_fold's gram dots of k_n and q.
            const float* vi = nullptr;
            dot_pairs(
                n + t, DK, tid, NTH,
                [&](int pr) -> const float* {
                    vi = sVec + (pr < n ? n : t) * FS_KROW(FL_PAD);
                    return sVec + (pr < n ? pr : pr - n) * FS_KROW(FL_PAD);
                },
                [&](int) -> const float* { return vi; },
                [&](int pr, float val) {
                    if (pr < n) {
                        sGK[pr] = val;
                    } else {
                        sGQ[pr - n] = val;
                    }
                });
            __syncthreads(); // the tables
            mbar_wait(&sBar[0][warp], parity);
            parity ^= 1;
            // S0[r].k_n and S0[r].q (fold_project's order under TCMap:
            // the row's four lanes over their chunks, then their sum).
            float pk[2] = {0.0f, 0.0f}, pq[2] = {0.0f, 0.0f};
#pragma unroll
            for (int cc = 0; cc < CPL; cc++) {
                const float4 k4 = *reinterpret_cast<const float4*>(sVec + n * FS_KROW(FL_PAD) + 16 * cc + 4 * lt);
                const float4 q4 = *reinterpret_cast<const float4*>(sVec + t * FS_KROW(FL_PAD) + 16 * cc + 4 * lt);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    float x[4];
                    load_chunk<STATE_FMT, 4>(strip, (u64)(g + 8 * h) * FS_SROW(FL_PAD) + 16 * cc + 4 * lt, x, 1.0f);
                    pk[h] = fmaf(x[0], k4.x, pk[h]);
                    pk[h] = fmaf(x[1], k4.y, pk[h]);
                    pk[h] = fmaf(x[2], k4.z, pk[h]);
                    pk[h] = fmaf(x[3], k4.w, pk[h]);
                    pq[h] = fmaf(x[0], q4.x, pq[h]);
                    pq[h] = fmaf(x[1], q4.y, pq[h]);
                    pq[h] = fmaf(x[2], q4.z, pq[h]);
                    pq[h] = fmaf(x[3], q4.w, pq[h]);
                }
            }
#pragma unroll
            for (int h = 0; h < 2; h++) {
                pk[h] = lanes_sum<4>(pk[h]);
                pq[h] = lanes_sum<4>(pq[h]);
            }
            // u'_n and o of row g + 8 lt on lanes lt < 2 (gdn_fold's
            // expressions, in its order).
            const float gt = sGt;
            float un = 0.0f;
            if (lt < 2) {
                const float pkr = lt == 0 ? pk[0] : pk[1], pqr = lt == 0 ? pq[0] : pq[1];
                float ui = vr - sEg * pkr;
#pragma unroll
                for (int l = 0; l < RMAX; l++) {
                    if (l < n) {
                        const float w = sWt[l] * sGK[l];
                        ui = fmaf(-w, ur[l], ui);
                    }
                }
                un = ui * sBeta;
                float ov = gt * pqr;
#pragma unroll
                for (int i = 0; i < RMAX; i++) {
                    if (i < t) {
                        const float w = sCoef[i] * sGQ[i];
                        ov = fmaf(w, i < n ? ur[i] : un, ov);
                    }
                }
                o[((u64)b * NVH + j) * DV + rr] = ov;
            }
            // The A operands: coef_i u_i of rows g and g+8, u'_n from the
            // lanes that formed it.
            const float un0 = __shfl_sync(FULL_MASK, un, 4 * g), un1 = __shfl_sync(FULL_MASK, un, 4 * g + 1);
            u32 ahi[FS_KS][4], alo[FS_KS][4];
#pragma unroll
            for (int ks = 0; ks < FS_KS; ks++) {
                const int i0 = 8 * ks + lt, i1 = i0 + 4;
                const bool in0 = i0 < t, in1 = i1 < t;
                const float a[4] = {
                    in0 ? sCoef[in0 ? i0 : 0] * (i0 == n ? un0 : it.uu[ks][0]) : 0.0f,
                    in0 ? sCoef[in0 ? i0 : 0] * (i0 == n ? un1 : it.uu[ks][1]) : 0.0f,
                    in1 ? sCoef[in1 ? i1 : 0] * (i1 == n ? un0 : it.uu[ks][2]) : 0.0f,
                    in1 ? sCoef[in1 ? i1 : 0] * (i1 == n ? un1 : it.uu[ks][3]) : 0.0f,
                };
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    tf32_split_fast(a[e], ahi[ks][e], alo[ks][e]);
                }
            }
            // The rank-t update of the strip (gdn_update_tc's), stored.
            fs_update_strip<FL_PAD>(strip, state + mat * (DV * DK), row0, sVec, t, gt, ahi, alo);
            __syncthreads(); // the tables and strips read before the next item's
        }
        seen += items;
        __syncthreads(); // the list read before the next chunk's
    }
    flush_done(hist, pending, done, slots, batch, L); // gdn_replay_flush's end (OVERLAP: the cursors' count)
}
#endif // FLUSH_STREAM
#endif

// gdn_baseline is the in-place recurrence every step (docs/DESIGN.md 1.2):
// u = beta (v - exp(g) S^T k); S = exp(g) S + k (x) u; o = S^T q, row by row
// (u[m] depends on row m only). With verify, draft k's state goes to buffer
// (cur+1+k) % nb. A bf16 state is rounded after every update.
template <bool VERIFY>
__device__ __forceinline__ void gdn_baseline(ST* state, const int* __restrict__ cur, const int* __restrict__ slots,
             const int* __restrict__ counts, int T, int nb, const float* __restrict__ q, const float* __restrict__ k,
             const float* __restrict__ v, const float* __restrict__ a, const float* __restrict__ bb,
             float* __restrict__ o, const double* __restrict__ negA, const double* __restrict__ dtb, float qscale)
{
    constexpr int KV = BVLEN(DK); // a padded vector (bvpad)
    __shared__ __align__(16) float sK[TMAX * KV];
    __shared__ __align__(16) float sQ[TMAX * KV];
    __shared__ float sDecay[TMAX];
    __shared__ float sBeta[TMAX];
    __shared__ float sScratch[NWARPS];
    __shared__ float sV[BASE_ROW ? DV : 1]; // BASE_ROW: the step's v
    __shared__ __align__(8) u64 sBar;        // BASE_BULK: the stage's copy

    constexpr int VEC = SM::VEC;
    const int j = blockIdx.x, b = blockIdx.y, kh = j / VPK;
    const int tid = threadIdx.x, warp = tid >> 5;
    const int s = slots[b];
    const int cnt = VERIFY ? (counts ? counts[b] : T) : 1;
    const int T1 = VERIFY ? T : 1;
    const int c0 = cur[s];
    const u64 srcm = ((u64)s * nb + c0) * NVH + j;
    ST* src = state + srcm * (DV * DK);
    const ST* stage = nullptr;
    if (!VERIFY && !SIO::SCALED) {
        stage = base_begin(src, &sBar, sV, v + ((u64)b * NVH + j) * DV);
    }

    for (int w = warp; w < 2 * cnt; w += NWARPS) {
        const int d = w % cnt;
        if (w < cnt) {
            l2norm_warp<true>(sK + d * KV, k + (((u64)b * T1 + d) * NKH + kh) * DK, 1.0f);
        } else {
            l2norm_warp<true>(sQ + d * KV, q + (((u64)b * T1 + d) * NKH + kh) * DK, qscale);
        }
    }
    if (tid < cnt) {
        const int d = tid;
        const double sp = softplus_d((double)a[((u64)b * T1 + d) * NVH + j] + dtb[j]);
        sDecay[d] = (float)exp(negA[j] * sp);
        sBeta[d] = (float)sigmoid_d((double)bb[((u64)b * T1 + d) * NVH + j]);
    }
    // BASE_EARLY_ON: pass 0 as stored, asked for before the barrier (the
    // warps that take no part in the prologue ask at once, the two l2 norms'
    // warps when they are done and the norms' float64 registers are free
    // again), and v at pass 0's row, which u needs after the row's first
    // reduction.
    uint4 raw0[SM::CPL];
    float v0 = 0.0f;
    if (BASE_EARLY_ON && !VERIFY && !SIO::SCALED) {
        raw_pass<SM>(src, 0, raw0);
        if (SM::row(0) < ROWS) {
            v0 = v[((u64)b * NVH + j) * DV + SM::row(0)];
        }
    }
    __syncthreads();
    if (!VERIFY && !SIO::SCALED) {
        // One step in place, streaming the state pass by pass (an fp8 state
        // needs the new matrix's amax first: it takes the other path).
        const float eg = sDecay[0], beta = sBeta[0];
        const float* vd = v + ((u64)b * NVH + j) * DV;
        float* od = o + ((u64)b * NVH + j) * DV;
#if BASE_PF
        float en[SM::CPL][VEC];
        load_pass<SIO, SM>(src, 0, en);
#endif
        // update streams pass `pass`, its chunks read where `from` says:
        // 0 here, 1 the prefetched pass (BASE_PF), 2 e as given.
        auto update = [&](int pass, float (&e)[SM::CPL][VEC], int from) {
            const int r = SM::row(pass);
#if BASE_PF
            if (from == 1) {
                next_pass<SIO, SM>(src, pass, e, en);
            }
#endif
            // BASE_EARLY_ON: v[r] asked for with the row's chunks (pass 0:
            // before the barrier), not after the S.k dot that precedes its
            // use, a second round trip every pass (BASE_PF reads it there).
            // BASE_BULK: v staged with the prologue.
            const float vr = BASE_ROW        ? (r < ROWS ? sV[r] : 0.0f)
                             : !BASE_EARLY_ON ? 0.0f
                             : from == 2      ? v0
                             : r < ROWS       ? vd[r]
                                              : 0.0f;
            if (from == 0) {
                load_pass<SIO, SM>(src, pass, e);
            }
            float sk = 0.0f;
#pragma unroll
            for (int c = 0; c < SM::CPL; c++) {
#pragma unroll
                for (int q = 0; q < VEC; q++) {
                    sk = fmaf(e[c][q], sK[bvpad(SM::col(c)) + q], sk);
                }
            }
            sk = lanes_sum<SM::LANES>(sk);
            const float u = r < ROWS ? beta * ((BASE_EARLY_ON || BASE_ROW ? vr : vd[r]) - eg * sk) : 0.0f;
            float ov = 0.0f;
#pragma unroll
            for (int c = 0; c < SM::CPL; c++) {
                const int col = SM::col(c), pc = bvpad(col);
#pragma unroll
                for (int q = 0; q < VEC; q++) {
                    const float xv = eg * e[c][q] + u * sK[pc + q];
                    e[c][q] = xv;
                    ov = fmaf(xv, sQ[pc + q], ov);
                }
                if (r < ROWS) {
                    SIO::store(src, (u64)r * DK + col, e[c], 1.0f, 1.0f);
                }
            }
            ov = lanes_sum<SM::LANES>(ov);
            if (r < ROWS && SM::lane() == 0) {
                od[r] = ov;
            }
        };
        base_stream<SIO, SM>(stage, &sBar, raw0, update);
        return;
    }
    const float sc0 = state_scale(state, srcm);
    float S[SM::PASSES][SM::CPL][VEC];
    load_state<SM>(src, sc0, S);
    for (int d = 0; d < cnt; d++) {
        const u64 dstm = VERIFY ? ((u64)s * nb + (c0 + 1 + d) % nb) * NVH + j : srcm;
        ST* dst = state + dstm * (DV * DK);
        const float eg = sDecay[d], beta = sBeta[d];
        const float* vd = v + (((u64)b * T1 + d) * NVH + j) * DV;
        float* od = o + (((u64)b * T1 + d) * NVH + j) * DV;
        const float* kd = sK + d * KV;
        const float* qd = sQ + d * KV;
#pragma unroll
        for (int pass = 0; pass < SM::PASSES; pass++) {
            const int r = SM::row(pass);
            float sk = 0.0f;
#pragma unroll
            for (int c = 0; c < SM::CPL; c++) {
                const int col = SM::col(c);
#pragma unroll
                for (int e = 0; e < VEC; e++) {
                    sk = fmaf(S[pass][c][e], kd[bvpad(col) + e], sk);
                }
            }
            sk = lanes_sum<SM::LANES>(sk);
            const float u = r < ROWS ? beta * (vd[r] - eg * sk) : 0.0f;
            float ov = 0.0f;
#pragma unroll
            for (int c = 0; c < SM::CPL; c++) {
                const int col = SM::col(c);
#pragma unroll
                for (int e = 0; e < VEC; e++) {
                    const float x = eg * S[pass][c][e] + u * kd[bvpad(col) + e];
                    S[pass][c][e] = x;
                    ov = fmaf(x, qd[bvpad(col) + e], ov);
                }
                if (!SIO::SCALED && r < ROWS) {
                    SIO::store(dst, (u64)r * DK + col, S[pass][c], 1.0f, 1.0f);
                }
            }
            ov = lanes_sum<SM::LANES>(ov);
            if (r < ROWS && SM::lane() == 0) {
                od[r] = ov;
            }
        }
        if (SIO::SCALED) { // fp8: one scale per new matrix, so one store after the update
            store_state_rounded<SM>(S, state, dstm, sScratch);
        }
    }
}

#define GDN_BASELINE_PARAMS                                                                                       \
    ST *state, const int *__restrict__ cur, const int *__restrict__ slots, const int *__restrict__ counts, int T, \
        int nb, const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,            \
        const float *__restrict__ a, const float *__restrict__ bb, float *__restrict__ o,                         \
        const double *__restrict__ negA, const double *__restrict__ dtb, float qscale
#define GDN_BASELINE_ARGS state, cur, slots, counts, T, nb, q, k, v, a, bb, o, negA, dtb, qscale

// The baseline kernels also set the slots' pending drafts (0 after a step,
// the count after a verify; commit reads them): one launch per operation.
#if BASELINE_KERNELS // baseline modules alone, never split
extern "C" __global__ void BASE_BOUNDS gdn_baseline_step(GDN_BASELINE_PARAMS, int* __restrict__ pending)
{
    gdn_baseline<false>(GDN_BASELINE_ARGS);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        pending[slots[blockIdx.y]] = 0;
    }
}
#endif

#if BASELINE_KERNELS // baseline modules alone, never split
extern "C" __global__ void __launch_bounds__(NT) gdn_baseline_verify(GDN_BASELINE_PARAMS, int* __restrict__ pending)
{
    gdn_baseline<true>(GDN_BASELINE_ARGS);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        pending[slots[blockIdx.y]] = counts ? counts[blockIdx.y] : T;
    }
}
#endif

// ---- the pipelined (persistent, bulk-copy) non-flush step ----
//
// gdn_pipe computes what gdn_step<0> computes, bit for bit, for the
// (batch row, value head) items i = blockIdx.x + k*gridDim.x whose window
// does not fill (gdn_replay_flush takes the others); see mamba2_pipe for the
// producer / consumer scheme. A stage holds the checkpoint (or read copy),
// the ring's keys and cached updates, the raw q, k, v of the current token
// and the ring's decay row (the output path needs no ring beta).
#ifdef NSTAGE
#define GS_K (((SMAT_BYTES) + 15) / 16 * 16) // RMAX keys: ring 0..n-1, raw k at n
#define GS_U (GS_K + RMAX * DK * 4)          // ring u 0..n-1
#define GS_Q (GS_U + RMAX * DV * 4)
#define GS_V (GS_Q + DK * 4)
#define GS_A (GS_V + DV * 4)
#define GS_END (GS_A + RMAXP * 4)
static_assert(GS_END <= STAGE_BYTES, "stage layout larger than STAGE_BYTES");

struct GDNScratch {
    float vec[2 * DK];  // normalised k, q
    float proj[2 * DV]; // S0^T k, S0^T q
    float gram[2 * (RMAX + 1)];
    float ws[RMAX + 1];
    float gam, eg, beta, gsc;
    int s, n, b, j, skip;
};
static_assert(sizeof(GDNScratch) <= SCR_BYTES, "scratch larger than SCR_BYTES");

__device__ __forceinline__ void
gdn_pipe(const ST* __restrict__ state, const u8* __restrict__ rcodes, const u8* __restrict__ rscales,
         const float* __restrict__ rglobal, float* __restrict__ ringK, float* __restrict__ ringV,
         float* __restrict__ ringA, float* __restrict__ ringBeta, float* __restrict__ ringU,
         const int* __restrict__ hist, const int* __restrict__ slots, const float* __restrict__ q,
         const float* __restrict__ k, const float* __restrict__ v, const float* __restrict__ a,
         const float* __restrict__ bb, float* __restrict__ o, const double* __restrict__ negA,
         const double* __restrict__ dtb, float qscale, int L, int batch)
{
    extern __shared__ __align__(128) unsigned char dsm[];
    unsigned char* stages = dsm;
    unsigned char* scrBase = dsm + NSTAGE * STAGE_BYTES;
    u64* full = reinterpret_cast<u64*>(scrBase + NSTAGE * SCR_BYTES);
    u64* empty = full + NSTAGE;
    float* lut = reinterpret_cast<float*>(empty + NSTAGE);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int items = batch * NVH;
    if (tid == 0) {
        for (int st = 0; st < NSTAGE; st++) {
            mbar_init(full + st, 33);
            mbar_init(empty + st, GW);
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
            int s = 0, n = 0, b = 0, j = 0, skip = 1;
            float gs = 0.0f, eg = 0.0f, beta = 0.0f;
            if (i < items) {
                b = i / NVH;
                j = i % NVH;
                s = slots[b];
                const float av = a[(u64)b * NVH + j], bv = bb[(u64)b * NVH + j];
                const double nA = negA[j], db = dtb[j];
                n = hist[s];
#if READ_FMT == FMT_NVFP4 || READ_FMT == FMT_E4M3
                gs = rglobal[(u64)s * NVH + j];
#elif READ_FMT == FMT_F32 && STATE_FMT == FMT_E4M3
                gs = state_scale(state, (u64)s * NVH + j);
#endif
                skip = n + 1 >= L;
                gdn_scalars(av, bv, nA, db, &eg, &beta);
            }
            for (int kk = 0; kk < 32 && base + kk * (int)gridDim.x < items; kk++, it++) {
                const int ks = __shfl_sync(FULL_MASK, s, kk), kn = __shfl_sync(FULL_MASK, n, kk);
                const int kb = __shfl_sync(FULL_MASK, b, kk), kj = __shfl_sync(FULL_MASK, j, kk);
                const int kskip = __shfl_sync(FULL_MASK, skip, kk);
                const float kgs = __shfl_sync(FULL_MASK, gs, kk), keg = __shfl_sync(FULL_MASK, eg, kk);
                const float kbeta = __shfl_sync(FULL_MASK, beta, kk);
                int stg;
                u32 par;
                stage_of(it, stg, par);
                mbar_wait(empty + stg, par ^ 1);
                GDNScratch* m = reinterpret_cast<GDNScratch*>(scrBase + stg * SCR_BYTES);
                if (lane == 0) {
                    m->s = ks;
                    m->n = kn;
                    m->b = kb;
                    m->j = kj;
                    m->skip = kskip;
                    m->gsc = kgs;
                    m->eg = keg;
                    m->beta = kbeta;
                }
                if (kskip) {
                    if (lane == 0) {
                        mbar_arrive(full + stg);
                    }
                    cp_async_mbar_arrive(full + stg);
                    continue;
                }
                const int kh = kj / VPK;
                unsigned char* sg = stages + stg * STAGE_BYTES;
                const u64 mat = (u64)ks * NVH + kj;
#if READ_FMT == FMT_NVFP4
                constexpr int NS = 2;
#else
                constexpr int NS = 1;
#endif
                const int npieces = NS + 2 * kn + 3 + (kn > 0 ? 1 : 0);
                produce_stage(full + stg, npieces, NS, [&](int ci) -> Piece {
                    if (ci < NS) {
#if READ_FMT == FMT_NVFP4
                        if (ci == 0) {
                            return Piece{sg, rcodes + mat * RC_BYTES, DV * DK / 2};
                        }
                        return Piece{sg + DV * DK / 2, rscales + mat * (DV * DK / 16), DV * DK / 16};
#elif READ_FMT != FMT_F32
                        return Piece{sg, rcodes + mat * RC_BYTES, RC_BYTES};
#else
                        return Piece{sg, state + mat * (DV * DK), SMAT_STATE_BYTES};
#endif
                    }
                    int c = ci - NS;
                    if (c < kn) {
                        return Piece{sg + GS_K + c * DK * 4, ringK + (ring_at(ks, c) * NKH + kh) * DK, DK * 4};
                    }
                    c -= kn;
                    if (c < kn) {
                        return Piece{sg + GS_U + c * DV * 4, ringU + (ring_at(ks, c) * NVH + kj) * DV, DV * 4};
                    }
                    c -= kn;
                    switch (c) {
                    case 0:
                        return Piece{sg + GS_K + kn * DK * 4, k + ((u64)kb * NKH + kh) * DK, DK * 4};
                    case 1:
                        return Piece{sg + GS_Q, q + ((u64)kb * NKH + kh) * DK, DK * 4};
                    case 2:
                        return Piece{sg + GS_V, v + ((u64)kb * NVH + kj) * DV, DV * 4};
                    default:
                        return Piece{sg + GS_A, ringA + rs_at(ks, kj, 0), RMAXP * 4};
                    }
                });
            }
        }
        return;
    }

    static_assert(NCW % GW == 0 && NSTAGE % NGRP == 0 && GW >= 3, "consumer warps must form whole groups of at least 3 warps");
    const int grp = (tid - 32) / GCT, ct = (tid - 32) % GCT, cw = ct >> 5;
    int it = grp;
    for (int i = blockIdx.x + grp * gridDim.x; i < items; i += NGRP * gridDim.x, it += NGRP) {
        int stg;
        u32 par;
        stage_of(it, stg, par);
        mbar_wait(full + stg, par);
        GDNScratch* m = reinterpret_cast<GDNScratch*>(scrBase + stg * SCR_BYTES);
        if (m->skip) {
            release_stage(empty + stg);
            continue;
        }
        const unsigned char* sg = stages + stg * STAGE_BYTES;
        const float* sK = reinterpret_cast<const float*>(sg + GS_K);
        const float* sU = reinterpret_cast<const float*>(sg + GS_U);
        const float* sQ = reinterpret_cast<const float*>(sg + GS_Q);
        const float* sV = reinterpret_cast<const float*>(sg + GS_V);
        const float* sA = reinterpret_cast<const float*>(sg + GS_A);
        const int s = m->s, n = m->n, b = m->b, j = m->j, kh = j / VPK, t = n + 1;
        // Normalise k and q; decay products ws[i] = prod_{l=i+1..n} a_l, gam = prod_{l<=n} a_l.
        if (cw == 0) {
            l2norm_warp(m->vec, sK + n * DK, 1.0f);
        } else if (cw == 1) {
            l2norm_warp(m->vec + DK, sQ, qscale);
        } else if (ct == 64) {
            double suf = 1.0;
            for (int l = n; l >= 0; l--) {
                m->ws[l] = (float)suf;
                suf *= (double)(l < n ? sA[l] : m->eg);
            }
            m->gam = (float)suf;
        }
        group_sync(grp);
        // k_i . k and k_i . q over the window, eight lanes per entry and vector.
        dot_pairs(
            2 * t, DK, ct, GCT,
            [&](int pr) -> const float* {
                const int l = pr >> 1;
                return (pr & 1) == 0 && l == n ? nullptr : (l < n ? sK + l * DK : m->vec);
            },
            [&](int pr) -> const float* { return m->vec + (pr & 1) * DK; },
            [&](int pr, float v) { m->gram[(pr & 1) * (RMAX + 1) + (pr >> 1)] = v; });
        smem_row_dots<2, GW>(sg, m->gsc, m->vec, DK, 2, lut, ct, m->proj);
        // Append k, v, exp(g), beta at entry n.
        if (j % VPK == 0) {
            for (int e = ct; e < DK; e += GCT) {
                ringK[(ring_at(s, n) * NKH + kh) * DK + e] = m->vec[e];
            }
        }
        for (int e = ct; e < DV; e += GCT) {
            ringV[(ring_at(s, n) * NVH + j) * DV + e] = sV[e];
        }
        if (ct == 0) {
            ringA[rs_at(s, j, n)] = m->eg;
            ringBeta[rs_at(s, j, n)] = m->beta;
        }
        group_sync(grp);
        const float gam = m->gam, beta = m->beta;
        float* ot = o + ((u64)b * NVH + j) * DV;
        for (int mm = ct; mm < DV; mm += GCT) {
            float ut = sV[mm] - gam * m->proj[mm];
            float ov = gam * m->proj[DV + mm];
            #pragma unroll 4
            for (int l = 0; l < n; l++) {
                const float ul = sU[l * DV + mm];
                ut = fmaf(-(m->ws[l] * m->gram[l]), ul, ut);
                ov = fmaf(m->ws[l] * m->gram[RMAX + 1 + l], ul, ov);
            }
            ut = ut * beta;
            ov = fmaf(m->ws[n] * m->gram[RMAX + 1 + n], ut, ov);
            ringU[(ring_at(s, n) * NVH + j) * DV + mm] = ut;
            ot[mm] = ov;
        }
        release_stage(empty + stg);
    }
}

// gdn_pipe_step: the non-flush slots of a decode step, after
// gdn_replay_flush; its last block moves the cursors.
#if WHOLE_REPLAY // the split module takes only the small step
extern "C" __global__ void __launch_bounds__(32 * (NCW + 1), PIPE_MINB) gdn_pipe_step(GDN_STEP_PARAMS)
{
    gdn_pipe(state, rcodes, rscales, rglobal, ringK, ringV, ringA, ringBeta, ringU, hist, slots, q, k, v, a, bb, o, negA,
             dtb, qscale, L, batch);
    step_done(hist, pending, done, slots, batch, L);
}
#endif
#endif

// ---- the group non-flush step ----
//
// gdn_group_step computes what gdn_step<0> computes for the slots that do not
// flush, bit for bit (but for a stream on the tensor cores, GROUP_TC below),
// with one block per (key head, batch row) instead of one per (value head,
// batch row): the key head's VPK value heads share q, k (normalised once), the
// ring's keys and their dots k_i . k, k_i . q, and their VPK*DV state rows are
// one stream that every thread reads GPF passes ahead with its columns of k
// and q in registers (mamba2_group_step does the same for a Mamba-2 group).
// The ring's u rows of the value heads go to dynamic shared memory by cp.async
// while the stream runs. Blocks take items i = kh + NKH*b in turn; each item
// is a call that is not inlined (inlined in the loop, ptxas keeps values
// across items: see mamba2_flush_item). The Go side launches it in place of
// gdn_pipe_step, in blocks of about 32 passes an item (groupBlockSize).
#ifdef GNT
#define GROWS (VPK * DV)
#define GR1 (RMAX + 1)
typedef CMap<GVEC, DK, GROWS, GNT / 32> GM;
typedef GRaw<GM> GR;
// GMINB: the group step's register bound in blocks an SM, 512/GNT, but
// five at 128 threads (Qwen3.5-122B) with an nvfp4 or fp8 read copy:
// H200, B=256, non-flush us against four (the nvfp4 step's registers
// had grown 92 -> 106 with the vectors' scaling, leaving four blocks):
// nvfp4 112 -> 104 (fp32 checkpoint), 111 -> 102 (bf16); fp8 138 -> 133,
// 138 -> 132; without a read copy five lost (fp32 287 -> 302, bf16 170 ->
// 173).
#define GMINB (GNT == 128 && (READ_FMT == FMT_NVFP4 || READ_FMT == FMT_E4M3) ? 5 : 512 / GNT)
// GPF: passes in flight. With an nvfp4 read copy a GDN item is short (a pass
// is 8 bytes of codes a thread) and its unrolled passes' code is what stalls
// (ncu: 16% of the stall samples on instruction fetch at 12 passes); four,
// against 12 (H200, B=256, us): Qwen3.5-4B 122 -> 109, 122B 201 -> 171
// (Mamba-2's group step keeps 12: Nano 143 -> 152 at four). The group verify
// below shares GPF; with a read copy its time was not measured apart (its
// tests pass).
#define GPF (READ_FMT == FMT_NVFP4 ? 4 : GPF_DEFAULT(GM::CPL))

// GROUP_TC=1 (gdnModule sets it for nvfp4 and e4m3 matrices on sm_89+): the
// stream's dots on the tensor cores (gt_dots, replay_common.cu), k and q as
// B's columns 0-3. A row's sum is not group_dots' order of operations, so this
// step is not bit for bit the per-head kernels' (the tests compare it within a
// bound).
#if GT_OK && GROUP_TC && DV % 16 == 0
#define GTC_ON 1
#else
#define GTC_ON 0
#endif

// The stream's raw loads a thread holds (GSPF strips or passes in flight)
// and gs_start, which points mat and scl at matrix m0's stream and issues
// its first ones. On the tensor cores, two strips in flight a warp (36
// bytes a lane each). H200, B=256, us, 4 -> 2 (8: 92 and 151): Qwen3.5-4B
// 85.8 -> 80.0, 122B 138 -> 124. With the scales' loads kept apart
// (GTRaw) and the token's inputs early, 2 against 4 and 8: 4B 64.1, 64.0,
// 73.0; 122B 98.6, 105, 110.
#if GTC_ON
typedef GTRaw GSRaw;
#define GSPF 2
#else
typedef GR GSRaw;
#define GSPF GPF
#endif
__device__ __forceinline__ void gs_start(const ST* state, const u8* rcodes, const u8* rscales, u64 m0, const void*& mat,
                                         const u8*& scl, GSRaw (&raw)[GSPF])
{
#if GTC_ON
    gt_start<GROWS>(state, rcodes, rscales, m0, mat, scl, raw);
#else
    group_start<GM, GROWS>(state, rcodes, rscales, m0, mat, scl, raw);
#endif
}

// GOUTS: the output rows a thread of the group step takes.
#define GOUTS ((GROWS + GNT - 1) / GNT)

// gdn_group_inputs asks for item (kh, b)'s v rows (vv), a and b (ta, tb),
// which do not depend on the slot.
__device__ __forceinline__ void gdn_group_inputs(const float* v, const float* a, const float* bb, int kh, int b,
                                                 float (&vv)[GOUTS], float& ta, float& tb)
{
    const int j0 = kh * VPK;
    const float* vt = v + ((u64)b * NVH + j0) * DV;
#pragma unroll
    for (int u = 0; u < GOUTS; u++) {
        const int o1 = threadIdx.x + u * GNT;
        vv[u] = o1 < GROWS ? vt[o1] : 0.0f;
    }
    ta = 0.0f, tb = 0.0f;
    if (threadIdx.x < VPK) {
        ta = a[(u64)b * NVH + j0 + threadIdx.x];
        tb = bb[(u64)b * NVH + j0 + threadIdx.x];
    }
}

// gdn_group_body is item (kh, b)'s work once its slot s, cursor n, first
// raw loads (gs_start), k or q (xv: warp 0 k, warp 1 q, l2norm_load) and
// inputs (gdn_group_inputs) are asked for. prefetch() runs once the stream
// has consumed raw and xv (or at once for a slot the flush takes); the
// items' loop could ask for the next item's loads there (gdn_group_ask),
// to fly during the output loop, but that measured within 1-3% (H200,
// B=256: Qwen3.5-4B nvfp4 non-flush 65.4 -> 64.9 us, 122B 111 -> 109, 122B
// bf16 170 -> 173): the blocks an SM already overlap the items' prologues.
// gdn_group_item passes nothing to do (the hook's type is part of the
// shared arrays' names in the PTX).
template <typename PRE>
__device__ __forceinline__ void gdn_group_body(GDN_STEP_PARAMS, int kh, int b, int s, int n, GSRaw (&raw)[GSPF],
                                               float (&xv)[L2V], const float (&vv)[GOUTS], float ta, float tb,
                                               PRE prefetch)
{
    __shared__ __align__(16) float sVec[(RMAX + 2) * DK]; // k, q, then the ring's keys k_0..k_{n-1}
    __shared__ float sGram[2 * GR1];                       // k_i . k, then k_i . q
    __shared__ float sDecay[VPK * GR1];
    __shared__ float sBeta[VPK * GR1];
    __shared__ float sWs[VPK * GR1];
    __shared__ float sGam[VPK];
    __shared__ float sGs[VPK];
    __shared__ float sProj[2 * GROWS]; // S0^T k, then S0^T q, for the VPK value heads
    __shared__ float sLut[16];
    // The ring's u rows of the value heads, entries [0, ucap) (the launch's
    // dynamic shared memory); entries past it are read from global memory.
    extern __shared__ __align__(16) float sUr[];

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int j0 = kh * VPK;
    constexpr int OUTS = GOUTS;
    if (n + 1 >= L) {
        prefetch();
        return; // gdn_replay_flush took the slot
    }
    const u64 m0 = (u64)s * NVH + j0;
    const void* mat;
    const u8* scl;
    group_mat(state, rcodes, rscales, m0, mat, scl);
    const int us = min(n, (int)(dynamic_smem_bytes() / (GROWS * 4)));
    const float* ur = ringU + (u64)j0 * DV;
    // The ring's keys and the value heads' exp(g), beta (one cp.async
    // group), then the u rows (a second, waited for after the stream).
    cp_rows<DK>(sVec + 2 * DK, ringK + (ring_at(s, 0) * NKH + kh) * DK, NKH * DK, n, tid, GNT);
    cp_table(sDecay, GR1, ringA + rs_at(s, j0, 0), RMAXP, VPK, n, tid, GNT);
    cp_table(sBeta, GR1, ringBeta + rs_at(s, j0, 0), RMAXP, VPK, n, tid, GNT);
    cp_async_commit();
    cp_rows<GROWS>(sUr, ur + ring_at(s, 0) * (NVH * DV), NVH * DV, us, tid, GNT);
    cp_async_commit();
    // The current token: q and k normalised (one warp each, as gdn_step:
    // l2norm_warp's sums), k also into the ring; the value heads' exp(g)
    // and beta (v goes to the ring with u_t, below).
    if (warp < 2) {
        const float r = l2norm_scale(xv, warp == 0 ? 1.0f : qscale);
        float* kr = ringK + (ring_at(s, n) * NKH + kh) * DK;
#pragma unroll
        for (int m = 0; m < L2V; m++) {
            const int e = lane + 32 * m;
            if (e < DK) {
                sVec[warp * DK + e] = xv[m] * r;
                if (warp == 0) {
                    kr[e] = xv[m] * r;
                }
            }
        }
    }
    if (tid < VPK) {
        const int j = j0 + tid;
        float eg, beta;
        gdn_scalars(ta, tb, negA[j], dtb[j], &eg, &beta);
        sDecay[tid * GR1 + n] = eg;
        sBeta[tid * GR1 + n] = beta;
        ringA[rs_at(s, j, n)] = eg;
        ringBeta[rs_at(s, j, n)] = beta;
        sGs[tid] = group_scale<VPK>(state, rglobal, m0, tid);
    }
#if READ_FMT == FMT_NVFP4 && !GTC_ON
    init_e2m1_lut(sLut);
#endif
    cp_async_wait_group<1>();
    __syncthreads();
    // k_i . k and k_i . q over the window (gdn_step's pairs), eight lanes
    // per pair; the decay products, one thread per value head from the
    // last warp down.
    const int t = n + 1;
    dot_pairs(
        2 * t, DK, tid, GNT,
        [&](int pr) -> const float* {
            const int i = pr >> 1;
            return (pr & 1) == 0 && i == n ? nullptr : sVec + (i < n ? (2 + i) * DK : 0);
        },
        [&](int pr) -> const float* { return sVec + (pr & 1) * DK; },
        [&](int pr, float val) { sGram[(pr & 1) * GR1 + (pr >> 1)] = val; });
    for (int jj = GNT - 1 - tid; jj < VPK; jj += GNT) {
        sGam[jj] = decay_suffix(sDecay + jj * GR1, n, sWs + jj * GR1);
    }
    // The stream: S0^T k and S0^T q for the VPK*DV rows.
#if GTC_ON
    GTVec bv;
    gt_vectors<2>(sVec, DK, bv);
    gt_stream<GROWS, DV, 2>(mat, scl, raw, bv, sGs, sProj);
#else
    float vr[2][GM::CPL][GVEC];
    group_vec<GM>(sVec, vr[0]);
    group_vec<GM>(sVec + DK, vr[1]);
#pragma unroll 1
    for (int base = 0; base < GM::PASSES; base += GPF) {
#pragma unroll
        for (int p = 0; p < GPF; p++) {
            const int pass = base + p;
            if (pass < GM::PASSES) {
                group_dots<GM, GROWS, DV, 2>(raw[p], pass, vr, sGs, sLut, sProj);
                if (pass + GPF < GM::PASSES) {
                    group_load<GM, GROWS>(mat, scl, pass + GPF, raw[p]);
                }
            }
        }
    }
#endif
    prefetch();
    cp_async_wait_all();
    __syncthreads();
    // u_t and o (gdn_step's order) for the thread's OUTS rows at once (each
    // row's chain as before; the rows' chains interleaved), the u rows from
    // shared memory where staged; the token's v rows also go to the ring.
    float ut[OUTS], ov[OUTS];
#pragma unroll
    for (int u = 0; u < OUTS; u++) {
        const int o1 = min(tid + u * GNT, GROWS - 1), jj = o1 / DV;
        const float gam = sGam[jj];
        ut[u] = vv[u] - gam * sProj[o1];
        ov[u] = gam * sProj[GROWS + o1];
    }
    for (int i = 0; i < n; i++) {
        const float gk = sGram[i], gq = sGram[GR1 + i];
#pragma unroll
        for (int u = 0; u < OUTS; u++) {
            const int o1 = min(tid + u * GNT, GROWS - 1);
            const float ws = sWs[(o1 / DV) * GR1 + i];
            const float ui = i < us ? sUr[i * GROWS + o1] : ur[ring_at(s, i) * (NVH * DV) + o1];
            ut[u] = fmaf(-(ws * gk), ui, ut[u]);
            ov[u] = fmaf(ws * gq, ui, ov[u]);
        }
    }
#pragma unroll
    for (int u = 0; u < OUTS; u++) {
        const int o1 = tid + u * GNT;
        if (o1 >= GROWS) {
            continue;
        }
        const int jj = o1 / DV;
        ringV[(ring_at(s, n) * NVH + j0) * DV + o1] = vv[u];
        const float tu = ut[u] * sBeta[jj * GR1 + n];
        ringU[(ring_at(s, n) * NVH + j0) * DV + o1] = tu;
        o[((u64)b * NVH + j0) * DV + o1] = fmaf(sWs[jj * GR1 + n] * sGram[GR1 + n], tu, ov[u]);
    }
}

// gdn_group_ask asks for what item (kh, b) of slot s needs first: k (warp
// 0) or q (warp 1) into xv, the first raw loads of its stream, and returns
// its cursor.
__device__ __forceinline__ int gdn_group_ask(const ST* state, const u8* rcodes, const u8* rscales, const int* hist,
                                             const float* q, const float* k, int kh, int b, int s, GSRaw (&raw)[GSPF],
                                             float (&xv)[L2V])
{
    if ((threadIdx.x >> 5) < 2) {
        l2norm_load(((threadIdx.x >> 5) == 0 ? k : q) + ((u64)b * NKH + kh) * DK, xv);
    }
    const void* mat;
    const u8* scl;
    gs_start(state, rcodes, rscales, (u64)s * NVH + kh * VPK, mat, scl, raw);
    return hist[s];
}

// gdn_group_item is one item, asked for at its start (the token's inputs
// before its cursor: ncu, their round trips after it were 8%
// of the step's stall samples).
__device__ __noinline__ void gdn_group_item(GDN_STEP_PARAMS, int kh, int b)
{
    GSRaw raw[GSPF];
    float xv[L2V], vv[GOUTS], ta, tb;
    gdn_group_inputs(v, a, bb, kh, b, vv, ta, tb);
    const int s = slots[b];
    const int n = gdn_group_ask(state, rcodes, rscales, hist, q, k, kh, b, s, raw, xv);
    gdn_group_body(state, rcodes, rscales, rglobal, ringK, ringV, ringA, ringBeta, ringU, hist, slots, q, k, v, a, bb, o,
                   negA, dtb, qscale, L, pending, done, batch, kh, b, s, n, raw, xv, vv, ta, tb, [] {});
}

#if WHOLE_REPLAY // the split module takes only the small step
extern "C" __global__ void __launch_bounds__(GNT, GMINB) gdn_group_step(GDN_STEP_PARAMS)
{
#if OVERLAP
    __shared__ int sQ[2];
    for (int i = blockIdx.x, it = 0; i < batch * NKH; it++) {
        const int asked = queue_ask(done + 3);
        gdn_group_item(state, rcodes, rscales, rglobal, ringK, ringV, ringA, ringBeta, ringU, hist, slots, q, k, v, a, bb,
                       o, negA, dtb, qscale, L, pending, done, batch, i % NKH, i / NKH);
        queue_put(sQ, it, asked);
        __syncthreads(); // the item's tables are read before the next one's
        i = sQ[it & 1];
    }
#else
    for (int i = blockIdx.x; i < batch * NKH; i += gridDim.x) {
        gdn_group_item(state, rcodes, rscales, rglobal, ringK, ringV, ringA, ringBeta, ringU, hist, slots, q, k, v, a, bb,
                       o, negA, dtb, qscale, L, pending, done, batch, i % NKH, i / NKH);
        __syncthreads(); // the item's tables are read before the next one's
    }
#endif
    step_done(hist, pending, done, slots, batch, L);
}
#endif

// ---- the group verify ----
//
// gdn_group_verify computes what gdn_replay_verify computes for the slots
// with no early fold, bit for bit, with one block per (key head, batch row)
// like gdn_group_step: the key head's VPK value heads' rows are read once
// for the 2cnt vectors (the drafts' k and q, in shared memory: 2*TMAX
// vectors of a thread's 16 columns would take 128 registers), the drafts'
// keys normalised and their gram dots with the ring's keys formed once per
// key head, the decay products once per value head and draft. Each output
// row's drafts run in one thread with the ring's u and the drafts' u' in
// registers. On the H200 (B=256, T=4) it took the Qwen3.5-4B fp32 verify
// from 609 to 515 us (per-head), bf16 725 -> 637.
#if TMAX > 1
#define GV2 (2 * TMAX)
#define GVP (DK + (DK >> 5) * 4) // a padded vector (group_dots_smem)
// GV_PAIR: the stream takes two passes at a time (group_dots_smem_pair)
// for 2-byte states read directly, whose stream is bound by the
// shared-memory reads of the vectors and whose registers (about 100 of
// the 128 that 8 blocks of 64 threads allow) leave room for a second
// pass's sums; fp32 states are at 128 already. It needs an even GPF. On
// the H200 (B=256, T=4, bf16) it took the 122B verify (128 threads) from
// 917 to 838 us and the 4B one (64 threads, items of 256 rows) from 516
// to 541: on from 128 threads.
// GVTC_ON: the stream on the tensor cores (VERIFY_TC; gtw_stream in
// replay_common.cu), the drafts' 2cnt <= 8 vectors as B's columns. Its
// sums are not gdn_replay_verify's order of operations.
#if GT_OK && VERIFY_TC && DV % 16 == 0 && GV2 <= 8
#define GVTC_ON 1
#else
#define GVTC_ON 0
#endif
#define GV_PAIR (READ_FMT == FMT_F32 && FMT_SIZE(STATE_FMT) == 2 && GNT >= 128 && !GVTC_ON)
// GVK_FLOATS: the ring keys' rows, then the stream's vectors (padded, or
// the tensor cores' operands).
#define GVK_MAX(a, b) ((a) > (b) ? (a) : (b))
#if GVTC_ON
#define GVK_FLOATS GVK_MAX(RMAX * DK, GTW_FLOATS)
#else
#define GVK_FLOATS GVK_MAX(RMAX * DK, GV2 * GVP)
#endif
__device__ __noinline__ void gdn_group_verify_item(GDN_VERIFY_PARAMS, int kh, int b)
{
    // k_d, q_d of the drafts, then the ring's keys; once the gram dots are
    // formed, the ring keys' rows hold the drafts' vectors again, padded
    // for the stream (group_dots_smem).
    __shared__ __align__(16) float sVec[GV2 * DK + GVK_FLOATS];
    float* const sRingK = sVec + GV2 * DK;
    __shared__ float sGram[GV2 * GR1];                       // [d][i] = k_i . k_d, [TMAX+d][i] = k_i . q_d
    __shared__ float sDecay[VPK * GR1];
    __shared__ float sBeta[VPK * GR1];
    // Per value head and draft: prod_{i<m<=n+d} exp(g_m), then the
    // outputs' ring weights, that times k_i.k_d (sWs) and times k_i.q_d (sWq).
    __shared__ float sWs[VPK * TMAX * GR1];
    __shared__ float sWq[VPK * TMAX * GR1];
    __shared__ float sGam[VPK * TMAX];
    __shared__ float sGs[VPK];
    __shared__ float sProj[GV2 * GROWS]; // S0^T vec_a for the VPK*DV rows
    __shared__ float sLut[16];

    const int tid = threadIdx.x, warp = tid >> 5;
    const int j0 = kh * VPK;
    const int s = slots[b];
    const u64 m0 = (u64)s * NVH + j0;
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
    if (FOLDS_EARLY(n, cnt, R)) {
        n = 0; // the early folds folded the slot's history: a new checkpoint, the drafts from entry 0
    }
    // The ring's keys and the value heads' exp(g), beta by cp.async.
    cp_rows<DK>(sRingK, ringK + (ring_at(s, 0) * NKH + kh) * DK, NKH * DK, n, tid, GNT);
    cp_table(sDecay, GR1, ringA + rs_at(s, j0, 0), RMAXP, VPK, n, tid, GNT);
    cp_table(sBeta, GR1, ringBeta + rs_at(s, j0, 0), RMAXP, VPK, n, tid, GNT);
    cp_async_commit();
    // The drafts: k and q normalised (one warp each), exp(g) and beta per
    // value head (v goes to the ring with u' and o, below).
    for (int w = warp; w < 2 * cnt; w += GNT / 32) {
        const int d = w % cnt;
        if (w < cnt) {
            l2norm_warp(sVec + d * DK, k + (((u64)b * T + d) * NKH + kh) * DK, 1.0f);
        } else {
            l2norm_warp(sVec + w * DK, q + (((u64)b * T + d) * NKH + kh) * DK, qscale);
        }
    }
    for (int idx = tid; idx < VPK * cnt; idx += GNT) {
        const int jj = idx / cnt, d = idx % cnt, j = j0 + jj;
        float eg, beta;
        gdn_scalars(a[((u64)b * T + d) * NVH + j], bb[((u64)b * T + d) * NVH + j], negA[j], dtb[j], &eg, &beta);
        sDecay[jj * GR1 + n + d] = eg;
        sBeta[jj * GR1 + n + d] = beta;
        ringA[rs_at(s, j, n + d)] = eg;
        ringBeta[rs_at(s, j, n + d)] = beta;
    }
    if (tid < VPK) {
        sGs[tid] = group_scale<VPK>(state, rglobal, m0, tid);
    }
#if READ_FMT == FMT_NVFP4 && !GVTC_ON
    init_e2m1_lut(sLut);
#endif
    cp_async_wait_all();
    __syncthreads();
    for (int idx = tid; idx < cnt * DK; idx += GNT) {
        const int d = idx / DK, e = idx % DK;
        ringK[(ring_at(s, n + d) * NKH + kh) * DK + e] = sVec[idx];
    }
    // The decay products per value head and draft (gdn_replay_verify's
    // order, unrolled over the ring), on the last warps; the gram dots
    // (its pairs) on all.
    for (int idx = GNT - 1 - tid; idx < VPK * cnt; idx += GNT) {
        const int jj = idx / cnt, d = idx % cnt;
        sGam[jj * TMAX + d] = decay_suffix(sDecay + jj * GR1, n + d, sWs + (jj * TMAX + d) * GR1);
    }
    const int W = n + cnt;
    dot_pairs(
        2 * cnt * W, DK, tid, GNT,
        [&](int pr) -> const float* {
            const int row = pr / W, i = pr % W, d = row % cnt;
            if (row >= cnt ? i > n + d : i >= n + d) {
                return nullptr;
            }
            return i < n ? sRingK + i * DK : sVec + (i - n) * DK;
        },
        [&](int pr) -> const float* { return sVec + (pr / W) * DK; },
        [&](int pr, float val) {
            const int row = pr / W;
            sGram[((row >= cnt ? TMAX : 0) + row % cnt) * GR1 + pr % W] = val;
        });
    // The drafts' vectors padded (4 floats after every 32) where the ring's
    // keys were: a warp's lanes then read distinct banks for any chunk width
    // (2-byte states had 2-way conflicts, 1-byte reads 4-way, and the
    // shared-memory pipe bounded the bf16 verify).
    __syncthreads();
    // The outputs' ring weights once an item, not in every row (as the
    // Mamba-2 verify's): the same float products, so the outputs do not
    // change. k's weights reach entry n+d-1, q's n+d.
    for (int idx = tid; idx < VPK * cnt * GR1; idx += GNT) {
        const int i = idx % GR1, d = idx / GR1 % cnt, at = (idx / (cnt * GR1) * TMAX + d) * GR1 + i;
        if (i <= n + d) {
            const float w = sWs[at];
            sWq[at] = w * sGram[(TMAX + d) * GR1 + i];
            if (i < n + d) {
                sWs[at] = w * sGram[d * GR1 + i];
            }
        }
    }
#if GVTC_ON
    // or the tensor cores' B operands there
    gtw_vectors(sVec, DK, 2 * cnt, sRingK);
    __syncthreads();
    gtw_stream<GROWS, DV>(mat, scl, raw, sRingK, 2 * cnt, sGs, sProj);
#else
    for (int idx = tid; idx < 2 * cnt * (DK / 4); idx += GNT) {
        const int a = idx / (DK / 4), e = 4 * (idx % (DK / 4));
        *reinterpret_cast<float4*>(sRingK + a * GVP + e + (e >> 5) * 4) =
            *reinterpret_cast<const float4*>(sVec + a * DK + e);
    }
    __syncthreads();
    // The stream: S0^T k_d and S0^T q_d for the VPK*DV rows; with GV_PAIR
    // two passes at a time, each vector chunk read once for both.
#pragma unroll 1
    for (int base = 0; base < GM::PASSES; base += GPF) {
#pragma unroll
        for (int p = 0; p < GPF; p++) {
            const int pass = base + p;
#if GV_PAIR
            if (GPF % 2 == 0) {
                const int p1 = min(p + 1, GPF - 1);
                if (p % 2 == 0 && pass < GM::PASSES) {
                    group_dots_smem_pair<GM, GROWS, DV, GV2>(raw[p], raw[p1], pass, sRingK, 2 * cnt, sGs, sProj);
                    if (pass + GPF < GM::PASSES) {
                        group_load<GM, GROWS>(mat, scl, pass + GPF, raw[p]);
                    }
                    if (pass + 1 + GPF < GM::PASSES) {
                        group_load<GM, GROWS>(mat, scl, pass + 1 + GPF, raw[p1]);
                    }
                }
                continue;
            }
#endif
            if (pass < GM::PASSES) {
                group_dots_smem<GM, GROWS, DV, GV2>(raw[p], pass, sRingK, 2 * cnt, sGs, sLut, sProj);
                if (pass + GPF < GM::PASSES) {
                    group_load<GM, GROWS>(mat, scl, pass + GPF, raw[p]);
                }
            }
        }
    }
#endif
    __syncthreads();
    // u'_d and o_d in order (gdn_replay_verify's): the ring's u and the
    // earlier drafts' u' in registers (loops unrolled, indices fixed).
    for (int o1 = tid; o1 < GROWS; o1 += GNT) {
        const int jj = o1 / DV;
        const float* ur = ringU + (u64)j0 * DV + o1;
        float uloc[RMAX];
#pragma unroll
        for (int i = 0; i < RMAX; i++) {
            uloc[i] = i < n ? ur[ring_at(s, i) * (NVH * DV)] : 0.0f;
        }
        // The drafts' v of this row, asked for together with the ring's u
        // (one round trip), and appended to the ring.
        float vd[TMAX];
#pragma unroll
        for (int d = 0; d < TMAX; d++) {
            vd[d] = d < cnt ? v[(((u64)b * T + d) * NVH + j0) * DV + o1] : 0.0f;
        }
#pragma unroll
        for (int d = 0; d < TMAX; d++) {
            if (d < cnt) {
                ringV[(ring_at(s, n + d) * NVH + j0) * DV + o1] = vd[d];
            }
        }
        float ud[TMAX];
#pragma unroll
        for (int d = 0; d < TMAX; d++) {
            ud[d] = 0.0f;
            if (d < cnt) {
                const int tp = n + d;
                const float gam = sGam[jj * TMAX + d];
                const float* wk = sWs + (jj * TMAX + d) * GR1;
                const float* wq = sWq + (jj * TMAX + d) * GR1;
                const u64 row = (((u64)b * T + d) * NVH + j0) * DV + o1;
                float ut = vd[d] - gam * sProj[d * GROWS + o1];
                float ov = gam * sProj[(cnt + d) * GROWS + o1];
#pragma unroll
                for (int i = 0; i < RMAX; i++) {
                    if (i < n) {
                        ut = fmaf(-wk[i], uloc[i], ut);
                        ov = fmaf(wq[i], uloc[i], ov);
                    }
                }
#pragma unroll
                for (int e = 0; e < TMAX; e++) {
                    if (e < d) {
                        ut = fmaf(-wk[n + e], ud[e], ut);
                        ov = fmaf(wq[n + e], ud[e], ov);
                    }
                }
                ut = ut * sBeta[jj * GR1 + tp];
                ov = fmaf(wq[tp], ut, ov);
                ud[d] = ut;
                ringU[(ring_at(s, tp) * NVH + j0) * DV + o1] = ut;
                o[row] = ov;
            }
        }
    }
}

// GVMINB is gdn_group_verify's register bound in blocks an SM. At 128
// threads (Qwen3.5-122B) five blocks were faster than GMINB's four (H200,
// B=256, T=4: fp32 797 -> 780 us, bf16 756 -> 722; six: 789, 748), where
// the group step lost with them (298 -> 305 fp32); at 64 threads
// (Qwen3.5-4B) ten blocks instead of eight were 1% slower.
#define GVMINB (GNT == 128 ? 5 : GMINB)
#if WHOLE_REPLAY // the split module takes only the small step
extern "C" __global__ void __launch_bounds__(GNT, GVMINB) gdn_group_verify(GDN_VERIFY_PARAMS, int batch)
{
    for (int i = blockIdx.x; i < batch * NKH; i += gridDim.x) {
        gdn_group_verify_item(GDN_VERIFY_ARGS, i % NKH, i / NKH);
        __syncthreads(); // the item's tables are read before the next one's
    }
}
#endif
#endif
#endif

// GDN folds with the work-item kernels (gdn_replay_flush,
// gdn_replay_fold_items) and the streamed ones (gdn_flush_stream,
// gdn_fold_stream), not on Mamba-2's pipelined folds (replay_common.cu,
// fold_produce): with gdn_fold's own chain of phases an item, one block an
// SM, those were slower (H200, B=256, items -> pipelined: Qwen3.5-4B
// aligned flush 468 -> 533 us fp32, 412 -> 511 bf16, windows 192 -> 201,
// 130 -> 139; 122B 920 -> 1046, 810 -> 1012).

// gdn_prefill runs counts[b] (or T) consecutive inputs of slot slots[b]
// through the recurrence (the contract's Prefill), as mamba2_prefill does:
// one CTA per (value head, batch row) with the head's state in registers,
// a replay slot's pending ring entries first (the exact fold: u recomputed
// from the ring's k, v, exp(g) and beta on the float32 state, no output),
// then the inputs, PREFILL_CHUNK rows at a time, each writing o = S^T q.
// Row m of the transposed state needs only v[m] and the head's vectors:
// u[m] = beta (v[m] - exp(g) S[m].k); S[m] = exp(g) S[m] + u[m] k.
#if PREFILL_MODULE
extern "C" __global__ void __launch_bounds__(NT)
    gdn_prefill(ST* state, u8* rcodes, u8* rscales, float* rglobal, const float* __restrict__ ringK,
                const float* __restrict__ ringV, const float* __restrict__ ringA, const float* __restrict__ ringBeta,
                const int* __restrict__ hist, const int* __restrict__ cur, int nb, int replay,
                const int* __restrict__ slots, const int* __restrict__ counts, int T, const float* __restrict__ q,
                const float* __restrict__ k, const float* __restrict__ v, const float* __restrict__ a,
                const float* __restrict__ bb, float* __restrict__ o, const double* __restrict__ negA,
                const double* __restrict__ dtb, float qscale)
{
    constexpr int KV = BVLEN(DK); // a padded vector (bvpad)
    constexpr int KC = PREFILL_CHUNK;
    __shared__ __align__(16) float sK[KC * KV];
    __shared__ __align__(16) float sQ[KC * KV];
    __shared__ float sV[KC * DV];
    __shared__ float sDecay[KC];
    __shared__ float sBeta[KC];
    __shared__ float sScratch[NWARPS];

    constexpr int VEC = SM::VEC;
    const int j = blockIdx.x, b = blockIdx.y, kh = j / VPK;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int s = slots[b];
    const int cnt = counts ? counts[b] : T;
    const int n = replay ? hist[s] : 0;
    const u64 mat = replay ? (u64)s * NVH + j : ((u64)s * nb + cur[s]) * NVH + j;
    const bool rounds = !replay && STATE_FMT != FMT_F32;
    float S[SM::PASSES][SM::CPL][VEC];
    load_state<SM>(state + mat * (DV * DK), state_scale(state, mat), S);
    for (int k0 = -n; k0 < cnt; k0 += KC) {
        const int m = min(KC, cnt - k0);
        __syncthreads(); // the last chunk's rows are read
        // Keys then queries, a warp a vector: the ring's keys as kept
        // (normalised), the inputs' normalised here.
        for (int w = warp; w < 2 * m; w += NWARPS) {
            const int d = w < m ? w : w - m, kk = k0 + d;
            if (w < m && kk < 0) {
                for (int i = lane; i < DK; i += 32) {
                    sK[d * KV + bvpad(i)] = ringK[(ring_at(s, n + kk) * NKH + kh) * DK + i];
                }
            } else if (w < m) {
                l2norm_warp<true>(sK + d * KV, k + (((u64)b * T + kk) * NKH + kh) * DK, 1.0f);
            } else if (kk >= 0) {
                l2norm_warp<true>(sQ + d * KV, q + (((u64)b * T + kk) * NKH + kh) * DK, qscale);
            }
        }
        if (tid < m) {
            const int kk = k0 + tid;
            if (kk < 0) {
                sDecay[tid] = ringA[rs_at(s, j, n + kk)];
                sBeta[tid] = ringBeta[rs_at(s, j, n + kk)];
            } else {
                gdn_scalars(a[((u64)b * T + kk) * NVH + j], bb[((u64)b * T + kk) * NVH + j], negA[j], dtb[j],
                            &sDecay[tid], &sBeta[tid]);
            }
        }
        for (int idx = tid; idx < m * DV; idx += NT) {
            const int d = idx / DV, r = idx % DV, kk = k0 + d;
            sV[d * DV + r] = kk < 0 ? ringV[(ring_at(s, n + kk) * NVH + j) * DV + r]
                                    : v[(((u64)b * T + kk) * NVH + j) * DV + r];
        }
        __syncthreads();
        for (int d = 0; d < m; d++) {
            const bool out = k0 + d >= 0; // the same for the whole block
            const float eg = sDecay[d], beta = sBeta[d];
            const float* kd = sK + d * KV;
            const float* qd = sQ + d * KV;
            float* od = out ? o + (((u64)b * T + k0 + d) * NVH + j) * DV : nullptr;
#pragma unroll
            for (int pass = 0; pass < SM::PASSES; pass++) {
                const int r = SM::row(pass);
                float sk = 0.0f;
#pragma unroll
                for (int c = 0; c < SM::CPL; c++) {
                    const int col = SM::col(c);
#pragma unroll
                    for (int e = 0; e < VEC; e++) {
                        sk = fmaf(S[pass][c][e], kd[bvpad(col) + e], sk);
                    }
                }
                sk = lanes_sum<SM::LANES>(sk);
                const float u = r < ROWS ? beta * (sV[d * DV + r] - eg * sk) : 0.0f;
                float ov = 0.0f;
#pragma unroll
                for (int c = 0; c < SM::CPL; c++) {
                    const int col = SM::col(c);
#pragma unroll
                    for (int e = 0; e < VEC; e++) {
                        const float xv = eg * S[pass][c][e] + u * kd[bvpad(col) + e];
                        S[pass][c][e] = xv;
                        ov = fmaf(xv, qd[bvpad(col) + e], ov);
                    }
                }
                if (out) {
                    ov = lanes_sum<SM::LANES>(ov);
                    if (r < ROWS && SM::lane() == 0) {
                        od[r] = ov;
                    }
                }
            }
            if (rounds) {
                store_state_rounded<SM>(S, state, mat, sScratch);
            }
        }
    }
    prefill_store<SM>(S, state, rcodes, rscales, rglobal, mat, replay, sScratch);
}
#endif

// ---- the chunked prefill (Gated DeltaNet's WY form, docs/DESIGN.md 2.3c) ----
//
// A prompt runs in chunks of CQ positions. With gamma_i the product of the
// decays from the chunk's start through input i (float64 sums of the
// log-decays) and S_0 the state ([dv][dk]) at the chunk's start, the
// corrected updates u_t = beta_t (v_t - g_t S_{t-1} k_t) of the chunk
// solve the unit lower-triangular system
//
//	(I + A) U = diag(beta) V - diag(beta gamma) K S_0^T,  A_tj = beta_t (gamma_t/gamma_j) (k_t . k_j), j < t
//
// so U = U' - W S_0^T with W = (I+A)^-1 diag(beta gamma) K and U' = (I+A)^-1
// diag(beta) V, which depend on the chunk's inputs alone; then
//
//	o_t = gamma_t S_0 q_t + sum_{j<=t} (gamma_t/gamma_j) (q_t . k_j) u_j
//	S_Q = gamma_last S_0 + sum_j (gamma_last/gamma_j) u_j k_j^T
//
// gdn_chunk_prep forms W, U', P_tj = (q_t . k_j) gamma_t/gamma_j (j <= t),
// the gammas and the normalised keys and queries of every chunk in
// parallel (forward substitution for the solve); gdn_chunk_scan walks the
// chunks of one value head's state rows [r0, r0+CPS) with that slice of
// the state in tensor-core accumulators (3xTF32); gdn_chunk_store stores
// the final states as prefill_store does.
#if PREFILL_MODULE
#define CQ 64          // positions a chunk
#define CPS 16         // state rows (of dv) a scan block
#define CNT 256        // threads a prep or scan block
#define CN4 (DK + 4)   // row stride of staged key-sized rows
#define CQ4 (CQ + 4)   // row stride of CQ-sized rows
#define CNCH ((DK + 127) / 128)
#define CNR ((DK / 8 + CNT / 32 - 1) / (CNT / 32)) // state tiles a warp

// The prep's output for slot b and chunk c, at chunk_at(b, c, nchunks):
// per value head HEAD_FLOATS (W [CQ][DK], U' [CQ][DV], P [CQ][CQ], gamma
// [CQ], gamma_last/gamma [CQ]), then per key head KEY_FLOATS (normalised
// keys, then queries, [CQ][DK] each). gdnChunkScratch (prefill.go) counts
// the same.
#define HEAD_FLOATS (CQ * DK + CQ * DV + CQ * CQ + 2 * CQ)
#define KEY_FLOATS (2 * CQ * DK)
#define CHUNK_FLOATS (NVH * HEAD_FLOATS + NKH * KEY_FLOATS)
__device__ __forceinline__ u64 chunk_at(int b, int c, int nchunks) { return ((u64)b * nchunks + c) * CHUNK_FLOATS; }
__device__ __forceinline__ u64 head_at(int j) { return (u64)j * HEAD_FLOATS; }
__device__ __forceinline__ u64 key_at(int kh) { return (u64)NVH * HEAD_FLOATS + (u64)kh * KEY_FLOATS; }

// gdn_chunk_prep: grid (nchunks, NVH, batch); dynamic shared memory
// gdnChunkPrepSmem (prefill.go).
extern "C" __global__ void __launch_bounds__(CNT)
    gdn_chunk_prep(const int* __restrict__ counts, int T, const float* __restrict__ q, const float* __restrict__ k,
                   const float* __restrict__ v, const float* __restrict__ a, const float* __restrict__ bb,
                   const double* __restrict__ negA, const double* __restrict__ dtb, float qscale,
                   float* __restrict__ work, int nchunks)
{
    extern __shared__ __align__(16) float smem[];
    float* sK = smem;               // [CQ][CN4] normalised keys
    float* sQ = sK + CQ * CN4;      // [CQ][CN4] normalised queries
    float* sA = sQ + CQ * CN4;      // [CQ][CQ4] A
    double* sCum = reinterpret_cast<double*>(sA + CQ * CQ4); // [CQ] per-warp inclusive sums
    float* sBeta = reinterpret_cast<float*>(sCum + CQ);        // [CQ]

    const int c = blockIdx.x, j = blockIdx.y, b = blockIdx.z, kh = j / VPK;
    const int t = threadIdx.x, warp = t >> 5, lane = t & 31;
    const int cnt = counts ? counts[b] : T;
    const int k0 = c * CQ;
    if (k0 >= cnt) {
        return;
    }
    const int m = min(CQ, cnt - k0);
    for (int w = warp; w < 2 * CQ; w += CNT / 32) {
        const int i = w < CQ ? w : w - CQ;
        float* dst = (w < CQ ? sK : sQ) + i * CN4;
        if (i < m) {
            const float* src = (w < CQ ? k : q) + (((u64)b * T + k0 + i) * NKH + kh) * DK;
            l2norm_warp(dst, src, w < CQ ? 1.0f : qscale);
        } else {
            for (int e = lane; e < DK; e += 32) {
                dst[e] = 0.0f;
            }
        }
    }
    if (t < CQ) {
        double la = 0.0;
        float beta = 0.0f;
        if (t < m) {
            const u64 at = ((u64)b * T + k0 + t) * NVH + j;
            la = (double)(float)(negA[j] * softplus_d((double)a[at] + dtb[j])); // gdn_scalars' g
            beta = (float)sigmoid_d((double)bb[at]);
        }
        sBeta[t] = beta;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const double x = __shfl_up_sync(FULL_MASK, la, o);
            if (lane >= o) {
                la += x;
            }
        }
        sCum[t] = la;
    }
    __syncthreads();
    auto cum = [&](int i) { return sCum[i] + (i >= 32 ? sCum[31] : 0.0); };
    const double last = cum(CQ - 1);
    float* out = work + chunk_at(b, c, nchunks) + head_at(j);
    float* oW = out;
    float* oU = oW + CQ * DK;
    float* oP = oU + CQ * DV;
    float* oGam = oP + CQ * CQ;
    float* oGamR = oGam + CQ;
    if (t < CQ) {
        oGam[t] = expf((float)cum(t));
        oGamR[t] = expf((float)(last - cum(t)));
    }
    // K K^T and Q K^T, thread (row i, columns j0 + 4kk): A and P.
    {
        const int i = t >> 2, j0 = t & 3;
        float kk[CQ / 4], qk[CQ / 4];
#pragma unroll
        for (int e = 0; e < CQ / 4; e++) {
            kk[e] = 0.0f;
            qk[e] = 0.0f;
        }
        for (int n = 0; n < DK; n += 4) {
            const float4 ki = *reinterpret_cast<const float4*>(sK + i * CN4 + n);
            const float4 qi = *reinterpret_cast<const float4*>(sQ + i * CN4 + n);
#pragma unroll
            for (int e = 0; e < CQ / 4; e++) {
                const float4 kj = *reinterpret_cast<const float4*>(sK + (j0 + 4 * e) * CN4 + n);
                kk[e] = fmaf(ki.x, kj.x, fmaf(ki.y, kj.y, fmaf(ki.z, kj.z, fmaf(ki.w, kj.w, kk[e]))));
                qk[e] = fmaf(qi.x, kj.x, fmaf(qi.y, kj.y, fmaf(qi.z, kj.z, fmaf(qi.w, kj.w, qk[e]))));
            }
        }
        const double ci = cum(i);
#pragma unroll
        for (int e = 0; e < CQ / 4; e++) {
            const int jj = j0 + 4 * e;
            const float w = i < m && jj <= i ? expf((float)(ci - cum(jj))) : 0.0f;
            sA[i * CQ4 + jj] = jj < i ? sBeta[i] * w * kk[e] : 0.0f;
            oP[i * CQ + jj] = w * qk[e];
        }
    }
    __syncthreads();
    // (I + A) X = R by forward substitution, a column of [W | U'] a thread:
    // R_t is beta_t gamma_t k_t (W's columns) or beta_t v_t (U''s).
    for (int col = t; col < DK + DV; col += CNT) {
        float X[CQ];
#pragma unroll
        for (int r = 0; r < CQ; r++) {
            float x = 0.0f;
            if (r < m) {
                x = col < DK ? sBeta[r] * expf((float)cum(r)) * sK[r * CN4 + col]
                             : sBeta[r] * v[(((u64)b * T + k0 + r) * NVH + j) * DV + col - DK];
            }
#pragma unroll
            for (int jj = 0; jj < r; jj++) {
                x = fmaf(-sA[r * CQ4 + jj], X[jj], x);
            }
            X[r] = x;
        }
#pragma unroll
        for (int r = 0; r < CQ; r++) {
            if (col < DK) {
                oW[r * DK + col] = X[r];
            } else {
                oU[r * DV + col - DK] = X[r];
            }
        }
    }
    if (j % VPK == 0) { // one value head of the key head writes its keys and queries
        float* oK = work + chunk_at(b, c, nchunks) + key_at(kh);
        float* oQ = oK + CQ * DK;
        for (int idx = t; idx < CQ * DK; idx += CNT) {
            const int i = idx / DK, e = idx % DK;
            oK[idx] = sK[i * CN4 + e];
            oQ[idx] = sQ[i * CN4 + e];
        }
    }
}

// stage_rows copies CQ rows of DK floats (src, row stride DK) to dst [CQ][CN4],
// row i times mul[i] where mul is not null.
__device__ __forceinline__ void stage_rows(float* dst, const float* __restrict__ src, const float* mul)
{
    for (int idx = threadIdx.x; idx < CQ * (DK / 4); idx += CNT) {
        const int i = idx / (DK / 4), n = 4 * (idx % (DK / 4));
        float4 x = *reinterpret_cast<const float4*>(src + i * DK + n);
        if (mul) {
            const float f = mul[i];
            x.x *= f;
            x.y *= f;
            x.z *= f;
            x.w *= f;
        }
        *reinterpret_cast<float4*>(dst + i * CN4 + n) = x;
    }
}

// gdn_chunk_scan runs state rows [r0, r0+CPS) of value head j of slot b
// (r0 = CPS*blockIdx.x; grid (ceil(DV/CPS), NVH, batch)) through the
// replay ring's pending entries (replay mode) one at a time, then through
// the chunks gdn_chunk_prep formed, writing the outputs o of those rows,
// and leaves the final float32 state rows in fin [b][head][DV][DK].
// Dynamic shared memory: gdnChunkScanSmem (prefill.go).
extern "C" __global__ void __launch_bounds__(CNT)
    gdn_chunk_scan(const ST* state, const float* __restrict__ ringK, const float* __restrict__ ringV,
                   const float* __restrict__ ringA, const float* __restrict__ ringBeta,
                   const int* __restrict__ hist, const int* __restrict__ cur, int nb, int replay,
                   const int* __restrict__ slots, const int* __restrict__ counts, int T, float* __restrict__ o,
                   const float* __restrict__ work, int nchunks, float* __restrict__ fin)
{
    extern __shared__ __align__(16) float smem[];
    float* sCB = smem;            // [CQ][CN4]: W, then the queries, then the decayed keys
    float* sU = sCB + CQ * CN4;   // [CPS][CQ4]: U', then U
    float* sS = sU + CPS * CQ4;   // [CPS][CN4]: the state rows at the chunk's start
    float* sE = sS + CPS * CN4;   // [CQ] gamma
    float* sER = sE + CQ;         // [CQ] gamma_last/gamma

    const int r0 = blockIdx.x * CPS, j = blockIdx.y, b = blockIdx.z, kh = j / VPK;
    const int t = threadIdx.x, warp = t >> 5, lg = (t & 31) >> 2, lt = t & 3;
    const int s = slots[b];
    const int cnt = counts ? counts[b] : T;
    const int nr = replay ? hist[s] : 0;
    const u64 mat = replay ? (u64)s * NVH + j : ((u64)s * nb + cur[s]) * NVH + j;

    // The state rows, loaded and run through the ring's pending entries
    // (u = beta (v - g S k), S = g S + u k^T, as the step) by thread (row
    // up, columns un + 128r .. +7), the 16 threads of a row summing S k
    // with shuffles; then staged for the accumulators.
    {
        const int up = t >> 4, un = (t & 15) * 8, row = r0 + up;
        float S[CNCH][8];
        const float sc = state_scale(state, mat);
#pragma unroll
        for (int r = 0; r < CNCH; r++) {
            const int n0 = un + 128 * r;
            if (row < DV && n0 < DK) {
                load_chunk<STATE_FMT, 8>(state + mat * (DV * DK), (u64)row * DK + n0, S[r], sc);
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    S[r][e] = 0.0f;
                }
            }
        }
        for (int e = 0; e < nr; e++) {
            const float eg = ringA[rs_at(s, j, e)], beta = ringBeta[rs_at(s, j, e)];
            const float* ke = ringK + (ring_at(s, e) * NKH + kh) * DK;
            float sk = 0.0f;
#pragma unroll
            for (int r = 0; r < CNCH; r++) {
                const int n0 = un + 128 * r;
                if (n0 < DK) {
#pragma unroll
                    for (int x = 0; x < 8; x++) {
                        sk = fmaf(S[r][x], ke[n0 + x], sk);
                    }
                }
            }
            sk = lanes_sum<16>(sk);
            const float u = row < DV ? beta * (ringV[(ring_at(s, e) * NVH + j) * DV + row] - eg * sk) : 0.0f;
#pragma unroll
            for (int r = 0; r < CNCH; r++) {
                const int n0 = un + 128 * r;
                if (n0 < DK) {
#pragma unroll
                    for (int x = 0; x < 8; x++) {
                        S[r][x] = eg * S[r][x] + u * ke[n0 + x];
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < CNCH; r++) {
            const int n0 = un + 128 * r;
            if (n0 < DK) {
#pragma unroll
                for (int x = 0; x < 8; x++) {
                    sS[up * CN4 + n0 + x] = S[r][x];
                }
            }
        }
    }
    __syncthreads();
    float acc[CNR][4]; // as mamba2_chunk_scan's
#pragma unroll
    for (int r = 0; r < CNR; r++) {
        const int n = 8 * (warp + (CNT / 32) * r) + 2 * lt;
        const bool on = n < DK;
        acc[r][0] = on ? sS[lg * CN4 + n] : 0.0f;
        acc[r][1] = on ? sS[lg * CN4 + n + 1] : 0.0f;
        acc[r][2] = on ? sS[(lg + 8) * CN4 + n] : 0.0f;
        acc[r][3] = on ? sS[(lg + 8) * CN4 + n + 1] : 0.0f;
    }

    const int mt = warp >> 1, pt = warp & 1; // the warp's tile: chunk rows 16mt.., state rows 8pt..
    const int i0 = 16 * mt + lg, i1 = i0 + 8;
    for (int k0 = 0, c = 0; k0 < cnt; k0 += CQ, c++) {
        const int m = min(CQ, cnt - k0);
        const float* in = work + chunk_at(b, c, nchunks);
        const float* W = in + head_at(j);
        const float* Up = W + CQ * DK;
        const float* Pm = Up + CQ * DV;
        const float* gam = Pm + CQ * CQ;
        __syncthreads(); // the last chunk's keys and state rows are read
        stage_rows(sCB, W, nullptr);
        for (int idx = t; idx < CPS * CQ; idx += CNT) {
            const int i = idx / CPS, p = idx % CPS;
            sU[p * CQ4 + i] = r0 + p < DV ? Up[i * DV + r0 + p] : 0.0f;
        }
        if (t < CQ) {
            sE[t] = gam[t];
            sER[t] = gam[CQ + t];
        }
        __syncthreads();
        // U = U' - W S_0^T, the warp's tile.
        {
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            const float* wa = sCB + i0 * CN4 + lt;
            const float* sb = sS + (8 * pt + lg) * CN4 + lt;
            for (int n = 0; n < DK; n += 8) {
                u32 ahi[4], alo[4], bhi0, bhi1, blo0, blo1;
                tf32_split(wa[n], ahi[0], alo[0]);
                tf32_split(wa[8 * CN4 + n], ahi[1], alo[1]);
                tf32_split(wa[n + 4], ahi[2], alo[2]);
                tf32_split(wa[8 * CN4 + n + 4], ahi[3], alo[3]);
                tf32_split(sb[n], bhi0, blo0);
                tf32_split(sb[n + 4], bhi1, blo1);
                mma_3xtf32<false>(d[0], d[1], d[2], d[3], ahi, alo, bhi0, bhi1, blo0, blo1);
            }
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = e < 2 ? i0 : i1, p = 8 * pt + 2 * lt + (e & 1);
                sU[p * CQ4 + i] -= d[e];
            }
        }
        __syncthreads(); // W is read, U written
        stage_rows(sCB, in + key_at(kh) + CQ * DK, nullptr);
        __syncthreads();
        // o_t = gamma_t (q_t . S_0) + sum_{j<=t} P_tj u_j, the warp's tile.
        {
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            const float* qa = sCB + i0 * CN4 + lt;
            const float* sb = sS + (8 * pt + lg) * CN4 + lt;
            for (int n = 0; n < DK; n += 8) {
                u32 ahi[4], alo[4], bhi0, bhi1, blo0, blo1;
                tf32_split(qa[n], ahi[0], alo[0]);
                tf32_split(qa[8 * CN4 + n], ahi[1], alo[1]);
                tf32_split(qa[n + 4], ahi[2], alo[2]);
                tf32_split(qa[8 * CN4 + n + 4], ahi[3], alo[3]);
                tf32_split(sb[n], bhi0, blo0);
                tf32_split(sb[n + 4], bhi1, blo1);
                mma_3xtf32<false>(d[0], d[1], d[2], d[3], ahi, alo, bhi0, bhi1, blo0, blo1);
            }
            d[0] *= sE[i0];
            d[1] *= sE[i0];
            d[2] *= sE[i1];
            d[3] *= sE[i1];
            const float* pa = Pm + i0 * CQ + lt;
            const float* ub = sU + (8 * pt + lg) * CQ4 + lt;
            for (int n = 0; n < 16 * (mt + 1); n += 8) { // P is zero past the diagonal
                u32 ahi[4], alo[4], bhi0, bhi1, blo0, blo1;
                tf32_split(pa[n], ahi[0], alo[0]);
                tf32_split(pa[8 * CQ + n], ahi[1], alo[1]);
                tf32_split(pa[n + 4], ahi[2], alo[2]);
                tf32_split(pa[8 * CQ + n + 4], ahi[3], alo[3]);
                tf32_split(ub[n], bhi0, blo0);
                tf32_split(ub[n + 4], bhi1, blo1);
                mma_3xtf32<false>(d[0], d[1], d[2], d[3], ahi, alo, bhi0, bhi1, blo0, blo1);
            }
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = e < 2 ? i0 : i1, p = r0 + 8 * pt + 2 * lt + (e & 1);
                if (i < m && p < DV) {
                    o[(((u64)b * T + k0 + i) * NVH + j) * DV + p] = d[e];
                }
            }
        }
        __syncthreads(); // the queries and the old state rows are read
        stage_rows(sCB, in + key_at(kh), sER);
        __syncthreads();
        // S = gamma_last S + sum_j u_j (gamma_last/gamma_j) k_j^T.
        {
            const float dq = sE[CQ - 1]; // gamma_last (rows past m add nothing)
#pragma unroll
            for (int r = 0; r < CNR; r++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    acc[r][e] *= dq;
                }
            }
            const float* ua = sU + lg * CQ4 + lt;
            for (int kq = 0; kq < m; kq += 8) {
                u32 ahi[4], alo[4];
                tf32_split(ua[kq], ahi[0], alo[0]);
                tf32_split(ua[8 * CQ4 + kq], ahi[1], alo[1]);
                tf32_split(ua[kq + 4], ahi[2], alo[2]);
                tf32_split(ua[8 * CQ4 + kq + 4], ahi[3], alo[3]);
#pragma unroll
                for (int r = 0; r < CNR; r++) {
                    const int n = 8 * (warp + (CNT / 32) * r) + lg;
                    if (n < DK) {
                        u32 bhi0, bhi1, blo0, blo1;
                        tf32_split(sCB[(kq + lt) * CN4 + n], bhi0, blo0);
                        tf32_split(sCB[(kq + lt + 4) * CN4 + n], bhi1, blo1);
                        mma_3xtf32<false>(acc[r][0], acc[r][1], acc[r][2], acc[r][3], ahi, alo, bhi0, bhi1, blo0, blo1);
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < CNR; r++) {
                const int n = 8 * (warp + (CNT / 32) * r) + 2 * lt;
                if (n < DK) {
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
        if (n < DK) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int row = r0 + lg + 8 * (e >> 1);
                if (row < DV) {
                    fin[(((u64)b * NVH + j) * DV + row) * DK + n + (e & 1)] = acc[r][e];
                }
            }
        }
    }
}

// gdn_chunk_store stores the chunked prefill's final float32 states fin
// [b][head][DV][DK] as prefill_store does (mamba2_chunk_store's). Grid
// (NVH, batch), NT threads.
extern "C" __global__ void __launch_bounds__(NT)
    gdn_chunk_store(ST* state, u8* rcodes, u8* rscales, float* rglobal, const int* __restrict__ cur, int nb,
                    int replay, const int* __restrict__ slots, const float* __restrict__ fin)
{
    __shared__ float sScratch[NWARPS];
    const int j = blockIdx.x, b = blockIdx.y;
    const int s = slots[b];
    const u64 mat = replay ? (u64)s * NVH + j : ((u64)s * nb + cur[s]) * NVH + j;
    float S[SM::PASSES][SM::CPL][SM::VEC];
    const float* src = fin + ((u64)b * NVH + j) * (DV * DK);
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
