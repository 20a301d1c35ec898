// conv.cu: the causal depthwise convolution of the SSM layers' inputs over
// per-slot windows of raw inputs (replay.ConvWeights; the CPU cache's
// convWindow): out[t][c] = bias[c] + sum_k w[c*K+k] * x[t-(K-1)+k][c].
// A slot's window holds `rows` rows of C floats: rows [0, K-1) are the
// committed inputs, oldest first; a verify writes its drafts after them
// and a commit of n shifts the window by n. The products and sums are
// rounded separately, in the CPU cache's order, so both backends give the
// same bits.

// conv_apply writes T inputs per slot after its committed window, computes
// their outputs (each seeing the window and the inputs before it), and
// with shift (a decode step, T = 1) moves the window on by one.
// One thread per (batch row, channel).
extern "C" __global__ void conv_apply(float* __restrict__ win, const float* __restrict__ w,
    const float* __restrict__ bias, const int* __restrict__ slots, const float* __restrict__ in,
    float* __restrict__ out, int batch, int T, int C, int K, int rows, int shift)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)batch * C) {
        return;
    }
    const int b = (int)(i / C), c = (int)(i % C);
    float* base = win + (long long)slots[b] * rows * C + c;
    for (int t = 0; t < T; t++) {
        base[(K - 1 + t) * C] = in[((long long)b * T + t) * C + c];
    }
    for (int t = 0; t < T; t++) {
        float sum = bias != nullptr ? bias[c] : 0.0f;
        for (int k = 0; k < K; k++) {
            sum = __fadd_rn(sum, __fmul_rn(w[c * K + k], base[(t + k) * C]));
        }
        out[((long long)b * T + t) * C + c] = sum;
    }
    if (shift) {
        for (int k = 0; k < K - 1; k++) {
            base[k * C] = base[(k + 1) * C];
        }
    }
}

// conv_shift makes the first accepted[b] inputs after slot b's window part
// of it (a commit). One thread per (batch row, channel).
extern "C" __global__ void conv_shift(float* __restrict__ win, const int* __restrict__ slots,
    const int* __restrict__ accepted, int batch, int C, int K, int rows)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long)batch * C) {
        return;
    }
    const int b = (int)(i / C), c = (int)(i % C), n = accepted[b];
    if (n <= 0) {
        return;
    }
    float* base = win + (long long)slots[b] * rows * C + c;
    for (int k = 0; k < K - 1; k++) {
        base[k * C] = base[(k + n) * C];
    }
}
