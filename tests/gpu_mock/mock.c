/* The host mock of cuda.h and cublas_v2.h (tests only). Fresh "device" memory
 * is filled with 0xff bytes (NaN), so a shim that reads memory it never
 * cleared or wrote fails the comparison. cuBLAS GEMMs are column-major loops;
 * beta = 0 ignores C, as cuBLAS does. tcc_mock_launches counts refused launches.
 *
 * Streams: work on the null stream runs at once, after all queued work (the
 * legacy null stream waits for blocking streams). Work on a created stream
 * (memsets, GEMMs on a handle set to it, event records and waits) is queued;
 * whatever must see its results (a copy, cuCtxSynchronize, cuMemFree, null
 * stream work) first runs every queue dry, one operation at a time, taking the
 * next from a stream drawn at random (seed tcc_mock_seed) among those whose
 * first operation may run: a wait may run once the event's last record before
 * it has run. So a shim that forgets a wait between two streams reads results
 * that are not there yet for some seed. tcc_mock_streams counts created
 * streams, tcc_mock_waits waits, tcc_mock_choices draws among two or more
 * streams (how often the order was open). */
#include "cuda.h"
#include "cublas_v2.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tcc_mock_launches = 0;
unsigned tcc_mock_seed = 1;
int tcc_mock_streams = 0;
int tcc_mock_waits = 0;
int tcc_mock_choices = 0;

enum { OP_GEMM_D, OP_GEMM_S, OP_MEMSET, OP_RECORD, OP_WAIT };
typedef struct {
    int kind;
    int ta, tb, m, n, k, lda, ldb, ldc, batch;
    long long sa, sb, sc;
    double alpha, beta;
    const void *a, *b;
    void* c;
    void* dst;
    unsigned char v;
    size_t bytes;
    CUevent ev;
    unsigned gen;
} op_t;
struct CUstream_st {
    op_t* q;
    size_t head, len, cap;
};
struct CUevent_st {
    unsigned recorded; /* records issued */
    unsigned done;     /* the last record that ran */
};
struct cublasContext {
    CUstream stream;
};
#define MAX_STREAMS 64
static CUstream streams_[MAX_STREAMS];
static unsigned long long rng_;
static unsigned rng_seed_ = 0;

static unsigned draw(unsigned n) {
    if (rng_seed_ != tcc_mock_seed) rng_ = rng_seed_ = tcc_mock_seed;
    rng_ = rng_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return (unsigned)(rng_ >> 33) % n;
}

#define GEMM_LOOP(T)                                                                                           \
    do {                                                                                                       \
        const T *A = (const T*)o->a, *B = (const T*)o->b;                                                      \
        T* C = (T*)o->c;                                                                                       \
        for (int q = 0; q < o->batch; q++)                                                                     \
            for (int j = 0; j < o->n; j++)                                                                     \
                for (int i = 0; i < o->m; i++) {                                                               \
                    double acc = 0;                                                                            \
                    for (int l = 0; l < o->k; l++) {                                                           \
                        T x = o->ta == CUBLAS_OP_N ? A[q * o->sa + i + (long long)l * o->lda]                  \
                                                   : A[q * o->sa + l + (long long)i * o->lda];                 \
                        T y = o->tb == CUBLAS_OP_N ? B[q * o->sb + l + (long long)j * o->ldb]                  \
                                                   : B[q * o->sb + j + (long long)l * o->ldb];                 \
                        acc += (double)x * (double)y;                                                          \
                    }                                                                                          \
                    T* c = &C[q * o->sc + i + (long long)j * o->ldc];                                          \
                    *c = (T)(o->alpha * acc + (o->beta == 0 ? 0 : o->beta * *c));                              \
                }                                                                                              \
    } while (0)

static void run_op(const op_t* o) {
    switch (o->kind) {
    case OP_GEMM_D: GEMM_LOOP(double); break;
    case OP_GEMM_S: GEMM_LOOP(float); break;
    case OP_MEMSET: memset(o->dst, o->v, o->bytes); break;
    case OP_RECORD: o->ev->done = o->gen; break;
    case OP_WAIT: break;
    }
}

static int may_run(const op_t* o) { return o->kind != OP_WAIT || o->ev->done >= o->gen; }

/* Runs every queue dry in a random order the streams and events allow. */
static void drain(void) {
    for (;;) {
        int open[MAX_STREAMS], n = 0, pending = 0;
        for (int i = 0; i < tcc_mock_streams; i++) {
            CUstream s = streams_[i];
            if (s->head < s->len) {
                pending = 1;
                if (may_run(&s->q[s->head])) open[n++] = i;
            }
        }
        if (!pending) break;
        if (n == 0) {
            fprintf(stderr, "mock: every stream waits for an event that no queued record fires\n");
            abort();
        }
        if (n > 1) tcc_mock_choices++;
        CUstream s = streams_[open[draw((unsigned)n)]];
        run_op(&s->q[s->head++]);
    }
    for (int i = 0; i < tcc_mock_streams; i++) streams_[i]->head = streams_[i]->len = 0;
}

static CUresult issue(CUstream s, op_t o) {
    if (!s) {
        drain();
        run_op(&o);
        return CUDA_SUCCESS;
    }
    if (s->len == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        op_t* q = realloc(s->q, cap * sizeof *q);
        if (!q) return 2;
        s->q = q;
        s->cap = cap;
    }
    s->q[s->len++] = o;
    return CUDA_SUCCESS;
}

CUresult cuInit(unsigned f) { (void)f; return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice* d, int k) { *d = k; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) { (void)d; *c = (CUcontext)0; return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext c) { (void)c; return CUDA_SUCCESS; }
CUresult cuModuleLoadData(CUmodule* m, const void* ptx) { *m = (CUmodule)0; return ptx ? CUDA_SUCCESS : 1; }
CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
    (void)m;
    *f = (CUfunction)name;
    return CUDA_SUCCESS;
}
CUresult cuGetErrorString(CUresult e, const char** s) {
    *s = e == 700 ? "kernel launches are not emulated by the mock" : "mock error";
    return CUDA_SUCCESS;
}
CUresult cuMemAlloc(CUdeviceptr* p, size_t n) {
    void* q = malloc(n);
    if (!q) return 2;
    memset(q, 0xff, n);
    *p = (CUdeviceptr)q;
    return CUDA_SUCCESS;
}
CUresult cuMemFree(CUdeviceptr p) { drain(); free((void*)p); return CUDA_SUCCESS; }
CUresult cuMemcpyHtoD(CUdeviceptr d, const void* s, size_t n) { drain(); memcpy((void*)d, s, n); return CUDA_SUCCESS; }
CUresult cuMemcpyDtoH(void* d, CUdeviceptr s, size_t n) { drain(); memcpy(d, (const void*)s, n); return CUDA_SUCCESS; }
CUresult cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) { return cuMemsetD8Async(d, v, n, NULL); }
CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
    op_t o = {0};
    o.kind = OP_MEMSET;
    o.dst = (void*)d;
    o.v = v;
    o.bytes = n;
    return issue(s, o);
}
CUresult cuLaunchKernel(CUfunction f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g,
                        unsigned h, CUstream s, void** p, void** x) {
    (void)f; (void)a; (void)b; (void)c; (void)d; (void)e; (void)g; (void)h; (void)s; (void)p; (void)x;
    tcc_mock_launches++;
    return 700;
}
CUresult cuCtxSynchronize(void) { drain(); return CUDA_SUCCESS; }
CUresult cuStreamCreate(CUstream* s, unsigned flags) {
    (void)flags;
    if (tcc_mock_streams == MAX_STREAMS) return 2;
    CUstream t = calloc(1, sizeof *t);
    if (!t) return 2;
    streams_[tcc_mock_streams++] = t;
    *s = t;
    return CUDA_SUCCESS;
}
CUresult cuEventCreate(CUevent* e, unsigned flags) {
    (void)flags;
    *e = calloc(1, sizeof **e);
    return *e ? CUDA_SUCCESS : 2;
}
CUresult cuEventDestroy(CUevent e) { drain(); free(e); return CUDA_SUCCESS; }
CUresult cuEventRecord(CUevent e, CUstream s) {
    op_t o = {0};
    o.kind = OP_RECORD;
    o.ev = e;
    o.gen = ++e->recorded;
    return issue(s, o);
}
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
    (void)flags;
    op_t o = {0};
    o.kind = OP_WAIT;
    o.ev = e;
    o.gen = e->recorded;
    tcc_mock_waits++;
    return issue(s, o);
}

cublasStatus_t cublasCreate(cublasHandle_t* h) {
    *h = calloc(1, sizeof **h);
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, CUstream s) { h->stream = s; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) { (void)h; (void)m; return CUBLAS_STATUS_SUCCESS; }

#define GEMM(NAME, T, KIND)                                                                                         \
    cublasStatus_t NAME(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,        \
                        const T* alpha, const T* A, int lda, long long sa, const T* B, int ldb, long long sb,    \
                        const T* beta, T* C, int ldc, long long sc, int batch) {                                  \
        if (m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;                            \
        op_t o = {0};                                                                                             \
        o.kind = KIND;                                                                                            \
        o.ta = ta, o.tb = tb, o.m = m, o.n = n, o.k = k, o.lda = lda, o.ldb = ldb, o.ldc = ldc, o.batch = batch;  \
        o.sa = sa, o.sb = sb, o.sc = sc, o.alpha = *alpha, o.beta = *beta, o.a = A, o.b = B, o.c = C;             \
        return issue(h->stream, o) == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;        \
    }
GEMM(cublasDgemmStridedBatched, double, OP_GEMM_D)
GEMM(cublasSgemmStridedBatched, float, OP_GEMM_S)
