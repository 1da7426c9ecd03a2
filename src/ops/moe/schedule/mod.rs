//! MoE tile scheduling, on the host: the tile orders the kernels walk and their choice
//! (`order`), the tables `moe_tile_prefix` builds and the walk from a tile to its expert (`tables`:
//! mirrors of `kernels/moe/tile_prefix.cu` and `kernels/moe/sched.cuh`, so the schedule can be
//! simulated and tested without a GPU), and the wave-quantisation-aware choice of tile shape
//! (`tiles`).

mod order;
mod tables;
mod tiles;

pub use order::{
    expert_coords, order_for, tile_coords, TileOrder, EXPERT_GROUP_MAX, GROUP_M, ONE_GROUP_MAX,
    ONE_GROUP_X_BYTES,
};
pub use tables::{
    expert_tiles, find_expert, sched_bytes, table_bytes, tile, tile_in, Schedule, Tile,
    INDEX_RING_BYTES, MAX_EXPERTS, SORT_MAX,
};
pub use tiles::{TileConfig, BK};

/// A contiguous problem of these per-expert row counts, N = `n` and K = 64 (for the tests).
#[cfg(test)]
fn contiguous(counts: &[usize], n: usize) -> super::problem::MoeProblem {
    use crate::ops::gemm::DType;
    super::problem::MoeProblem::contiguous(counts, n, 64, DType::Bf16, DType::Bf16)
}
