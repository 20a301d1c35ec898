// replay_gdn.cu: the Gated DeltaNet state cache on the GPU (compiled after
// replay_common.cu). One CTA per (value head, batch row): grid (NVH, batch).
//
// Extra defines: NKH, NVH (key and value heads), L2EPS (the l2norm epsilon).
// ROWS = dv, COLS = dk: the state of value head j is stored transposed, dv
// rows of dk (package replay's layout), so S^T v is one dot product per row.
// Layouts: state [slot][buffer][head][dv][dk]; read copy as for Mamba-2;
// ring per slot of RMAX entries: k (l2-normalised) [NKH*dk], v [NVH*dv],
// the decay exp(g) [NVH], beta [NVH], u [NVH*dv]. Input rows: q, k [NKH*dk]
// (before the normalisation), v [NVH*dv], a, b [NVH] (raw); outputs o [NVH*dv].

#define DK COLS
#define DV ROWS
#define VPK (NVH / NKH)
#define VROWS (RMAX + 1 > 2 * TMAX ? RMAX + 1 : 2 * TMAX)

typedef StateIO<STATE_FMT> SIO;
typedef SIO::T ST;
typedef Map<SIO::VEC, COLS, ROWS> SM;

__device__ __forceinline__ u64 ring_at(int s, int e) { return (u64)s * RMAX + e; }

// l2norm_warp writes src * (float32(1/sqrt(sum src^2 + eps)) * scale) to dst,
// the sum in float64 as the CPU cache does. One warp calls it.
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
        dst[i] = src[i] * r;
    }
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

// gdn_fold is the exact flush (DESIGN.md 2.2, replay.GDNCache.fold) of the t
// ring entries whose normalised keys are sh.vec[0..t-1] (and, when q_slot >= 0,
// q in sh.vec[q_slot]) into the checkpoint S of one value head. It recomputes
// every corrected update from the raw v, g, beta on the high-precision
// checkpoint, never from cached u:
//
//	u'_i = beta_i (v_i - [g_i S0^T k_i + sum_{l<i} (g_i/g_l)(k_l.k_i) u'_l])
//	S0  <- g_t S0 + sum_i (g_t/g_i) k_i (x) u'_i
//
// (g_i = the product of the per-step decays exp(g) through entry i, in
// float64 as the CPU fold takes them: no exp, no division), writes S (and the
// read copy) back,
// and with q_slot >= 0 writes o = S_new^T q to out. v_i comes from the ring
// for i < nring and from vcur for i = nring. Barriers inside: every thread
// calls it.
__device__ __forceinline__ void gdn_fold(GDNShared& sh, ST* S, u8* codes, u8* scales, float* global, int t,
                                         int q_slot, const float* __restrict__ ringV, int s, int j, int nring,
                                         const float* __restrict__ vcur, float* __restrict__ out)
{
    constexpr int VEC = SM::VEC;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int nv = q_slot >= 0 ? t + 1 : t;
    float reg[SM::PASSES][SM::CPL][VEC];
    // The checkpoint in registers; S0^T vec_a for every vector, each vector
    // chunk read from shared memory once for all the thread's rows.
#pragma unroll
    for (int pass = 0; pass < SM::PASSES; pass++) {
        const int r = SM::row(pass);
#pragma unroll
        for (int c = 0; c < SM::CPL; c++) {
            if (r < ROWS) {
                SIO::load(S, (u64)r * DK + SM::col(c), reg[pass][c]);
            } else {
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    reg[pass][c][k] = 0.0f;
                }
            }
        }
    }
    for (int a = 0; a < nv; a++) {
        float acc[SM::PASSES];
#pragma unroll
        for (int pass = 0; pass < SM::PASSES; pass++) {
            acc[pass] = 0.0f;
        }
#pragma unroll
        for (int c = 0; c < SM::CPL; c++) {
            const float4* vp = reinterpret_cast<const float4*>(sh.vec + a * DK + SM::col(c));
#pragma unroll
            for (int q = 0; q < VEC / 4; q++) {
                const float4 v4 = vp[q];
#pragma unroll
                for (int pass = 0; pass < SM::PASSES; pass++) {
                    acc[pass] = fmaf(reg[pass][c][4 * q], v4.x, acc[pass]);
                    acc[pass] = fmaf(reg[pass][c][4 * q + 1], v4.y, acc[pass]);
                    acc[pass] = fmaf(reg[pass][c][4 * q + 2], v4.z, acc[pass]);
                    acc[pass] = fmaf(reg[pass][c][4 * q + 3], v4.w, acc[pass]);
                }
            }
        }
#pragma unroll
        for (int pass = 0; pass < SM::PASSES; pass++) {
            const int r = SM::row(pass);
            const float sum = lanes_sum<SM::LANES>(acc[pass]);
            if (r < ROWS && SM::lane() == 0) {
                sh.proj[a * DV + r] = sum;
            }
        }
    }
    // gram[i][l] = k_l . vec_i for l < min(i, t), shared by nothing else: one
    // warp per pair.
    const int pairs = nv * t;
    for (int pr = warp; pr < pairs; pr += NWARPS) {
        const int i = pr / t, l = pr % t;
        if (l < i) {
            float acc = 0.0f;
            for (int e = lane; e < DK; e += 32) {
                acc = fmaf(sh.vec[l * DK + e], sh.vec[i * DK + e], acc);
            }
            acc = warp_sum(acc);
            if (lane == 0) {
                sh.gram[i * VROWS + l] = acc;
            }
        }
    }
    // Decays as products of the per-step exp(g), one entry i per thread:
    // wt[i][l] = prod_{m=l+1..i} a_m, eg[i] = prod_{m<=i} a_m,
    // coef[i] = prod_{m=i+1..t-1} a_m, gt = prod_{m<t} a_m.
    for (int i = tid; i < t; i += NT) {
        double w = 1.0;
        for (int l = i - 1; l >= 0; l--) {
            w *= (double)sh.decay[l + 1];
            sh.wt[i * RMAX + l] = (float)w;
        }
        sh.eg[i] = (float)(w * (double)sh.decay[0]);
        double c = 1.0;
        for (int m = i + 1; m < t; m++) {
            c *= (double)sh.decay[m];
        }
        sh.coef[i] = (float)c;
    }
    if (tid == NT - 1) {
        double gp = 1.0;
        for (int m = 0; m < t; m++) {
            gp *= (double)sh.decay[m];
        }
        sh.gt = (float)gp;
    }
    __syncthreads();
    // u'_i in order, one value index m per thread; proj row i becomes u'_i.
    for (int m = tid; m < DV; m += NT) {
        // v_i[m] for every entry, all loads in flight at once.
        float vloc[RMAX];
#pragma unroll
        for (int i = 0; i < RMAX; i++) {
            vloc[i] = 0.0f;
            if (i < nring) {
                vloc[i] = ringV[(ring_at(s, i) * NVH + j) * DV + m];
            } else if (i < t) {
                vloc[i] = vcur[m];
            }
        }
        for (int i = 0; i < t; i++) {
            float ui = vloc[i] - sh.eg[i] * sh.proj[i * DV + m];
            for (int l = 0; l < i; l++) {
                const float w = sh.wt[i * RMAX + l] * sh.gram[i * VROWS + l];
                ui = fmaf(-w, sh.proj[l * DV + m], ui);
            }
            sh.proj[i * DV + m] = ui * sh.beta[i];
        }
        if (q_slot >= 0) {
            float o = sh.gt * sh.proj[t * DV + m];
            for (int i = 0; i < t; i++) {
                const float w = sh.coef[i] * sh.gram[t * VROWS + i];
                o = fmaf(w, sh.proj[i * DV + m], o);
            }
            out[m] = o;
        }
    }
    __syncthreads();
    // S_m <- g_t S_m + sum_i (coef_i u'_i[m]) k_i, from the registers; each
    // k_i chunk feeds every pass.
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
            const float4* kp = reinterpret_cast<const float4*>(sh.vec + i * DK + SM::col(c));
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
#pragma unroll
    for (int pass = 0; pass < SM::PASSES; pass++) {
        const int r = SM::row(pass);
        if (r < ROWS) {
#pragma unroll
            for (int c = 0; c < SM::CPL; c++) {
                float e[VEC];
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    e[k] = reg[pass][c][k];
                }
                SIO::store(S, (u64)r * DK + SM::col(c), e);
            }
        }
    }
#if READ_FMT == FMT_NVFP4
    nvfp4_write<SM>(reg, codes, scales, global, sh.scratch);
#endif
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
//     o = g_t S0^T q + sum_{i<=t} (g_t/g_i)(k_i.q) u_i (DESIGN.md 2.2), S0 read
//     from the read copy if there is one; u_t is cached in the ring;
//   - gdn_replay_flush: the exact fold of the whole window, current token
//     included, and o = S_new^T q.
// The ring's keys and cached updates are gathered into shared memory with all
// loads in flight at once.
template <bool FLUSH>
__device__ __forceinline__ void gdn_step(ST* state, u8* rcodes, u8* rscales, float* rglobal,
                                         float* __restrict__ ringK, float* __restrict__ ringV,
                                         float* __restrict__ ringA, float* __restrict__ ringBeta,
                                         float* __restrict__ ringU, const int* __restrict__ hist,
                                         const int* __restrict__ slots, const float* __restrict__ q,
                                         const float* __restrict__ k, const float* __restrict__ v,
                                         const float* __restrict__ a, const float* __restrict__ bb,
                                         float* __restrict__ o, const double* __restrict__ negA,
                                         const double* __restrict__ dtb, float qscale, int L)
{
    __shared__ __align__(16) GDNShared sh;
    const int j = blockIdx.x, b = blockIdx.y, kh = j / VPK;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int s = slots[b];
    const int n = hist[s];
    const int t = n + 1;
    if ((t >= L) != FLUSH) {
        return;
    }
    const u64 mat = (u64)s * NVH + j;
    // Vector rows: the flush keeps k_0..k_n, q; the non-flush k_n, q, then
    // the ring keys k_0..k_{n-1} from row 2 (and the ring's u_i in proj rows
    // 2.., next to S0^T k and S0^T q in rows 0 and 1).
    const int kslot = FLUSH ? n : 0, qslot = FLUSH ? t : 1, kbase = FLUSH ? 0 : 2;
    const float* vt = v + ((u64)b * NVH + j) * DV;
    float* ot = o + ((u64)b * NVH + j) * DV;

    constexpr int KIT = (DK * RMAX + NT - 1) / NT;
    constexpr int UIT = FLUSH ? 1 : (DV * RMAX + NT - 1) / NT;
    float kv[KIT], uv[UIT];
#pragma unroll
    for (int it = 0; it < KIT; it++) {
        const int idx = tid + it * NT;
        kv[it] = 0.0f;
        if (idx < n * DK) {
            kv[it] = ringK[(ring_at(s, idx / DK) * NKH + kh) * DK + idx % DK];
        }
    }
    if (!FLUSH) {
#pragma unroll
        for (int it = 0; it < UIT; it++) {
            const int idx = tid + it * NT;
            uv[it] = 0.0f;
            if (idx < n * DV) {
                uv[it] = ringU[(ring_at(s, idx / DV) * NVH + j) * DV + idx % DV];
            }
        }
    }
    if (warp == 0) {
        l2norm_warp(sh.vec + kslot * DK, k + ((u64)b * NKH + kh) * DK, 1.0f);
    }
    if (warp == 1) { // NT >= 64
        l2norm_warp(sh.vec + qslot * DK, q + ((u64)b * NKH + kh) * DK, qscale);
    }
    if (tid == 0) {
        float eg, beta;
        gdn_scalars(a[(u64)b * NVH + j], bb[(u64)b * NVH + j], negA[j], dtb[j], &eg, &beta);
        sh.decay[n] = eg;
        sh.beta[n] = beta;
        if (!FLUSH) {
            ringA[ring_at(s, n) * NVH + j] = eg;
            ringBeta[ring_at(s, n) * NVH + j] = beta;
        }
    }
    for (int i = tid; i < n; i += NT) {
        sh.decay[i] = ringA[ring_at(s, i) * NVH + j];
        sh.beta[i] = ringBeta[ring_at(s, i) * NVH + j];
    }
    if (!FLUSH) {
        for (int m = tid; m < DV; m += NT) {
            ringV[(ring_at(s, n) * NVH + j) * DV + m] = vt[m];
        }
    }
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
#if READ_FMT == FMT_NVFP4
    init_e2m1_lut(sh.lut);
#endif
    __syncthreads();
    if (FLUSH) {
        gdn_fold(sh, state + mat * (DV * DK), rcodes + mat * (DV * DK / 2), rscales + mat * (DV * DK / 16),
                 rglobal + mat, t, qslot, ringV, s, j, n, vt, ot);
        return;
    }
    if (j % VPK == 0) {
        for (int e = tid; e < DK; e += NT) {
            ringK[(ring_at(s, n) * NKH + kh) * DK + e] = sh.vec[e];
        }
    }
    // k_i . k and k_i . q over the window, one warp per entry and vector.
    for (int pr = warp; pr < 2 * t; pr += NWARPS) {
        const int i = pr >> 1, which = pr & 1;
        if (which == 0 && i == n) {
            continue;
        }
        const float* ki = sh.vec + (i < n ? (2 + i) * DK : 0);
        float acc = 0.0f;
        for (int e = lane; e < DK; e += 32) {
            acc = fmaf(ki[e], sh.vec[which * DK + e], acc);
        }
        acc = warp_sum(acc);
        if (lane == 0) {
            sh.gram[which * VROWS + i] = acc;
        }
    }
    if (tid == 0) {
        double suf = 1.0;
        for (int i = n; i >= 0; i--) {
            sh.ws[i] = (float)suf;
            suf *= (double)sh.decay[i];
        }
        sh.gam[0] = (float)suf;
    }
#if READ_FMT == FMT_NVFP4
    dots_nvfp4<2>(rcodes + mat * (DV * DK / 2), rscales + mat * (DV * DK / 16), rglobal[mat], sh.vec, DK, 2, sh.proj,
                  sh.lut);
#else
    dots_state<2, STATE_FMT>(state + mat * (DV * DK), sh.vec, DK, 2, sh.proj);
#endif
    __syncthreads();
    const float gam = sh.gam[0], beta = sh.beta[n];
    for (int m = tid; m < DV; m += NT) {
        float ut = vt[m] - gam * sh.proj[m];
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
}

#define GDN_STEP_PARAMS                                                                                          \
    ST *state, u8 *rcodes, u8 *rscales, float *rglobal, float *__restrict__ ringK, float *__restrict__ ringV,    \
        float *__restrict__ ringA, float *__restrict__ ringBeta, float *__restrict__ ringU,                      \
        const int *__restrict__ hist, const int *__restrict__ slots, const float *__restrict__ q,                \
        const float *__restrict__ k, const float *__restrict__ v, const float *__restrict__ a,                   \
        const float *__restrict__ bb, float *__restrict__ o, const double *__restrict__ negA,                     \
        const double *__restrict__ dtb, float qscale, int L
#define GDN_STEP_ARGS state, rcodes, rscales, rglobal, ringK, ringV, ringA, ringBeta, ringU, hist, slots, q, k, v, a, bb, o, negA, dtb, qscale, L

extern "C" __global__ void __launch_bounds__(NT) gdn_replay_nonflush(GDN_STEP_PARAMS)
{
    gdn_step<false>(GDN_STEP_ARGS);
}

extern "C" __global__ void __launch_bounds__(NT) gdn_replay_flush(GDN_STEP_PARAMS)
{
    gdn_step<true>(GDN_STEP_ARGS);
}

// gdn_replay_verify computes the outputs of cnt = counts[b] (or T) drafts per
// slot from the checkpoint (or read copy) and the ring (DESIGN.md 2.3: the UT
// transform solved by forward substitution), appending them at ring entries
// n.., without writing the checkpoint. An early fold of the committed history
// runs first when n + 2*cnt would overflow the ring.
extern "C" __global__ void __launch_bounds__(NT)
gdn_replay_verify(ST* state, u8* rcodes, u8* rscales, float* rglobal,
                  float* __restrict__ ringK, float* __restrict__ ringV,
                  float* __restrict__ ringA, float* __restrict__ ringBeta, float* __restrict__ ringU,
                  const int* __restrict__ hist, const int* __restrict__ slots, const int* __restrict__ counts, int T,
                  const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                  const float* __restrict__ a, const float* __restrict__ bb, float* __restrict__ o,
                  const double* __restrict__ negA, const double* __restrict__ dtb, float qscale, int R)
{
    __shared__ __align__(16) GDNShared sh;
    const int j = blockIdx.x, b = blockIdx.y, kh = j / VPK;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int s = slots[b];
    int n = hist[s];
    const int cnt = counts ? counts[b] : T;
    const u64 mat = (u64)s * NVH + j;

    for (int i = tid; i < n; i += NT) {
        sh.decay[i] = ringA[ring_at(s, i) * NVH + j];
        sh.beta[i] = ringBeta[ring_at(s, i) * NVH + j];
    }
    if (n > 0 && n + 2 * cnt > R) {
        for (int idx = tid; idx < n * DK; idx += NT) {
            const int i = idx / DK, e = idx % DK;
            sh.vec[idx] = ringK[(ring_at(s, i) * NKH + kh) * DK + e];
        }
        __syncthreads();
        gdn_fold(sh, state + mat * (DV * DK), rcodes + mat * (DV * DK / 2), rscales + mat * (DV * DK / 16),
                 rglobal + mat, n, -1, ringV, s, j, n, nullptr, nullptr);
        // New checkpoint and read copy visible to the CTA, read back below.
        __syncthreads();
        n = 0;
    }
    // Normalise the drafts' k and q: vec[k] = k_k, vec[cnt+k] = q_k.
    for (int w = warp; w < 2 * cnt; w += NWARPS) {
        const int d = w % cnt;
        if (w < cnt) {
            l2norm_warp(sh.vec + d * DK, k + (((u64)b * T + d) * NKH + kh) * DK, 1.0f);
        } else {
            l2norm_warp(sh.vec + w * DK, q + (((u64)b * T + d) * NKH + kh) * DK, qscale);
        }
    }
    if (tid < cnt) {
        const int d = tid;
        float eg, beta;
        gdn_scalars(a[((u64)b * T + d) * NVH + j], bb[((u64)b * T + d) * NVH + j], negA[j], dtb[j], &eg, &beta);
        sh.decay[n + d] = eg;
        sh.beta[n + d] = beta;
        ringA[ring_at(s, n + d) * NVH + j] = eg;
        ringBeta[ring_at(s, n + d) * NVH + j] = beta;
    }
    for (int idx = tid; idx < cnt * DV; idx += NT) {
        const int d = idx / DV, m = idx % DV;
        ringV[(ring_at(s, n + d) * NVH + j) * DV + m] = v[(((u64)b * T + d) * NVH + j) * DV + m];
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
    // gram[d][i] = k_i . k_d (i < n+d), gram[TMAX+d][i] = k_i . q_d (i <= n+d).
    const int W = n + cnt;
    for (int pr = warp; pr < 2 * cnt * W; pr += NWARPS) {
        const int row = pr / W, i = pr % W;
        const int d = row % cnt;
        const bool isq = row >= cnt;
        if (isq ? i > n + d : i >= n + d) {
            continue;
        }
        const float* ki = i < n ? ringK + (ring_at(s, i) * NKH + kh) * DK : sh.vec + (i - n) * DK;
        float acc = 0.0f;
        for (int e = lane; e < DK; e += 32) {
            acc = fmaf(ki[e], sh.vec[row * DK + e], acc);
        }
        acc = warp_sum(acc);
        if (lane == 0) {
            sh.gram[((isq ? TMAX : 0) + d) * VROWS + i] = acc;
        }
    }
    if (tid < cnt) {
        const int d = tid;
        double suf = 1.0;
        for (int i = n + d; i >= 0; i--) {
            sh.ws[d * (RMAX + 1) + i] = (float)suf;
            suf *= (double)sh.decay[i];
        }
        sh.gam[d] = (float)suf;
    }
#if READ_FMT == FMT_NVFP4
    dots_nvfp4<2 * TMAX>(rcodes + mat * (DV * DK / 2), rscales + mat * (DV * DK / 16), rglobal[mat], sh.vec, DK,
                         2 * cnt, sh.proj, sh.lut);
#else
    dots_state<2 * TMAX, STATE_FMT>(state + mat * (DV * DK), sh.vec, DK, 2 * cnt, sh.proj);
#endif
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

// gdn_baseline is the in-place recurrence every step (DESIGN.md 1.2):
// u = beta (v - exp(g) S^T k); S = exp(g) S + k (x) u; o = S^T q, row by row
// (u[m] depends on row m only). With verify, draft k's state goes to buffer
// (cur+1+k) % nb. A bf16 state is rounded after every update.
template <bool VERIFY>
__device__ __forceinline__ void gdn_baseline(ST* state, const int* __restrict__ cur, const int* __restrict__ slots,
             const int* __restrict__ counts, int T, int nb, const float* __restrict__ q, const float* __restrict__ k,
             const float* __restrict__ v, const float* __restrict__ a, const float* __restrict__ bb,
             float* __restrict__ o, const double* __restrict__ negA, const double* __restrict__ dtb, float qscale)
{
    __shared__ __align__(16) float sK[TMAX * DK];
    __shared__ __align__(16) float sQ[TMAX * DK];
    __shared__ float sDecay[TMAX];
    __shared__ float sBeta[TMAX];

    constexpr int VEC = SM::VEC;
    const int j = blockIdx.x, b = blockIdx.y, kh = j / VPK;
    const int tid = threadIdx.x, warp = tid >> 5;
    const int s = slots[b];
    const int cnt = VERIFY ? (counts ? counts[b] : T) : 1;
    const int T1 = VERIFY ? T : 1;
    const int c0 = cur[s];
    ST* src = state + (((u64)s * nb + c0) * NVH + j) * (DV * DK);

    for (int w = warp; w < 2 * cnt; w += NWARPS) {
        const int d = w % cnt;
        if (w < cnt) {
            l2norm_warp(sK + d * DK, k + (((u64)b * T1 + d) * NKH + kh) * DK, 1.0f);
        } else {
            l2norm_warp(sQ + d * DK, q + (((u64)b * T1 + d) * NKH + kh) * DK, qscale);
        }
    }
    if (tid < cnt) {
        const int d = tid;
        const double sp = softplus_d((double)a[((u64)b * T1 + d) * NVH + j] + dtb[j]);
        sDecay[d] = (float)exp(negA[j] * sp);
        sBeta[d] = (float)sigmoid_d((double)bb[((u64)b * T1 + d) * NVH + j]);
    }
    __syncthreads();
    if (!VERIFY) {
        // One step in place, streaming the state pass by pass.
        const float eg = sDecay[0], beta = sBeta[0];
        const float* vd = v + ((u64)b * NVH + j) * DV;
        float* od = o + ((u64)b * NVH + j) * DV;
#pragma unroll 1
        for (int pass = 0; pass < SM::PASSES; pass++) {
            const int r = SM::row(pass);
            float e[SM::CPL][VEC];
#pragma unroll
            for (int c = 0; c < SM::CPL; c++) {
                if (r < ROWS) {
                    SIO::load(src, (u64)r * DK + SM::col(c), e[c]);
                } else {
#pragma unroll
                    for (int q = 0; q < VEC; q++) {
                        e[c][q] = 0.0f;
                    }
                }
            }
            float sk = 0.0f;
#pragma unroll
            for (int c = 0; c < SM::CPL; c++) {
#pragma unroll
                for (int q = 0; q < VEC; q++) {
                    sk = fmaf(e[c][q], sK[SM::col(c) + q], sk);
                }
            }
            sk = lanes_sum<SM::LANES>(sk);
            const float u = r < ROWS ? beta * (vd[r] - eg * sk) : 0.0f;
            float ov = 0.0f;
#pragma unroll
            for (int c = 0; c < SM::CPL; c++) {
                const int col = SM::col(c);
#pragma unroll
                for (int q = 0; q < VEC; q++) {
                    const float xv = eg * e[c][q] + u * sK[col + q];
                    e[c][q] = xv;
                    ov = fmaf(xv, sQ[col + q], ov);
                }
                if (r < ROWS) {
                    SIO::store(src, (u64)r * DK + col, e[c]);
                }
            }
            ov = lanes_sum<SM::LANES>(ov);
            if (r < ROWS && SM::lane() == 0) {
                od[r] = ov;
            }
        }
        return;
    }
    float S[SM::PASSES][SM::CPL][VEC];
#pragma unroll
    for (int pass = 0; pass < SM::PASSES; pass++) {
        const int r = SM::row(pass);
#pragma unroll
        for (int c = 0; c < SM::CPL; c++) {
            if (r < ROWS) {
                SIO::load(src, (u64)r * DK + SM::col(c), S[pass][c]);
            } else {
#pragma unroll
                for (int e = 0; e < VEC; e++) {
                    S[pass][c][e] = 0.0f;
                }
            }
        }
    }
    for (int d = 0; d < cnt; d++) {
        ST* dst = VERIFY ? state + (((u64)s * nb + (c0 + 1 + d) % nb) * NVH + j) * (DV * DK) : src;
        const float eg = sDecay[d], beta = sBeta[d];
        const float* vd = v + (((u64)b * T1 + d) * NVH + j) * DV;
        float* od = o + (((u64)b * T1 + d) * NVH + j) * DV;
        const float* kd = sK + d * DK;
        const float* qd = sQ + d * DK;
#pragma unroll
        for (int pass = 0; pass < SM::PASSES; pass++) {
            const int r = SM::row(pass);
            float sk = 0.0f;
#pragma unroll
            for (int c = 0; c < SM::CPL; c++) {
                const int col = SM::col(c);
#pragma unroll
                for (int e = 0; e < VEC; e++) {
                    sk = fmaf(S[pass][c][e], kd[col + e], sk);
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
                    const float x = eg * S[pass][c][e] + u * kd[col + e];
                    S[pass][c][e] = x;
                    ov = fmaf(x, qd[col + e], ov);
                }
                if (r < ROWS) {
                    SIO::store(dst, (u64)r * DK + col, S[pass][c]);
                }
            }
            ov = lanes_sum<SM::LANES>(ov);
            if (r < ROWS && SM::lane() == 0) {
                od[r] = ov;
            }
        }
    }
}

#define GDN_BASELINE_PARAMS                                                                                       \
    ST *state, const int *__restrict__ cur, const int *__restrict__ slots, const int *__restrict__ counts, int T, \
        int nb, const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,            \
        const float *__restrict__ a, const float *__restrict__ bb, float *__restrict__ o,                         \
        const double *__restrict__ negA, const double *__restrict__ dtb, float qscale
#define GDN_BASELINE_ARGS state, cur, slots, counts, T, nb, q, k, v, a, bb, o, negA, dtb, qscale

extern "C" __global__ void __launch_bounds__(NT) gdn_baseline_step(GDN_BASELINE_PARAMS)
{
    gdn_baseline<false>(GDN_BASELINE_ARGS);
}

extern "C" __global__ void __launch_bounds__(NT) gdn_baseline_verify(GDN_BASELINE_PARAMS)
{
    gdn_baseline<true>(GDN_BASELINE_ARGS);
}
