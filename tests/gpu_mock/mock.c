/* The host mock of cuda.h and cublas_v2.h (tests only). Fresh "device" memory
 * is filled with 0xff bytes (NaN), so a shim that reads memory it never
 * cleared or wrote fails the comparison. cuBLAS GEMMs are column-major loops;
 * beta = 0 ignores C, as cuBLAS does. tcc_mock_launches counts refused launches. */
#include "cuda.h"
#include "cublas_v2.h"
#include <stdlib.h>
#include <string.h>

int tcc_mock_launches = 0;

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
CUresult cuMemFree(CUdeviceptr p) { free((void*)p); return CUDA_SUCCESS; }
CUresult cuMemcpyHtoD(CUdeviceptr d, const void* s, size_t n) { memcpy((void*)d, s, n); return CUDA_SUCCESS; }
CUresult cuMemcpyDtoH(void* d, CUdeviceptr s, size_t n) { memcpy(d, (const void*)s, n); return CUDA_SUCCESS; }
CUresult cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) { memset((void*)d, v, n); return CUDA_SUCCESS; }
CUresult cuLaunchKernel(CUfunction f, unsigned a, unsigned b, unsigned c, unsigned d, unsigned e, unsigned g,
                        unsigned h, CUstream s, void** p, void** x) {
    (void)f; (void)a; (void)b; (void)c; (void)d; (void)e; (void)g; (void)h; (void)s; (void)p; (void)x;
    tcc_mock_launches++;
    return 700;
}
CUresult cuCtxSynchronize(void) { return CUDA_SUCCESS; }

cublasStatus_t cublasCreate(cublasHandle_t* h) { *h = (cublasHandle_t)0; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m) { (void)h; (void)m; return CUBLAS_STATUS_SUCCESS; }

#define GEMM(NAME, T)                                                                                               \
    cublasStatus_t NAME(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,        \
                        const T* alpha, const T* A, int lda, long long sa, const T* B, int ldb, long long sb,    \
                        const T* beta, T* C, int ldc, long long sc, int batch) {                                  \
        (void)h;                                                                                                  \
        if (m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;                            \
        for (int q = 0; q < batch; q++)                                                                           \
            for (int j = 0; j < n; j++)                                                                           \
                for (int i = 0; i < m; i++) {                                                                     \
                    double acc = 0;                                                                               \
                    for (int l = 0; l < k; l++) {                                                                 \
                        T a = ta == CUBLAS_OP_N ? A[q * sa + i + (long long)l * lda] : A[q * sa + l + (long long)i * lda]; \
                        T b = tb == CUBLAS_OP_N ? B[q * sb + l + (long long)j * ldb] : B[q * sb + j + (long long)l * ldb]; \
                        acc += (double)a * (double)b;                                                             \
                    }                                                                                             \
                    T* c = &C[q * sc + i + (long long)j * ldc];                                                   \
                    *c = (T)(*alpha * acc + (*beta == 0 ? 0 : *beta * *c));                                       \
                }                                                                                                 \
        return CUBLAS_STATUS_SUCCESS;                                                                             \
    }
GEMM(cublasDgemmStridedBatched, double)
GEMM(cublasSgemmStridedBatched, float)
