// cuda_host.h: stand-ins for CUDA's keywords, built-in variables and
// intrinsics, so that g++ can parse the kernels as host C++
// (TestKernelSyntax). They only need to type-check: none of them runs.
#pragma once
#include <cmath>
#include <cstdint>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __shared__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
struct uint3 { unsigned x, y, z; };
struct dim3 { unsigned x, y, z; };
extern uint3 threadIdx, blockIdx; extern dim3 blockDim, gridDim;
struct uint4 { unsigned x, y, z, w; }; struct uint2 { unsigned x, y; };
struct float4 { float x, y, z, w; }; struct float2 { float x, y; };
struct int4 { int x, y, z, w; }; struct int2 { int x, y; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a,b,c,d}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a,b,c,d}; }
inline float2 make_float2(float a, float b) { return {a,b}; }
inline int2 make_int2(int a, int b) { return {a,b}; }
inline void __syncthreads() {}
inline int __syncthreads_count(int) { return 0; }
inline int __syncthreads_or(int) { return 0; }
inline void __syncwarp(unsigned = 0) {}
inline void __threadfence() {}
inline void __threadfence_block() {}
template <class T> T __shfl_xor_sync(unsigned, T v, int, int = 32) { return v; }
template <class T> T __shfl_sync(unsigned, T v, int, int = 32) { return v; }
template <class T> T __shfl_down_sync(unsigned, T v, int, int = 32) { return v; }
template <class T> T __shfl_up_sync(unsigned, T v, int, int = 32) { return v; }
inline unsigned __ballot_sync(unsigned, int) { return 0; }
inline int __any_sync(unsigned, int) { return 0; }
inline int __all_sync(unsigned, int) { return 0; }
template <class T> T __ldg(const T* p) { return *p; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdividef(float a, float b) { return a / b; }
inline float __uint_as_float(unsigned u) { return 0; }
inline unsigned __float_as_uint(float) { return 0; }
inline float __int_as_float(int) { return 0; }
inline int __float_as_int(float) { return 0; }
inline double __longlong_as_double(long long) { return 0; }
inline long long __double_as_longlong(double) { return 0; }
inline int __float2int_rn(float) { return 0; }
inline unsigned __float2uint_rn(float) { return 0; }
inline float __saturatef(float x) { return x; }
inline int __clz(int) { return 0; } inline int __ffs(int) { return 0; } inline int __popc(unsigned) { return 0; }
inline float __expf(float x) { return x; } inline float __logf(float x) { return x; }
inline float rsqrtf(float x) { return x; } inline double rsqrt(double x) { return x; }
inline int atomicAdd(int*, int) { return 0; } inline unsigned atomicAdd(unsigned*, unsigned) { return 0; }
inline float atomicAdd(float*, float) { return 0; }
inline int atomicOr(int*, int) { return 0; } inline int atomicMax(int*, int) { return 0; }
inline int atomicExch(int*, int) { return 0; } inline int atomicCAS(int*, int, int) { return 0; }
inline unsigned __cvta_generic_to_shared(const void*) { return 0; }
inline long long clock64() { return 0; }
inline int min(int a, int b) { return a < b ? a : b; } inline int max(int a, int b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; } inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; } inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
#include <math.h>
using std::fma; using std::fmax; using std::fmin; using std::exp; using std::log1p; using std::sqrt; using std::fabs; using std::log; using std::expm1;
#define asm(...) ((void)0)
#define __asm__(...) ((void)0)

inline uint2 make_uint2(unsigned a, unsigned b) { return {a,b}; }
inline float __fmaf_rn(float a, float b, float c) { return a*b+c; }
inline float __fdiv_rn(float a, float b) { return a/b; }
inline float __frcp_rn(float a) { return 1/a; }
inline void __trap() {}
inline unsigned __reduce_add_sync(unsigned, unsigned v) { return v; }
inline unsigned __reduce_max_sync(unsigned, unsigned v) { return v; }
inline unsigned __reduce_or_sync(unsigned, unsigned v) { return v; }
inline unsigned __byte_perm(unsigned, unsigned, unsigned) { return 0; }
inline unsigned long long atomicAdd(unsigned long long*, unsigned long long) { return 0; }
inline unsigned __match_any_sync(unsigned, unsigned) { return 0; }
inline unsigned long long __float2ull_rn(float) { return 0; }
