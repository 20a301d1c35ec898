// fill.cu: fill device buffers with a constant or with reproducible
// pseudo-random values, so that tests and benchmarks never run on zeros
// (METHOD.md) and need no host-to-device transfer of their inputs.

// hash32 is the "lowbias32" integer hash. fill.go mirrors it bit for bit
// (UniformAt), so a host reference can recompute any element.
__device__ __forceinline__ unsigned hash32(unsigned x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

// uniform_at is element i of the stream seeded by seed, in [lo, hi). The
// multiply and add are rounded separately (no fused multiply-add) so that
// the Go mirror, which cannot fuse, is bit-identical.
__device__ __forceinline__ float uniform_at(unsigned seed, unsigned long long i, float lo, float hi)
{
    const unsigned h = hash32((unsigned)i ^ hash32(seed + (unsigned)(i >> 32)));
    const float u = (float)(h >> 8) * (1.0f / 16777216.0f);
    return __fadd_rn(lo, __fmul_rn(hi - lo, u));
}

// fill_f32 sets n floats to value (grid-stride loop).
extern "C" __global__ void fill_f32(float* __restrict__ dst, float value, unsigned long long n)
{
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        dst[i] = value;
    }
}

// fill_uniform_f32 sets dst[i] = uniform_at(seed, i, lo, hi) for i < n.
extern "C" __global__ void fill_uniform_f32(float* __restrict__ dst, unsigned long long n,
                                            unsigned seed, float lo, float hi)
{
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        dst[i] = uniform_at(seed, i, lo, hi);
    }
}

// fill_uniform_bf16 stores uniform_at(seed, i, lo, hi) rounded to bfloat16
// (round to nearest, ties to even; the values are finite) as raw bits.
extern "C" __global__ void fill_uniform_bf16(unsigned short* __restrict__ dst, unsigned long long n,
                                             unsigned seed, float lo, float hi)
{
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const unsigned bits = __float_as_uint(uniform_at(seed, i, lo, hi));
        dst[i] = (unsigned short)((bits + 0x7fffU + ((bits >> 16) & 1U)) >> 16);
    }
}

// zero_slot zeroes the parts of one slot of a cache: row `slot` of a table
// [slots][n] of {device address, 4-byte words}, part blockIdx.y, the
// blocks along x striding over its words. Grid: (blocks, n).
extern "C" __global__ void zero_slot(const unsigned long long* __restrict__ table, int n, int slot)
{
    const unsigned long long* e = table + 2 * ((long long)slot * n + blockIdx.y);
    unsigned* p = (unsigned*)e[0];
    const unsigned long long words = e[1];
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < words;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        p[i] = 0u;
    }
}
