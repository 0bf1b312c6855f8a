/* SPDX-License-Identifier: GPL-2.0 */
/* The CUDA site table: every probed CUDA symbol once, shared by the BPF programs and userspace.
 * A row names the symbol, its layer, where its arguments live and the roles it plays; each
 * capability selects the rows of its roles, and the attach cookie is always the row. Adding an
 * API to trace and latency is one row with GS_ROLE_CALL (see CONTRIBUTING.md). */
#ifndef GPUSCOPE_COMMON_CUDA_API_H
#define GPUSCOPE_COMMON_CUDA_API_H

enum gs_layer { GS_LAYER_RUNTIME = 0, GS_LAYER_DRIVER = 1, GS_LAYER_COUNT = 2 };

/* What a row is probed for: a bit per capability role. */
enum gs_role {
	GS_ROLE_CALL = 1 << 0, /* trace, latency: a call with arguments, duration and return code */
	GS_ROLE_MEM = 1 << 1,  /* memleak: allocates, frees or maps memory (.mem_op, .mem_cat) */
	GS_ROLE_LAUNCH = 1 << 2,       /* kernels: launches one kernel (.special says how) */
	GS_ROLE_GRAPH_LAUNCH = 1 << 3, /* kernels: launches an instantiated graph */
	GS_ROLE_CAPTURE = 1 << 4,      /* kernels: begins or ends stream capture (.special) */
	GS_ROLE_NAMER = 1 << 5,        /* kernels: gives a kernel handle its name (.namer) */
	GS_ROLE_CONTEXT = 1 << 6, /* memleak: makes, ends or switches a CUDA context (.ctx_op) */
	GS_ROLE_FAULT = 1 << 7,   /* errors: can return an earlier asynchronous fault (sticky) */
	GS_ROLE_COPY = 1 << 8,    /* copies: copies or sets memory (.copy, .copy_dir) */
};

/* copies: a copy's direction; the first five are cudaMemcpyKind's values. */
enum gs_copy_dir {
	GS_DIR_H2H,
	GS_DIR_H2D,
	GS_DIR_D2H,
	GS_DIR_D2D,
	GS_DIR_DEFAULT, /* cudaMemcpyDefault, cuMemcpy: the runtime infers it from the pointers */
	GS_DIR_PEER,
	GS_DIR_MEMSET,
	GS_DIR_COUNT
};

/* copies: where a GS_ROLE_COPY row's bytes and direction are. The direction is .copy_dir (+1)
 * where set, else .kind_fixed (+1), else the .kind argument, except for the struct rows. */
enum gs_copy_shape {
	GS_COPY_LINEAR, /* the .size argument, times .elem_bytes where set (cuMemsetD32: 4) */
	GS_COPY_2D,     /* .width times .height arguments (bytes times rows) */
	GS_COPY_RT_3D,  /* .params: const struct cudaMemcpy3DParms *: extent and kind */
	GS_COPY_CU_2D,  /* .params: const CUDA_MEMCPY2D *: memory types, WidthInBytes, Height */
	GS_COPY_CU_3D, /* .params: const CUDA_MEMCPY3D *: memory types, WidthInBytes, Height, Depth */
};

enum gs_special {
	GS_SP_NONE,
	GS_SP_RT_LAUNCH,    /* cudaLaunchKernel(func, dim3 grid, dim3 block, args, smem, stream) */
	GS_SP_RT_LAUNCH_EX, /* cudaLaunchKernelExC(const cudaLaunchConfig_t *, func, args) */
	GS_SP_CU_LAUNCH, /* cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra) */
	GS_SP_CU_LAUNCH_EX, /* cuLaunchKernelEx(const CUlaunchConfig *, f, params, extra) */
	GS_SP_CAPTURE_BEGIN,
	GS_SP_CAPTURE_END,
	GS_SP_HOST_FUNC, /* cudaLaunchHostFunc(stream, fn, data), cuLaunchHostFunc(stream, fn, data) */
};

/* Where the value behind the out-pointer argument goes when the call returns. */
enum gs_out {
	GS_OUT_NONE,
	GS_OUT_PTR,
	GS_OUT_STREAM,
	GS_OUT_EVENT,
	GS_OUT_GRAPH,
	GS_OUT_HANDLE,
	GS_OUT_DEVICE,
	GS_OUT_CTX
};

/* memleak: what a GS_ROLE_MEM row does, and to which kind of memory. */
enum gs_mem_op {
	GS_MEM_ALLOC,       /* (T **out, size_t size, ...) */
	GS_MEM_ALLOC_PITCH, /* (T **out, size_t *pitch, size_t width, size_t height, ...) */
	GS_MEM_FREE,        /* (T *ptr, ...) */
	GS_MEM_VMM_CREATE,  /* cuMemCreate(handle *out, size_t size, const prop *, flags) */
	GS_MEM_VMM_RELEASE, /* cuMemRelease(handle) */
	GS_MEM_VMM_MAP,     /* cuMemMap(ptr, size, offset, handle, flags) */
	GS_MEM_VMM_UNMAP,   /* cuMemUnmap(ptr, size) */
};
enum gs_mem_category { GS_MEM_DEVICE, GS_MEM_MANAGED, GS_MEM_PINNED, GS_MEM_VMM };

/* memleak: what a GS_ROLE_CONTEXT row does to the calling thread's contexts. */
enum gs_ctx_op {
	GS_CTX_NONE,
	GS_CTX_CREATE,         /* cuCtxCreate(CUcontext *out, ..., CUdevice dev): made and pushed */
	GS_CTX_DESTROY,        /* cuCtxDestroy(CUcontext): its memory ends */
	GS_CTX_PRIMARY_RETAIN, /* cuDevicePrimaryCtxRetain(CUcontext *out, CUdevice) */
	GS_CTX_PRIMARY_RELEASE, /* cuDevicePrimaryCtxRelease(CUdevice): ends with the last retain */
	GS_CTX_PRIMARY_RESET,   /* cuDevicePrimaryCtxReset(CUdevice): its memory ends */
	GS_CTX_SET_CURRENT,     /* cuCtxSetCurrent(CUcontext) */
	GS_CTX_PUSH,            /* cuCtxPushCurrent(CUcontext) */
	GS_CTX_POP,             /* cuCtxPopCurrent(CUcontext *out) */
	GS_CTX_RT_SET_DEVICE, /* cudaSetDevice(int): the device's primary context becomes current */
	GS_CTX_RT_DEVICE_RESET, /* cudaDeviceReset(void): the current device's primary context ends */
};

/* kernels: how a GS_ROLE_NAMER row names a handle. */
enum gs_namer {
	GS_NAMER_MODULE_GET_FUNCTION, /* cuModuleGetFunction(CUfunction *, CUmodule, const char *) */
	GS_NAMER_LIBRARY_GET_KERNEL,  /* cuLibraryGetKernel(CUkernel *, CUlibrary, const char *) */
	GS_NAMER_KERNEL_GET_FUNCTION, /* cuKernelGetFunction(CUfunction *, CUkernel) */
	GS_NAMER_GET_KERNEL,          /* __cudaGetKernel(cudaKernel_t *, const void *stub) */
};

/* Argument positions are stored +1 so that 0 means "absent". */
struct gs_api_desc {
	unsigned char layer, special, out, outp;
	unsigned char size, ptr, dst, src, kind, stream, event, graph, handle, device;
	unsigned char
	        kind_fixed; /* cudaMemcpyKind + 1 for driver copies, whose direction is in the name */
	unsigned short roles; /* enum gs_role bits */
	unsigned char mem_op, mem_cat, namer;
	unsigned char func;                  /* a host function (GS_SP_HOST_FUNC rows) */
	unsigned char ctx;                   /* a CUcontext argument */
	unsigned char ctx_op;                /* enum gs_ctx_op (GS_ROLE_CONTEXT rows) */
	unsigned char copy;                  /* enum gs_copy_shape (GS_ROLE_COPY rows) */
	unsigned char width, height, params; /* GS_COPY_2D's arguments; the struct rows' pointer */
	unsigned char copy_dir;   /* enum gs_copy_dir + 1 where the row fixes it (peer, memset) */
	unsigned char elem_bytes; /* GS_COPY_LINEAR: bytes per counted element (0: 1) */
};

#define GS_ARG(i) ((i) + 1)
#define GS_RT GS_LAYER_RUNTIME
#define GS_DRV GS_LAYER_DRIVER
/* X(enum id, symbol, designated initializers). The symbol is the exported name, the
 * per-thread-stream variants (_ptsz, _ptds) are probed with the same row. */
#define GS_APIS(X)                                                                                 \
	X(CUDA_MALLOC, cudaMalloc, .layer = GS_RT, .out = GS_OUT_PTR, .outp = GS_ARG(0),           \
	  .size = GS_ARG(1), .roles = GS_ROLE_CALL | GS_ROLE_MEM | GS_ROLE_FAULT,                  \
	  .mem_op = GS_MEM_ALLOC, .mem_cat = GS_MEM_DEVICE)                                        \
	X(CUDA_MALLOC_MANAGED, cudaMallocManaged, .layer = GS_RT, .out = GS_OUT_PTR,               \
	  .outp = GS_ARG(0), .size = GS_ARG(1), .roles = GS_ROLE_CALL | GS_ROLE_MEM,               \
	  .mem_op = GS_MEM_ALLOC, .mem_cat = GS_MEM_MANAGED)                                       \
	X(CUDA_MALLOC_ASYNC, cudaMallocAsync, .layer = GS_RT, .out = GS_OUT_PTR,                   \
	  .outp = GS_ARG(0), .size = GS_ARG(1), .stream = GS_ARG(2),                               \
	  .roles = GS_ROLE_CALL | GS_ROLE_MEM, .mem_op = GS_MEM_ALLOC, .mem_cat = GS_MEM_DEVICE)   \
	X(CUDA_FREE, cudaFree, .layer = GS_RT, .ptr = GS_ARG(0),                                   \
	  .roles = GS_ROLE_CALL | GS_ROLE_MEM | GS_ROLE_FAULT, .mem_op = GS_MEM_FREE,              \
	  .mem_cat = GS_MEM_DEVICE)                                                                \
	X(CUDA_FREE_ASYNC, cudaFreeAsync, .layer = GS_RT, .ptr = GS_ARG(0), .stream = GS_ARG(1),   \
	  .roles = GS_ROLE_CALL | GS_ROLE_MEM, .mem_op = GS_MEM_FREE, .mem_cat = GS_MEM_DEVICE)    \
	X(CUDA_MEMCPY, cudaMemcpy, .layer = GS_RT, .size = GS_ARG(2), .dst = GS_ARG(0),            \
	  .src = GS_ARG(1), .kind = GS_ARG(3),                                                     \
	  .roles = GS_ROLE_CALL | GS_ROLE_FAULT | GS_ROLE_COPY)                                    \
	X(CUDA_MEMCPY_ASYNC, cudaMemcpyAsync, .layer = GS_RT, .size = GS_ARG(2), .dst = GS_ARG(0), \
	  .src = GS_ARG(1), .kind = GS_ARG(3), .stream = GS_ARG(4),                                \
	  .roles = GS_ROLE_CALL | GS_ROLE_FAULT | GS_ROLE_COPY)                                    \
	X(CUDA_MEMSET, cudaMemset, .layer = GS_RT, .size = GS_ARG(2), .ptr = GS_ARG(0),            \
	  .roles = GS_ROLE_CALL | GS_ROLE_COPY, .copy_dir = GS_ARG(GS_DIR_MEMSET))                 \
	X(CUDA_LAUNCH_KERNEL, cudaLaunchKernel, .layer = GS_RT, .special = GS_SP_RT_LAUNCH,        \
	  .roles = GS_ROLE_CALL | GS_ROLE_LAUNCH)                                                  \
	X(CUDA_LAUNCH_KERNEL_EXC, cudaLaunchKernelExC, .layer = GS_RT,                             \
	  .special = GS_SP_RT_LAUNCH_EX, .roles = GS_ROLE_CALL | GS_ROLE_LAUNCH)                   \
	X(CUDA_GRAPH_LAUNCH, cudaGraphLaunch, .layer = GS_RT, .stream = GS_ARG(1),                 \
	  .graph = GS_ARG(0), .roles = GS_ROLE_CALL | GS_ROLE_GRAPH_LAUNCH)                        \
	X(CUDA_GRAPH_INSTANTIATE, cudaGraphInstantiate, .layer = GS_RT, .out = GS_OUT_GRAPH,       \
	  .outp = GS_ARG(0), .graph = GS_ARG(1), .roles = GS_ROLE_CALL)                            \
	X(CUDA_STREAM_BEGIN_CAPTURE, cudaStreamBeginCapture, .layer = GS_RT,                       \
	  .special = GS_SP_CAPTURE_BEGIN, .stream = GS_ARG(0),                                     \
	  .roles = GS_ROLE_CALL | GS_ROLE_CAPTURE)                                                 \
	X(CUDA_STREAM_END_CAPTURE, cudaStreamEndCapture, .layer = GS_RT,                           \
	  .special = GS_SP_CAPTURE_END, .out = GS_OUT_GRAPH, .outp = GS_ARG(1),                    \
	  .stream = GS_ARG(0), .roles = GS_ROLE_CALL | GS_ROLE_CAPTURE)                            \
	X(CUDA_STREAM_CREATE, cudaStreamCreate, .layer = GS_RT, .out = GS_OUT_STREAM,              \
	  .outp = GS_ARG(0), .roles = GS_ROLE_CALL)                                                \
	X(CUDA_STREAM_SYNCHRONIZE, cudaStreamSynchronize, .layer = GS_RT, .stream = GS_ARG(0),     \
	  .roles = GS_ROLE_CALL | GS_ROLE_FAULT)                                                   \
	X(CUDA_EVENT_CREATE, cudaEventCreate, .layer = GS_RT, .out = GS_OUT_EVENT,                 \
	  .outp = GS_ARG(0), .roles = GS_ROLE_CALL)                                                \
	X(CUDA_EVENT_RECORD, cudaEventRecord, .layer = GS_RT, .stream = GS_ARG(1),                 \
	  .event = GS_ARG(0), .roles = GS_ROLE_CALL)                                               \
	X(CUDA_EVENT_SYNCHRONIZE, cudaEventSynchronize, .layer = GS_RT, .event = GS_ARG(0),        \
	  .roles = GS_ROLE_CALL | GS_ROLE_FAULT)                                                   \
	X(CUDA_DEVICE_SYNCHRONIZE, cudaDeviceSynchronize, .layer = GS_RT,                          \
	  .roles = GS_ROLE_CALL | GS_ROLE_FAULT)                                                   \
	X(CUDA_GET_DEVICE, cudaGetDevice, .layer = GS_RT, .out = GS_OUT_DEVICE, .outp = GS_ARG(0), \
	  .roles = GS_ROLE_CALL)                                                                   \
	X(CUDA_SET_DEVICE, cudaSetDevice, .layer = GS_RT, .device = GS_ARG(0),                     \
	  .roles = GS_ROLE_CALL | GS_ROLE_CONTEXT, .ctx_op = GS_CTX_RT_SET_DEVICE)                 \
	X(CU_LAUNCH_KERNEL, cuLaunchKernel, .layer = GS_DRV, .special = GS_SP_CU_LAUNCH,           \
	  .roles = GS_ROLE_CALL | GS_ROLE_LAUNCH)                                                  \
	X(CU_LAUNCH_KERNEL_EX, cuLaunchKernelEx, .layer = GS_DRV, .special = GS_SP_CU_LAUNCH_EX,   \
	  .roles = GS_ROLE_CALL | GS_ROLE_LAUNCH)                                                  \
	X(CU_GRAPH_LAUNCH, cuGraphLaunch, .layer = GS_DRV, .stream = GS_ARG(1),                    \
	  .graph = GS_ARG(0), .roles = GS_ROLE_CALL | GS_ROLE_GRAPH_LAUNCH)                        \
	X(CU_GRAPH_INSTANTIATE_WITH_FLAGS, cuGraphInstantiateWithFlags, .layer = GS_DRV,           \
	  .out = GS_OUT_GRAPH, .outp = GS_ARG(0), .graph = GS_ARG(1), .roles = GS_ROLE_CALL)       \
	X(CU_STREAM_BEGIN_CAPTURE, cuStreamBeginCapture_v2, .layer = GS_DRV,                       \
	  .special = GS_SP_CAPTURE_BEGIN, .stream = GS_ARG(0),                                     \
	  .roles = GS_ROLE_CALL | GS_ROLE_CAPTURE)                                                 \
	X(CU_STREAM_END_CAPTURE, cuStreamEndCapture, .layer = GS_DRV,                              \
	  .special = GS_SP_CAPTURE_END, .out = GS_OUT_GRAPH, .outp = GS_ARG(1),                    \
	  .stream = GS_ARG(0), .roles = GS_ROLE_CALL | GS_ROLE_CAPTURE)                            \
	X(CU_MEM_ALLOC, cuMemAlloc_v2, .layer = GS_DRV, .out = GS_OUT_PTR, .outp = GS_ARG(0),      \
	  .size = GS_ARG(1), .roles = GS_ROLE_CALL | GS_ROLE_MEM | GS_ROLE_FAULT,                  \
	  .mem_op = GS_MEM_ALLOC, .mem_cat = GS_MEM_DEVICE)                                        \
	X(CU_MEM_ALLOC_ASYNC, cuMemAllocAsync, .layer = GS_DRV, .out = GS_OUT_PTR,                 \
	  .outp = GS_ARG(0), .size = GS_ARG(1), .stream = GS_ARG(2),                               \
	  .roles = GS_ROLE_CALL | GS_ROLE_MEM, .mem_op = GS_MEM_ALLOC, .mem_cat = GS_MEM_DEVICE)   \
	X(CU_MEM_FREE, cuMemFree_v2, .layer = GS_DRV, .ptr = GS_ARG(0),                            \
	  .roles = GS_ROLE_CALL | GS_ROLE_MEM | GS_ROLE_FAULT, .mem_op = GS_MEM_FREE,              \
	  .mem_cat = GS_MEM_DEVICE)                                                                \
	X(CU_MEM_FREE_ASYNC, cuMemFreeAsync, .layer = GS_DRV, .ptr = GS_ARG(0),                    \
	  .stream = GS_ARG(1), .roles = GS_ROLE_CALL | GS_ROLE_MEM, .mem_op = GS_MEM_FREE,         \
	  .mem_cat = GS_MEM_DEVICE)                                                                \
	X(CU_MEM_CREATE, cuMemCreate, .layer = GS_DRV, .out = GS_OUT_HANDLE, .outp = GS_ARG(0),    \
	  .size = GS_ARG(1), .roles = GS_ROLE_CALL | GS_ROLE_MEM, .mem_op = GS_MEM_VMM_CREATE,     \
	  .mem_cat = GS_MEM_VMM)                                                                   \
	X(CU_MEM_RELEASE, cuMemRelease, .layer = GS_DRV, .handle = GS_ARG(0),                      \
	  .roles = GS_ROLE_CALL | GS_ROLE_MEM, .mem_op = GS_MEM_VMM_RELEASE,                       \
	  .mem_cat = GS_MEM_VMM)                                                                   \
	X(CU_MEM_MAP, cuMemMap, .layer = GS_DRV, .size = GS_ARG(1), .ptr = GS_ARG(0),              \
	  .handle = GS_ARG(3), .roles = GS_ROLE_CALL | GS_ROLE_MEM, .mem_op = GS_MEM_VMM_MAP,      \
	  .mem_cat = GS_MEM_VMM)                                                                   \
	X(CU_MEM_UNMAP, cuMemUnmap, .layer = GS_DRV, .size = GS_ARG(1), .ptr = GS_ARG(0),          \
	  .roles = GS_ROLE_CALL | GS_ROLE_MEM, .mem_op = GS_MEM_VMM_UNMAP, .mem_cat = GS_MEM_VMM)  \
	X(CU_MEMCPY_HTOD, cuMemcpyHtoD_v2, .layer = GS_DRV, .size = GS_ARG(2), .dst = GS_ARG(0),   \
	  .src = GS_ARG(1), .kind_fixed = GS_ARG(1),                                               \
	  .roles = GS_ROLE_CALL | GS_ROLE_FAULT | GS_ROLE_COPY)                                    \
	X(CU_MEMCPY_DTOH, cuMemcpyDtoH_v2, .layer = GS_DRV, .size = GS_ARG(2), .dst = GS_ARG(0),   \
	  .src = GS_ARG(1), .kind_fixed = GS_ARG(2),                                               \
	  .roles = GS_ROLE_CALL | GS_ROLE_FAULT | GS_ROLE_COPY)                                    \
	X(CU_MEMCPY_ASYNC, cuMemcpyAsync, .layer = GS_DRV, .size = GS_ARG(2), .dst = GS_ARG(0),    \
	  .src = GS_ARG(1), .stream = GS_ARG(3), .kind_fixed = GS_ARG(4),                          \
	  .roles = GS_ROLE_CALL | GS_ROLE_FAULT | GS_ROLE_COPY)                                    \
	X(CU_STREAM_SYNCHRONIZE, cuStreamSynchronize, .layer = GS_DRV, .stream = GS_ARG(0),        \
	  .roles = GS_ROLE_CALL | GS_ROLE_FAULT)                                                   \
	X(CU_CTX_SYNCHRONIZE, cuCtxSynchronize, .layer = GS_DRV,                                   \
	  .roles = GS_ROLE_CALL | GS_ROLE_FAULT)                                                   \
	X(CUDA_MALLOC_FROM_POOL_ASYNC, cudaMallocFromPoolAsync, .layer = GS_RT,                    \
	  .roles = GS_ROLE_MEM, .mem_op = GS_MEM_ALLOC, .mem_cat = GS_MEM_DEVICE)                  \
	X(CUDA_MALLOC_PITCH, cudaMallocPitch, .layer = GS_RT, .roles = GS_ROLE_MEM,                \
	  .mem_op = GS_MEM_ALLOC_PITCH, .mem_cat = GS_MEM_DEVICE)                                  \
	X(CUDA_MALLOC_HOST, cudaMallocHost, .layer = GS_RT, .roles = GS_ROLE_MEM,                  \
	  .mem_op = GS_MEM_ALLOC, .mem_cat = GS_MEM_PINNED)                                        \
	X(CUDA_HOST_ALLOC, cudaHostAlloc, .layer = GS_RT, .roles = GS_ROLE_MEM,                    \
	  .mem_op = GS_MEM_ALLOC, .mem_cat = GS_MEM_PINNED)                                        \
	X(CUDA_FREE_HOST, cudaFreeHost, .layer = GS_RT, .roles = GS_ROLE_MEM,                      \
	  .mem_op = GS_MEM_FREE, .mem_cat = GS_MEM_PINNED)                                         \
	X(CU_MEM_ALLOC_MANAGED, cuMemAllocManaged, .layer = GS_DRV, .roles = GS_ROLE_MEM,          \
	  .mem_op = GS_MEM_ALLOC, .mem_cat = GS_MEM_MANAGED)                                       \
	X(CU_MEM_ALLOC_PITCH, cuMemAllocPitch_v2, .layer = GS_DRV, .roles = GS_ROLE_MEM,           \
	  .mem_op = GS_MEM_ALLOC_PITCH, .mem_cat = GS_MEM_DEVICE)                                  \
	X(CU_MEM_ALLOC_FROM_POOL_ASYNC, cuMemAllocFromPoolAsync, .layer = GS_DRV,                  \
	  .roles = GS_ROLE_MEM, .mem_op = GS_MEM_ALLOC, .mem_cat = GS_MEM_DEVICE)                  \
	X(CU_MEM_HOST_ALLOC, cuMemHostAlloc, .layer = GS_DRV, .roles = GS_ROLE_MEM,                \
	  .mem_op = GS_MEM_ALLOC, .mem_cat = GS_MEM_PINNED)                                        \
	X(CU_MEM_ALLOC_HOST, cuMemAllocHost_v2, .layer = GS_DRV, .roles = GS_ROLE_MEM,             \
	  .mem_op = GS_MEM_ALLOC, .mem_cat = GS_MEM_PINNED)                                        \
	X(CU_MEM_FREE_HOST, cuMemFreeHost, .layer = GS_DRV, .roles = GS_ROLE_MEM,                  \
	  .mem_op = GS_MEM_FREE, .mem_cat = GS_MEM_PINNED)                                         \
	X(CU_MODULE_GET_FUNCTION, cuModuleGetFunction, .layer = GS_DRV, .roles = GS_ROLE_NAMER,    \
	  .namer = GS_NAMER_MODULE_GET_FUNCTION)                                                   \
	X(CU_LIBRARY_GET_KERNEL, cuLibraryGetKernel, .layer = GS_DRV, .roles = GS_ROLE_NAMER,      \
	  .namer = GS_NAMER_LIBRARY_GET_KERNEL)                                                    \
	X(CU_KERNEL_GET_FUNCTION, cuKernelGetFunction, .layer = GS_DRV, .roles = GS_ROLE_NAMER,    \
	  .namer = GS_NAMER_KERNEL_GET_FUNCTION)                                                   \
	X(CUDA_GET_KERNEL, __cudaGetKernel, .layer = GS_RT, .roles = GS_ROLE_NAMER,                \
	  .namer = GS_NAMER_GET_KERNEL)                                                            \
	X(CUDA_LAUNCH_COOPERATIVE_KERNEL, cudaLaunchCooperativeKernel, .layer = GS_RT,             \
	  .special = GS_SP_RT_LAUNCH, .roles = GS_ROLE_CALL | GS_ROLE_LAUNCH)                      \
	X(CU_LAUNCH_COOPERATIVE_KERNEL, cuLaunchCooperativeKernel, .layer = GS_DRV,                \
	  .special = GS_SP_CU_LAUNCH, .roles = GS_ROLE_CALL | GS_ROLE_LAUNCH)                      \
	X(CUDA_LAUNCH_HOST_FUNC, cudaLaunchHostFunc, .layer = GS_RT, .special = GS_SP_HOST_FUNC,   \
	  .stream = GS_ARG(0), .roles = GS_ROLE_CALL | GS_ROLE_LAUNCH, .func = GS_ARG(1))          \
	X(CU_LAUNCH_HOST_FUNC, cuLaunchHostFunc, .layer = GS_DRV, .special = GS_SP_HOST_FUNC,      \
	  .stream = GS_ARG(0), .roles = GS_ROLE_CALL | GS_ROLE_LAUNCH, .func = GS_ARG(1))          \
	X(CU_CTX_CREATE, cuCtxCreate_v4, .layer = GS_DRV, .out = GS_OUT_CTX, .outp = GS_ARG(0),    \
	  .device = GS_ARG(3), .roles = GS_ROLE_CALL | GS_ROLE_CONTEXT, .ctx_op = GS_CTX_CREATE)   \
	X(CU_CTX_CREATE_V2, cuCtxCreate_v2, .layer = GS_DRV, .out = GS_OUT_CTX, .outp = GS_ARG(0), \
	  .device = GS_ARG(2), .roles = GS_ROLE_CALL | GS_ROLE_CONTEXT, .ctx_op = GS_CTX_CREATE)   \
	X(CU_CTX_DESTROY, cuCtxDestroy_v2, .layer = GS_DRV,                                        \
	  .roles = GS_ROLE_CALL | GS_ROLE_CONTEXT, .ctx = GS_ARG(0), .ctx_op = GS_CTX_DESTROY)     \
	X(CU_DEVICE_PRIMARY_CTX_RETAIN, cuDevicePrimaryCtxRetain, .layer = GS_DRV,                 \
	  .out = GS_OUT_CTX, .outp = GS_ARG(0), .device = GS_ARG(1),                               \
	  .roles = GS_ROLE_CALL | GS_ROLE_CONTEXT, .ctx_op = GS_CTX_PRIMARY_RETAIN)                \
	X(CU_DEVICE_PRIMARY_CTX_RELEASE, cuDevicePrimaryCtxRelease_v2, .layer = GS_DRV,            \
	  .device = GS_ARG(0), .roles = GS_ROLE_CALL | GS_ROLE_CONTEXT,                            \
	  .ctx_op = GS_CTX_PRIMARY_RELEASE)                                                        \
	X(CU_DEVICE_PRIMARY_CTX_RESET, cuDevicePrimaryCtxReset_v2, .layer = GS_DRV,                \
	  .device = GS_ARG(0), .roles = GS_ROLE_CALL | GS_ROLE_CONTEXT,                            \
	  .ctx_op = GS_CTX_PRIMARY_RESET)                                                          \
	X(CU_CTX_SET_CURRENT, cuCtxSetCurrent, .layer = GS_DRV,                                    \
	  .roles = GS_ROLE_CALL | GS_ROLE_CONTEXT, .ctx = GS_ARG(0), .ctx_op = GS_CTX_SET_CURRENT) \
	X(CU_CTX_PUSH_CURRENT, cuCtxPushCurrent_v2, .layer = GS_DRV,                               \
	  .roles = GS_ROLE_CALL | GS_ROLE_CONTEXT, .ctx = GS_ARG(0), .ctx_op = GS_CTX_PUSH)        \
	X(CU_CTX_POP_CURRENT, cuCtxPopCurrent_v2, .layer = GS_DRV, .out = GS_OUT_CTX,              \
	  .outp = GS_ARG(0), .roles = GS_ROLE_CALL | GS_ROLE_CONTEXT, .ctx_op = GS_CTX_POP)        \
	X(CUDA_STREAM_QUERY, cudaStreamQuery, .layer = GS_RT, .stream = GS_ARG(0),                 \
	  .roles = GS_ROLE_FAULT)                                                                  \
	X(CUDA_EVENT_QUERY, cudaEventQuery, .layer = GS_RT, .event = GS_ARG(0),                    \
	  .roles = GS_ROLE_FAULT)                                                                  \
	X(CU_EVENT_SYNCHRONIZE, cuEventSynchronize, .layer = GS_DRV, .event = GS_ARG(0),           \
	  .roles = GS_ROLE_FAULT)                                                                  \
	X(CU_STREAM_QUERY, cuStreamQuery, .layer = GS_DRV, .stream = GS_ARG(0),                    \
	  .roles = GS_ROLE_FAULT)                                                                  \
	X(CU_EVENT_QUERY, cuEventQuery, .layer = GS_DRV, .event = GS_ARG(0),                       \
	  .roles = GS_ROLE_FAULT)                                                                  \
	X(CU_MEMCPY_DTOH_ASYNC, cuMemcpyDtoHAsync_v2, .layer = GS_DRV, .size = GS_ARG(2),          \
	  .dst = GS_ARG(0), .src = GS_ARG(1), .stream = GS_ARG(3), .kind_fixed = GS_ARG(2),        \
	  .roles = GS_ROLE_FAULT | GS_ROLE_COPY)                                                   \
	X(CUDA_DEVICE_RESET, cudaDeviceReset, .layer = GS_RT,                                      \
	  .roles = GS_ROLE_CALL | GS_ROLE_CONTEXT, .ctx_op = GS_CTX_RT_DEVICE_RESET)               \
	X(CUDA_MEMCPY_2D, cudaMemcpy2D, .layer = GS_RT, .kind = GS_ARG(6), .roles = GS_ROLE_COPY,  \
	  .copy = GS_COPY_2D, .width = GS_ARG(4), .height = GS_ARG(5))                             \
	X(CUDA_MEMCPY_2D_ASYNC, cudaMemcpy2DAsync, .layer = GS_RT, .kind = GS_ARG(6),              \
	  .stream = GS_ARG(7), .roles = GS_ROLE_COPY, .copy = GS_COPY_2D, .width = GS_ARG(4),      \
	  .height = GS_ARG(5))                                                                     \
	X(CUDA_MEMCPY_3D, cudaMemcpy3D, .layer = GS_RT, .roles = GS_ROLE_COPY,                     \
	  .copy = GS_COPY_RT_3D, .params = GS_ARG(0))                                              \
	X(CUDA_MEMCPY_3D_ASYNC, cudaMemcpy3DAsync, .layer = GS_RT, .stream = GS_ARG(1),            \
	  .roles = GS_ROLE_COPY, .copy = GS_COPY_RT_3D, .params = GS_ARG(0))                       \
	X(CUDA_MEMCPY_PEER, cudaMemcpyPeer, .layer = GS_RT, .size = GS_ARG(4),                     \
	  .roles = GS_ROLE_COPY, .copy_dir = GS_ARG(GS_DIR_PEER))                                  \
	X(CUDA_MEMCPY_PEER_ASYNC, cudaMemcpyPeerAsync, .layer = GS_RT, .size = GS_ARG(4),          \
	  .stream = GS_ARG(5), .roles = GS_ROLE_COPY, .copy_dir = GS_ARG(GS_DIR_PEER))             \
	X(CUDA_MEMSET_ASYNC, cudaMemsetAsync, .layer = GS_RT, .size = GS_ARG(2), .ptr = GS_ARG(0), \
	  .stream = GS_ARG(3), .roles = GS_ROLE_COPY, .copy_dir = GS_ARG(GS_DIR_MEMSET))           \
	X(CUDA_MEMSET_2D, cudaMemset2D, .layer = GS_RT, .ptr = GS_ARG(0), .roles = GS_ROLE_COPY,   \
	  .copy = GS_COPY_2D, .width = GS_ARG(3), .height = GS_ARG(4),                             \
	  .copy_dir = GS_ARG(GS_DIR_MEMSET))                                                       \
	X(CU_MEMCPY_DTOD, cuMemcpyDtoD_v2, .layer = GS_DRV, .size = GS_ARG(2), .dst = GS_ARG(0),   \
	  .src = GS_ARG(1), .kind_fixed = GS_ARG(GS_DIR_D2D), .roles = GS_ROLE_COPY)               \
	X(CU_MEMCPY_HTOD_ASYNC, cuMemcpyHtoDAsync_v2, .layer = GS_DRV, .size = GS_ARG(2),          \
	  .dst = GS_ARG(0), .src = GS_ARG(1), .stream = GS_ARG(3),                                 \
	  .kind_fixed = GS_ARG(GS_DIR_H2D), .roles = GS_ROLE_COPY)                                 \
	X(CU_MEMCPY_DTOD_ASYNC, cuMemcpyDtoDAsync_v2, .layer = GS_DRV, .size = GS_ARG(2),          \
	  .dst = GS_ARG(0), .src = GS_ARG(1), .stream = GS_ARG(3),                                 \
	  .kind_fixed = GS_ARG(GS_DIR_D2D), .roles = GS_ROLE_COPY)                                 \
	X(CU_MEMCPY, cuMemcpy, .layer = GS_DRV, .size = GS_ARG(2), .dst = GS_ARG(0),               \
	  .src = GS_ARG(1), .kind_fixed = GS_ARG(GS_DIR_DEFAULT), .roles = GS_ROLE_COPY)           \
	X(CU_MEMCPY_PEER, cuMemcpyPeer, .layer = GS_DRV, .size = GS_ARG(4), .dst = GS_ARG(0),      \
	  .src = GS_ARG(2), .roles = GS_ROLE_COPY, .copy_dir = GS_ARG(GS_DIR_PEER))                \
	X(CU_MEMCPY_PEER_ASYNC, cuMemcpyPeerAsync, .layer = GS_DRV, .size = GS_ARG(4),             \
	  .dst = GS_ARG(0), .src = GS_ARG(2), .stream = GS_ARG(5), .roles = GS_ROLE_COPY,          \
	  .copy_dir = GS_ARG(GS_DIR_PEER))                                                         \
	X(CU_MEMCPY_2D, cuMemcpy2D_v2, .layer = GS_DRV, .roles = GS_ROLE_COPY,                     \
	  .copy = GS_COPY_CU_2D, .params = GS_ARG(0))                                              \
	X(CU_MEMCPY_2D_ASYNC, cuMemcpy2DAsync_v2, .layer = GS_DRV, .stream = GS_ARG(1),            \
	  .roles = GS_ROLE_COPY, .copy = GS_COPY_CU_2D, .params = GS_ARG(0))                       \
	X(CU_MEMCPY_3D, cuMemcpy3D_v2, .layer = GS_DRV, .roles = GS_ROLE_COPY,                     \
	  .copy = GS_COPY_CU_3D, .params = GS_ARG(0))                                              \
	X(CU_MEMCPY_3D_ASYNC, cuMemcpy3DAsync_v2, .layer = GS_DRV, .stream = GS_ARG(1),            \
	  .roles = GS_ROLE_COPY, .copy = GS_COPY_CU_3D, .params = GS_ARG(0))                       \
	X(CU_MEMSET_D8, cuMemsetD8_v2, .layer = GS_DRV, .size = GS_ARG(2), .ptr = GS_ARG(0),       \
	  .roles = GS_ROLE_COPY, .copy_dir = GS_ARG(GS_DIR_MEMSET))                                \
	X(CU_MEMSET_D32, cuMemsetD32_v2, .layer = GS_DRV, .size = GS_ARG(2), .ptr = GS_ARG(0),     \
	  .roles = GS_ROLE_COPY, .copy_dir = GS_ARG(GS_DIR_MEMSET), .elem_bytes = 4)               \
	X(CU_MEMSET_D8_ASYNC, cuMemsetD8Async, .layer = GS_DRV, .size = GS_ARG(2),                 \
	  .ptr = GS_ARG(0), .stream = GS_ARG(3), .roles = GS_ROLE_COPY,                            \
	  .copy_dir = GS_ARG(GS_DIR_MEMSET))                                                       \
	X(CU_MEMSET_D32_ASYNC, cuMemsetD32Async, .layer = GS_DRV, .size = GS_ARG(2),               \
	  .ptr = GS_ARG(0), .stream = GS_ARG(3), .roles = GS_ROLE_COPY,                            \
	  .copy_dir = GS_ARG(GS_DIR_MEMSET), .elem_bytes = 4)

#define GS_API_ENUM(id, sym, ...) GS_API_##id,
enum gs_api { GS_APIS(GS_API_ENUM) GS_API_COUNT };
#undef GS_API_ENUM

#define GS_API_DESC(id, sym, ...) {__VA_ARGS__},
#define GS_API_DESC_TABLE                                                                          \
	{                                                                                          \
		GS_APIS(GS_API_DESC)                                                               \
	}

#endif
