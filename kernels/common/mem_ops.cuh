// Memory operations of the cross-CTA reductions (split-K partial tiles) and shared-memory
// hand-offs: float4 loads/stores that bypass L1 (.cg, so a partial written by one SM is read
// from L2 by another) and float4 reductions at the L2, float4 / float2 / scalar shared-memory
// access (the C staging), and the GPU-scope fence and counter.
#pragma once
#include "common/types.cuh"

__device__ __forceinline__ void st_cg_f4(float* p, float a, float b, float c, float d) {
  asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
__device__ __forceinline__ void ld_cg_f4(const float* p, float& a, float& b, float& c, float& d) {
  asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "l"(p) : "memory");
}
// p[0..3] += (a, b, c, d) at the L2, without a result (sm_90's vector reduction).
__device__ __forceinline__ void red_add_f4(float* p, float a, float b, float c, float d) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
__device__ __forceinline__ void st_shared_f4(u32 a, float x, float y, float z, float w) {
  asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "f"(x), "f"(y), "f"(z), "f"(w) : "memory");
}
__device__ __forceinline__ void st_shared_f2(u32 a, float x, float y) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(a), "f"(x), "f"(y) : "memory");
}
__device__ __forceinline__ void ld_shared_f4(u32 a, float& x, float& y, float& z, float& w) {
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n" : "=f"(x), "=f"(y), "=f"(z), "=f"(w) : "r"(a) : "memory");
}
__device__ __forceinline__ u32 ld_shared_u32(u32 a) {
  u32 x;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(x) : "r"(a) : "memory");
  return x;
}
__device__ __forceinline__ float ld_shared_f32(u32 a) {
  float x;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(x) : "r"(a) : "memory");
  return x;
}
// Orders this thread's earlier global writes before its later ones for every thread of the GPU
// (the partials before the counter that announces them, and the counter before the reads).
__device__ __forceinline__ void fence_gpu() { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }
// The old value of *p; p += v at GPU scope.
__device__ __forceinline__ u32 atom_add_gpu(u32* p, u32 v) {
  u32 old;
  asm volatile("atom.add.gpu.global.u32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
