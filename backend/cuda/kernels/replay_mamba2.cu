// replay_mamba2.cu: the Mamba-2 state cache on the GPU (compiled after
// replay_common.cu). One CTA per (head, batch row): grid (NHEADS, batch).
//
// Extra defines: NHEADS, NGROUPS (ROWS = P head dim, COLS = N state size).
// Layouts are package replay's: state [slot][buffer][head][P][N]; read copy
// codes [slot][head][P*N/2], scales [slot][head][P*N/16], global [slot][head];
// ring per slot of RMAX entries: x [H*P], B [G*N], delta [H], a = exp(delta*A) [H].
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

__device__ __forceinline__ u64 ring_at(int s, int e) { return (u64)s * RMAX + e; }

// mamba2_fold applies the flush of DESIGN.md 2.1 to the matrix S of one head:
//
//	S <- decay*S + sum_{j<t} coef[p][j] * B_j        coef[p][j] = Delta_j e^{L_t-L_j} x_j[p]
//
// with B_j in sB[j*N...] and coef in sCoef[p*CSTRIDE + j], writes S back in
// the state format and, with a read copy, rewrites the copy. With OUT it also
// writes sDot[p] = S_new[p] . sC (the fp32 S, before any rounding).
template <bool OUT>
__device__ __forceinline__ void mamba2_fold(ST* S, u8* codes, u8* scales, float* global, int t, float decay,
                                            const float* sB, const float* sCoef, const float* sC, float* sDot,
                                            float* scratch)
{
    constexpr int VEC = SM::VEC;
    // The thread's whole share of the matrix in registers: each B_j chunk
    // read from shared memory then feeds every pass (rows p, p+RPP, ...),
    // so the rank update is not bound by shared-memory bandwidth.
    float e[SM::PASSES][SM::CPL][VEC];
#pragma unroll
    for (int pass = 0; pass < SM::PASSES; pass++) {
        const int r = SM::row(pass);
#pragma unroll
        for (int c = 0; c < SM::CPL; c++) {
            if (r < ROWS) {
                SIO::load(S, (u64)r * N + SM::col(c), e[pass][c]);
            } else {
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    e[pass][c][k] = 0.0f;
                }
            }
#pragma unroll
            for (int k = 0; k < VEC; k++) {
                e[pass][c][k] = decay * e[pass][c][k];
            }
        }
    }
    for (int j = 0; j < t; j++) {
        float cj[SM::PASSES];
#pragma unroll
        for (int pass = 0; pass < SM::PASSES; pass++) {
            const int r = SM::row(pass);
            cj[pass] = r < ROWS ? sCoef[r * CSTRIDE + j] : 0.0f;
        }
#pragma unroll
        for (int c = 0; c < SM::CPL; c++) {
            const float4* bj = reinterpret_cast<const float4*>(sB + j * N + SM::col(c));
#pragma unroll
            for (int q = 0; q < VEC / 4; q++) {
                const float4 b4 = bj[q];
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
#pragma unroll
    for (int pass = 0; pass < SM::PASSES; pass++) {
        const int r = SM::row(pass);
        float acc = 0.0f;
#pragma unroll
        for (int c = 0; c < SM::CPL; c++) {
            const int col = SM::col(c);
            if (OUT) {
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    acc = fmaf(e[pass][c][k], sC[col + k], acc);
                }
            }
            if (r < ROWS) {
                float w[VEC]; // the store rounds its argument; keep e in fp32
#pragma unroll
                for (int k = 0; k < VEC; k++) {
                    w[k] = e[pass][c][k];
                }
                SIO::store(S, (u64)r * N + col, w);
            }
        }
        if (OUT) {
            acc = lanes_sum<SM::LANES>(acc);
            if (r < ROWS && SM::lane() == 0) {
                sDot[r] = acc;
            }
        }
    }
#if READ_FMT == FMT_NVFP4
    nvfp4_write<SM>(e, codes, scales, global, scratch);
#endif
}

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
// CTAs. Ring entries are gathered into shared memory with all loads in flight
// at once (one round trip, not one per entry). cursor_step then moves the
// cursors.
template <bool FLUSH>
__device__ __forceinline__ void mamba2_step(ST* state, u8* rcodes, u8* rscales, float* rglobal,
                                            float* __restrict__ ringX, float* __restrict__ ringB,
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
    __shared__ float sX[P * CSTRIDE]; // x_j[p]; the flush turns it into w_j x_j[p]
    __shared__ float sDot[P];
    __shared__ float sW[RMAX];
    __shared__ float sBC[RMAX];
    __shared__ float sDelta[RMAX];
    __shared__ float sDecay[RMAX];
    __shared__ float sE;
    __shared__ float sLut[16];
    __shared__ float sScratch[NWARPS];

    const int h = blockIdx.x, b = blockIdx.y, g = h / HPG;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int s = slots[b];
    const int n = hist[s];
    const int t = n + 1;
    if ((t >= L) != FLUSH) {
        return;
    }
    const u64 mat = (u64)s * NHEADS + h;
    const float* xt = x + ((u64)b * NHEADS + h) * P;
    const float* Bt = B + ((u64)b * NGROUPS + g) * N;

    // Gather the ring: every load first, then the shared-memory stores.
    constexpr int XIT = (P * RMAX + NT - 1) / NT;
    constexpr int BIT = (N * RMAX + NT - 1) / NT;
    float xv[XIT], bv[BIT];
#pragma unroll
    for (int it = 0; it < XIT; it++) {
        const int idx = tid + it * NT;
        xv[it] = 0.0f;
        if (idx < P * n) {
            xv[it] = ringX[(ring_at(s, idx / P) * NHEADS + h) * P + idx % P];
        }
    }
#pragma unroll
    for (int it = 0; it < BIT; it++) {
        const int idx = tid + it * NT;
        bv[it] = 0.0f;
        if (idx < N * n) {
            bv[it] = ringB[(ring_at(s, idx / N) * NGROUPS + g) * N + idx % N];
        }
    }
    if (tid == 0) {
        const float delta = fmaxf((float)softplus_d((double)dt[(u64)b * NHEADS + h] + dtb[h]), dtMin);
        const float a = (float)exp((double)delta * A[h]);
        sDelta[n] = delta;
        sDecay[n] = a;
        if (!FLUSH) {
            ringDt[ring_at(s, n) * NHEADS + h] = delta;
            ringA[ring_at(s, n) * NHEADS + h] = a;
        }
    }
    for (int j = tid; j < n; j += NT) {
        sDelta[j] = ringDt[ring_at(s, j) * NHEADS + h];
        sDecay[j] = ringA[ring_at(s, j) * NHEADS + h];
    }
    for (int p = tid; p < P; p += NT) {
        const float v = xt[p];
        sX[p * CSTRIDE + n] = v;
        if (!FLUSH) {
            ringX[(ring_at(s, n) * NHEADS + h) * P + p] = v;
        }
    }
    for (int i = tid; i < N; i += NT) {
        const float v = Bt[i];
        sB[n * N + i] = v;
        if (!FLUSH && h % HPG == 0) {
            ringB[(ring_at(s, n) * NGROUPS + g) * N + i] = v;
        }
        sC[i] = C[((u64)b * NGROUPS + g) * N + i];
    }
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
#if READ_FMT == FMT_NVFP4
    init_e2m1_lut(sLut);
#endif
    __syncthreads();
    // Decay products from each entry to the current one (DESIGN.md 2.1),
    // as products of the per-step decays in float64 like the CPU cache.
    if (tid == 0) {
        double suf = 1.0;
        for (int j = t - 1; j >= 0; j--) {
            sW[j] = (float)((double)sDelta[j] * suf);
            suf *= (double)sDecay[j];
        }
        sE = (float)suf;
    }
    if (!FLUSH) {
        // B_j . C, one warp per ring entry.
        for (int j = warp; j < t; j += NWARPS) {
            float acc = 0.0f;
            for (int i = lane; i < N; i += 32) {
                acc = fmaf(sB[j * N + i], sC[i], acc);
            }
            acc = warp_sum(acc);
            if (lane == 0) {
                sBC[j] = acc;
            }
        }
#if READ_FMT == FMT_NVFP4
        dots_nvfp4<1>(rcodes + mat * (P * N / 2), rscales + mat * (P * N / 16), rglobal[mat], sC, 0, 1, sDot, sLut);
#else
        dots_state<1, STATE_FMT>(state + mat * (P * N), sC, 0, 1, sDot);
#endif
        __syncthreads();
        const float e = sE, dh = D[h];
        for (int p = tid; p < P; p += NT) {
            float yv = e * sDot[p] + dh * sX[p * CSTRIDE + n];
            for (int j = 0; j < t; j++) {
                yv = fmaf(sW[j] * sBC[j], sX[p * CSTRIDE + j], yv);
            }
            y[((u64)b * NHEADS + h) * P + p] = yv;
        }
        return;
    }
    __syncthreads();
    for (int idx = tid; idx < P * t; idx += NT) {
        const int p = idx / t, j = idx % t;
        sX[p * CSTRIDE + j] = sW[j] * sX[p * CSTRIDE + j];
    }
    __syncthreads();
    mamba2_fold<true>(state + mat * (P * N), rcodes + mat * (P * N / 2), rscales + mat * (P * N / 16), rglobal + mat,
                      t, sE, sB, sX, sC, sDot, sScratch);
    __syncthreads();
    const float dh = D[h];
    for (int p = tid; p < P; p += NT) {
        y[((u64)b * NHEADS + h) * P + p] = sDot[p] + dh * xt[p];
    }
}

// mamba2_nonflush_pf is the non-flush step (mamba2_step<false>'s outputs,
// bit for bit) with the state traffic issued first (v4): the CTA's whole
// share of the checkpoint is loaded into registers (raw 16-byte chunks) as
// soon as hist[s] says the slot does not flush, and the ring gather, C, and
// the ring's delta / decay go to shared memory by cp.async in the same round
// trip; the current token's x, B, dt (which depend on the batch row only) are
// loaded before slots[b]. Dependent chain: slots -> hist -> {state, ring} ->
// y, one global round trip shorter than v3 (slots -> hist -> ring -> state).
__device__ __forceinline__ void mamba2_nonflush_pf(ST* state, float* __restrict__ ringX, float* __restrict__ ringB,
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
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const float* xt = x + ((u64)b * NHEADS + h) * P;
    const float* Bt = B + ((u64)b * NGROUPS + g) * N;

    // The current token: independent of the slot, in flight with slots[b].
    float xc[XT], bc[BT];
#pragma unroll
    for (int it = 0; it < XT; it++) {
        const int p = tid + it * NT;
        xc[it] = p < P ? xt[p] : 0.0f;
    }
#pragma unroll
    for (int it = 0; it < BT; it++) {
        const int i = tid + it * NT;
        bc[it] = i < N ? Bt[i] : 0.0f;
    }
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
        cp_async16(sB + j * N + i, ringB + (ring_at(s, j) * NGROUPS + g) * N + i);
    }
    for (int idx = tid; idx < P * n; idx += NT) {
        const int j = idx / P, p = idx % P;
        cp_async4(sX + p * CSTRIDE + j, ringX + (ring_at(s, j) * NHEADS + h) * P + p);
    }
    for (int j = tid; j < n; j += NT) {
        cp_async4(sDelta + j, ringDt + ring_at(s, j) * NHEADS + h);
        cp_async4(sDecay + j, ringA + ring_at(s, j) * NHEADS + h);
    }
    // Append the current token at entry n.
#pragma unroll
    for (int it = 0; it < XT; it++) {
        const int p = tid + it * NT;
        if (p < P) {
            sX[p * CSTRIDE + n] = xc[it];
            ringX[(ring_at(s, n) * NHEADS + h) * P + p] = xc[it];
        }
    }
#pragma unroll
    for (int it = 0; it < BT; it++) {
        const int i = tid + it * NT;
        if (i < N) {
            sB[n * N + i] = bc[it];
            if (h % HPG == 0) {
                ringB[(ring_at(s, n) * NGROUPS + g) * N + i] = bc[it];
            }
        }
    }
    if (tid == 0) {
        const float delta = fmaxf((float)softplus_d(dtv + dtbh), dtMin);
        const float a = (float)exp((double)delta * Ah);
        sDelta[n] = delta;
        sDecay[n] = a;
        ringDt[ring_at(s, n) * NHEADS + h] = delta;
        ringA[ring_at(s, n) * NHEADS + h] = a;
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
            SIO::unpack(raw[pass][c], v);
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
    // B_j . C, one warp per ring entry; the last warp's lane 0 also forms
    // the decay products (float64, like the CPU cache).
    for (int j = warp; j < t; j += NWARPS) {
        float acc = 0.0f;
        for (int i = lane; i < N; i += 32) {
            acc = fmaf(sB[j * N + i], sC[i], acc);
        }
        acc = warp_sum(acc);
        if (lane == 0) {
            sBC[j] = acc;
        }
    }
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
    ST *state, u8 *rcodes, u8 *rscales, float *rglobal, float *__restrict__ ringX, float *__restrict__ ringB,     \
        float *__restrict__ ringDt, float *__restrict__ ringA, const int *__restrict__ hist,                       \
        const int *__restrict__ slots, const float *__restrict__ x, const float *__restrict__ B,                  \
        const float *__restrict__ C, const float *__restrict__ dt, float *__restrict__ y,                         \
        const double *__restrict__ A, const double *__restrict__ dtb, const float *__restrict__ D, float dtMin, int L
#define MAMBA2_STEP_ARGS state, rcodes, rscales, rglobal, ringX, ringB, ringDt, ringA, hist, slots, x, B, C, dt, y, A, dtb, D, dtMin, L

extern "C" __global__ void __launch_bounds__(NT) mamba2_replay_nonflush(MAMBA2_STEP_PARAMS)
{
#if READ_FMT == FMT_NVFP4 || NF_VARIANT != 4
    mamba2_step<false>(MAMBA2_STEP_ARGS);
#else
    mamba2_nonflush_pf(state, ringX, ringB, ringDt, ringA, hist, slots, x, B, C, dt, y, A, dtb, D, dtMin, L);
#endif
}

extern "C" __global__ void __launch_bounds__(NT) mamba2_replay_flush(MAMBA2_STEP_PARAMS)
{
    mamba2_step<true>(MAMBA2_STEP_ARGS);
}

// mamba2_replay_verify computes the outputs of cnt = counts[b] (or T) draft
// inputs per slot from the checkpoint (or read copy) and the ring, without
// writing the checkpoint (DESIGN.md 2.3). Draft k of batch row b is input
// row b*T+k and goes to ring entry n+k. If the committed history n plus 2*cnt
// would overflow the ring, the history is folded first (early flush) and the
// drafts start a new window. cursor_verify then moves the cursors; commit
// accepts a prefix.
extern "C" __global__ void __launch_bounds__(NT)
mamba2_replay_verify(ST* state, u8* rcodes, u8* rscales, float* rglobal,
                     float* __restrict__ ringX, float* __restrict__ ringB, float* __restrict__ ringDt,
                     float* __restrict__ ringA, const int* __restrict__ hist, const int* __restrict__ slots,
                     const int* __restrict__ counts, int T,
                     const float* __restrict__ x, const float* __restrict__ B, const float* __restrict__ C,
                     const float* __restrict__ dt, float* __restrict__ y, const double* __restrict__ A,
                     const double* __restrict__ dtb, const float* __restrict__ D, float dtMin, int R)
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

    const int h = blockIdx.x, b = blockIdx.y, g = h / HPG;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int s = slots[b];
    int n = hist[s];
    const int cnt = counts ? counts[b] : T;
    const u64 mat = (u64)s * NHEADS + h;

    for (int j = tid; j < n; j += NT) {
        sDelta[j] = ringDt[ring_at(s, j) * NHEADS + h];
        sDecay[j] = ringA[ring_at(s, j) * NHEADS + h];
    }
    if (n > 0 && n + 2 * cnt > R) {
        // Early flush of the committed history; drafts are never folded.
        for (int idx = tid; idx < n * N; idx += NT) {
            const int j = idx / N, i = idx % N;
            sB[idx] = ringB[(ring_at(s, j) * NGROUPS + g) * N + i];
        }
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
            sCoef[p * CSTRIDE + j] = sWk[j] * ringX[(ring_at(s, j) * NHEADS + h) * P + p];
        }
        __syncthreads();
        mamba2_fold<false>(state + mat * (P * N), rcodes + mat * (P * N / 2), rscales + mat * (P * N / 16),
                           rglobal + mat, n, sEk[0], sB, sCoef, nullptr, nullptr, sScratch);
        // The barrier makes the new checkpoint and read copy, read back
        // below like any other slot's, visible to the whole CTA.
        __syncthreads();
        n = 0;
    }
    // Append the drafts.
    if (tid < cnt) {
        const int k = tid;
        const float delta = fmaxf((float)softplus_d((double)dt[((u64)b * T + k) * NHEADS + h] + dtb[h]), dtMin);
        const float a = (float)exp((double)delta * A[h]);
        sDelta[n + k] = delta;
        sDecay[n + k] = a;
        ringDt[ring_at(s, n + k) * NHEADS + h] = delta;
        ringA[ring_at(s, n + k) * NHEADS + h] = a;
    }
    // Gather the committed ring entries into shared memory, every load in
    // flight at once, next to the drafts (which also enter the ring).
    constexpr int XIT = (P * RMAX + NT - 1) / NT;
    constexpr int BIT = (N * RMAX + NT - 1) / NT;
    {
        float xv[XIT], bv[BIT];
#pragma unroll
        for (int it = 0; it < XIT; it++) {
            const int idx = tid + it * NT;
            xv[it] = 0.0f;
            if (idx < P * n) {
                xv[it] = ringX[(ring_at(s, idx / P) * NHEADS + h) * P + idx % P];
            }
        }
#pragma unroll
        for (int it = 0; it < BIT; it++) {
            const int idx = tid + it * NT;
            bv[it] = 0.0f;
            if (idx < N * n) {
                bv[it] = ringB[(ring_at(s, idx / N) * NGROUPS + g) * N + idx % N];
            }
        }
#pragma unroll
        for (int it = 0; it < XIT; it++) {
            const int idx = tid + it * NT;
            if (idx < P * n) {
                sCoef[(idx % P) * CSTRIDE + idx / P] = xv[it];
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
    for (int idx = tid; idx < cnt * P; idx += NT) {
        const int k = idx / P, p = idx % P;
        const float xv = x[(((u64)b * T + k) * NHEADS + h) * P + p];
        ringX[(ring_at(s, n + k) * NHEADS + h) * P + p] = xv;
        sCoef[p * CSTRIDE + n + k] = xv;
    }
    for (int idx = tid; idx < cnt * N; idx += NT) {
        const int k = idx / N, i = idx % N;
        const float bv = B[(((u64)b * T + k) * NGROUPS + g) * N + i];
        if (h % HPG == 0) {
            ringB[(ring_at(s, n + k) * NGROUPS + g) * N + i] = bv;
        }
        sB[(n + k) * N + i] = bv;
    }
    for (int idx = tid; idx < cnt * N; idx += NT) {
        const int k = idx / N, i = idx % N;
        sCk[idx] = C[(((u64)b * T + k) * NGROUPS + g) * N + i];
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
    // B_j . C_k for every draft k and entry j <= n+k, one warp per pair.
    const int pairs = cnt * (n + cnt);
    for (int pr = warp; pr < pairs; pr += NWARPS) {
        const int k = pr / (n + cnt), j = pr % (n + cnt);
        if (j <= n + k) {
            const float* Bj = sB + j * N;
            float acc = 0.0f;
            for (int i = lane; i < N; i += 32) {
                acc = fmaf(Bj[i], sCk[k * N + i], acc);
            }
            acc = warp_sum(acc);
            if (lane == 0) {
                sBC[k * RMAX + j] = acc;
            }
        }
    }
#if READ_FMT == FMT_NVFP4
    dots_nvfp4<TMAX>(rcodes + mat * (P * N / 2), rscales + mat * (P * N / 16), rglobal[mat], sCk, N, cnt, sDot, sLut);
#else
    dots_state<TMAX, STATE_FMT>(state + mat * (P * N), sCk, N, cnt, sDot);
#endif
    __syncthreads();
    const float dh = D[h];
    for (int idx = tid; idx < cnt * P; idx += NT) {
        const int k = idx / P, p = idx % P;
        const float* xk = x + (((u64)b * T + k) * NHEADS + h) * P;
        float yv = sEk[k] * sDot[k * P + p] + dh * xk[p];
        for (int j = 0; j <= n + k; j++) {
            const float xj = sCoef[p * CSTRIDE + j];
            yv = fmaf(sWk[k * RMAX + j] * sBC[k * RMAX + j], xj, yv);
        }
        y[(((u64)b * T + k) * NHEADS + h) * P + p] = yv;
    }
}

// mamba2_baseline is the in-place recurrence every step (DESIGN.md 1.1):
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
    __shared__ __align__(16) float sBk[TMAX * N];
    __shared__ __align__(16) float sCk[TMAX * N];
    __shared__ float sDot[TMAX * P];
    __shared__ float sDelta[TMAX];
    __shared__ float sDecay[TMAX];

    constexpr int VEC = SM::VEC;
    const int h = blockIdx.x, b = blockIdx.y, g = h / HPG;
    const int tid = threadIdx.x;
    const int s = slots[b];
    const int cnt = VERIFY ? (counts ? counts[b] : T) : 1;
    const int T1 = VERIFY ? T : 1;
    const int c0 = cur[s];
    ST* src = state + (((u64)s * nb + c0) * NHEADS + h) * (P * N);

    if (tid < cnt) {
        const int k = tid;
        const double delta = fmax(softplus_d((double)dt[((u64)b * T1 + k) * NHEADS + h] + dtb[h]), (double)dtMin);
        sDelta[k] = (float)delta;
        sDecay[k] = (float)exp(delta * A[h]);
    }
    for (int idx = tid; idx < cnt * N; idx += NT) {
        const int k = idx / N, i = idx % N;
        sBk[idx] = B[(((u64)b * T1 + k) * NGROUPS + g) * N + i];
        sCk[idx] = C[(((u64)b * T1 + k) * NGROUPS + g) * N + i];
    }
    __syncthreads();
    if (!VERIFY) {
        // One step in place: stream the state pass by pass (few registers,
        // many CTAs in flight), no copy of it held.
        const float a = sDecay[0], delta = sDelta[0];
        const float* xk = x + ((u64)b * NHEADS + h) * P;
#pragma unroll 1
        for (int pass = 0; pass < SM::PASSES; pass++) {
            const int r = SM::row(pass);
            float e[SM::CPL][VEC];
            float acc = 0.0f;
            if (r < ROWS) {
#pragma unroll
                for (int c = 0; c < SM::CPL; c++) {
                    SIO::load(src, (u64)r * N + SM::col(c), e[c]);
                }
                const float xc = delta * xk[r];
#pragma unroll
                for (int c = 0; c < SM::CPL; c++) {
                    const int col = SM::col(c);
#pragma unroll
                    for (int q = 0; q < VEC; q++) {
                        const float v = a * e[c][q] + xc * sBk[col + q];
                        e[c][q] = v;
                        acc = fmaf(v, sCk[col + q], acc);
                    }
                    SIO::store(src, (u64)r * N + col, e[c]);
                }
            }
            acc = lanes_sum<SM::LANES>(acc);
            if (r < ROWS && SM::lane() == 0) {
                sDot[r] = acc;
            }
        }
    } else {
        float S[SM::PASSES][SM::CPL][VEC];
#pragma unroll
        for (int pass = 0; pass < SM::PASSES; pass++) {
            const int r = SM::row(pass);
#pragma unroll
            for (int c = 0; c < SM::CPL; c++) {
                if (r < ROWS) {
                    SIO::load(src, (u64)r * N + SM::col(c), S[pass][c]);
                } else {
#pragma unroll
                    for (int k = 0; k < VEC; k++) {
                        S[pass][c][k] = 0.0f;
                    }
                }
            }
        }
        for (int k = 0; k < cnt; k++) {
            ST* dst = VERIFY ? state + (((u64)s * nb + (c0 + 1 + k) % nb) * NHEADS + h) * (P * N) : src;
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
                        const float v = a * S[pass][c][e] + xc * sBk[k * N + col + e];
                        S[pass][c][e] = v;
                        acc = fmaf(v, sCk[k * N + col + e], acc);
                    }
                    if (r < ROWS) {
                        SIO::store(dst, (u64)r * N + col, S[pass][c]);
                    }
                }
                acc = lanes_sum<SM::LANES>(acc);
                if (r < ROWS && SM::lane() == 0) {
                    sDot[k * P + r] = acc;
                }
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

extern "C" __global__ void __launch_bounds__(NT) mamba2_baseline_step(MAMBA2_BASELINE_PARAMS)
{
    mamba2_baseline<false>(MAMBA2_BASELINE_ARGS);
}

extern "C" __global__ void __launch_bounds__(NT) mamba2_baseline_verify(MAMBA2_BASELINE_PARAMS)
{
    mamba2_baseline<true>(MAMBA2_BASELINE_ARGS);
}
