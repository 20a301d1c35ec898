// mock.c: a host-memory stand-in for libcuda, NVRTC and cuBLAS, used to run
// the package's GPU tests on a machine without a GPU while developing the Go
// plumbing (it checks, for instance, that every driver call is made with the
// context current on the calling thread). It is not part of CI. Usage:
//
//	gcc -O2 -shared -fPIC -o /tmp/mock/libmock.so mock.c -lm
//	for n in libcuda.so.1 libnvrtc.so.13 libcublas.so.13; do ln -sf libmock.so /tmp/mock/$n; done
//	REPLAYSSM_CUDA_PATH=/tmp/mock go test -short ./backend/cuda
//
// "Kernels" are C functions chosen by name; TestCopyBandwidth fails (a CPU
// copy is not a GPU copy).
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <math.h>
#include <time.h>
#include <pthread.h>

typedef int CUresult;
typedef unsigned long long u64;
static __thread void *current_ctx;
static int primary_ctx_token;
static int primary_refs;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

#define NEED_CTX() do { if (current_ctx != &primary_ctx_token) { fprintf(stderr, "mock: %s without context\n", __func__); return 201; } } while (0)

static double now_ms(void) { struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts); return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6; }

CUresult cuGetErrorName(CUresult e, const char **s) {
  switch (e) {
  case 0: *s = "CUDA_SUCCESS"; return 0;
  case 1: *s = "CUDA_ERROR_INVALID_VALUE"; return 0;
  case 2: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
  case 200: *s = "CUDA_ERROR_INVALID_IMAGE"; return 0;
  case 201: *s = "CUDA_ERROR_INVALID_CONTEXT"; return 0;
  case 500: *s = "CUDA_ERROR_NOT_FOUND"; return 0;
  case 900: *s = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"; return 0;
  }
  return 1;
}
CUresult cuInit(unsigned f) { return f ? 1 : 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGet(int *d, int ord) { if (ord != 0) return 101; *d = 0; return 0; }
CUresult cuDeviceGetName(char *name, int len, int dev) { snprintf(name, len, "Mock GPU"); return 0; }
CUresult cuDeviceTotalMem_v2(size_t *b, int dev) { *b = 80ull << 30; return 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  switch (attr) {
  case 75: *v = 9; break; case 76: *v = 0; break; case 16: *v = 132; break;
  case 38: *v = 50 << 20; break; case 97: *v = 227 << 10; break; default: *v = 1;
  }
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) { pthread_mutex_lock(&mu); primary_refs++; pthread_mutex_unlock(&mu); *ctx = &primary_ctx_token; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { pthread_mutex_lock(&mu); primary_refs--; pthread_mutex_unlock(&mu); return primary_refs < 0 ? 1 : 0; }
CUresult cuCtxSetCurrent(void *ctx) { current_ctx = ctx; return 0; }
CUresult cuCtxSynchronize(void) { NEED_CTX(); return 0; }
CUresult cuMemGetInfo_v2(size_t *f, size_t *t) { NEED_CTX(); *f = 70ull << 30; *t = 80ull << 30; return 0; }
CUresult cuMemAlloc_v2(u64 *p, size_t n) {
  NEED_CTX();
  if (n == 0) return 1;
  if (n > (64ull << 30)) return 2;
  void *m = malloc(n + 256);
  if (!m) return 2;
  memset(m, 0xCD, n);
  *p = (u64)m;
  return 0;
}
CUresult cuMemFree_v2(u64 p) { NEED_CTX(); free((void *)p); return 0; }
CUresult cuMemHostAlloc(void **p, size_t n, unsigned f) { NEED_CTX(); return posix_memalign(p, 4096, n) ? 2 : 0; }
CUresult cuMemFreeHost(void *p) { NEED_CTX(); free(p); return 0; }
CUresult cuMemcpyHtoD_v2(u64 d, const void *s, size_t n) { NEED_CTX(); memcpy((void *)d, s, n); return 0; }
CUresult cuMemcpyDtoH_v2(void *d, u64 s, size_t n) { NEED_CTX(); memcpy(d, (void *)s, n); return 0; }
CUresult cuMemcpyDtoD_v2(u64 d, u64 s, size_t n) { NEED_CTX(); memmove((void *)d, (void *)s, n); return 0; }
CUresult cuMemsetD8_v2(u64 d, unsigned char v, size_t n) { NEED_CTX(); memset((void *)d, v, n); return 0; }
CUresult cuMemsetD32_v2(u64 d, unsigned v, size_t n) { NEED_CTX(); unsigned *p = (unsigned *)d; for (size_t i = 0; i < n; i++) p[i] = v; return 0; }

// ---- streams, ops, graphs
enum { OP_KERNEL, OP_COPY, OP_MEMSET32, OP_EVENT, OP_GEMM };
typedef struct { int kind; u64 a, b, c; unsigned char params[16][32]; int fn; void *ev; void *gemm; } op_t;
typedef struct { int capturing; op_t *ops; int nops; } stream_t;
typedef struct { op_t *ops; int nops; } graph_t;
typedef struct { double t; } event_t;
static stream_t default_stream;
static stream_t *S(void *h) { return h ? (stream_t *)h : &default_stream; }

static void exec_op(op_t *op);
static CUresult submit(void *h, op_t *op) {
  stream_t *s = S(h);
  if (s->capturing) {
    s->ops = realloc(s->ops, sizeof(op_t) * (s->nops + 1));
    s->ops[s->nops++] = *op;
    return 0;
  }
  exec_op(op);
  return 0;
}
CUresult cuStreamCreate(void **s, unsigned flags) { NEED_CTX(); if (flags != 1) return 1; *s = calloc(1, sizeof(stream_t)); return 0; }
CUresult cuStreamDestroy_v2(void *s) { NEED_CTX(); free(s); return 0; }
CUresult cuStreamSynchronize(void *s) { NEED_CTX(); return S(s)->capturing ? 900 : 0; }
CUresult cuStreamWaitEvent(void *s, void *e, unsigned f) { NEED_CTX(); return 0; }
CUresult cuMemcpyDtoDAsync_v2(u64 d, u64 s, size_t n, void *st) { NEED_CTX(); op_t op = {.kind = OP_COPY, .a = d, .b = s, .c = n}; return submit(st, &op); }
CUresult cuMemcpyHtoDAsync_v2(u64 d, const void *s, size_t n, void *st) { NEED_CTX(); memcpy((void *)d, s, n); return 0; }
CUresult cuMemcpyDtoHAsync_v2(void *d, u64 s, size_t n, void *st) { NEED_CTX(); memcpy(d, (void *)s, n); return 0; }
CUresult cuMemsetD8Async(u64 d, unsigned char v, size_t n, void *st) { NEED_CTX(); memset((void *)d, v, n); return 0; }
CUresult cuMemsetD32Async(u64 d, unsigned v, size_t n, void *st) { NEED_CTX(); op_t op = {.kind = OP_MEMSET32, .a = d, .b = v, .c = n}; return submit(st, &op); }
CUresult cuEventCreate(void **e, unsigned f) { NEED_CTX(); *e = calloc(1, sizeof(event_t)); return 0; }
CUresult cuEventDestroy_v2(void *e) { NEED_CTX(); free(e); return 0; }
CUresult cuEventRecord(void *e, void *st) { NEED_CTX(); op_t op = {.kind = OP_EVENT, .ev = e}; return submit(st, &op); }
CUresult cuEventSynchronize(void *e) { NEED_CTX(); return 0; }
CUresult cuEventElapsedTime_v2(float *ms, void *a, void *b) { NEED_CTX(); *ms = (float)(((event_t *)b)->t - ((event_t *)a)->t); return 0; }
CUresult cuStreamBeginCapture_v2(void *st, int mode) { NEED_CTX(); if (!st || mode != 2) return 1; stream_t *s = S(st); s->capturing = 1; s->ops = NULL; s->nops = 0; return 0; }
CUresult cuStreamEndCapture(void *st, void **g) { NEED_CTX(); stream_t *s = S(st); if (!s->capturing) return 1; graph_t *gr = calloc(1, sizeof(graph_t)); gr->ops = s->ops; gr->nops = s->nops; s->capturing = 0; s->ops = NULL; s->nops = 0; *g = gr; return 0; }
CUresult cuGraphInstantiateWithFlags(void **x, void *g, unsigned long long f) {
  NEED_CTX(); graph_t *src = g, *dst = calloc(1, sizeof(graph_t));
  dst->ops = malloc(sizeof(op_t) * (src->nops + 1)); memcpy(dst->ops, src->ops, sizeof(op_t) * src->nops); dst->nops = src->nops; *x = dst; return 0;
}
CUresult cuGraphLaunch(void *x, void *st) { NEED_CTX(); graph_t *g = x; for (int i = 0; i < g->nops; i++) { CUresult r = submit(st, &g->ops[i]); if (r) return r; } return 0; }
CUresult cuGraphUpload(void *x, void *st) { NEED_CTX(); return 0; }
CUresult cuGraphDestroy(void *g) { NEED_CTX(); free(((graph_t *)g)->ops); free(g); return 0; }
CUresult cuGraphExecDestroy(void *g) { NEED_CTX(); free(((graph_t *)g)->ops); free(g); return 0; }

// ---- modules and kernels
typedef struct { char *src; } module_t;
static const char *kernel_names[] = {"saxpy_f32", "fill_f32", "fill_uniform_f32", "fill_uniform_bf16", "copy16", "probe", "spin", "empty", 0};
// parameter sizes per kernel (0 terminates)
static const int kernel_params[][16] = {
  {8, 8, 4, 8}, {8, 4, 8}, {8, 8, 4, 4, 4}, {8, 8, 4, 4, 4}, {8, 8, 8},
  {8, 4, 4, 8, 8, 4, 8, 24, 4, 16, 8}, {8, 8}, {4},
};
typedef struct { int idx; } function_t;
CUresult cuModuleLoadData(void **m, const void *image) {
  NEED_CTX();
  if (strncmp(image, "MOCKCUBIN\n", 10) != 0) return 200;
  module_t *mod = calloc(1, sizeof(module_t)); mod->src = strdup((const char *)image + 10); *m = mod; return 0;
}
CUresult cuModuleUnload(void *m) { NEED_CTX(); free(((module_t *)m)->src); free(m); return 0; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
  NEED_CTX();
  module_t *mod = m;
  char pat[128]; snprintf(pat, sizeof pat, "%s(", name);
  if (!strstr(mod->src, pat)) return 500;
  for (int i = 0; kernel_names[i]; i++) if (!strcmp(kernel_names[i], name)) { function_t *fn = malloc(sizeof *fn); fn->idx = i; *f = fn; return 0; }
  return 500;
}
// The mock's modules define no globals.
CUresult cuModuleGetGlobal_v2(u64 *dptr, size_t *bytes, void *m, const char *name) { NEED_CTX(); return 500; }
CUresult cuFuncGetAttribute(int *v, int attr, void *f) { NEED_CTX(); int vals[] = {1024, 0, 0, 0, 32, 90, 90}; *v = vals[attr]; return 0; }
CUresult cuFuncSetAttribute(void *f, int attr, int v) { NEED_CTX(); return 0; }

static unsigned hash32(unsigned x) { x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16; return x; }
static float uniform_at(unsigned seed, u64 i, float lo, float hi) {
  unsigned h = hash32((unsigned)i ^ hash32(seed + (unsigned)(i >> 32)));
  volatile float u = (float)(h >> 8) * (1.0f / 16777216.0f);
  volatile float p = (hi - lo) * u;
  return lo + p;
}
#define P(T, i) (*(T *)op->params[i])
static void exec_op(op_t *op) {
  switch (op->kind) {
  case OP_COPY: memmove((void *)op->a, (void *)op->b, op->c); return;
  case OP_MEMSET32: { unsigned *p = (unsigned *)op->a; for (u64 i = 0; i < op->c; i++) p[i] = (unsigned)op->b; return; }
  case OP_EVENT: ((event_t *)op->ev)->t = now_ms(); return;
  case OP_GEMM: { extern void exec_gemm(void *); exec_gemm(op->gemm); return; }
  }
  switch (op->fn) {
  case 0: { float *y = P(float *, 0); const float *x = P(float *, 1); float a = P(float, 2); u64 n = P(u64, 3); for (u64 i = 0; i < n; i++) y[i] = fmaf(a, x[i], y[i]); return; }
  case 1: { float *d = P(float *, 0); float v = P(float, 1); u64 n = P(u64, 2); for (u64 i = 0; i < n; i++) d[i] = v; return; }
  case 2: { float *d = P(float *, 0); u64 n = P(u64, 1); for (u64 i = 0; i < n; i++) d[i] = uniform_at(P(unsigned, 2), i, P(float, 3), P(float, 4)); return; }
  case 3: { unsigned short *d = P(unsigned short *, 0); u64 n = P(u64, 1);
    for (u64 i = 0; i < n; i++) { float f = uniform_at(P(unsigned, 2), i, P(float, 3), P(float, 4)); unsigned b; memcpy(&b, &f, 4); d[i] = (unsigned short)((b + 0x7fffU + ((b >> 16) & 1U)) >> 16); } return; }
  case 4: { memcpy(P(void *, 0), P(void *, 1), 16 * P(u64, 2)); return; }
  case 5: {
    u64 *out = P(u64 *, 0);
    out[0] = (u64)(long long)P(int, 1); out[1] = P(unsigned, 2); out[2] = (u64)P(long long, 3); out[3] = P(u64, 4);
    unsigned fb; memcpy(&fb, op->params[5], 4); out[4] = fb; memcpy(&out[5], op->params[6], 8);
    const unsigned char *blob = op->params[7];
    int ba; memcpy(&ba, blob, 4); out[6] = (u64)(long long)ba; unsigned bb; memcpy(&bb, blob + 4, 4); out[7] = bb; memcpy(&out[8], blob + 8, 8); memcpy(&out[9], blob + 16, 8);
    out[10] = (u64)(long long)P(int, 8);
    unsigned q[4]; memcpy(q, op->params[9], 16); out[11] = ((u64)q[1] << 32) | q[0]; out[12] = ((u64)q[3] << 32) | q[2];
    out[13] = P(u64, 10); float pv = *P(float *, 10); memcpy(&fb, &pv, 4); out[14] = fb; return;
  }
  case 6: { u64 ns = P(u64, 0); double t0 = now_ms(); while ((now_ms() - t0) * 1e6 < ns) {} *P(u64 *, 1) = ns; return; }
  case 7: return;
  }
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *st, void **params, void **extra) {
  NEED_CTX();
  if (!gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024 || extra) return 1;
  function_t *fn = f;
  op_t op = {.kind = OP_KERNEL, .fn = fn->idx};
  for (int i = 0; i < 16 && kernel_params[fn->idx][i]; i++) memcpy(op.params[i], params[i], kernel_params[fn->idx][i]);
  return submit(st, &op);
}

// ---- NVRTC
typedef struct { char *src; char *log; } prog_t;
int nvrtcVersion(int *ma, int *mi) { *ma = 13; *mi = 0; return 0; }
const char *nvrtcGetErrorString(int r) { return r == 6 ? "NVRTC_ERROR_COMPILATION" : r == 0 ? "NVRTC_SUCCESS" : "NVRTC_ERROR_OTHER"; }
int nvrtcGetNumSupportedArchs(int *n) { *n = 4; return 0; }
int nvrtcGetSupportedArchs(int *a) { a[0] = 75; a[1] = 80; a[2] = 89; a[3] = 90; return 0; }
int nvrtcCreateProgram(void **p, const char *src, const char *name, int nh, const char **h, const char **hn) {
  prog_t *pr = calloc(1, sizeof *pr); pr->src = strdup(src); *p = pr; return 0;
}
int nvrtcCompileProgram(void *p, int n, const char **opts) {
  prog_t *pr = p;
  int arch = 0;
  for (int i = 0; i < n; i++) if (!strncmp(opts[i], "--gpu-architecture=sm_90", 24)) arch = 1;
  if (!arch) { pr->log = strdup("mock: missing --gpu-architecture=sm_90"); return 7; }
  char *u = strstr(pr->src, "undefined_thing");
  if (u) { char buf[256]; snprintf(buf, sizeof buf, "bad.cu(1): error: identifier \"%.18s\" is undefined\n\n1 error detected in the compilation of \"bad.cu\".\n", u); pr->log = strdup(buf); return 6; }
  pr->log = strdup("");
  return 0;
}
int nvrtcGetProgramLogSize(void *p, size_t *n) { *n = strlen(((prog_t *)p)->log) + 1; return 0; }
int nvrtcGetProgramLog(void *p, char *l) { strcpy(l, ((prog_t *)p)->log); return 0; }
int nvrtcGetCUBINSize(void *p, size_t *n) { *n = strlen(((prog_t *)p)->src) + 11; return 0; }
int nvrtcGetCUBIN(void *p, char *b) { strcpy(b, "MOCKCUBIN\n"); strcat(b, ((prog_t *)p)->src); return 0; }
int nvrtcGetPTXSize(void *p, size_t *n) { return 7; }
int nvrtcGetPTX(void *p, char *b) { return 7; }
int nvrtcDestroyProgram(void **p) { prog_t *pr = *p; free(pr->src); free(pr->log); free(pr); *p = 0; return 0; }

// ---- cuBLAS
typedef struct { void *stream; void *ws; size_t wsn; } blas_t;
typedef struct { int ta, tb, m, n, k; float alpha, beta; const void *A; int at, lda; const void *B; int bt, ldb; void *C; int ct, ldc; } gemm_t;
int cublasCreate_v2(void **h) { if (current_ctx != &primary_ctx_token) return 1; *h = calloc(1, sizeof(blas_t)); return 0; }
int cublasDestroy_v2(void *h) { free(h); return 0; }
int cublasSetStream_v2(void *h, void *s) { ((blas_t *)h)->stream = s; ((blas_t *)h)->ws = 0; return 0; }
int cublasSetWorkspace_v2(void *h, void *w, size_t n) { ((blas_t *)h)->ws = w; ((blas_t *)h)->wsn = n; return 0; }
int cublasGetVersion_v2(void *h, int *v) { *v = 130000; return 0; }
const char *cublasGetStatusName(int s) { return s == 7 ? "CUBLAS_STATUS_INVALID_VALUE" : s == 0 ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_OTHER"; }
static double ld(const void *p, int t, size_t i) {
  if (t == 0) return ((const float *)p)[i];
  unsigned b = (unsigned)((const unsigned short *)p)[i] << 16; float f; memcpy(&f, &b, 4); return f;
}
void exec_gemm(void *gp) {
  gemm_t *g = gp;
  for (int j = 0; j < g->n; j++) for (int i = 0; i < g->m; i++) {
    float s = 0;
    for (int l = 0; l < g->k; l++) {
      double a = g->ta ? ld(g->A, g->at, l + (size_t)i * g->lda) : ld(g->A, g->at, i + (size_t)l * g->lda);
      double b = g->tb ? ld(g->B, g->bt, j + (size_t)l * g->ldb) : ld(g->B, g->bt, l + (size_t)j * g->ldb);
      s += (float)a * (float)b;
    }
    size_t ci = i + (size_t)j * g->ldc;
    float old = g->beta != 0 ? (float)ld(g->C, g->ct, ci) : 0;
    float v = g->alpha * s + g->beta * old;
    if (g->ct == 0) ((float *)g->C)[ci] = v;
    else { unsigned b; memcpy(&b, &v, 4); ((unsigned short *)g->C)[ci] = (unsigned short)((b + 0x7fffU + ((b >> 16) & 1U)) >> 16); }
  }
}
int cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha, const void *A, int at, int lda,
                 const void *B, int bt, int ldb, const void *beta, void *C, int ct, int ldc, int compute, int algo) {
  if (current_ctx != &primary_ctx_token) return 1;
  blas_t *bl = h;
  if (!bl->ws || algo != -1 || (compute != 68 && compute != 77)) return 7;
  if (lda < (ta ? k : m) || ldb < (tb ? n : k) || ldc < m) return 7;
  gemm_t *g = malloc(sizeof *g);
  *g = (gemm_t){ta, tb, m, n, k, *(const float *)alpha, *(const float *)beta, A, at, lda, B, bt, ldb, C, ct, ldc};
  op_t op = {.kind = OP_GEMM, .gemm = g};
  return submit(bl->stream, &op);
}
