//! The attention backward problem: the forward's problem (shapes, mask, scale, layout) and
//! whether dQ must be summed in a fixed order (bitwise-reproducible gradients).

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::ops::attention::AttentionProblem;

/// One attention backward to run: the gradients of the forward `attn`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BackwardProblem {
    pub attn: AttentionProblem,
    /// dQ's key blocks are added in a fixed order, so two runs give the same bits.
    pub deterministic: bool,
}

impl BackwardProblem {
    pub fn new(attn: AttentionProblem, deterministic: bool) -> Self {
        BackwardProblem {
            attn,
            deterministic,
        }
    }

    pub fn validate(&self) -> Result<()> {
        self.attn.validate()
    }

    /// FlashAttention's count: 2.5 times the forward's FLOPs (five GEMMs of the forward's two's
    /// size: Qkᵀ recomputed, dV, dP, dQ and dK).
    pub fn flops(&self) -> f64 {
        2.5 * self.attn.flops()
    }

    /// The forward's label, and `deterministic` when it is.
    pub fn label(&self) -> String {
        let det = if self.deterministic {
            " deterministic"
        } else {
            ""
        };
        format!("{}{det}", self.attn.label())
    }

    /// Device bytes of the operands (Q, K, V, O, dO, LSE, dQ, dK, dV).
    pub fn operand_bytes(&self) -> u64 {
        let a = &self.attn;
        let e = a.dtype.size() as u64;
        (4 * a.q_elems() as u64 + 4 * a.kv_elems() as u64) * e + 4 * a.lse_elems() as u64
    }

    /// Device bytes of the operands and the workspaces (D and the fp32 dQ accumulator): what one
    /// run occupies.
    pub fn device_bytes(&self) -> u64 {
        let a = &self.attn;
        self.operand_bytes() + 4 * (a.lse_elems() as u64 + a.q_elems() as u64)
    }

    /// The key blocks of `bn` keys of every key/value head and batch: a grid's blocks, one a
    /// key block.
    pub fn key_blocks(&self, bn: u32) -> u32 {
        let a = &self.attn;
        (a.seqlen_kv as u32).div_ceil(bn) * a.heads_kv as u32 * a.batch as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flops_are_two_and_a_half_forwards_and_the_label_says_deterministic() {
        let f = AttentionProblem::new(2, 16, 8192, 128);
        let p = BackwardProblem::new(f, true);
        assert_eq!(p.flops(), 2.5 * 4.0 * 2.0 * 16.0 * 128.0 * 8192.0 * 8192.0);
        assert!(p.label().ends_with(" deterministic"));
        assert!(!BackwardProblem::new(f, false).label().contains("determ"));
        // 4 Q-sized and 4 K-sized 16-bit tensors, LSE, D and the f32 accumulator.
        let s = AttentionProblem::new(1, 2, 10, 64);
        let q = 2 * 10 * 64;
        assert_eq!(
            BackwardProblem::new(s, false).device_bytes(),
            (8 * q * 2 + 4 * (2 * 20 + q)) as u64
        );
    }
}
