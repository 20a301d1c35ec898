// copy.cu: a device-to-device copy, 16 bytes per access, used to measure the
// machine's copy bandwidth, the ceiling every memory-bound kernel is judged
// against (docs/DESIGN.md section 3: bytes read + bytes written over time).

// COPY_UNROLL is the number of 16-byte words each thread moves and
// COPY_THREADS the block size. On an H200 one word per thread in
// 256-thread blocks copied fastest, 4261 GB/s against 4066-4122 GB/s for 2
// to 16 words per thread and 4226 GB/s for cuMemcpyDtoD: a grid of many
// small blocks already keeps enough loads in flight, and more words per
// thread only cost registers.
#define COPY_UNROLL 1
#define COPY_THREADS 256

// load_cs and store_cs are 16-byte global accesses with the "cache
// streaming" policy (evict first): copied data is not read again. Written as
// PTX so the file needs no header under NVRTC.
__device__ __forceinline__ uint4 load_cs(const uint4* p)
{
    uint4 v;
    asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ void store_cs(uint4* p, uint4 v)
{
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};"
                 :
                 : "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
}

// xor_word folds word w into x (the read kernels' sinks).
__device__ __forceinline__ void xor_word(uint4& x, uint4 w)
{
    x.x ^= w.x, x.y ^= w.y, x.z ^= w.z, x.w ^= w.w;
}

// load_words loads a thread's COPY_UNROLL words, first + u*blockDim for u
// < COPY_UNROLL, all before any is used (zeros past n16), and returns first
// (the block's COPY_UNROLL*blockDim words, then the thread's).
__device__ __forceinline__ unsigned long long load_words(const uint4* __restrict__ src, unsigned long long n16,
                                                         uint4 (&v)[COPY_UNROLL])
{
    const unsigned long long first = (unsigned long long)blockIdx.x * blockDim.x * COPY_UNROLL + threadIdx.x;
#pragma unroll
    for (int u = 0; u < COPY_UNROLL; u++) {
        const unsigned long long j = first + (unsigned long long)u * blockDim.x;
        v[u] = make_uint4(0, 0, 0, 0);
        if (j < n16) {
            v[u] = load_cs(src + j);
        }
    }
    return first;
}

// copy16 copies n16 16-byte words from src to dst. Thread t of block b moves
// the words b*blockDim*COPY_UNROLL + t + u*blockDim for u < COPY_UNROLL: each
// access is coalesced across the warp (512 contiguous bytes per instruction),
// and all loads are issued before the first store, so COPY_UNROLL independent
// 16-byte loads are in flight per thread. Launch with COPY_THREADS threads
// per block and ceil(n16 / (COPY_THREADS*COPY_UNROLL)) blocks.
extern "C" __global__ void __launch_bounds__(COPY_THREADS)
copy16(uint4* __restrict__ dst, const uint4* __restrict__ src, unsigned long long n16)
{
    uint4 v[COPY_UNROLL];
    const unsigned long long first = load_words(src, n16, v);
#pragma unroll
    for (int u = 0; u < COPY_UNROLL; u++) {
        const unsigned long long j = first + (unsigned long long)u * blockDim.x;
        if (j < n16) {
            store_cs(dst + j, v[u]);
        }
    }
}

// read16 reads n16 16-byte words, laid out over the grid as copy16's, and
// writes nothing unless a thread's words XOR to a value no pseudo-random
// buffer gives (so the loads cannot be dropped): the read-only bandwidth,
// the ceiling of a step that reads its state without writing it back (a
// replay non-flush step). The sink takes one word a thread that hits.
extern "C" __global__ void __launch_bounds__(COPY_THREADS)
read16(uint4* __restrict__ sink, const uint4* __restrict__ src, unsigned long long n16)
{
    uint4 v[COPY_UNROLL];
    load_words(src, n16, v);
    uint4 x = v[0];
#pragma unroll
    for (int u = 1; u < COPY_UNROLL; u++) {
        xor_word(x, v[u]);
    }
    if ((x.x & x.y & x.z & x.w) == 0xffffffffu) {
        store_cs(sink + threadIdx.x, x);
    }
}
