/* A host mock of the CUDA driver API calls the tcc C shim makes (tests only):
 * device memory is host memory, copies are memcpy, kernel launches fail (the
 * mock runs no PTX), so a shim whose plan is cuBLAS calls and memsets runs
 * here without a GPU (tests/complex.rs, tests/gpu.rs). Work issued to a created
 * stream is queued and run later, in an order drawn at random among those the
 * streams and events allow (see mock.c). Declarations as the real header's. */
#ifndef TCC_MOCK_CUDA_H
#define TCC_MOCK_CUDA_H
#include <stddef.h>
typedef int CUresult;
#define CUDA_SUCCESS 0
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
#define CU_STREAM_DEFAULT 0
#define CU_EVENT_DISABLE_TIMING 2
typedef unsigned long long CUdeviceptr;
CUresult cuInit(unsigned);
CUresult cuDeviceGet(CUdevice*, int);
CUresult cuDevicePrimaryCtxRetain(CUcontext*, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuModuleLoadData(CUmodule*, const void*);
CUresult cuModuleGetFunction(CUfunction*, CUmodule, const char*);
CUresult cuGetErrorString(CUresult, const char**);
CUresult cuMemAlloc(CUdeviceptr*, size_t);
CUresult cuMemFree(CUdeviceptr);
CUresult cuMemcpyHtoD(CUdeviceptr, const void*, size_t);
CUresult cuMemcpyDtoH(void*, CUdeviceptr, size_t);
CUresult cuMemsetD8(CUdeviceptr, unsigned char, size_t);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void**, void**);
CUresult cuCtxSynchronize(void);
CUresult cuMemsetD8Async(CUdeviceptr, unsigned char, size_t, CUstream);
CUresult cuStreamCreate(CUstream*, unsigned);
CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned);
CUresult cuEventCreate(CUevent*, unsigned);
CUresult cuEventRecord(CUevent, CUstream);
CUresult cuEventDestroy(CUevent);
#endif
