// TEST-ONLY planted kernel (reachable only with KILN_TEST_KERNELS=1, as GEMM version `planted`,
// MODE=1): spins forever on a flag that nothing ever sets, so that the tuner's watchdog has a
// hang to catch. It never writes C. Not in the normal registry, `kiln check` or the JIT sources.
struct PlantedArgs {
  const void* a;
  const void* b;
  void* c;
  int m, n, k;
  long long lda, ldb, ldc;
  float alpha, beta;
};

__device__ volatile int kiln_planted_flag = 0; // never set by anyone

extern "C" __global__ void planted_hang(PlantedArgs p) {
  while (kiln_planted_flag == 0) {
  }
  static_cast<float*>(p.c)[0] = 0.0f;
}
