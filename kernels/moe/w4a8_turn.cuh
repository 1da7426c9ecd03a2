// The decode of `KILN_W4A8_FORM=wide-turn` (ledger F150): each of the wide form's three consumers
// decodes whole stages in turn (step it's stage by consumer it % 3, the slot's index), both atoms
// (a unit of each a thread: w4a8_lean.cuh's decode of one unit, twice), two steps before the step
// that reads it, and the consumers meet at mbarriers of the slots instead of at a named barrier.
//
// Why (ncu of `wide-first`, F120's early call; `wide-lean`, F150's): a step (~1,350-1,390 cycles
// against 768 of tensor work) is the decoding consumers' chain: decode (~900 cycles for ~100-140
// instructions: dependent shared loads under the wgmmas' operand traffic), meet, promote, issue;
// consumer 2 waits at the meet. Here a consumer decodes one stage in three, both units' loads in
// flight together where the registers allow, so its chain over three steps is one two-unit decode
// and three promotions and issues; a slot's readers wait only for the decode two steps back. The
// SwiGLU only (the grouped GEMM spills 20 bytes with it at 160 registers and runs `wide`).
//
// A slot's barriers sit after the tables (lut + 128): `full` (4 arrivals: lane 0 of each warp of
// the decoding consumer, after its lanes' stores and proxy fence) and `empty` (12: lane 0 of each
// consumer warp once its wgmmas have read the slot, or, without tokens, once it has seen it full).
#pragma once
#include "common/mbarrier.cuh"
#include "common/tma.cuh"
#include "moe/w4a8_lean.cuh"

constexpr u32 TURN_SLOTS = 3, TURN_BAR_BYTES = 64;
// Round 1 (F151): the decoders waited for their stages to land in 15 % of the samples: a stage is
// decoded a step earlier than the meet's forms read it, and its atoms come from DRAM just in
// time. The producer asks L2 for each tile's atoms this many K blocks before it loads them (F152).
constexpr int TURN_AHEAD = 4;

__device__ __forceinline__ u32 turn_full(u32 lut, u32 it) { return lut + 128 + 8u * (it % TURN_SLOTS); }
__device__ __forceinline__ u32 turn_empty(u32 lut, u32 it) { return lut + 128 + 8u * (TURN_SLOTS + it % TURN_SLOTS); }

// One thread, with the rings' barriers (before mbar_fence_init and the block barrier).
__device__ __forceinline__ void turn_init(u32 lut, int consumers) {
  for (u32 s = 0; s < TURN_SLOTS; ++s) {
    mbar_init(turn_full(lut, s), 4);
    mbar_init(turn_empty(lut, s), 4u * consumers);
  }
}

// Waits until step it's slot is decoded (its readers).
__device__ __forceinline__ void turn_wait_full(u32 lut, u32 it) { mbar_wait(turn_full(lut, it), (it / TURN_SLOTS) & 1); }

// Step it's slot read (lane 0 of a reader warp, after its wgmmas or its wait).
__device__ __forceinline__ void turn_free(u32 lut, u32 it, int lane) {
  if (lane == 0) mbar_arrive(turn_empty(lut, it));
}

// Consumer it % 3 decodes step it's stage (at `stage`, waited for) into the slot at `slot` once
// the slot's last readers (step it - 3) are done: unit l of atom 0 and the same unit of atom 1
// (64 rows on: the same swizzle).
__device__ __forceinline__ void turn_decode(u32 lut, u32 it, u32 stage, u32 slot, const W4Lane& l, int lane) {
  mbar_wait(turn_empty(lut, it), ((it / TURN_SLOTS) & 1) ^ 1);  // a fresh barrier passes at once
  const W4Lane m = {l.codes + W4A8_ATOM_BYTES, l.offs + W4A8_ATOM_BYTES, l.dst + 64u * 128u};
  // atom 0's unit, then atom 1's: both units' loads first spilled at 160 registers (the offsets
  // of both first cost nothing)
  W4Codes a, b;
  const u32 oa = w4a8_lean_offs(stage, l), ob = w4a8_lean_offs(stage, m);
  w4a8_lean_words(a, stage, l);
  w4a8_lean_tables(a, lut, oa);
  w4a8_lean_store(a, slot, l);
  w4a8_lean_words(b, stage, m);
  w4a8_lean_tables(b, lut, ob);
  w4a8_lean_store(b, slot, m);
  fence_proxy_async_shared();
  __syncwarp();  // every lane's stores fenced before lane 0 arrives for the warp
  if (lane == 0) mbar_arrive(turn_full(lut, it));
}
