// sample.cu: each row's token drawn where its logits are (nn.Backend's
// Sample), so that only token ids cross to the host. nn.SampleRow
// (model/nn/sample.go) defines the draw by thresholds on the logits'
// values; this kernel finds them without a sort, by radix selects on the
// logits' order-preserving keys (four 8-bit digits from the top), counting
// tokens for top-k and summing weights for top-p, then draws by a
// block-wide prefix sum of weights over contiguous runs of ids.
//
// Weights are exp((l − max)/T) in float32, accurate to about 3 ulps (the
// float32 rounding of the exponent's argument is undone to first order),
// held as integers in units of 2⁻⁴⁰ of the largest weight (1), so every
// sum is exact, independent of the order atomics land in, and the same bits
// every run; a row of 2¹⁸ tokens sums to below 2⁵⁸. Against the float64
// definition a draw may therefore differ only where U·Z, or a top-p
// running sum against TopP·Zk, lies within about 1e-6·Z of a boundary.
//
// One block of SAMPLE_THREADS per row; a row holds at most 2³¹ − 1 tokens.
// Passes over the row: the maximum, up to four count histograms (top-k;
// fewer when a whole bin is kept), four weight histograms (top-p), the sum
// of the kept weights and the walk of one warp's run.

#define SAMPLE_THREADS 1024
#define SAMPLE_WARPS (SAMPLE_THREADS / 32)
// Copies of the weight histogram: warps of different copies do not
// contend for one bin's shared-memory atomics.
#define SAMPLE_COPIES 4

// SampleParam is one row's nn.SampleParams as sample.go lays it out.
struct SampleParam {
    float temperature, top_p;
    int top_k, pad;
    double u;
};

// sample_key maps a float to an unsigned int in the same order, −0 as +0.
__device__ __forceinline__ unsigned sample_key(float x)
{
    unsigned b = __float_as_uint(x);
    if (b == 0x80000000u)
        b = 0;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// sample_weight is exp((l − m)·inv_t) in units of 2⁻⁴⁰. The argument is
// formed in double and split into its float part xh and the rest xl, so
// that exp(x) = exp(xh)·(1 + xl) within float32 ulps even where |x| is
// tens (a float argument alone would be off by |x|·2⁻²⁴). Below −29 the
// weight rounds to 0 anyway.
__device__ __forceinline__ unsigned long long sample_weight(float l, double m, double inv_t)
{
    const double x = ((double)l - m) * inv_t;
    if (!(x > -29.0))
        return 0;
    const float xh = (float)x, xl = (float)(x - (double)xh);
    const float e = expf(xh);
    return __float2ull_rn(fmaf(e, xl, e) * 1099511627776.0f);
}

// sample_pick chooses one digit of a radix select from the histogram's
// copies: the largest digit d whose bins from d up hold at least *need,
// taking the bins above d off *need; *bin gets bin d. With top_p > 0 (the
// first level of the top-p select) *need is first set to
// ⌈top_p · the histogram's total⌉. Warp 0 scans, lane j holding bins
// 255−8j down to 248−8j. Every thread returns d.
__device__ unsigned sample_pick(unsigned long long (*hist)[256], int copies, float top_p,
                                unsigned long long* need_s, unsigned long long* bin_s, unsigned* digit_s)
{
    __syncthreads();
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        unsigned long long h[8], own = 0;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int b = 255 - 8 * lane - j;
            unsigned long long v = 0;
            for (int c = 0; c < copies; c++)
                v += hist[c][b];
            h[j] = v;
            own += v;
        }
        unsigned long long cum = own; // bins from this lane's lowest up
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned long long v = __shfl_up_sync(0xffffffffu, cum, o);
            if (lane >= o)
                cum += v;
        }
        unsigned long long need = *need_s;
        if (top_p > 0.0f) {
            const unsigned long long total = __shfl_sync(0xffffffffu, cum, 31);
            need = (unsigned long long)ceil((double)top_p * (double)total);
            need = need < 1 ? 1 : (need > total ? total : need);
        }
        const unsigned hit = __ballot_sync(0xffffffffu, cum >= need);
        // The sums are exact and need ≤ the total, so some lane hits; the
        // last lane stands in should one not.
        const int at = hit ? __ffs(hit) - 1 : 31;
        if (lane == at) {
            unsigned long long above = cum - own;
            int j = 0;
            for (; j < 7; j++) {
                if (above + h[j] >= need)
                    break;
                above += h[j];
            }
            *digit_s = 255 - 8 * lane - j;
            *need_s = need - above;
            *bin_s = h[j];
        }
    }
    __syncthreads();
    return *digit_s;
}

// nn_sample: dst[r] = nn.SampleRow(row r of x, params[r]), or -1 when the
// row holds a NaN or an infinity. Grid: rows; SAMPLE_THREADS threads.
extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS)
    nn_sample(int* __restrict__ dst, const float* __restrict__ x, int xs, int cols,
              const SampleParam* __restrict__ params)
{
    __shared__ unsigned long long hist[SAMPLE_COPIES][256];
    __shared__ unsigned long long need_s, bin_s, part_s[SAMPLE_WARPS];
    __shared__ unsigned digit_s;
    __shared__ float best_s[SAMPLE_WARPS];
    __shared__ int at_s[SAMPLE_WARPS];
    __shared__ int walker_s;
    __shared__ unsigned long long base_s, target_s;

    const float* xr = x + (long long)blockIdx.x * xs;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    // The largest logit and its first column, as nn_argmax.
    float best = __int_as_float(0xff800000);
    int at = 0x7fffffff;
    int broken = 0;
    for (int c = threadIdx.x; c < cols; c += SAMPLE_THREADS) {
        const float v = xr[c];
        broken |= !isfinite(v);
        if (v > best)
            best = v, at = c;
    }
    broken = __syncthreads_or(broken);
    if (broken) {
        if (threadIdx.x == 0)
            dst[blockIdx.x] = -1;
        return;
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float bv = __shfl_xor_sync(0xffffffffu, best, o);
        const int ba = __shfl_xor_sync(0xffffffffu, at, o);
        if (bv > best || (bv == best && ba < at))
            best = bv, at = ba;
    }
    if (lane == 0)
        best_s[warp] = best, at_s[warp] = at;
    __syncthreads();
    best = best_s[0], at = at_s[0];
    for (int w = 1; w < SAMPLE_WARPS; w++)
        if (best_s[w] > best || (best_s[w] == best && at_s[w] < at))
            best = best_s[w], at = at_s[w];

    const SampleParam p = params[blockIdx.x];
    if (!(p.temperature > 0.0f) || p.top_k == 1) {
        if (threadIdx.x == 0)
            dst[blockIdx.x] = at;
        return;
    }
    const double m = best, inv_t = 1.0 / (double)p.temperature;

    // Top-k: the key of the top_k-th largest logit, by counts. The lanes
    // of a warp with one digit add their count once (__match_any_sync).
    unsigned floor_key = 0;
    if (p.top_k > 0 && p.top_k < cols) {
        if (threadIdx.x == 0)
            need_s = (unsigned long long)p.top_k;
        unsigned prefix = 0, mask = 0;
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int i = threadIdx.x; i < 256; i += SAMPLE_THREADS)
                hist[0][i] = 0;
            __syncthreads();
            for (int c0 = 0; c0 < cols; c0 += SAMPLE_THREADS) {
                const int c = c0 + threadIdx.x;
                unsigned d = 0;
                bool in = false;
                if (c < cols) {
                    const unsigned k = sample_key(xr[c]);
                    in = (k & mask) == prefix;
                    d = (k >> shift) & 255u;
                }
                // Lanes outside the prefix share a digit no key has.
                const unsigned same = __match_any_sync(0xffffffffu, in ? d : 0xffffffffu);
                if (in && __ffs(same) - 1 == lane)
                    atomicAdd(&hist[0][d], (unsigned long long)__popc(same));
            }
            const unsigned d = sample_pick(hist, 1, 0.0f, &need_s, &bin_s, &digit_s);
            prefix |= d << shift;
            mask |= 255u << shift;
            // The whole bin is kept: its lowest key, prefix with zeros
            // below, keeps the same tokens as the exact key.
            const bool whole = bin_s == need_s;
            __syncthreads(); // need_s and bin_s read before the next pick
            if (whole)
                break;
        }
        floor_key = prefix;
    }

    // Top-p: the largest key whose tokens at or above it (among those
    // top-k kept) weigh at least top_p of the kept weight, by weights.
    if (p.top_p > 0.0f && p.top_p < 1.0f) {
        unsigned prefix = 0, mask = 0;
        unsigned long long* mine = hist[warp % SAMPLE_COPIES];
        for (int shift = 24; shift >= 0; shift -= 8) {
            for (int i = threadIdx.x; i < SAMPLE_COPIES * 256; i += SAMPLE_THREADS)
                hist[i / 256][i % 256] = 0;
            __syncthreads();
            for (int c = threadIdx.x; c < cols; c += SAMPLE_THREADS) {
                const float l = xr[c];
                const unsigned k = sample_key(l);
                if (k >= floor_key && (k & mask) == prefix) {
                    const unsigned long long w = sample_weight(l, m, inv_t);
                    if (w)
                        atomicAdd(&mine[(k >> shift) & 255u], w);
                }
            }
            const unsigned d = sample_pick(hist, SAMPLE_COPIES, shift == 24 ? p.top_p : 0.0f, &need_s, &bin_s, &digit_s);
            prefix |= d << shift;
            mask |= 255u << shift;
        }
        floor_key = prefix;
    }

    // The draw: warp w sums the kept weights of ids [w·span, (w+1)·span),
    // the warps' sums are scanned, and the warp whose run holds
    // t = ⌊U·Z⌋ walks it 32 ids at a time to the first id whose running
    // sum exceeds t.
    const int span = ((cols + SAMPLE_WARPS - 1) / SAMPLE_WARPS + 31) & ~31;
    const int lo = warp * span, hi = min(cols, lo + span);
    unsigned long long own = 0;
    for (int c = lo + lane; c < hi; c += 32) {
        const float l = xr[c];
        if (sample_key(l) >= floor_key)
            own += sample_weight(l, m, inv_t);
    }
    for (int o = 16; o > 0; o >>= 1)
        own += __shfl_xor_sync(0xffffffffu, own, o);
    if (lane == 0)
        part_s[warp] = own;
    __syncthreads();
    if (warp == 0) {
        const unsigned long long v = part_s[lane];
        unsigned long long cum = v;
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned long long u = __shfl_up_sync(0xffffffffu, cum, o);
            if (lane >= o)
                cum += u;
        }
        const unsigned long long z = __shfl_sync(0xffffffffu, cum, 31);
        unsigned long long t = 0; // z ≥ 2⁴⁰: the maximum is kept
        if (p.u > 0.0) {
            const double tz = p.u * (double)z;
            t = tz < (double)z ? (unsigned long long)tz : z;
            t = t < z ? t : z - 1;
        }
        const unsigned hit = __ballot_sync(0xffffffffu, cum > t);
        if (lane == (hit ? __ffs(hit) - 1 : 31))
            walker_s = lane, base_s = cum - v, target_s = t;
        if (lane == 0)
            dst[blockIdx.x] = at; // stands in should the walk find nothing
    }
    __syncthreads();
    if (warp != walker_s)
        return;
    unsigned long long base = base_s;
    const unsigned long long t = target_s;
    for (int c0 = lo; c0 < hi; c0 += 32) {
        const int c = c0 + lane;
        unsigned long long w = 0;
        if (c < hi) {
            const float l = xr[c];
            if (sample_key(l) >= floor_key)
                w = sample_weight(l, m, inv_t);
        }
        unsigned long long cum = w;
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned long long u = __shfl_up_sync(0xffffffffu, cum, o);
            if (lane >= o)
                cum += u;
        }
        const unsigned hit = __ballot_sync(0xffffffffu, base + cum > t);
        if (hit) {
            if (lane == __ffs(hit) - 1)
                dst[blockIdx.x] = c;
            return;
        }
        base += __shfl_sync(0xffffffffu, cum, 31);
    }
}
