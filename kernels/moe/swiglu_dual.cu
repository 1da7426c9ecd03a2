// MoE fused SwiGLU dual GEMM (sm_90a): for every expert e,
//   H[rows of e] = silu(X · W1[e]ᵀ) ⊙ (X · W3[e]ᵀ) (⊙ the row's routing weight, if given)
// in one persistent launch. Each stage holds one X tile and the matching W1 and W3 tiles; the X
// tile feeds both wgmmas, each consumer keeps two accumulators (gate and up, 64 x 128 each), and
// SiLU, the product and the routing weight happen in the epilogue, so neither G nor U is ever
// written. Scheduling, X and W tensor maps, masking: as moe/grouped_gemm.cu.
//
// The W1 tile and the W3 tile sit back to back in the stage (128 rows each, 128-byte rows, 8-row
// groups 1024 bytes apart), which is exactly the layout of one 256-row K-major operand: a single
// m64n256k16 per k16 computes [gate | up] (accumulator columns 0-127 gate, 128-255 up), the same
// instruction stream as the plain grouped GEMM's 128x256 tile, instead of two m64n128k16 that
// read the X fragment twice. KILN_SWIGLU_SPLIT=1 keeps the two-instruction form (to time both).
//
// Weights: separate W1 and W3 [E, N, K] (two 3D maps, two 128-row boxes per stage), or one
// interleaved W13 [E, 2N, K] whose rows alternate 128-row blocks of W1 and W3 (block j of W1 is
// rows 256j .. 256j + 127, of W3 256j + 128 .. 256j + 255): one 256-row box brings both tiles.
// A consumer whose 64 rows are all past the expert's end (a last tile of at most 64 rows) issues
// no wgmma and only follows the stage barriers. X comes in 32-row boxes, and a tile loads only
// those holding its valid rows (the rows not loaded keep an earlier stage's data: rows past the
// expert's end are garbage either way, never stored): the box traffic, not the tensor cores,
// bounds this kernel (extra L2 prefetch boxes slowed it in proportion to their bytes: MoE ledger
// #7).
//
// Units (whole tiles, then the split tiles' slices) go to CTAs dynamically (SwigluSplit.dynamic):
// CTA b starts at unit b and then takes the next from a global counter (zeroed by
// moe_tile_prefix in the same stream), so the CTAs that drew an expert's short last tiles take
// more; the producer publishes each unit to the consumers through a 2-slot ring in shared memory
// (as moe/grouped_swapab.cu). Static (dynamic = 0): unit b, b + grid, ...
//
// Last-wave split (SwigluSplit.max_splits > 1): the tile count is known only here (the prefix
// sums are built on the GPU), so the kernel itself checks whether the last wave of tiles leaves
// at least half of the resident CTAs idle; if so it cuts each of those tiles' K blocks into
// min(CTAs / tail tiles, max_splits) slices. Each slice's unit stores its fp32 gate and up
// partials to ws (fragment order), counts itself on the tile's counter, and the unit that counts
// last adds the others, resets the counter for the next launch and runs the epilogue.
#include "common/cp_async.cuh"
#include "common/fast_math.cuh"
#include "common/grid_dep.cuh"
#include "common/split_k.cuh"
#include "common/tma_3d.cuh"
#include "common/wgmma_ss.cuh"
#include "common/ws_pipeline.cuh"
#include "moe/epilogue.cuh"
#include "moe/gather.cuh"
#include "moe/sched.cuh"

#if !defined(KILN_STAGES) || !defined(KILN_MAX_EXPERTS) || !defined(KILN_SWIGLU_SPLIT) || !defined(KILN_SWIGLU_DEFER) || \
    !defined(KILN_SWIGLU_SILU) || !defined(KILN_SWIGLU_FOLD) || !defined(KILN_SMEM) || !defined(KILN_GATHER)
#error "KILN_STAGES, KILN_MAX_EXPERTS, KILN_SWIGLU_SPLIT, KILN_SWIGLU_DEFER, KILN_SWIGLU_SILU, KILN_SWIGLU_FOLD, KILN_SMEM and KILN_GATHER must be defined by the host"
#endif
// KILN_GATHER = 1 or 2 (the MoE layer): the rows are the expert-sorted (token, expert) pairs and
// row r reads X row p.row_map[r] instead of X's own rows in 32-row boxes. 1: one 1-row TMA box
// per row (moe/gather.cuh), issued by the producer warp's 32 lanes. 2: 16-byte cp.async chunks
// by the producer warp into the swizzled tile (lane l: chunk l % 8 of rows l / 8 + 4i), the tile's
// row ids staged in shared memory; the stage's full barrier then takes a second arrival, from
// lane 0 once every lane's copies of that stage have landed and been fenced to the async proxy
// (wgmma reads them there), one stage behind the issue so that copies overlap. Everything
// after the loads is as without it.
// The epilogue's silu (common/fast_math.cuh): 0 silu_fast (ex2 + rcp, two MUFU operations an
// element), 1 silu_tanh (one). The host picks by output dtype: the epilogue is MUFU-bound with
// the tensor cores idle, so each MUFU operation dropped is time. (sm_90 has no packed MUFU:
// tanh.approx.f16x2 compiles to two MUFU.TANH.F16, so a packed form saves nothing.)
// Folded remainders (KILN_SWIGLU_FOLD rows, 0, 16 or 32): an expert whose rows leave at most FOLD in
// a last m-tile gives them to the tile before it (tables from moe_tile_prefix with the same
// fold), instead of a tile that streams the whole W for a few rows. Those rows (the tile's rows
// 128 .. 128 + FOLD) come in one more 32-row X box per stage and are computed transposed, W as
// the M operand: consumer c multiplies its 64-row blocks of W1 and W3 (columns 64c .. 64c + 63 of
// gate and up) by the FOLD rows, two m64nFOLDk16 a k16 beside its m64n256k16.

constexpr int BM = 128, BN = 128, BK = 64, STAGES = KILN_STAGES;
constexpr int XBOX = 32;  // X rows per TMA box: a tile loads only the boxes that hold its valid rows
constexpr int FOLD = KILN_SWIGLU_FOLD;
constexpr bool SPLIT = KILN_SWIGLU_SPLIT;  // the two-instruction form (see the top)
constexpr int GATHER = KILN_GATHER;
static_assert(GATHER >= 0 && GATHER <= 2, "KILN_GATHER is 0, 1 or 2");
// GATHER = 2: the tile's row ids (folded rows included) in shared memory, after the tables
constexpr u32 GATHER_IDS_BYTES = GATHER == 2 ? (BM + FOLD) * 4 : 0;
static_assert(FOLD == 0 || FOLD == 16 || FOLD == 32, "KILN_SWIGLU_FOLD is 0, 16 or 32");
constexpr int FR = (FOLD > 0 ? FOLD : 16) / 2;  // registers of one m64nFOLD fragment
constexpr u32 X_BYTES = BM * BK * 2, W_BYTES = BN * BK * 2;
constexpr u32 XF_BYTES = FOLD > 0 ? XBOX * BK * 2 : 0;  // the folded rows' X box
constexpr u32 STAGE_BYTES = X_BYTES + 2 * W_BYTES + XF_BYTES;
constexpr u32 TABLE_BYTES = (3 * KILN_MAX_EXPERTS + 1) * 4;
// Deferred stores (16-bit outputs): a tile's results wait, packed, in registers and go out under
// the next unit's first wgmma batch, so the tensor cores need not idle while they drain.
// (A preprocessor condition: f32 output (KILN_OUT 2) has no pack2 to compile.)
#define SWIGLU_DEFER (KILN_SWIGLU_DEFER && KILN_OUT != 2)
static_assert(STAGE_BYTES % 1024 == 0, "stages must keep 1024-byte alignment");
static_assert(KILN_SMEM >= 1024 + STAGES * STAGE_BYTES + 2 * STAGES * 8 + MOE_RING_BYTES + TABLE_BYTES + GATHER_IDS_BYTES,
              "KILN_SMEM (declared by the host) is smaller than the stages, unit ring and tables need");

// The epilogue's silu, as KILN_SWIGLU_SILU picks it.
__device__ __forceinline__ float swiglu_silu(float g) { return KILN_SWIGLU_SILU == 1 ? silu_tanh(g) : silu_fast(g); }

// The last-wave split's workspace, laid out as `SwigluSplit` in src/ops/moe/swiglu_dual.rs:
// ws holds up to gridDim.x partial tiles of BM x 2BN floats, then as many partials of the folded
// rows (FR gate then FR up floats per consumer thread); counters gridDim.x / 2 zeros.
struct SwigluSplit {
  float* ws;
  u32* counters;
  int max_splits;  // 1: no split
  int dynamic;     // 1: units after the first wave come from the global counter (see the top)
};

// The producer of KILN_GATHER (the whole first warp; see the top): the same units and stages as
// the single-thread producer, each tile's rows (its folded rows included) gathered row by row.
template <class NextUnit>
__device__ __forceinline__ void gather_producer(const TmaMap& tma_x, const TmaMap& tma_w1, const TmaMap& tma_w3,
                                                const MoeArgs& p, u32 base, const MbarRing<STAGES>& stages,
                                                const MoeIndexRing& ring, const int* table, int* ids, int units,
                                                int split_from, int splits, int kblocks, int tiles_m,
                                                const NextUnit& next_unit) {
  const int lane = threadIdx.x;
  if (lane == 0) {
    tma_prefetch(&tma_x);
    tma_prefetch(&tma_w1);
    if (!p.interleaved) tma_prefetch(&tma_w3);
  }
  GatherRows<(BM + FOLD + 31) / 32> g;  // (a fold of 16 still needs a fifth slot)
  const in_t* x = static_cast<const in_t*>(p.x);
  const int chunk = lane % 8;
  u32 it = 0, pending_bar = 0;  // GATHER 2: the stage whose copies still await their arrival
  bool pending = false;
  // GATHER 2: once this lane's copies of the stage before have landed (all but the newest group),
  // made visible to the async proxy, and every lane has got there, lane 0 arrives for them.
  auto land = [&](int keep) {
    if (keep == 0) cp_async_wait<0>();
    else cp_async_wait<1>();
    fence_proxy_async_shared();
    __syncwarp();
    if (lane == 0) mbar_arrive(pending_bar);
  };
  for (int j = 0, u = blockIdx.x;; ++j) {
    if (lane == 0) ring.publish(j, u);
    if (u >= units) break;
    int t, sp, ns, kb0, kb1;
    unit_tile(u, split_from, splits, t, sp, ns);
    split_range(sp, ns, kblocks, kb0, kb1);
    const MoeTile tile = moe_tile(table, p.experts, t, tiles_m, p.tiles_n, p.group_m, p.by_expert, BM, BN, FOLD);
    g.load(p.row_map, tile.row0, tile.valid_rows, lane);
    if constexpr (GATHER == 2) {
      // (the previous tile's copies read their ids when issued: overwriting them is safe)
      for (int r = lane; r < g.rows; r += 32) ids[r] = p.row_map[tile.row0 + r];
      __syncwarp();
    }
    for (int kb = kb0; kb < kb1; ++kb, ++it) {
      const int s = MbarRing<STAGES>::slot(it);
      const u32 sx = base + s * STAGE_BYTES, sw = sx + X_BYTES, bar = stages.full(s);
      const int k0 = kb * BK;
      if (lane == 0) {
        stages.acquire(it, 2 * W_BYTES + (GATHER == 1 ? (u32)g.rows * 128u : 0u));
        if (p.interleaved) {
          tma_load_3d(sw, &tma_w1, bar, k0, 2 * tile.n0, tile.expert);
        } else {
          tma_load_3d(sw, &tma_w1, bar, k0, tile.n0, tile.expert);
          tma_load_3d(sw + W_BYTES, &tma_w3, bar, k0, tile.n0, tile.expert);
        }
      }
      __syncwarp();  // the stage is free (lane 0 waited for it) before any lane loads into it
      // rows past BM are the folded rows, in the fold box after the weights
      auto row_at = [&](int r) { return r < BM ? sx + r * 128u : sw + 2 * W_BYTES + (r - BM) * 128u; };
      if constexpr (GATHER == 1) {
        g.issue(&tma_x, bar, k0, lane, row_at);
      } else {
        // chunk c of a row lands at chunk c ^ (row % 8): the 128B swizzle the wgmma reads
        // (tiles and the fold box start on 1024-byte boundaries); chunks past K are zeros
        const bool in_k = k0 + 8 * chunk < p.k;
        for (int r = lane / 8; r < g.rows; r += 4) {
          const in_t* src = in_k ? x + (i64)ids[r] * p.k + k0 + 8 * chunk : x;
          cp_async16_zfill_nohint(row_at(r) + ((u32)(chunk ^ (r & 7)) << 4), src, in_k ? 16 : 0);
        }
        cp_async_commit();
        if (pending) land(1);
        pending = true;
        pending_bar = bar;
      }
    }
    int next = 0;
    if (lane == 0) next = next_unit(u);
    u = __shfl_sync(0xffffffffu, next, 0);
  }
  if (GATHER == 2 && pending) land(0);
}

extern "C" __global__ void __launch_bounds__(384, 1)
    moe_swiglu_dual(const __grid_constant__ TmaMap tma_x, const __grid_constant__ TmaMap tma_w1,
                    const __grid_constant__ TmaMap tma_w3, const MoeArgs p, const SwigluSplit sx) {
  extern __shared__ unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = smem_align1024(smem_raw);
  const MbarRing<STAGES> stages{base + STAGES * STAGE_BYTES};
  const MoeIndexRing ring(smem_raw, raw, stages.bars + 16u * STAGES);  // the units, to the consumers
  int* table = ring.slot + 2;

  const int E = p.experts;
  if (threadIdx.x == 0) {
    // empty: lane 0 of each consumer warp; full: the producer's expect_tx, and with cp.async the
    // arrival for its copies
    stages.init(8, GATHER == 2 ? 2 : 1);
    ring.init(8);
    mbar_fence_init();
  }
  // Launched as moe_tile_prefix's dependent: everything above overlapped it; its tables (and
  // whatever earlier work wrote X) are read only from here.
  grid_dependency_wait();
  moe_load_tables(table, p.sched, E);
  __syncthreads();

  const int tiles_m = table[E], tiles = tiles_m * p.tiles_n, kblocks = (p.k + BK - 1) / BK;
  // The last wave's split (see the top): whole waves, or a last wave over half full, stay whole.
  int split_from = tiles, splits = 1;
  {
    const int slots = gridDim.x, tail = tiles % slots;
    if (sx.max_splits > 1 && tiles > slots && tail > 0 && 2 * tail <= slots) {
      const int s = min(min(slots / tail, sx.max_splits), kblocks / 4);
      if (s > 1) {
        splits = s;
        split_from = tiles - tail;
      }
    }
  }
  const int units = split_from + (tiles - split_from) * splits;
  // The unit after `u`: the static stride, or (dynamic) the next one nobody has taken yet.
  int* unit_counter = const_cast<int*>(p.sched) + moe_table_ints(E);
  auto next_unit = [&](int u) { return sx.dynamic ? (int)gridDim.x + atomicAdd(unit_counter, 1) : u + (int)gridDim.x; };
  const int wg = warpgroup_index();  // warp-uniform for ptxas (common/wgmma.cuh)

  if (wg == 0) {
    warpgroup_reg_dec<40>();
    if constexpr (GATHER) {
      if (threadIdx.x < 32) {
        int* ids = table + 3 * KILN_MAX_EXPERTS + 1;
        gather_producer(tma_x, tma_w1, tma_w3, p, base, stages, ring, table, ids, units, split_from, splits, kblocks,
                        tiles_m, next_unit);
      }
    } else if (threadIdx.x == 0) {
      tma_prefetch(&tma_x);
      tma_prefetch(&tma_w1);
      if (!p.interleaved) tma_prefetch(&tma_w3);
      u32 it = 0;
      for (int j = 0, u = blockIdx.x;; ++j, u = next_unit(u)) {
        ring.publish(j, u);
        if (u >= units) break;
        int t, sp, ns, kb0, kb1;
        unit_tile(u, split_from, splits, t, sp, ns);
        split_range(sp, ns, kblocks, kb0, kb1);
        const MoeTile tile = moe_tile(table, E, t, tiles_m, p.tiles_n, p.group_m, p.by_expert, BM, BN, FOLD);
        const int x_boxes = min((tile.valid_rows + XBOX - 1) / XBOX, BM / XBOX);
        const bool folded = FOLD > 0 && tile.valid_rows > BM;
        for (int kb = kb0; kb < kb1; ++kb, ++it) {
          // (zero fill past X counts)
          ws_fill(stages, it, 2 * W_BYTES + (x_boxes + (folded ? 1 : 0)) * XBOX * 128u, [&](int s, u32 bar) {
            const u32 sx = base + s * STAGE_BYTES, sw = sx + X_BYTES;
            const int k0 = kb * BK;
            for (int b = 0; b < x_boxes; ++b) tma_load_2d(sx + b * XBOX * 128u, &tma_x, bar, k0, tile.row0 + b * XBOX);
            if (folded) tma_load_2d(sw + 2 * W_BYTES, &tma_x, bar, k0, tile.row0 + BM);
            if (p.interleaved) {
              tma_load_3d(sw, &tma_w1, bar, k0, 2 * tile.n0, tile.expert);  // W1 block, then W3
            } else {
              tma_load_3d(sw, &tma_w1, bar, k0, tile.n0, tile.expert);
              tma_load_3d(sw + W_BYTES, &tma_w3, bar, k0, tile.n0, tile.expert);
            }
          });
        }
      }
    }
  } else {
    warpgroup_reg_inc<232>();
    const int c = wg - 1;
    const int w = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, q = lane % 4;
    out_t* y = static_cast<out_t*>(p.y);
    auto release = [&](int s) { stages.release(s, lane); };
    // acc[0, BN/2) is the gate fragment (columns 0-127), acc[BN/2, BN) the up fragment.
    float acc[BN];
#pragma unroll
    for (int i = 0; i < BN; ++i) acc[i] = 0.0f;
    // Folded rows (FOLD): this consumer's gate and up columns 64c .. 64c + 63 for the tile's rows
    // 128 .. 128 + FOLD - 1, transposed (m64nFOLD fragments: W rows down, X rows across).
    float fg[FR], fu[FR];
#pragma unroll
    for (int i = 0; i < FR; ++i) fg[i] = fu[i] = 0.0f;

    // The packed results of the last tile this consumer finished, not yet stored (SWIGLU_DEFER):
    // [row half h][column group g] 8 values in 4 words, in fragment order until flush()
    // transposes them, for rows prow[h] when pok[h].
    u32 pw[2][BN / 32][4];
    i64 prow[2] = {0, 0};
    bool pok[2] = {false, false}, pending = false;
    int pn0 = 0;
    auto flush = [&]() {
#if SWIGLU_DEFER
      if (!pending) return;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int g = 0; g < BN / 32; ++g) {
          quad_transpose_packed(pw[h][g], q);  // every lane takes part, stored rows or not
          if (pok[h]) moe_store8_packed(y, p.ldy, p.n, prow[h], pn0 + 8 * (4 * g + q), pw[h][g]);
        }
      }
      pending = false;
#endif
    };

    u32 it = 0;
    for (int j = 0;; ++j) {
      const int u = ring.take(j, lane);
      if (u >= units) break;
      int t, sp, ns, nk;
      {
        int kb0, kb1;
        unit_tile(u, split_from, splits, t, sp, ns);
        split_range(sp, ns, kblocks, kb0, kb1);
        nk = kb1 - kb0;
      }
      const MoeTile tile = moe_tile(table, E, t, tiles_m, p.tiles_n, p.group_m, p.by_expert, BM, BN, FOLD);
      const bool folded = FOLD > 0 && tile.valid_rows > BM;
      // This consumer's 64 rows all past the expert's end: keep the stage barriers in step,
      // issue no wgmma (the other consumer gets the tensor cores), store nothing.
      const bool idle = 64 * c >= tile.valid_rows;
      if (idle) {
        flush();
        for (int kb = 0; kb < nk; ++kb, ++it) release(stages.wait_full(it));
        if (ns == 1) continue;
      }
      int prev = 0;
      // The k loop, compiled twice (`fc`: the folded rows' wgmmas or not), so ptxas sees no branch
      // inside a wgmma batch (a join there costs an injected fence and a dummy wgmma a k-block).
      auto kloop = [&](auto fc) {
        auto mma = [&](int s, int kb, bool acc_live, bool) {
          const u32 sa = base + s * STAGE_BYTES + c * 64u * 128u, sw = base + s * STAGE_BYTES + X_BYTES;
#pragma unroll
          for (int i = 0; i < BN; ++i) wgmma_fence_operand(acc[i]);
#pragma unroll
          for (int i = 0; i < FR; ++i) {
            wgmma_fence_operand(fg[i]);
            wgmma_fence_operand(fu[i]);
          }
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < BK / 16; ++kk) {
            const u64 da = wgmma_desc_sw128(sa + kk * 32, 16, 1024);
            const u64 d1 = wgmma_desc_sw128(sw + kk * 32, 16, 1024);
            const int scale_d = (acc_live || kk > 0) ? 1 : 0;
            if constexpr (SPLIT) {
              const u64 d3 = wgmma_desc_sw128(sw + W_BYTES + kk * 32, 16, 1024);
              float(&gate)[BN / 2] = *reinterpret_cast<float(*)[BN / 2]>(&acc[0]);
              float(&up)[BN / 2] = *reinterpret_cast<float(*)[BN / 2]>(&acc[BN / 2]);
              wgmma_m64k16<in_t, BN, 0, 0>(gate, da, d1, scale_d);
              wgmma_m64k16<in_t, BN, 0, 0>(up, da, d3, scale_d);
            } else {
              wgmma_m64k16<in_t, 2 * BN, 0, 0>(acc, da, d1, scale_d);  // W1 rows then W3 rows
            }
            if constexpr (decltype(fc)::value) {
              // W1's and W3's rows 64c .. 64c + 63 (M) by the folded X rows (N = FOLD)
              const u64 dg = wgmma_desc_sw128(sw + c * 64u * 128u + kk * 32, 16, 1024);
              const u64 du = wgmma_desc_sw128(sw + W_BYTES + c * 64u * 128u + kk * 32, 16, 1024);
              const u64 dx = wgmma_desc_sw128(sw + 2 * W_BYTES + kk * 32, 16, 1024);
              wgmma_m64k16<in_t, 2 * FR, 0, 0>(fg, dg, dx, scale_d);
              wgmma_m64k16<in_t, 2 * FR, 0, 0>(fu, du, dx, scale_d);
            }
          }
          wgmma_commit();
          if (kb == 0) flush();  // the previous tile's stores, under this batch
#pragma unroll
          for (int i = 0; i < BN; ++i) wgmma_fence_operand(acc[i]);
#pragma unroll
          for (int i = 0; i < FR; ++i) {
            wgmma_fence_operand(fg[i]);
            wgmma_fence_operand(fu[i]);
          }
        };
        prev = ws_kloop(stages, it, idle ? 0 : nk, c, mma, release);
      };
      if constexpr (FOLD > 0) {
        if (folded) kloop(IntConst<1>{});
        else kloop(IntConst<0>{});
      } else {
        kloop(IntConst<0>{});
      }
      // (Waited on every path, idle included: ptxas cannot tell the paths apart and would add
      // a wait of its own before the accumulators' next use.)
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < BN; ++i) wgmma_fence_operand(acc[i]);
#pragma unroll
      for (int i = 0; i < FR; ++i) {
        wgmma_fence_operand(fg[i]);
        wgmma_fence_operand(fu[i]);
      }
      if (!idle) release(prev);
      if (ns > 1) {
        // A slice of a split tile: partials of both consumers (common/split_k.cuh); an idle
        // consumer's rows are never stored, so it only keeps the barriers.
        const int ct = threadIdx.x - 128, st = t - split_from;
        float* tile_ws = sx.ws + (i64)st * ns * (BM * 2 * BN);
        // the folded rows' partials after every CTA's full partial tiles: the tile's ns gate
        // slots, then its ns up slots
        float* fold_g = sx.ws + (i64)gridDim.x * (BM * 2 * BN) + (i64)st * ns * (256 * 2 * FR);
        float* fold_u = fold_g + (i64)ns * (256 * FR);
        if (!idle) split_store_partial(tile_ws + (i64)sp * (BM * 2 * BN), ct, acc);
        if (FOLD > 0 && folded) {
          split_store_partial(fold_g + (i64)sp * (256 * FR), ct, fg);
          split_store_partial(fold_u + (i64)sp * (256 * FR), ct, fu);
        }
        if (!split_arrive(sx.counters + st, ns, ct, 3) || idle) continue;
        split_add_others(tile_ws, ns, sp, ct, acc);
        if (FOLD > 0 && folded) {
          split_add_others(fold_g, ns, sp, ct, fg);
          split_add_others(fold_u, ns, sp, ct, fu);
        }
      }

      const int r0 = 64 * c + 16 * w + lane / 4;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = r0 + 8 * h;
        const bool row_ok = r < tile.valid_rows;
        const i64 row = (i64)tile.row0 + r;
        const float scale = (row_ok && p.route != nullptr) ? p.route[row] : 1.0f;
        prow[h] = row;
        pok[h] = row_ok;
#pragma unroll
        for (int j0 = 0; j0 < BN / 8; j0 += 4) {
          float e[4][2];
#pragma unroll
          for (int s = 0; s < 4; ++s) {
#pragma unroll
            for (int x = 0; x < 2; ++x) {
              const int i = 4 * (j0 + s) + 2 * h + x;
              e[s][x] = swiglu_silu(acc[i]) * acc[BN / 2 + i] * scale;
            }
          }
#if SWIGLU_DEFER
          // packed as computed; flush() transposes them across the quad under the next batch
#pragma unroll
          for (int s = 0; s < 4; ++s) pw[h][j0 / 4][s] = pack2<out_t>(e[s][0], e[s][1]);
#else
          quad_transpose(e, q);
          if (row_ok) moe_store8(y, p.ldy, p.n, row, tile.n0 + 8 * (j0 + q), e);
#endif
        }
      }
      pn0 = tile.n0;
      pending = true;
      if (FOLD > 0 && folded) {
        // Fragment i: W row 16w + lane/4 + 8((i >> 1) & 1) of block c (an output column), X row
        // 128 + 8(i >> 2) + 2q + (i & 1) of the tile. Few values: stored one by one, now.
#pragma unroll
        for (int i = 0; i < FR; ++i) {
          const int xr = BM + 8 * (i >> 2) + 2 * q + (i & 1);
          const int col = tile.n0 + 64 * c + 16 * w + lane / 4 + 8 * ((i >> 1) & 1);
          if (xr < tile.valid_rows && col < p.n) {
            const i64 row = (i64)tile.row0 + xr;
            const float scale = p.route != nullptr ? p.route[row] : 1.0f;
            y[row * p.ldy + col] = from_float<out_t>(swiglu_silu(fg[i]) * fu[i] * scale);
          }
        }
      }
    }
    flush();
  }
}
