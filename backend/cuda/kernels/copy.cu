// copy.cu: a device-to-device copy, 16 bytes per access, used to measure the
// machine's copy bandwidth, the ceiling every memory-bound kernel is judged
// against (docs/DESIGN.md section 3: bytes read + bytes written over time).

// COPY_UNROLL is the number of 16-byte words each thread moves and
// COPY_THREADS the block size; both can be set with -D to compare variants.
// On an H200 (NOTES.md) one word per thread in 256-thread blocks copied
// fastest, 4261 GB/s against 4066-4122 GB/s for 2 to 16 words per thread and
// 4226 GB/s for cuMemcpyDtoD: a grid of many small blocks already keeps
// enough loads in flight, and more words per thread only cost registers.
#ifndef COPY_UNROLL
#define COPY_UNROLL 1
#endif
#ifndef COPY_THREADS
#define COPY_THREADS 256
#endif

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

// read_items reads the buffer the way the replay group steps stream their
// state: a resident grid of blocks, each reading whole items (item16
// contiguous 16-byte words) in turn, item i = block + k*grid, each item in
// passes of ITEM_THREADS*ITEM_CPL words (thread t takes words c*ITEM_THREADS
// + t of a pass) with ITEM_PF passes in flight in registers. Thread t's
// XOR of every word it read goes to sink[block*ITEM_THREADS + t], so the
// XOR over the sink is the XOR over the buffer. A measuring kernel
// (TestReadPatterns): which items, blocks and passes in flight come
// nearest read16.
#ifndef ITEM_THREADS
#define ITEM_THREADS 64
#endif
#ifndef ITEM_CPL
#define ITEM_CPL 4
#endif
#ifndef ITEM_PF
#define ITEM_PF 2
#endif
#ifndef ITEM_MINB
#define ITEM_MINB 8
#endif
// ITEM_SUMS adds a group step's arithmetic to each pass: 1 (an fp32 state)
// or 2 (bf16: a word's eight values), each word's values dotted with two
// vectors held in registers, the two sums of a row's lanes reduced by
// shuffles and written to shared memory by its first lane, a barrier an
// item. The words' XOR still goes to the sink; the sums are kept alive by
// a store on a never-true test, as read16's.
#ifndef ITEM_SUMS
#define ITEM_SUMS 0
#endif
// ITEM_LANES (0: off) lays a pass out as the group steps' CMap does, rows
// of ITEM_LANES*ITEM_CPL words, ITEM_LANES lanes a row: thread t's word c
// of a pass is word c*ITEM_LANES + t%ITEM_LANES of row t/ITEM_LANES, so a
// warp's load asks for 32/ITEM_LANES pieces of 16*ITEM_LANES bytes, where
// the default asks for one 512-byte piece. The same bytes a pass.
#ifndef ITEM_LANES
#define ITEM_LANES 0
#endif
__device__ __forceinline__ int item_word(int c)
{
#if ITEM_LANES
    return (threadIdx.x / ITEM_LANES) * (ITEM_LANES * ITEM_CPL) + c * ITEM_LANES + threadIdx.x % ITEM_LANES;
#else
    return c * ITEM_THREADS + threadIdx.x;
#endif
}
#if ITEM_SUMS
#define ITEM_VALS (ITEM_SUMS == 2 ? 8 : 4)
// ITEM_ROW_LANES: the lanes whose sums make a row's (eight where the
// layout is not the row map's, as the 4B steps' rows).
#define ITEM_ROW_LANES (ITEM_LANES ? ITEM_LANES : 8)
__device__ __forceinline__ void item_values(uint4 w, float (&v)[ITEM_VALS])
{
    const unsigned u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if (ITEM_SUMS == 2) {
            v[2 * i] = __uint_as_float(u[i] << 16);
            v[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
        } else {
            v[i] = __uint_as_float(u[i]);
        }
    }
}
#endif
extern "C" __global__ void __launch_bounds__(ITEM_THREADS, ITEM_MINB)
read_items(uint4* __restrict__ sink, const uint4* __restrict__ src, unsigned long long items, int item16)
{
    const int PW = ITEM_THREADS * ITEM_CPL; // words a pass
    const int passes = item16 / PW;
    uint4 x = make_uint4(0, 0, 0, 0);
#if ITEM_SUMS
    __shared__ float sOut[2 * 1024];
    float vr[2][ITEM_CPL][ITEM_VALS], keep = 0.0f;
#pragma unroll
    for (int a = 0; a < 2; a++) {
#pragma unroll
        for (int c = 0; c < ITEM_CPL; c++) {
#pragma unroll
            for (int e = 0; e < ITEM_VALS; e++) {
                vr[a][c][e] = 1.0f + 1e-3f * (float)(threadIdx.x + 7 * a + 3 * c + e);
            }
        }
    }
#endif
    for (unsigned long long it = blockIdx.x; it < items; it += gridDim.x) {
        const uint4* p = src + it * (unsigned long long)item16;
        uint4 raw[ITEM_PF][ITEM_CPL];
#pragma unroll
        for (int f = 0; f < ITEM_PF; f++) {
#pragma unroll
            for (int c = 0; c < ITEM_CPL; c++) {
                raw[f][c] = f < passes ? p[f * PW + item_word(c)] : make_uint4(0, 0, 0, 0);
            }
        }
#pragma unroll 1
        for (int base = 0; base < passes; base += ITEM_PF) {
#pragma unroll
            for (int f = 0; f < ITEM_PF; f++) {
                const int pass = base + f;
                if (pass < passes) {
#if ITEM_SUMS
                    float acc[2] = {0.0f, 0.0f};
#endif
#pragma unroll
                    for (int c = 0; c < ITEM_CPL; c++) {
                        xor_word(x, raw[f][c]);
#if ITEM_SUMS
                        float v[ITEM_VALS];
                        item_values(raw[f][c], v);
#pragma unroll
                        for (int e = 0; e < ITEM_VALS; e++) {
                            acc[0] = fmaf(vr[0][c][e], v[e], acc[0]);
                            acc[1] = fmaf(vr[1][c][e], v[e], acc[1]);
                        }
#endif
                        if (pass + ITEM_PF < passes) {
                            raw[f][c] = p[(pass + ITEM_PF) * PW + item_word(c)];
                        }
                    }
#if ITEM_SUMS
#pragma unroll
                    for (int o = ITEM_ROW_LANES / 2; o > 0; o >>= 1) {
                        acc[0] += __shfl_xor_sync(0xffffffffu, acc[0], o);
                        acc[1] += __shfl_xor_sync(0xffffffffu, acc[1], o);
                    }
                    if (threadIdx.x % ITEM_ROW_LANES == 0) {
                        const int r = (pass * ITEM_THREADS + threadIdx.x) / ITEM_ROW_LANES % 1024;
                        sOut[r] = acc[0];
                        sOut[1024 + r] = acc[1];
                    }
#endif
                }
            }
        }
#if ITEM_SUMS
        __syncthreads(); // the item's sums are read before the next item's
        keep += sOut[threadIdx.x] + sOut[1024 + threadIdx.x];
        __syncthreads();
#endif
    }
#if ITEM_SUMS
    if (keep == 1234.5f) { // never, for sums of random data; keeps the sums
        x.x ^= 1u;
    }
#endif
    sink[(unsigned long long)blockIdx.x * ITEM_THREADS + threadIdx.x] = x;
}
