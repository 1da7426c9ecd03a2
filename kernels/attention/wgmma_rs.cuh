// WGMMA with the A operand in registers (sm_90a), for attention's P·V: P never leaves the
// registers it was computed in. A (64x16, 16-bit) uses the accumulator pattern of an m64n16 tile
// packed in pairs: a0 (row g, k 2t..), a1 (row g+8, k 2t..), a2 (row g, k 8+2t..), a3 (row g+8,
// k 8+2t..), per warp w rows 16w + .. (g = lane/4, t = lane%4). B comes from a shared-memory
// descriptor; TB = 1 reads it MN-major (transposed). A's registers must not change until the
// batch is waited for.
#pragma once
#include "common/wgmma.cuh"

#define KILN_RS_F4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define KILN_RS_F16(i) KILN_RS_F4(i), KILN_RS_F4(i + 4), KILN_RS_F4(i + 8), KILN_RS_F4(i + 12)
#define KILN_RS_F64(i) KILN_RS_F16(i), KILN_RS_F16(i + 16), KILN_RS_F16(i + 32), KILN_RS_F16(i + 48)
#define KILN_RS_REGS                                                                                      \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                             \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                    \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                    \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "                   \
  "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"

// d (+)= A(64x16, registers) * B(16x128, shared). scale_d == 0: D = A*B.
template <class In, int TB>
__device__ __forceinline__ void wgmma_m64n128k16_rs(float (&d)[64], const u32 (&a)[4], u64 db, int scale_d) {
  static_assert(TB == 0 || TB == 1, "transpose flag is 0 or 1");
  if constexpr (WgmmaIsBf16<In>::value) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " KILN_RS_REGS
                 : KILN_RS_F64(0)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
  } else {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " KILN_RS_REGS
                 : KILN_RS_F64(0)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TB));
  }
}

#undef KILN_RS_F4
#undef KILN_RS_F16
#undef KILN_RS_F64
#undef KILN_RS_REGS
