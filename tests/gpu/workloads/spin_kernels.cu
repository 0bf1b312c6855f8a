// Kernels that spin on %globaltimer for known times (50, 200, 1000, 5000 us), 20 launches
// each, one at a time, after 20 of spin<0> (no spin: the GPU's fixed cost of a kernel, which
// every span includes): for checks/86_gputime_spin.sh. Build: nvcc -O2 -o spin_kernels spin_kernels.cu
#include <cstdio>

__device__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

template <unsigned US>
__global__ void spin(unsigned long long* out) {
  unsigned long long t0 = globaltimer();
  while (globaltimer() - t0 < US * 1000ull) {
  }
  if (out) *out = t0;
}

template <unsigned US>
void run(int n) {
  for (int i = 0; i < n; i++) {
    spin<US><<<1, 1>>>(nullptr);
    cudaDeviceSynchronize();
  }
}

int main() {
  run<0>(20);
  run<50>(20);
  run<200>(20);
  run<1000>(20);
  run<5000>(20);
  cudaError_t e = cudaGetLastError();
  printf("done %s\n", cudaGetErrorName(e));
  return e == cudaSuccess ? 0 : 1;
}
