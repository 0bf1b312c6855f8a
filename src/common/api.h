/* The traced CUDA API: one table shared by the BPF programs and userspace.
 * Each row says where a call's arguments live, so one entry and one exit program
 * decode every API; the attach cookie carries the row index. */
#ifndef GPUSCOPE_COMMON_API_H
#define GPUSCOPE_COMMON_API_H

enum gs_layer { GS_LAYER_RUNTIME = 0, GS_LAYER_DRIVER = 1, GS_LAYER_COUNT = 2 };

enum gs_special {
	GS_SP_NONE,
	GS_SP_RT_LAUNCH,    /* cudaLaunchKernel(func, dim3 grid, dim3 block, args, smem, stream) */
	GS_SP_RT_LAUNCH_EX, /* cudaLaunchKernelExC(const cudaLaunchConfig_t *, func, args) */
	GS_SP_CU_LAUNCH,    /* cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra) */
	GS_SP_CU_LAUNCH_EX, /* cuLaunchKernelEx(const CUlaunchConfig *, f, params, extra) */
	GS_SP_CAPTURE_BEGIN,
	GS_SP_CAPTURE_END,
};

/* Where the value behind the out-pointer argument goes when the call returns. */
enum gs_out { GS_OUT_NONE, GS_OUT_PTR, GS_OUT_STREAM, GS_OUT_EVENT, GS_OUT_GRAPH, GS_OUT_HANDLE, GS_OUT_DEVICE };

/* Argument positions are stored +1 so that 0 means "absent". */
#define A(i) ((i) + 1)

struct gs_api_desc {
	unsigned char layer, special, out, outp;
	unsigned char size, ptr, dst, src, kind, stream, event, graph, handle, device;
	unsigned char kind_fixed; /* cudaMemcpyKind + 1 for driver copies, whose direction is in the name */
	unsigned char pad;
};

#define RT GS_LAYER_RUNTIME
#define DRV GS_LAYER_DRIVER
/* X(enum id, symbol, designated initializers) */
#define GS_APIS(X)                                                                                   \
	X(CUDA_MALLOC, cudaMalloc, .layer = RT, .out = GS_OUT_PTR, .outp = A(0), .size = A(1)) \
	X(CUDA_MALLOC_MANAGED, cudaMallocManaged, .layer = RT, .out = GS_OUT_PTR, .outp = A(0), .size = A(1)) \
	X(CUDA_MALLOC_ASYNC, cudaMallocAsync, .layer = RT, .out = GS_OUT_PTR, .outp = A(0), .size = A(1), .stream = A(2)) \
	X(CUDA_FREE, cudaFree, .layer = RT, .ptr = A(0)) \
	X(CUDA_FREE_ASYNC, cudaFreeAsync, .layer = RT, .ptr = A(0), .stream = A(1)) \
	X(CUDA_MEMCPY, cudaMemcpy, .layer = RT, .size = A(2), .dst = A(0), .src = A(1), .kind = A(3)) \
	X(CUDA_MEMCPY_ASYNC, cudaMemcpyAsync, .layer = RT, .size = A(2), .dst = A(0), .src = A(1), .kind = A(3), .stream = A(4)) \
	X(CUDA_MEMSET, cudaMemset, .layer = RT, .size = A(2), .ptr = A(0)) \
	X(CUDA_LAUNCH_KERNEL, cudaLaunchKernel, .layer = RT, .special = GS_SP_RT_LAUNCH) \
	X(CUDA_LAUNCH_KERNEL_EXC, cudaLaunchKernelExC, .layer = RT, .special = GS_SP_RT_LAUNCH_EX) \
	X(CUDA_GRAPH_LAUNCH, cudaGraphLaunch, .layer = RT, .stream = A(1), .graph = A(0)) \
	X(CUDA_GRAPH_INSTANTIATE, cudaGraphInstantiate, .layer = RT, .out = GS_OUT_GRAPH, .outp = A(0), .graph = A(1)) \
	X(CUDA_STREAM_BEGIN_CAPTURE, cudaStreamBeginCapture, .layer = RT, .special = GS_SP_CAPTURE_BEGIN, .stream = A(0)) \
	X(CUDA_STREAM_END_CAPTURE, cudaStreamEndCapture, .layer = RT, .special = GS_SP_CAPTURE_END, .out = GS_OUT_GRAPH, .outp = A(1), .stream = A(0)) \
	X(CUDA_STREAM_CREATE, cudaStreamCreate, .layer = RT, .out = GS_OUT_STREAM, .outp = A(0)) \
	X(CUDA_STREAM_SYNCHRONIZE, cudaStreamSynchronize, .layer = RT, .stream = A(0)) \
	X(CUDA_EVENT_CREATE, cudaEventCreate, .layer = RT, .out = GS_OUT_EVENT, .outp = A(0)) \
	X(CUDA_EVENT_RECORD, cudaEventRecord, .layer = RT, .stream = A(1), .event = A(0)) \
	X(CUDA_EVENT_SYNCHRONIZE, cudaEventSynchronize, .layer = RT, .event = A(0)) \
	X(CUDA_DEVICE_SYNCHRONIZE, cudaDeviceSynchronize, .layer = RT) \
	X(CUDA_GET_DEVICE, cudaGetDevice, .layer = RT, .out = GS_OUT_DEVICE, .outp = A(0)) \
	X(CUDA_SET_DEVICE, cudaSetDevice, .layer = RT, .device = A(0)) \
	X(CU_LAUNCH_KERNEL, cuLaunchKernel, .layer = DRV, .special = GS_SP_CU_LAUNCH) \
	X(CU_LAUNCH_KERNEL_EX, cuLaunchKernelEx, .layer = DRV, .special = GS_SP_CU_LAUNCH_EX) \
	X(CU_GRAPH_LAUNCH, cuGraphLaunch, .layer = DRV, .stream = A(1), .graph = A(0)) \
	X(CU_GRAPH_INSTANTIATE_WITH_FLAGS, cuGraphInstantiateWithFlags, .layer = DRV, .out = GS_OUT_GRAPH, .outp = A(0), .graph = A(1)) \
	X(CU_STREAM_BEGIN_CAPTURE, cuStreamBeginCapture_v2, .layer = DRV, .special = GS_SP_CAPTURE_BEGIN, .stream = A(0)) \
	X(CU_STREAM_END_CAPTURE, cuStreamEndCapture, .layer = DRV, .special = GS_SP_CAPTURE_END, .out = GS_OUT_GRAPH, .outp = A(1), .stream = A(0)) \
	X(CU_MEM_ALLOC, cuMemAlloc_v2, .layer = DRV, .out = GS_OUT_PTR, .outp = A(0), .size = A(1)) \
	X(CU_MEM_ALLOC_ASYNC, cuMemAllocAsync, .layer = DRV, .out = GS_OUT_PTR, .outp = A(0), .size = A(1), .stream = A(2)) \
	X(CU_MEM_FREE, cuMemFree_v2, .layer = DRV, .ptr = A(0)) \
	X(CU_MEM_FREE_ASYNC, cuMemFreeAsync, .layer = DRV, .ptr = A(0), .stream = A(1)) \
	X(CU_MEM_CREATE, cuMemCreate, .layer = DRV, .out = GS_OUT_HANDLE, .outp = A(0), .size = A(1)) \
	X(CU_MEM_RELEASE, cuMemRelease, .layer = DRV, .handle = A(0)) \
	X(CU_MEM_MAP, cuMemMap, .layer = DRV, .size = A(1), .ptr = A(0), .handle = A(3)) \
	X(CU_MEM_UNMAP, cuMemUnmap, .layer = DRV, .size = A(1), .ptr = A(0)) \
	X(CU_MEMCPY_HTOD, cuMemcpyHtoD_v2, .layer = DRV, .size = A(2), .dst = A(0), .src = A(1), .kind_fixed = A(1)) \
	X(CU_MEMCPY_DTOH, cuMemcpyDtoH_v2, .layer = DRV, .size = A(2), .dst = A(0), .src = A(1), .kind_fixed = A(2)) \
	X(CU_MEMCPY_ASYNC, cuMemcpyAsync, .layer = DRV, .size = A(2), .dst = A(0), .src = A(1), .stream = A(3), .kind_fixed = A(4)) \
	X(CU_STREAM_SYNCHRONIZE, cuStreamSynchronize, .layer = DRV, .stream = A(0)) \
	X(CU_CTX_SYNCHRONIZE, cuCtxSynchronize, .layer = DRV)

#define GS_API_ENUM(id, sym, ...) GS_API_##id,
enum gs_api { GS_APIS(GS_API_ENUM) GS_API_COUNT };
#undef GS_API_ENUM

#define GS_API_DESC(id, sym, ...) {__VA_ARGS__},
#define GS_API_DESC_TABLE { GS_APIS(GS_API_DESC) }

#endif
