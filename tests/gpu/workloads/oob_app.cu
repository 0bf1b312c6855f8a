// A CUDA program whose kernel writes far out of bounds, for checks/91_errors_xid.sh: three
// fill_ok launches and a synchronization that succeeds, then one oob_write launch that faults
// (the driver logs an Xid, 31 on an H100) and the synchronization after it returns the sticky
// cudaErrorIllegalAddress. It stays alive for HOLD seconds after the fault so that the tools
// can still read its /proc entry; only its own context is lost.
// Build: nvcc -O2 -cudart shared -gencode arch=compute_90,code=[sm_90,compute_90] -o oob_app oob_app.cu
#include <cuda_runtime.h>
#include <unistd.h>

#include <time.h>

#include <cstdio>
#include <cstdlib>

__global__ void fill_ok(float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = 1.0f;
}

__global__ void oob_write(float* p, unsigned long long offset_elems) { p[offset_elems + threadIdx.x] = 2.0f; }

int main(int argc, char** argv) {
  const int wait_s = argc > 1 ? atoi(argv[1]) : 2;
  const int hold_s = argc > 2 ? atoi(argv[2]) : 4;
  printf("pid %d\n", getpid());
  fflush(stdout);
  sleep(wait_s);
  float* p = nullptr;
  const int n = 1 << 20;
  if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess) return 3;
  for (int i = 0; i < 3; i++) fill_ok<<<n / 256, 256>>>(p, n);
  cudaError_t ok = cudaDeviceSynchronize();
  printf("sync before: %s\n", cudaGetErrorName(ok));
  oob_write<<<1, 32>>>(p, 1ull << 38);  // 1 TiB past the allocation
  cudaError_t e = cudaDeviceSynchronize();
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  printf("sync after: %s\nfault_seen_realtime_ns %lld\n", cudaGetErrorName(e), now.tv_sec * 1000000000LL + now.tv_nsec);
  fflush(stdout);
  sleep(hold_s);
  return e == cudaErrorIllegalAddress ? 0 : 1;
}
