// TEST-ONLY planted kernel (reachable only with KILN_TEST_KERNELS=1, as GEMM version `planted`,
// MODE=2): writes far outside C (2^40 bytes past its start, then near address 0, neither of
// which any allocation covers), so that the tuner has an illegal address, and the corrupted
// context that follows, to catch. Not in the normal registry, `kiln check` or the JIT sources.
struct PlantedArgs {
  const void* a;
  const void* b;
  void* c;
  int m, n, k;
  long long lda, ldb, ldc;
  float alpha, beta;
};

extern "C" __global__ void planted_oob(PlantedArgs p) {
  volatile float* far = reinterpret_cast<volatile float*>(static_cast<char*>(p.c) + (1LL << 40));
  far[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f;
  volatile float* low = reinterpret_cast<volatile float*>(static_cast<unsigned long long>(64 + threadIdx.x * 4));
  *low = 2.0f;
}
