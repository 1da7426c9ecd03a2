// WGMMA (sm_90a): warpgroup matrix multiply-accumulate from shared-memory descriptors, with the
// fence / commit / wait that bracket it. Every function here is executed by all 128 threads of a
// warpgroup (4 contiguous warps, the first with an index divisible by 4) with identical operands.
#pragma once
#include "common/types.cuh"

// Shared-memory matrix descriptor for a 128B-swizzled operand (PTX "matrix descriptor"):
// start address >> 4 in bits 0-13, LBO >> 4 in 16-29, SBO >> 4 in 32-45, base offset 0 (tiles
// start on 1024-byte boundaries), swizzle mode in 62-63 where 1 = 128B (the reverse of the TMA
// enum, in which 128B is 3).
//   K-major:  LBO unused (1), SBO = 1024 (the stride between 8-row groups of 128-byte rows).
//   MN-major: LBO = stride between 64-element chunks along M/N, SBO = stride between 8-deep K
//             groups (1024 for 128-byte rows of consecutive K).
__device__ __forceinline__ u64 wgmma_desc_sw128(u32 smem_addr, u32 lbo_bytes, u32 sbo_bytes) {
  return (u64)((smem_addr & 0x3FFFF) >> 4) | ((u64)((lbo_bytes >> 4) & 0x3FFF) << 16) |
         ((u64)((sbo_bytes >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
  static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7 pending groups");
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving accumulator reads or writes across a wgmma fence or wait.
__device__ __forceinline__ void wgmma_fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

template <class T> struct WgmmaIsBf16 { static constexpr bool value = false; };
template <> struct WgmmaIsBf16<bf16> { static constexpr bool value = true; };

#define KILN_F4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define KILN_F16(i) KILN_F4(i), KILN_F4(i + 4), KILN_F4(i + 8), KILN_F4(i + 12)
#define KILN_F64(i) KILN_F16(i), KILN_F16(i + 16), KILN_F16(i + 32), KILN_F16(i + 48)

// d (+)= A(64x16) * B(16xN), fp32 accumulators in the m64nNk16 fragment layout: for thread t
// (warp w = t/32 within the warpgroup, lane l) register i holds row 16w + l/4 + 8*((i>>1)&1),
// column 8*(i>>2) + 2*(l%4) + (i&1). scale_d == 0 ignores d's old value (D = A*B).
// TA / TB: 0 = K-major, 1 = MN-major (transposed; 16-bit types only). In: bf16 or f16.
template <class In, int N, int TA, int TB>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[N / 2], u64 da, u64 db, int scale_d) {
  static_assert(N == 64 || N == 128 || N == 256, "wgmma_m64k16 is instantiated for N = 64, 128 and 256");
  static_assert((TA == 0 || TA == 1) && (TB == 0 || TB == 1), "transpose flags are 0 or 1");
  constexpr bool kBf16 = WgmmaIsBf16<In>::value;
  if constexpr (N == 64) {
    if constexpr (kBf16) {
      asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
        : KILN_F16(0), KILN_F16(16)
        : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    } else {
      asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
        : KILN_F16(0), KILN_F16(16)
        : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
    }
  }
  if constexpr (kBf16 && N == 128) {
    asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, %67, %68;\n}\n"
      : KILN_F64(0)
      : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
  }
  if constexpr (kBf16 && N == 256) {
    asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, %131, %132;\n}\n"
      : KILN_F64(0), KILN_F64(64)
      : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
  }
  if constexpr (!kBf16 && N == 128) {
    asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, %67, %68;\n}\n"
      : KILN_F64(0)
      : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
  }
  if constexpr (!kBf16 && N == 256) {
    asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, %131, %132;\n}\n"
      : KILN_F64(0), KILN_F64(64)
      : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
  }
}

#undef KILN_F4
#undef KILN_F16
#undef KILN_F64

// Warpgroup register budget (setmaxnreg): the whole warpgroup executes it; the kernel needs
// __launch_bounds__(threads, 1) so ptxas knows the entry count. N: 24..256, a multiple of 8.
template <int N> __device__ __forceinline__ void warpgroup_reg_dec() {
  static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg takes 24..256 in steps of 8");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N> __device__ __forceinline__ void warpgroup_reg_inc() {
  static_assert(N >= 24 && N <= 256 && N % 8 == 0, "setmaxnreg takes 24..256 in steps of 8");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
