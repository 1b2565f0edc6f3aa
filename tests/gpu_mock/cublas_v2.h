/* A host mock of the cuBLAS calls the tcc C shim makes (tests only; see cuda.h). */
#ifndef TCC_MOCK_CUBLAS_H
#define TCC_MOCK_CUBLAS_H
#include "cuda.h"
typedef struct cublasContext* cublasHandle_t;
typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum {
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_TENSOR_OP_MATH = 1,
    CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3
} cublasMath_t;
cublasStatus_t cublasCreate(cublasHandle_t*);
cublasStatus_t cublasSetStream(cublasHandle_t, CUstream);
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t);
cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                         const double*, const double*, int, long long, const double*, int, long long,
                                         const double*, double*, int, long long, int);
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                         const float*, const float*, int, long long, const float*, int, long long,
                                         const float*, float*, int, long long, int);
#endif
