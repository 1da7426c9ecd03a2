//! Packed (variable-length) attention in the harness: the problems (given or seeded lengths),
//! verification against the float64 reference with poisoned outputs, and timing beside one dense
//! call of the same work.

use serde::Serialize;

use crate::device::{Context, DeviceBuffer, HostFlags};
use crate::error::Result;
use crate::harness::attention::verify::{judge_o_lse, lse_error, o_bound, o_error_of};
use crate::harness::attention::{host_inputs, upload};
use crate::harness::device_data::mix64;
use crate::harness::outcome::{Extra, Outcome};
use crate::harness::runner::{self, Check};
use crate::ops::attention::fa3_wgmma::{Fa3Wgmma, VarlenOperands};
use crate::ops::attention::{AttentionProblem, VarlenProblem, VarlenShape, Window};
use crate::reference::{attention_varlen::varlen_forward, data::HostData};

/// `n` (query, key) lengths drawn uniformly from `lo..=hi` (equal query and key lengths), the
/// same for the same seed.
pub fn seeded_lengths(n: usize, lo: usize, hi: usize, seed: u64) -> Vec<(usize, usize)> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            // splitmix64
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let l = lo + (mix64(x) % (hi - lo + 1) as u64) as usize;
            (l, l)
        })
        .collect()
}

/// The boundary suite: lengths 1, 63, 64, 65, 127 and 4097 mixed, query lengths that differ from
/// key lengths (both ways, and empty sequences), GQA, causal or not, windows; head dims 64, 128
/// and 256.
pub fn varlen_suite() -> Vec<VarlenProblem> {
    let mixed = [
        (1, 1),
        (63, 63),
        (64, 64),
        (65, 65),
        (127, 127),
        (4097, 4097),
    ];
    let uneven = [
        (1, 65),
        (63, 200),
        (130, 64),
        (0, 17),
        (300, 1),
        (64, 0),
        (257, 513),
    ];
    let windows = [
        Window::UNBOUNDED,
        Window { left: 64, right: 0 },
        Window {
            left: 100,
            right: 37,
        },
    ];
    let mut out = Vec::new();
    for d in [64, 128, 256] {
        for (lengths, heads, kv) in [(&mixed[..], 2, 1), (&uneven[..], 4, 2)] {
            for causal in [false, true] {
                for w in windows {
                    out.push(VarlenProblem {
                        heads_kv: kv,
                        causal,
                        window: w,
                        ..VarlenProblem::new(lengths, heads, d)
                    });
                }
            }
        }
    }
    out
}

/// Unmasked (query, key) pairs of one head, summed over the sequences.
pub fn varlen_pairs(p: &VarlenProblem) -> u64 {
    (0..p.batch())
        .map(|s| {
            let (rq, rk) = p.rows(s);
            (0..rq.len())
                .map(|i| p.window.visible(p.causal, i, rq.len(), rk.len()).len() as u64)
                .sum::<u64>()
        })
        .sum()
}

/// 4·H·D per unmasked pair, as the dense problem counts.
pub fn varlen_flops(p: &VarlenProblem) -> f64 {
    4.0 * p.heads_q as f64 * p.head_dim as f64 * varlen_pairs(p) as f64
}

/// How a packed launch is sized: by the longest sequences the offsets hold (the host-checked
/// path), or by looser bounds, as flash-attention's `max_seqlen_q`/`_k` may be (the path where
/// the offsets never reach the host: the grid covers more rows than any sequence has and the
/// kernel alone checks the offsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum VarlenBounds {
    Exact,
    Loose,
}

impl VarlenBounds {
    /// The launch shape of `p` under these bounds: loose ones a quarter (at least 37 rows) over
    /// the longest, within the packed rows.
    pub fn shape(self, p: &VarlenProblem) -> VarlenShape {
        let s = p.shape();
        match self {
            VarlenBounds::Exact => s,
            VarlenBounds::Loose => VarlenShape {
                max_q: (s.max_q + (s.max_q / 4).max(37)).min(s.total_q),
                max_k: (s.max_k + (s.max_k / 4).max(37)).min(s.total_k),
                ..s
            },
        }
    }
}

/// A short label: sequences, lengths (up to 8), heads, dim, masks.
pub fn varlen_label(p: &VarlenProblem) -> String {
    let lens: Vec<String> = (0..p.batch().min(8))
        .map(|s| {
            let (q, k) = p.rows(s);
            if q.len() == k.len() {
                q.len().to_string()
            } else {
                format!("{}:{}", q.len(), k.len())
            }
        })
        .collect();
    format!(
        "varlen {} seqs [{}{}] h{}/{} d{} {}{}{}",
        p.batch(),
        lens.join(","),
        if p.batch() > 8 { ",.." } else { "" },
        p.heads_q,
        p.heads_kv,
        p.head_dim,
        if p.causal { "causal " } else { "" },
        p.window.label(),
        p.dtype
    )
}

/// The device buffers of one packed problem (inputs from `seed`, outputs as allocated).
pub struct VarlenBuffers {
    pub q: DeviceBuffer,
    pub k: DeviceBuffer,
    pub v: DeviceBuffer,
    pub o: DeviceBuffer,
    pub lse: DeviceBuffer,
    pub cu_q: DeviceBuffer,
    pub cu_k: DeviceBuffer,
}

impl VarlenBuffers {
    /// Q, K and V of `p` random from `seed` on the host ([`host_inputs`]), and the buffers that
    /// hold them with O and LSE as allocated.
    pub fn random(p: &VarlenProblem, seed: u64) -> Result<([HostData; 3], Self)> {
        let inputs = host_inputs(p.dtype, [p.q_elems(), p.kv_elems(), p.kv_elems()], seed);
        let bufs = Self::holding(p, upload(&inputs)?)?;
        Ok((inputs, bufs))
    }

    /// The buffers of `p` holding the uploaded Q, K and V, with O and LSE allocated.
    pub fn holding(p: &VarlenProblem, [q, k, v]: [DeviceBuffer; 3]) -> Result<Self> {
        Ok(VarlenBuffers {
            q,
            k,
            v,
            o: DeviceBuffer::new(p.q_elems() * p.dtype.size())?,
            lse: DeviceBuffer::new(p.heads_q * p.total_q * 4)?,
            cu_q: DeviceBuffer::from_host(&p.cu_seqlens_q)?,
            cu_k: DeviceBuffer::from_host(&p.cu_seqlens_k)?,
        })
    }

    pub fn operands(&self) -> VarlenOperands<'_> {
        VarlenOperands {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            o: &self.o,
            lse: &self.lse,
            cu_q: &self.cu_q,
            cu_k: &self.cu_k,
            errors: 0,
        }
    }
}

/// Random inputs from `seed`, NaN-poisoned O and LSE, fa3_wgmma's packed forward launched with
/// `bounds`, and every row compared with the float64 reference (O's relative L2 error, LSE's
/// largest error, elements never written); the kernel's offset check must find nothing.
pub fn verify_varlen(
    ctx: &Context,
    p: &VarlenProblem,
    seed: u64,
    bounds: VarlenBounds,
) -> Result<Outcome> {
    p.validate()?;
    runner::run(ctx, &Packed { p, bounds }, seed)
}

/// The packed forward's outcome on the problem labelled `label`, not yet judged.
pub fn blank(label: String, seed: u64, bound: f64) -> Outcome {
    let extra = Extra::Varlen {
        lse_max_error: f64::NAN,
    };
    Outcome::new("fa3_wgmma", label, seed, bound, extra)
}

/// One packed problem under one kind of bounds, as the runner checks it.
struct Packed<'a> {
    p: &'a VarlenProblem,
    bounds: VarlenBounds,
}

/// A packed problem's inputs (Q, K, V), buffers and the kernel's error word.
struct PackedDrawn {
    inputs: [HostData; 3],
    bufs: VarlenBuffers,
    flags: HostFlags,
}

impl Check for Packed<'_> {
    type Drawn = PackedDrawn;

    fn blank(&self, seed: u64) -> Outcome {
        let (p, shape) = (self.p, self.bounds.shape(self.p));
        let label = match self.bounds {
            VarlenBounds::Exact => varlen_label(p),
            VarlenBounds::Loose => format!(
                "{} (no host copy, max {}/{})",
                varlen_label(p),
                shape.max_q,
                shape.max_k
            ),
        };
        blank(label, seed, o_bound(p.dtype))
    }

    fn supports(&self, ctx: &Context) -> std::result::Result<(), String> {
        Fa3Wgmma.supports_varlen(&self.bounds.shape(self.p), &ctx.info)
    }

    fn draw(&self, _ctx: &Context, seed: u64) -> Result<PackedDrawn> {
        let (inputs, bufs) = VarlenBuffers::random(self.p, seed)?;
        Ok(PackedDrawn {
            inputs,
            bufs,
            flags: HostFlags::new(1)?,
        })
    }

    fn launch(&self, ctx: &Context, d: &mut PackedDrawn) -> Result<()> {
        // All-ones bytes: NaN in every dtype, so an unwritten element cannot pass.
        d.bufs.o.fill_bytes(0xFF, ctx)?;
        d.bufs.lse.fill_bytes(0xFF, ctx)?;
        let ops = VarlenOperands {
            errors: d.flags.device_ptr(),
            ..d.bufs.operands()
        };
        Fa3Wgmma.launch_varlen(ctx, &self.bounds.shape(self.p), &ops)
    }

    fn flops(&self) -> f64 {
        varlen_flops(self.p)
    }

    fn judge(&self, d: &PackedDrawn, out: &mut Outcome) -> Result<()> {
        let p = self.p;
        let o = HostData::from_bytes(
            p.dtype,
            &d.bufs.o.download::<u8>(p.q_elems() * p.dtype.size())?,
        );
        let lse: Vec<f32> = d.bufs.lse.download::<f32>(p.heads_q * p.total_q)?;
        out.mismatches = (0..o.len()).filter(|&i| o.get(i).is_nan()).count()
            + lse.iter().filter(|x| x.is_nan()).count();
        let [q, k, v] = d.inputs.each_ref().map(HostData::to_f64);
        let want = varlen_forward(p, &q, &k, &v);
        out.rel_error = o_error_of(&o, &want.o);
        let lse_err = want.lse.iter().zip(&lse).map(|(&w, &h)| lse_error(h, w));
        out.set_lse_max_error(lse_err.fold(0.0f64, f64::max));
        let flagged = d.flags.take()[0] != 0;
        judge_o_lse(
            out,
            p.dtype,
            &[(flagged, &|| {
                "the kernel flagged offsets that are good (its check of the offsets is wrong)"
                    .into()
            })],
        );
        Ok(())
    }
}

/// The dense problem with (about) the same work as `p`: one sequence of S queries over S keys,
/// S the square root of the packed pairs per head (masks off: the pairs are counted, not the
/// shape), rounded to a multiple of 128.
pub fn dense_equivalent(p: &VarlenProblem) -> AttentionProblem {
    let s = ((varlen_pairs(p) as f64).sqrt() / 128.0).round().max(1.0) as usize * 128;
    AttentionProblem {
        heads_kv: p.heads_kv,
        dtype: p.dtype,
        scale: p.scale,
        ..AttentionProblem::new(1, p.heads_q, s, p.head_dim)
    }
}

/// The same batch with every sequence of one length, masks kept, the length chosen so that its
/// pairs come closest to the packed batch's (a multiple of 64): beside the packed call it shows
/// what the raggedness alone costs, where [`dense_equivalent`]'s one long sequence also has
/// fewer, longer items.
pub fn dense_equal_batch(p: &VarlenProblem) -> AttentionProblem {
    let (batch, pairs) = (p.batch().max(1), varlen_pairs(p));
    let at = |s: usize| AttentionProblem {
        heads_kv: p.heads_kv,
        dtype: p.dtype,
        scale: p.scale,
        causal: p.causal,
        window: p.window,
        ..AttentionProblem::new(batch, p.heads_q, s, p.head_dim)
    };
    let gap = |s: usize| (at(s).pairs() as f64 * batch as f64 - pairs as f64).abs();
    // Pairs grow with the length: walk up in steps of 64 while the gap shrinks.
    let mut s = 64;
    while gap(s + 64) < gap(s) {
        s += 64;
    }
    at(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_lengths_repeat_and_stay_in_range() {
        let a = seeded_lengths(32, 128, 8192, 7);
        assert_eq!(a, seeded_lengths(32, 128, 8192, 7));
        assert_ne!(a, seeded_lengths(32, 128, 8192, 8));
        assert!(a.iter().all(|&(q, k)| q == k && (128..=8192).contains(&q)));
    }

    #[test]
    fn pairs_count_each_sequences_masks_and_the_suite_validates() {
        let p = VarlenProblem {
            causal: true,
            ..VarlenProblem::new(&[(3, 3), (2, 5)], 2, 64)
        };
        // causal 3x3: 1+2+3; 2 over 5 bottom-right: 4+5
        assert_eq!(varlen_pairs(&p), 6 + 9);
        assert_eq!(varlen_flops(&p), 4.0 * 2.0 * 64.0 * 15.0);
        let d = dense_equivalent(&VarlenProblem::new(&[(1024, 1024); 4], 2, 128));
        assert_eq!(d.seqlen_q, 2048);
        // Equal lengths: the batch itself; ragged ones: the length of the same pairs, causal
        // (about L²/2 per sequence) kept.
        let even = dense_equal_batch(&VarlenProblem::new(&[(1024, 1024); 4], 2, 128));
        assert_eq!((even.batch, even.seqlen_q, even.causal), (4, 1024, false));
        let ragged = VarlenProblem {
            causal: true,
            ..VarlenProblem::new(&[(640, 640), (1920, 1920)], 2, 64)
        };
        let e = dense_equal_batch(&ragged);
        assert_eq!((e.batch, e.seqlen_q, e.causal), (2, 1408, true));
        assert!((e.pairs() * 2).abs_diff(varlen_pairs(&ragged)) < 2 * 64 * 1408);
        for p in varlen_suite() {
            p.validate().unwrap();
        }
        assert!(varlen_label(&p).contains("[3,2:5]"), "{}", varlen_label(&p));
    }
}
