//! fa3_wgmma's device workspaces and the launch decisions that size them: the work counters,
//! split items (a ragged block shared by consumers) and the last wave run in parts (the buffers
//! themselves are the context's, `ctx.scratch.attn_*`).

use super::config::Config;
use crate::ops::attention::AttentionProblem;

impl Config {
    /// Bytes of one consumer warpgroup's partial softmax state in a workspace (the kernel's
    /// `store_partial`): 128 threads x (O's D/2 registers, 2 maxima, 2 sums) in fp32.
    pub(super) fn partial_state_bytes(&self) -> usize {
        128 * (self.d as usize / 2 + 4) * 4
    }

    /// Bytes of the split workspace a launch of `blocks` blocks needs for `p`, or `None` when no
    /// item is split. Split items: the last query block of each head in a non-causal problem
    /// when it has at most 64 rows, whose first [`split_consumers`] consumers then share its
    /// rows and divide its key tiles instead of leaving all but one idle (kernels/attention/fa3_wgmma.cu, `split_merge`; at
    /// S 4096 in 192-row blocks that block is a third full). Only for persistent launches (the
    /// workspace has a slice per block) of configs without overlap or ping-pong (the kernel's
    /// split path is in its plain loop).
    pub fn split_ws_bytes(&self, p: &AttentionProblem, blocks: u32) -> Option<usize> {
        let ragged = p.seqlen_q % self.bm() as usize;
        let split = !p.causal
            && !self.overlap
            && !self.pingpong
            && self.persistent_for(p)
            && (1..=64).contains(&ragged);
        // The kernel's SPLIT consumers share a split item: the most consumers, up to CWG, that
        // divide STAGES, so that each one's tiles keep to its own slots of the ring.
        let sharing = split_consumers(self.cwg, self.stages) as usize;
        // Per block: SPLIT - 1 consumers' partial states.
        (split && sharing > 1).then(|| blocks as usize * (sharing - 1) * self.partial_state_bytes())
    }

    /// Which items run in shares of their key tiles on several blocks (kernels/attention/
    /// fa3_wgmma.cu, `KILN_PARTS`), or `None`: the last, partial wave's items of a non-causal
    /// problem (all items alike) run persistently, in 2 or 3 parts, whichever makes that wave
    /// shortest (the parts run in rounds of `blocks`, each a half or a third of an item long),
    /// when that is shorter than a whole item and each part has a key tile. E.g. d128 B2 S8192:
    /// 1376 items of 192 rows on 132 SMs leave 56 in an 11th wave: 112 halves, one round of half
    /// an item. d256 S 8192: 2048 items leave 68: 204 thirds, two rounds of a third.
    pub fn parts(&self, p: &AttentionProblem, blocks: u32) -> Option<Parts> {
        if p.causal || self.pingpong || !self.persistent_for(p) || blocks == 0 {
            return None;
        }
        let (items, _) = self.grid(p, blocks);
        let (b, tail) = (blocks as u64, items % blocks as u64);
        if items <= b || tail == 0 {
            return None;
        }
        let key_tiles = p.seqlen_kv.div_ceil(self.bn as usize) as u64;
        // The last wave's length in sixths of an item: rounds of `blocks` parts, each 6/n long.
        let length = |n: u64| (tail * n).div_ceil(b) * (6 / n);
        let n = [2u64, 3]
            .into_iter()
            .filter(|&n| key_tiles >= n && length(n) < 6)
            .min_by_key(|&n| (length(n), n))?;
        Some(Parts {
            from: items - tail,
            parts: n as u32,
            items: tail,
            // Per item: n parts x CWG consumers' partial states.
            ws_bytes: (tail * n) as usize * self.cwg as usize * self.partial_state_bytes(),
        })
    }
}

/// A launch's items in parts ([`Config::parts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    /// The first item run in parts.
    pub from: u64,
    /// Parts per item (2 or 3).
    pub parts: u32,
    /// How many items run in parts (the rest, from `from` on).
    pub items: u64,
    /// Bytes of the parts' partial states.
    pub ws_bytes: usize,
}

/// Consumers that share a split item (the kernel's `SPLIT`): the most, up to `cwg`, that divide
/// the ring's `stages`, so that each keeps to its own slots of the ring (a parity wait on a slot
/// another consumer filled last can pass a phase early); 1: the config does not split.
pub fn split_consumers(cwg: u32, stages: u32) -> u32 {
    (1..=cwg.max(1))
        .rev()
        .find(|c| stages.is_multiple_of(*c))
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_items_share_only_rings_whose_slots_each_consumer_keeps() {
        // (consumers, stages) -> consumers sharing a split item
        for (cwg, stages, want) in [
            (3, 2, 2),
            (2, 2, 2),
            (3, 3, 3),
            (2, 4, 2),
            (3, 4, 2),
            (2, 3, 1),
            (1, 3, 1),
        ] {
            assert_eq!(
                split_consumers(cwg, stages),
                want,
                "cwg {cwg} stages {stages}"
            );
        }
        // the defaults keep their split
        for d in [64, 128] {
            let c = Config::default_for(d);
            assert_eq!(
                split_consumers(c.cwg, c.stages),
                c.cwg.min(c.stages),
                "d{d}"
            );
        }
    }

    #[test]
    fn only_a_ragged_non_causal_block_of_at_most_64_rows_is_split() {
        let d128 = Config::default_for(128); // 192-row blocks, 2 stages: two consumers share
        let p = AttentionProblem::new(4, 16, 4096, 128); // 4096 = 21 x 192 + 64
        assert_eq!(d128.split_ws_bytes(&p, 132), Some(132 * 128 * (64 + 4) * 4));
        let causal = AttentionProblem { causal: true, ..p };
        assert_eq!(d128.split_ws_bytes(&causal, 132), None);
        let rows128 = AttentionProblem::new(2, 16, 8192, 128); // 8192 = 42 x 192 + 128
        assert_eq!(d128.split_ws_bytes(&rows128, 132), None);
        let whole = AttentionProblem::new(1, 16, 192 * 10, 128);
        assert_eq!(d128.split_ws_bytes(&whole, 132), None);
        let tiny = AttentionProblem::new(1, 1, 17, 128);
        assert!(d128.split_ws_bytes(&tiny, 1).is_some());
        // Overlapped and one-block-per-item configs keep every item whole.
        let overlap = Config {
            overlap: true,
            ..d128
        };
        assert_eq!(overlap.split_ws_bytes(&p, 132), None);
        let one_per_item = Config {
            persist: 0,
            dynamic: 0,
            ..d128
        };
        assert_eq!(one_per_item.split_ws_bytes(&p, 1408), None);
    }

    #[test]
    fn the_last_wave_runs_in_parts_only_where_that_shortens_it() {
        let d128 = Config::default_for(128);
        // 2 x 16 x 43 = 1376 items of 192 rows on 132 SMs: 56 in the 11th wave, 112 halves.
        let p = AttentionProblem::new(2, 16, 8192, 128);
        let pt = d128.parts(&p, 132).expect("a 56-item last wave is split");
        assert_eq!((pt.from, pt.parts, pt.items), (1320, 2, 56));
        assert_eq!(pt.ws_bytes, 56 * 2 * 3 * 128 * (64 + 4) * 4);
        // 4 x 16 x 22 = 1408: 88 left over; 176 halves need two rounds, 264 thirds two rounds
        // of a third.
        let s4k = d128.parts(&AttentionProblem::new(4, 16, 4096, 128), 132);
        assert_eq!(s4k.map(|pt| (pt.from, pt.parts)), Some((1320, 3)));
        // d256 (overlapped, static order): 2048 items of 128 rows, 68 left over: thirds.
        let d256 = Config::default_for(256).parts(&AttentionProblem::new(2, 16, 8192, 256), 132);
        assert_eq!(d256.map(|pt| (pt.from, pt.parts)), Some((1980, 3)));
        // Causal items differ (heaviest first balances them); a single wave has no tail; a last
        // wave over two thirds full gains nothing from thirds (two rounds).
        assert_eq!(
            d128.parts(&AttentionProblem { causal: true, ..p }, 132),
            None
        );
        assert_eq!(
            d128.parts(&AttentionProblem::new(1, 4, 4096, 128), 132),
            None
        );
        assert_eq!(
            d128.parts(&AttentionProblem::new(1, 1, 192 * 250, 128), 132),
            None
        );
        // Ping-pong and one block per item keep items whole.
        let pingpong = Config {
            pingpong: true,
            ..d128
        };
        assert_eq!(pingpong.parts(&p, 132), None);
        let one_per_item = Config {
            persist: 0,
            dynamic: 0,
            ..d128
        };
        assert_eq!(one_per_item.parts(&p, 1376), None);
        // One key tile cannot be shared.
        let short = AttentionProblem {
            seqlen_kv: 100,
            ..p
        };
        assert_eq!(d128.parts(&short, 132), None);
    }
}
