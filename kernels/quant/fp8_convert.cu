// FP8 conversions on the GPU, for checking them against the CPU (src/ops/fp8/convert.rs): every
// input f32 encoded to e4m3fn and to e5m2, and every one of the 256 codes of each decoded.
#include "common/fp8.cuh"

extern "C" __global__ void fp8_convert(const float* x, int n, u8* e4m3, u8* e5m2, float* dec_e4m3, float* dec_e5m2) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    e4m3[i] = fp8_encode<FP8_E4M3>(x[i]);
    e5m2[i] = fp8_encode<FP8_E5M2>(x[i]);
  }
  if (i < 256) {
    dec_e4m3[i] = fp8_decode<FP8_E4M3>((u8)i);
    dec_e5m2[i] = fp8_decode<FP8_E5M2>((u8)i);
  }
}
