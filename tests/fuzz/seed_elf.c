/* Source of the ELF seeds for fuzz_elf_symbols: a few FUNC symbols, global and local, with
 * names like the ones gpuscope looks for. */
static int helper(int x) { return x * 3 + 1; }
int cudaMalloc(void **p, unsigned long n) {
  *p = 0;
  return helper((int)n);
}
int cudaLaunchKernel(const void *f, int a) { return helper(a) + (f != 0); }
int _Z12alpha_kernelPf(float *p) { return p != 0; }
int main(void) {
  void *p;
  return cudaMalloc(&p, 1) + cudaLaunchKernel(0, 2) + _Z12alpha_kernelPf(0) - 13;
}
