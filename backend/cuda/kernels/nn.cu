// nn.cu: the model blocks' operations besides the matrix products (cuBLAS)
// and the SSM caches (replay_*.cu): embedding, norms, row moves, gates,
// the Δ clamp, RoPE, attention over a KV cache, the greedy argmax, and the
// bfloat16 side of products (activations rounded for cuBLAS, a
// matrix-vector kernel for one row). float32 activations, row-major
// matrices with a row stride in elements, bfloat16 weights as raw 16-bit
// words; nn.go launches them and model/nn/nntest checks them against
// float64 references.
//
// Each kernel is the plain form of its operation: a block (or a warp) per
// row, threads over the columns. They are correct first; the decode step's
// profile decides which to fuse or tune.

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

// block_sum reduces v over a block of at most 1024 threads (a multiple of
// 32); every thread gets the sum.
__device__ float block_sum(float v)
{
    __shared__ float part[32];
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    const int warps = blockDim.x >> 5;
    v = lane < warps ? part[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// nn_embed: dst row r = table row tokens[r]. Grid: rows.
extern "C" __global__ void nn_embed(float* __restrict__ dst, int ds, const float* __restrict__ table, int cols,
                                    const int* __restrict__ tokens)
{
    const int r = blockIdx.x;
    const float* src = table + (long long)tokens[r] * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        dst[(long long)r * ds + c] = src[c];
}

// bf16 words: the upper half of a float32; rounding to nearest even,
// NaN kept a (quiet) NaN.
__device__ __forceinline__ float bf16_lo(unsigned p) { return __uint_as_float(p << 16); }
__device__ __forceinline__ float bf16_hi(unsigned p) { return __uint_as_float(p & 0xffff0000u); }
__device__ __forceinline__ unsigned short to_bf16(float f)
{
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (unsigned short)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}

// nn_embed_bf16: nn_embed from a bfloat16 table. Grid: rows.
extern "C" __global__ void nn_embed_bf16(float* __restrict__ dst, int ds, const unsigned short* __restrict__ table,
                                         int cols, const int* __restrict__ tokens)
{
    const int r = blockIdx.x;
    const unsigned short* src = table + (long long)tokens[r] * cols;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        dst[(long long)r * ds + c] = __uint_as_float((unsigned)src[c] << 16);
}

// nn_to_bf16: dst [rows][cols] (packed) = src rounded to bfloat16, for a
// cuBLAS product with bfloat16 weights. Grid: rows.
extern "C" __global__ void nn_to_bf16(unsigned short* __restrict__ dst, const float* __restrict__ src, int ss, int cols)
{
    const long long r = blockIdx.x;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        dst[r * cols + c] = to_bf16(src[r * ss + c]);
}

// nn_gemv_bf16: y[m][n] = Σ_k x[m][k]·W[n][k] for the m < M ≤ 8 rows of x
// (float32) and bfloat16 W [N][K], K a multiple of 8. A warp computes
// GEMV_ROWS outputs n, its lanes striding K in 16-byte words of each W
// row, so that every x value loaded serves GEMV_ROWS weights and x stays
// float32 (cuBLAS would round it to bfloat16). nn.go calls it for one row
// only: from two rows up cuBLAS is faster (BenchmarkNNMatMul), as the rows'
// x loads from L1 then outweigh the weights' bytes. With split > 1 the
// warps of a block work in groups of split on the same GEMV_ROWS outputs,
// each taking every split-th word of K, and sum through shared memory in
// a fixed order: more warps in flight for a matrix of few rows (MLP down).
// Grid: ceil(N / (GEMV_ROWS·warps/split)); blockDim ≤ 32·GEMV_MAX_WARPS.
#define GEMV_ROWS 4
#define GEMV_MAX_M 8
#define GEMV_MAX_WARPS 8
extern "C" __global__ void nn_gemv_bf16(float* __restrict__ y, int ys, const float* __restrict__ x, int xs,
                                        const unsigned short* __restrict__ W, int K, int N, int M, int split)
{
    __shared__ float part[GEMV_MAX_WARPS][GEMV_MAX_M * GEMV_ROWS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int slice = warp % split, groups = (blockDim.x >> 5) / split;
    const int n0 = (blockIdx.x * groups + warp / split) * GEMV_ROWS;
    const bool active = n0 < N; // no early return: split > 1 meets at a barrier
    float acc[GEMV_MAX_M][GEMV_ROWS];
#pragma unroll
    for (int m = 0; m < GEMV_MAX_M; m++)
#pragma unroll
        for (int j = 0; j < GEMV_ROWS; j++)
            acc[m][j] = 0.0f;
    const uint4* w[GEMV_ROWS];
#pragma unroll
    for (int j = 0; j < GEMV_ROWS; j++)
        w[j] = (const uint4*)(W + (long long)min(n0 + j, N - 1) * K);
    const int K8 = active ? K >> 3 : 0;
#pragma unroll 2
    for (int k8 = lane + 32 * slice; k8 < K8; k8 += 32 * split) {
        uint4 p[GEMV_ROWS];
#pragma unroll
        for (int j = 0; j < GEMV_ROWS; j++)
            p[j] = __ldg(w[j] + k8);
#pragma unroll
        for (int m = 0; m < GEMV_MAX_M; m++) {
            if (m < M) {
                const float* xr = x + (long long)m * xs + k8 * 8;
                float xv[8];
#pragma unroll
                for (int e = 0; e < 8; e++)
                    xv[e] = __ldg(xr + e);
#pragma unroll
                for (int j = 0; j < GEMV_ROWS; j++) {
                    float s = acc[m][j];
                    s = fmaf(xv[0], bf16_lo(p[j].x), s);
                    s = fmaf(xv[1], bf16_hi(p[j].x), s);
                    s = fmaf(xv[2], bf16_lo(p[j].y), s);
                    s = fmaf(xv[3], bf16_hi(p[j].y), s);
                    s = fmaf(xv[4], bf16_lo(p[j].z), s);
                    s = fmaf(xv[5], bf16_hi(p[j].z), s);
                    s = fmaf(xv[6], bf16_lo(p[j].w), s);
                    s = fmaf(xv[7], bf16_hi(p[j].w), s);
                    acc[m][j] = s;
                }
            }
        }
    }
#pragma unroll
    for (int m = 0; m < GEMV_MAX_M; m++) {
        if (m < M) {
#pragma unroll
            for (int j = 0; j < GEMV_ROWS; j++) {
                float v = acc[m][j];
                for (int o = 16; o > 0; o >>= 1)
                    v += __shfl_xor_sync(0xffffffffu, v, o);
                if (split == 1) {
                    if (lane == 0 && active && n0 + j < N)
                        y[(long long)m * ys + n0 + j] = v;
                } else if (lane == 0) {
                    part[warp][m * GEMV_ROWS + j] = v;
                }
            }
        }
    }
    if (split == 1)
        return;
    // The slices' sums in slice order (no atomics: the same bits every run).
    __syncthreads();
    if (slice == 0 && active && lane < M * GEMV_ROWS) {
        const int m = lane / GEMV_ROWS, j = lane % GEMV_ROWS;
        float v = part[warp][lane];
        for (int q = 1; q < split; q++)
            v += part[warp + q][lane];
        if (n0 + j < N)
            y[(long long)m * ys + n0 + j] = v;
    }
}

// nn_argmax: dst[r] = the column of row r's largest value, the first on
// ties, or -1 when the row holds a NaN or an infinity. Grid: rows; 1024
// threads.
extern "C" __global__ void nn_argmax(int* __restrict__ dst, const float* __restrict__ x, int xs, int cols)
{
    const float* xr = x + (long long)blockIdx.x * xs;
    float best = __int_as_float(0xff800000);
    int at = 0x7fffffff;
    int broken = 0;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = xr[c];
        broken |= !isfinite(v);
        if (v > best) // columns rise within a thread: the first stays on ties
            best = v, at = c;
    }
    broken = __syncthreads_or(broken);
    for (int o = 16; o > 0; o >>= 1) {
        const float bv = __shfl_xor_sync(0xffffffffu, best, o);
        const int ba = __shfl_xor_sync(0xffffffffu, at, o);
        if (bv > best || (bv == best && ba < at))
            best = bv, at = ba;
    }
    __shared__ float sv[32];
    __shared__ int sa[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0)
        sv[warp] = best, sa[warp] = at;
    __syncthreads();
    if (warp == 0) {
        const int warps = blockDim.x >> 5;
        best = lane < warps ? sv[lane] : __int_as_float(0xff800000);
        at = lane < warps ? sa[lane] : 0x7fffffff;
        for (int o = 16; o > 0; o >>= 1) {
            const float bv = __shfl_xor_sync(0xffffffffu, best, o);
            const int ba = __shfl_xor_sync(0xffffffffu, at, o);
            if (bv > best || (bv == best && ba < at))
                best = bv, at = ba;
        }
        if (lane == 0)
            dst[blockIdx.x] = broken ? -1 : at;
    }
}

// nn_rmsnorm: dst = x̂·w over groups of `group` columns. Grid: (rows,
// groups). Works in place.
extern "C" __global__ void nn_rmsnorm(float* dst, int ds, const float* x, int xs, const float* __restrict__ w,
                                      int group, float eps)
{
    const long long r = blockIdx.x;
    const int o = blockIdx.y * group;
    const float* xr = x + r * xs + o;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < group; c += blockDim.x)
        ss += xr[c] * xr[c];
    ss = block_sum(ss);
    const float inv = rsqrtf(ss / (float)group + eps);
    float* dr = dst + r * ds + o;
    for (int c = threadIdx.x; c < group; c += blockDim.x)
        dr[c] = xr[c] * inv * w[o + c];
}

// nn_rows: dst = src (op 0) or dst += src (op 1), row by row. Grid: rows.
extern "C" __global__ void nn_rows(float* dst, int ds, const float* src, int ss, int cols, int op)
{
    const long long r = blockIdx.x;
    float* d = dst + r * ds;
    const float* s = src + r * ss;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        d[c] = op == 0 ? s[c] : d[c] + s[c];
}

// nn_bias: y row r += b. Grid: rows.
extern "C" __global__ void nn_bias(float* y, int ys, const float* __restrict__ b, int cols)
{
    float* d = y + (long long)blockIdx.x * ys;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        d[c] += b[c];
}

// nn_gather: dst row i = src row rows[i], zeros where rows[i] < 0. Grid: n.
extern "C" __global__ void nn_gather(float* __restrict__ dst, int ds, const float* __restrict__ src, int ss,
                                     const int* __restrict__ rows, int cols)
{
    const int i = blockIdx.x, r = rows[i];
    float* d = dst + (long long)i * ds;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        d[c] = r < 0 ? 0.0f : src[(long long)r * ss + c];
}

// nn_scatter: dst row rows[i] = src row i, skipping rows[i] < 0. Grid: n.
extern "C" __global__ void nn_scatter(float* __restrict__ dst, int ds, const float* __restrict__ src, int ss,
                                      const int* __restrict__ rows, int cols)
{
    const int i = blockIdx.x, r = rows[i];
    if (r < 0)
        return;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        dst[(long long)r * ds + c] = src[(long long)i * ss + c];
}

// nn_axpy_rows: dst row rows[i] += w[i]·(src row i), i in order (a row may
// repeat). Grid-stride over columns; each thread walks the rows.
extern "C" __global__ void nn_axpy_rows(float* dst, int ds, const float* __restrict__ src, int ss,
                                        const int* __restrict__ rows, const float* __restrict__ w, int n, int cols)
{
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)
        for (int i = 0; i < n; i++)
            dst[(long long)rows[i] * ds + c] += w[i] * src[(long long)i * ss + c];
}

// nn_unary: x = silu(x) (op 0) or relu(x)² (op 1). Grid: rows.
extern "C" __global__ void nn_unary(float* x, int xs, int cols, int op)
{
    float* d = x + (long long)blockIdx.x * xs;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = d[c];
        if (op == 0)
            d[c] = v * sigmoidf_(v);
        else {
            const float p = fmaxf(v, 0.0f);
            d[c] = p * p;
        }
    }
}

// nn_binary: d ·= silu(z) (op 0, also SwiGLU with d = up, z = gate) or
// d ·= sigmoid(z) (op 1). Grid: rows.
extern "C" __global__ void nn_binary(float* d, int ds, const float* z, int zs, int cols, int op)
{
    float* dr = d + (long long)blockIdx.x * ds;
    const float* zr = z + (long long)blockIdx.x * zs;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float g = zr[c];
        dr[c] *= op == 0 ? g * sigmoidf_(g) : sigmoidf_(g);
    }
}

// nn_mul_sigmoid_rows: d row r ·= sigmoid(g[r][0]). Grid: rows.
extern "C" __global__ void nn_mul_sigmoid_rows(float* d, int ds, const float* g, int gs, int cols)
{
    const float s = sigmoidf_(g[(long long)blockIdx.x * gs]);
    float* dr = d + (long long)blockIdx.x * ds;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        dr[c] *= s;
}

__device__ __forceinline__ double softplus_(double x) { return x > 20.0 ? x : log1p(exp(x)); }
__device__ __forceinline__ double softplus_inv_(double y) { return y > 20.0 ? y : y + log(-expm1(-y)); }

// nn_clamp_delta: raw dt [rows][heads] rewritten so that softplus(dt +
// bias[h]) lies in [lo, hi], in double as the CPU does. Grid-stride.
extern "C" __global__ void nn_clamp_delta(float* dt, int ds, const float* __restrict__ bias, int rows, int heads,
                                          double lo, double hi)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows * heads; i += gridDim.x * blockDim.x) {
        const int r = i / heads, h = i % heads;
        float* p = dt + (long long)r * ds + h;
        const double b = bias[h];
        const double d = softplus_((double)*p + b);
        if (d < lo)
            *p = (float)(softplus_inv_(lo) - b);
        else if (d > hi)
            *p = (float)(softplus_inv_(hi) - b);
    }
}

// nn_kda_gate: Kimi Delta Attention's forget-gate logits f [rows][cols]
// (cols = heads·dk) rewritten in place into the log-decays
// g = −exp(aLog[h])·softplus(f + dtBias[c]), h = c / dk, in double as the
// CPU does. Grid-stride.
extern "C" __global__ void nn_kda_gate(float* f, int fs, const float* __restrict__ aLog,
                                       const float* __restrict__ dtBias, int rows, int cols, int dk)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < rows * cols; i += gridDim.x * blockDim.x) {
        const int r = i / cols, c = i % cols;
        float* p = f + (long long)r * fs + c;
        *p = (float)(-exp((double)aLog[c / dk]) * softplus_((double)*p + (double)dtBias[c]));
    }
}

// nn_rope: rotate the leading `rot` dimensions of x row r·heads+h (rotate
// half pairing) by pos[r]·invFreq[i], the angle formed in float32 as
// transformers does. Grid: rows·heads.
extern "C" __global__ void nn_rope(float* x, int xs, const float* __restrict__ invFreq, const int* __restrict__ pos,
                                   int heads, int rot)
{
    const int row = blockIdx.x, half = rot / 2;
    const float p = (float)pos[row / heads];
    float* v = x + (long long)row * xs;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const double ang = (double)(p * invFreq[i]);
        const float c = (float)cos(ang), s = (float)sin(ang);
        const float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
    }
}

// The paged KV cache (kvcache.go gpuKV): a pool of blocks of KV_BLOCK
// positions, allocated KV_CHUNK_BLOCKS blocks to a chunk, chunks[c] chunk
// c's address. A chunk is a key plane [KV_CHUNK_BLOCKS][KV_BLOCK][width]
// then a value plane of the same shape (width = kvHeads·hd floats a
// position), so a position's value row lies kv_values(width) floats past
// its key row. A sequence's block table is its row of table
// [capacity][maxBlocks]: position p of sequence s is at offset p % KV_BLOCK
// of block table[s·maxBlocks + p / KV_BLOCK]. Both constants are
// nn.KVBlock and nn.KVChunkBlocks (TestKVLayoutConstants).
#define KV_BLOCK 16
#define KV_CHUNK_BLOCKS 64

// kv_values is the distance from a key row to its value row.
__device__ __forceinline__ long long kv_values(int width) { return (long long)KV_CHUNK_BLOCKS * KV_BLOCK * width; }

// kv_block is the address of block blk's first key row.
__device__ __forceinline__ float* kv_block(float* const* __restrict__ chunks, int blk, int width)
{
    return chunks[blk / KV_CHUNK_BLOCKS] + (long long)(blk % KV_CHUNK_BLOCKS) * KV_BLOCK * width;
}

// kv_key is the address of the key row of position p of the sequence whose
// block table is tbl.
__device__ __forceinline__ const float* kv_key(float* const* __restrict__ chunks, const int* __restrict__ tbl, int p,
                                               int width)
{
    return kv_block(chunks, tbl[p / KV_BLOCK], width) + (long long)(p % KV_BLOCK) * width;
}

// nn_kv_append: row i of k and v into position pos[i] of sequence seqs[i],
// in block blocks[i] (the host's choice), which it also enters in the
// sequence's block table. Grid: n.
extern "C" __global__ void nn_kv_append(float* const* __restrict__ chunks, int* __restrict__ table, int maxBlocks,
                                        const int* __restrict__ blocks, const float* __restrict__ k, int ks,
                                        const float* __restrict__ v, int vs, const int* __restrict__ seqs,
                                        const int* __restrict__ pos, int width)
{
    const int i = blockIdx.x, p = pos[i], blk = blocks[i];
    if (threadIdx.x == 0) {
        table[(long long)seqs[i] * maxBlocks + p / KV_BLOCK] = blk;
    }
    float* kr = kv_block(chunks, blk, width) + (long long)(p % KV_BLOCK) * width;
    float* vr = kr + kv_values(width);
    for (int c = threadIdx.x; c < width; c += blockDim.x) {
        kr[c] = k[(long long)i * ks + c];
        vr[c] = v[(long long)i * vs + c];
    }
}

// nn_latent_move copies the first `len` positions of every sequence from a
// latent cache of oldLen positions a sequence to one of newLen. Grid:
// (len, capacity).
extern "C" __global__ void nn_latent_move(float* __restrict__ dst, const float* __restrict__ src, int width,
                                          int oldLen, int newLen)
{
    const long long t = blockIdx.x, q = blockIdx.y;
    for (int c = threadIdx.x; c < width; c += blockDim.x)
        dst[(q * newLen + t) * width + c] = src[(q * oldLen + t) * width + c];
}

// nn_attend: o row i, head h = softmax(q·Kᵀ·scale)·V over positions
// 0..pos[i] of sequence seqs[i], key/value head h/(heads/kvHeads). One warp
// per (row, head, part), lanes over the head's dimensions, an online
// softmax over the positions, block by block. Row blockIdx.x, or
// rows[blockIdx.x] when rows is not null (the rows the tiled kernels
// leave). Grid: (n, heads, parts), 32 threads; hd ≤ 256.
//
// With one part (part null) the warp writes o. With several
// (flash-decoding, attendSplits), part z takes the row's positions
// [z·span, (z+1)·span), span = ⌈⌈T/parts⌉/KV_BLOCK⌉·KV_BLOCK for the
// row's T = pos[i]+1 positions (so a part starts on a block; the last
// parts of a short row may be empty), and writes its running max m, sum l
// and unnormalised output acc[hd] to
// part[((blockIdx.x·heads + h)·parts + z)·(hd + 2) + {0, 1, 2..}], which
// nn_attend_combine merges into o.
extern "C" __global__ void nn_attend(float* __restrict__ o, int os, const float* __restrict__ q, int qs,
                                     float* const* __restrict__ chunks, const int* __restrict__ table, int maxBlocks,
                                     const int* __restrict__ seqs, const int* __restrict__ pos,
                                     const int* __restrict__ rows, int heads, int kvHeads, int hd, float scale,
                                     float* __restrict__ part)
{
    const int x = blockIdx.x, i = rows != nullptr ? rows[x] : x, h = blockIdx.y, lane = threadIdx.x;
    const int parts = gridDim.z, z = blockIdx.z;
    const int width = kvHeads * hd, off = (h / (heads / kvHeads)) * hd;
    const float* qh = q + (long long)i * qs + h * hd;
    const int* tbl = table + (long long)seqs[i] * maxBlocks;
    const int T = pos[i] + 1;
    const int span = ((T + parts - 1) / parts + KV_BLOCK - 1) / KV_BLOCK * KV_BLOCK;
    const int t0 = min(T, z * span), t1 = min(T, t0 + span);
    constexpr int PER = 8; // hd ≤ 32·PER
    float qv[PER], acc[PER];
    for (int j = 0; j < PER; j++) {
        const int c = lane + 32 * j;
        qv[j] = c < hd ? qh[c] : 0.0f;
        acc[j] = 0.0f;
    }
    float m = __int_as_float(0xff800000), l = 0.0f; // −∞
    for (int b0 = t0; b0 < t1; b0 += KV_BLOCK) { // b0 is a multiple of KV_BLOCK
        const float* K = kv_block(chunks, tbl[b0 / KV_BLOCK], width) + off;
        const float* V = K + kv_values(width);
        const int nb = min(KV_BLOCK, t1 - b0);
        for (int t = 0; t < nb; t++) {
            const float* kt = K + t * width;
            float s = 0.0f;
            for (int j = 0; j < PER; j++) {
                const int c = lane + 32 * j;
                if (c < hd)
                    s += qv[j] * kt[c];
            }
            for (int w = 16; w > 0; w >>= 1)
                s += __shfl_xor_sync(0xffffffffu, s, w);
            s *= scale;
            const float mNew = fmaxf(m, s);
            const float corr = expf(m - mNew), p = expf(s - mNew);
            l = l * corr + p;
            const float* vt = V + t * width;
            for (int j = 0; j < PER; j++) {
                const int c = lane + 32 * j;
                if (c < hd)
                    acc[j] = acc[j] * corr + p * vt[c];
            }
            m = mNew;
        }
    }
    if (part == nullptr) {
        float* oh = o + (long long)i * os + h * hd;
        for (int j = 0; j < PER; j++) {
            const int c = lane + 32 * j;
            if (c < hd)
                oh[c] = acc[j] / l;
        }
        return;
    }
    float* pp = part + ((long long)(x * heads + h) * parts + z) * (hd + 2);
    if (lane == 0) {
        pp[0] = m; // −∞ and l = 0 for an empty part
        pp[1] = l;
    }
    for (int j = 0; j < PER; j++) {
        const int c = lane + 32 * j;
        if (c < hd)
            pp[2 + c] = acc[j];
    }
}

// nn_attend_combine merges nn_attend's parts of o row i, head h (row
// blockIdx.x, or rows[blockIdx.x] when rows is not null): with M the
// largest of the parts' maxima m_z, o = Σ_z e^(m_z−M)·acc_z / Σ_z
// e^(m_z−M)·l_z, empty parts (m_z = −∞) left out. Grid: (n, heads).
extern "C" __global__ void nn_attend_combine(float* __restrict__ o, int os, const float* __restrict__ part,
                                             const int* __restrict__ rows, int heads, int hd, int parts)
{
    const int x = blockIdx.x, i = rows != nullptr ? rows[x] : x, h = blockIdx.y;
    const float ninf = __int_as_float(0xff800000);
    const float* pp = part + (long long)(x * heads + h) * parts * (hd + 2);
    float M = ninf;
    for (int z = 0; z < parts; z++) {
        M = fmaxf(M, pp[z * (hd + 2)]);
    }
    float L = 0.0f;
    for (int z = 0; z < parts; z++) {
        const float mz = pp[z * (hd + 2)];
        if (mz != ninf) {
            L += expf(mz - M) * pp[z * (hd + 2) + 1];
        }
    }
    float* oh = o + (long long)i * os + h * hd;
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
        float acc = 0.0f;
        for (int z = 0; z < parts; z++) {
            const float mz = pp[z * (hd + 2)];
            if (mz != ninf) {
                acc += expf(mz - M) * pp[z * (hd + 2) + 2 + c];
            }
        }
        oh[c] = acc / L;
    }
}

// tf32 rounds x to TensorFloat-32 (round to nearest, away from zero on
// ties): the bits of a float whose low 13 mantissa bits are zero.
__device__ __forceinline__ unsigned att_tf32(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// att_split writes x as big + small, both TensorFloat-32: three products
// of the parts (small·big, big·small, big·big; small·small is below
// float32's rounding) give a float32-accurate product on tensor cores.
__device__ __forceinline__ void att_split(float x, unsigned& big, unsigned& small)
{
    big = att_tf32(x);
    small = att_tf32(x - __uint_as_float(big));
}

// att_mma: d (16×8, float32) += a (16×8) · b (8×8), TensorFloat-32.
// Lane l = 4g + t holds a at (g, t), (g+8, t), (g, t+4), (g+8, t+4), b at
// (t, g), (t+4, g), d at (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
__device__ __forceinline__ void att_mma(float* d, const unsigned* a, const unsigned* b)
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// att_mma3 is att_mma to float32 accuracy from split operands.
__device__ __forceinline__ void att_mma3(float* d, const unsigned* aBig, const unsigned* aSmall, const unsigned* bBig,
                                         const unsigned* bSmall)
{
    att_mma(d, aSmall, bBig);
    att_mma(d, aBig, bSmall);
    att_mma(d, aBig, bBig);
}

// nn_attend_mma_<hd> is nn_attend for a prompt's rows, on tensor cores:
// tile k of tiles ({row0, count, seq, pos0}, count ≤ ATT_ROWS) is rows
// row0.. of sequence seq at positions pos0.., and a block stages the keys
// and values of ATT_KEYS positions at a time (ATT_KEYS / KV_BLOCK whole
// blocks of the cache, a key row a warp through the block table) in shared
// memory for all of them. Warp w holds rows 16w..16w+15: S = Q·Kᵀ
// (16×ATT_KEYS) in registers, the rows' online softmax over the quad of
// lanes that shares a row, P through shared memory into the operand
// layout, then O += P·V. Products are split TensorFloat-32 (att_mma3),
// float32-accurate, so the result agrees with nn_attend's to float32
// rounding. Grid: (tiles, heads), 128 threads, dynamic shared memory of
// attendKernel.smem(hd) bytes (attend.go); hd a multiple of 8, at most
// NT·8.
#define ATT_ROWS 64
#define ATT_KEYS 32
template <int NT>
__device__ __forceinline__ void att_tiles(float* __restrict__ o, int os, const float* __restrict__ q, int qs,
                                          float* const* __restrict__ chunks, const int* __restrict__ table,
                                          int maxBlocks, const int* __restrict__ tiles, int heads, int kvHeads, int hd,
                                          float scale)
{
    extern __shared__ float sm[];
    const int qsd = hd + 4, ksd = hd + 4, vsd = hd + 8, psd = ATT_KEYS + 4; // padded: no bank conflicts
    float* Qs = sm;                      // [ATT_ROWS][hd+4]
    float* Ks = Qs + ATT_ROWS * qsd;     // [ATT_KEYS][hd+4]
    float* Vs = Ks + ATT_KEYS * ksd;     // [ATT_KEYS][hd+8]
    float* Ps = Vs + ATT_KEYS * vsd;     // [4 warps][16][ATT_KEYS+4]
    const int* tl = tiles + 4 * blockIdx.x;
    const int row0 = tl[0], count = tl[1], seq = tl[2], pos0 = tl[3];
    const int h = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int width = kvHeads * hd, off = (h / (heads / kvHeads)) * hd;
    const int* tbl = table + (long long)seq * maxBlocks;
    const int warps = blockDim.x >> 5;
    for (int r = threadIdx.x >> 5; r < ATT_ROWS; r += warps) {
        const float* qr = q + (long long)(row0 + r) * qs + h * hd;
        for (int d = threadIdx.x & 31; d < hd; d += 32) {
            Qs[r * qsd + d] = r < count ? qr[d] : 0.0f;
        }
    }
    float* P = Ps + warp * 16 * psd;
    const int wr = warp * 16;               // the warp's first row in the tile
    const int ntiles = hd / 8;              // output column tiles
    const int r0 = pos0 + wr + g, r1 = r0 + 8; // positions of the lane's two rows
    const bool ok0 = wr + g < count, ok1 = wr + g + 8 < count;
    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) {
        acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    }
    const float ninf = __int_as_float(0xff800000);
    float m0 = ninf, m1 = ninf, l0 = 0.0f, l1 = 0.0f;
    const int last = pos0 + count - 1; // the last position any row sees
    for (int t0 = 0; t0 <= last; t0 += ATT_KEYS) {
        const int n = min(ATT_KEYS, last + 1 - t0);
        __syncthreads(); // the previous tile is read (and Qs written)
        for (int k = threadIdx.x >> 5; k < ATT_KEYS; k += warps) {
            // A warp stages key k, from its block; keys past the last
            // position are zeros, their blocks not looked up.
            const float* kr = k < n ? kv_key(chunks, tbl, t0 + k, width) + off : nullptr;
            for (int d = threadIdx.x & 31; d < hd; d += 32) {
                Ks[k * ksd + d] = k < n ? kr[d] : 0.0f;
                Vs[k * vsd + d] = k < n ? kr[kv_values(width) + d] : 0.0f;
            }
        }
        __syncthreads();
        if (wr >= count || pos0 + wr + 15 < t0) {
            continue; // the warp's rows are past the tile's, or see none of its keys
        }
        float s[ATT_KEYS / 8][4];
#pragma unroll
        for (int j = 0; j < ATT_KEYS / 8; j++) {
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
        }
        for (int k8 = 0; k8 < hd; k8 += 8) {
            unsigned ab[4], as[4];
            att_split(Qs[(wr + g) * qsd + k8 + t], ab[0], as[0]);
            att_split(Qs[(wr + g + 8) * qsd + k8 + t], ab[1], as[1]);
            att_split(Qs[(wr + g) * qsd + k8 + t + 4], ab[2], as[2]);
            att_split(Qs[(wr + g + 8) * qsd + k8 + t + 4], ab[3], as[3]);
#pragma unroll
            for (int j = 0; j < ATT_KEYS / 8; j++) {
                unsigned bb[2], bs[2];
                att_split(Ks[(8 * j + g) * ksd + k8 + t], bb[0], bs[0]);
                att_split(Ks[(8 * j + g) * ksd + k8 + t + 4], bb[1], bs[1]);
                att_mma3(s[j], ab, as, bb, bs);
            }
        }
        // Scores of the lane's rows r0 (s[j][0..1]) and r1 (s[j][2..3]) at
        // keys t0 + 8j + 2t + (0, 1).
        float mt0 = ninf, mt1 = ninf;
#pragma unroll
        for (int j = 0; j < ATT_KEYS / 8; j++) {
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int key = 8 * j + 2 * t + (c & 1), pk = t0 + key;
                const bool ok = key < n && (c < 2 ? ok0 && pk <= r0 : ok1 && pk <= r1);
                s[j][c] = ok ? s[j][c] * scale : ninf;
            }
            mt0 = fmaxf(mt0, fmaxf(s[j][0], s[j][1]));
            mt1 = fmaxf(mt1, fmaxf(s[j][2], s[j][3]));
        }
        for (int w = 1; w < 4; w <<= 1) {
            mt0 = fmaxf(mt0, __shfl_xor_sync(0xffffffffu, mt0, w));
            mt1 = fmaxf(mt1, __shfl_xor_sync(0xffffffffu, mt1, w));
        }
        const float mn0 = fmaxf(m0, mt0), mn1 = fmaxf(m1, mt1);
        // A row past the count has seen no key: its corrections stay 1 and
        // its weights 0.
        const float c0 = mn0 == ninf ? 1.0f : expf(m0 - mn0), c1 = mn1 == ninf ? 1.0f : expf(m1 - mn1);
        float ps0 = 0.0f, ps1 = 0.0f;
#pragma unroll
        for (int j = 0; j < ATT_KEYS / 8; j++) {
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const float mn = c < 2 ? mn0 : mn1;
                const float p = s[j][c] == ninf ? 0.0f : expf(s[j][c] - mn);
                if (c < 2) {
                    ps0 += p;
                } else {
                    ps1 += p;
                }
                P[(g + 8 * (c >> 1)) * psd + 8 * j + 2 * t + (c & 1)] = p;
            }
        }
        for (int w = 1; w < 4; w <<= 1) {
            ps0 += __shfl_xor_sync(0xffffffffu, ps0, w);
            ps1 += __shfl_xor_sync(0xffffffffu, ps1, w);
        }
        l0 = l0 * c0 + ps0;
        l1 = l1 * c1 + ps1;
        m0 = mn0;
        m1 = mn1;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            acc[nt][0] *= c0;
            acc[nt][1] *= c0;
            acc[nt][2] *= c1;
            acc[nt][3] *= c1;
        }
        __syncwarp();
#pragma unroll
        for (int k8 = 0; k8 < ATT_KEYS; k8 += 8) {
            unsigned ab[4], as[4];
            att_split(P[g * psd + k8 + t], ab[0], as[0]);
            att_split(P[(g + 8) * psd + k8 + t], ab[1], as[1]);
            att_split(P[g * psd + k8 + t + 4], ab[2], as[2]);
            att_split(P[(g + 8) * psd + k8 + t + 4], ab[3], as[3]);
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                if (nt < ntiles) {
                    unsigned bb[2], bs[2];
                    att_split(Vs[(k8 + t) * vsd + 8 * nt + g], bb[0], bs[0]);
                    att_split(Vs[(k8 + t + 4) * vsd + 8 * nt + g], bb[1], bs[1]);
                    att_mma3(acc[nt], ab, as, bb, bs);
                }
            }
        }
        __syncwarp(); // P is read before the next tile writes it
    }
    if (wr >= count) {
        return;
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        if (nt < ntiles) {
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int r = wr + g + 8 * (c >> 1);
                if (r < count) {
                    o[(long long)(row0 + r) * os + h * hd + 8 * nt + 2 * t + (c & 1)] = acc[nt][c] / (c < 2 ? l0 : l1);
                }
            }
        }
    }
}

#define ATT_KERNEL(HD)                                                                                                 \
    extern "C" __global__ void __launch_bounds__(128) nn_attend_mma_##HD(                                              \
        float* __restrict__ o, int os, const float* __restrict__ q, int qs, float* const* __restrict__ chunks,         \
        const int* __restrict__ table, int maxBlocks, const int* __restrict__ tiles, int heads, int kvHeads, int hd,   \
        float scale)                                                                                                   \
    {                                                                                                                  \
        att_tiles<HD / 8>(o, os, q, qs, chunks, table, maxBlocks, tiles, heads, kvHeads, hd, scale);                   \
    }
ATT_KERNEL(64)
ATT_KERNEL(128)

// nn_attend_tiles is nn_attend for a prompt's rows where nn_attend_mma
// does not serve (heads of more than 128 dimensions, or not a multiple of
// 8: at 256 its shared memory leaves one block per SM): tile k of tiles
// ({row0, count, seq, pos0}, count ≤ ATTS_ROWS) is rows row0.. of sequence
// seq at positions pos0.., and a block stages the keys and values of
// ATTS_KEYS positions at a time (whole blocks of the cache, a key row a
// warp through the block table) in shared memory for all of them, where
// nn_attend reads each once per row. Warp w holds rows 4w..4w+3: lane t
// scores key t against them, then the lanes, over the head's dimensions,
// fold the tile into each row's online softmax. Grid: (tiles, heads), 256
// threads, dynamic shared memory ((2·ATTS_KEYS + ATTS_ROWS)·hd + ATTS_KEYS)
// floats; hd ≤ 256.
#define ATTS_ROWS 32
#define ATTS_KEYS 32
#define ATT_WARP_ROWS 4
extern "C" __global__ void __launch_bounds__(256) nn_attend_tiles(float* __restrict__ o, int os,
    const float* __restrict__ q, int qs, float* const* __restrict__ chunks, const int* __restrict__ table, int maxBlocks,
    const int* __restrict__ tiles, int heads, int kvHeads, int hd, float scale)
{
    extern __shared__ float sm[];
    const int hdp = hd + 1; // a padded key row: lane t reads row t without bank conflicts
    float* Ks = sm;                   // [ATTS_KEYS][hd+1]
    float* Vs = Ks + ATTS_KEYS * hdp;  // [ATTS_KEYS][hd]
    float* Qs = Vs + ATTS_KEYS * hd;   // [ATTS_ROWS][hd]
    const int* tl = tiles + 4 * blockIdx.x;
    const int row0 = tl[0], count = tl[1], seq = tl[2], pos0 = tl[3];
    const int h = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int width = kvHeads * hd, off = (h / (heads / kvHeads)) * hd;
    const int* tbl = table + (long long)seq * maxBlocks;
    const int warps = blockDim.x >> 5;
    for (int e = threadIdx.x; e < ATTS_ROWS * hd; e += blockDim.x) {
        const int r = e / hd, d = e - r * hd;
        Qs[e] = r < count ? q[(long long)(row0 + r) * qs + h * hd + d] : 0.0f;
    }
    constexpr int PER = 8; // hd ≤ 32·PER
    float acc[ATT_WARP_ROWS][PER], m[ATT_WARP_ROWS], l[ATT_WARP_ROWS];
#pragma unroll
    for (int r = 0; r < ATT_WARP_ROWS; r++) {
        m[r] = __int_as_float(0xff800000); // −∞
        l[r] = 0.0f;
#pragma unroll
        for (int j = 0; j < PER; j++) {
            acc[r][j] = 0.0f;
        }
    }
    const int wr = warp * ATT_WARP_ROWS; // the warp's first row in the tile
    const int last = pos0 + count - 1;   // the last position any row sees
    for (int t0 = 0; t0 <= last; t0 += ATTS_KEYS) {
        const int n = min(ATTS_KEYS, last + 1 - t0);
        __syncthreads(); // the previous tile is read (and Qs written)
        for (int t = warp; t < ATTS_KEYS; t += warps) {
            // A warp stages key t, from its block; keys past the last
            // position are zeros, their blocks not looked up.
            const float* kr = t < n ? kv_key(chunks, tbl, t0 + t, width) + off : nullptr;
            for (int d = lane; d < hd; d += 32) {
                Ks[t * hdp + d] = t < n ? kr[d] : 0.0f;
                Vs[t * hd + d] = t < n ? kr[kv_values(width) + d] : 0.0f;
            }
        }
        __syncthreads();
        if (wr >= count || pos0 + wr + ATT_WARP_ROWS - 1 < t0) {
            continue; // the warp's rows are past the tile's, or see none of its keys
        }
        float s[ATT_WARP_ROWS];
#pragma unroll
        for (int r = 0; r < ATT_WARP_ROWS; r++) {
            s[r] = 0.0f;
        }
        const float* kt = Ks + lane * hdp;
        const float* qw = Qs + wr * hd;
        for (int d = 0; d < hd; d++) {
            const float kd = kt[d];
#pragma unroll
            for (int r = 0; r < ATT_WARP_ROWS; r++) {
                s[r] += qw[r * hd + d] * kd;
            }
        }
        float p[ATT_WARP_ROWS];
#pragma unroll
        for (int r = 0; r < ATT_WARP_ROWS; r++) {
            const bool ok = lane < n && wr + r < count && t0 + lane <= pos0 + wr + r;
            const float sr = ok ? s[r] * scale : __int_as_float(0xff800000);
            float mt = sr;
            for (int w = 16; w > 0; w >>= 1) {
                mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, w));
            }
            const float mNew = fmaxf(m[r], mt);
            if (mNew == __int_as_float(0xff800000)) {
                p[r] = 0.0f; // a row past the count: nothing seen yet
                continue;
            }
            const float corr = expf(m[r] - mNew);
            p[r] = ok ? expf(sr - mNew) : 0.0f;
            float ps = p[r];
            for (int w = 16; w > 0; w >>= 1) {
                ps += __shfl_xor_sync(0xffffffffu, ps, w);
            }
            l[r] = l[r] * corr + ps;
            m[r] = mNew;
#pragma unroll
            for (int j = 0; j < PER; j++) {
                acc[r][j] *= corr;
            }
        }
        for (int t = 0; t < n; t++) {
            float pt[ATT_WARP_ROWS];
#pragma unroll
            for (int r = 0; r < ATT_WARP_ROWS; r++) {
                pt[r] = __shfl_sync(0xffffffffu, p[r], t);
            }
            const float* vt = Vs + t * hd;
#pragma unroll
            for (int j = 0; j < PER; j++) {
                const int c = lane + 32 * j;
                if (c < hd) {
                    const float v = vt[c];
#pragma unroll
                    for (int r = 0; r < ATT_WARP_ROWS; r++) {
                        acc[r][j] += pt[r] * v;
                    }
                }
            }
        }
    }
#pragma unroll
    for (int r = 0; r < ATT_WARP_ROWS; r++) {
        if (wr + r >= count) {
            continue;
        }
        float* oh = o + (long long)(row0 + wr + r) * os + h * hd;
#pragma unroll
        for (int j = 0; j < PER; j++) {
            const int c = lane + 32 * j;
            if (c < hd) {
                oh[c] = acc[r][j] / l[r];
            }
        }
    }
}

