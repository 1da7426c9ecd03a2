//! fa3_wgmma over a packed batch of variable-length sequences (`KILN_VARLEN`): maps over the
//! packed tensors, a grid over the longest sequence's query blocks, and the launch. The offsets
//! are read (and checked) by the kernel only: nothing here depends on their contents.

use super::config::{Config, Masking};
use super::launch::{encode, map_shape};
use super::Fa3Wgmma;
use crate::device::{Context, DeviceBuffer, DeviceInfo, Function};
use crate::error::{Error, Result};
use crate::ops::attention::varlen::VarlenShape;
use crate::ops::attention::{
    AttentionKernel, AttentionOperands, AttentionProblem, AttnArgs, Strides, Window,
    WINDOW_UNBOUNDED,
};

/// The device buffers of one packed call: Q, O [total_q, H, D], K, V [total_k, Hkv, D], LSE
/// f32 [H, total_q], and the cumulative offsets, i32 [batch + 1] each.
pub struct VarlenOperands<'a> {
    pub q: &'a DeviceBuffer,
    pub k: &'a DeviceBuffer,
    pub v: &'a DeviceBuffer,
    pub o: &'a DeviceBuffer,
    pub lse: &'a DeviceBuffer,
    pub cu_q: &'a DeviceBuffer,
    pub cu_k: &'a DeviceBuffer,
    /// A host-mapped word ([`crate::device::HostFlags`]) the kernel sets to 1 when a sequence's
    /// offsets are bad; 0: not recorded.
    pub errors: u64,
}

impl VarlenOperands<'_> {
    fn dense(&self) -> AttentionOperands<'_> {
        AttentionOperands {
            q: self.q,
            k: self.k,
            v: self.v,
            o: self.o,
            lse: self.lse,
        }
    }
}

/// The dense problem a packed one is configured as: its sequences as a batch of the longest
/// lengths (the config, the grid and the tuned cache's class follow from it).
pub fn stand_in(p: &VarlenShape) -> AttentionProblem {
    let (max_q, max_k) = (p.max_q, p.max_k);
    AttentionProblem {
        batch: p.batch,
        heads_q: p.heads_q,
        heads_kv: p.heads_kv,
        seqlen_q: max_q.max(1),
        seqlen_kv: max_k.max(1),
        head_dim: p.head_dim,
        dtype: p.dtype,
        causal: p.causal,
        scale: p.scale,
        window: p.window,
        ..AttentionProblem::new(1, 1, 1, p.head_dim)
    }
}

/// Checks that the buffers hold the packed problem's tensors and offsets.
pub fn check_varlen_buffers(p: &VarlenShape, ops: &VarlenOperands) -> Result<()> {
    let e = p.dtype.size();
    let offsets = (p.batch + 1) * 4;
    for (name, need, have) in [
        ("Q", p.q_elems() * e, ops.q.bytes()),
        ("K", p.kv_elems() * e, ops.k.bytes()),
        ("V", p.kv_elems() * e, ops.v.bytes()),
        ("O", p.q_elems() * e, ops.o.bytes()),
        ("LSE", p.heads_q * p.total_q * 4, ops.lse.bytes()),
        ("cu_seqlens_q", offsets, ops.cu_q.bytes()),
        ("cu_seqlens_k", offsets, ops.cu_k.bytes()),
    ] {
        if have < need {
            return Err(Error::invalid(format!(
                "{name} needs {need} bytes for this shape but its buffer has {have}"
            )));
        }
    }
    Ok(())
}

/// A packed launch worked out but for its operands' addresses ([`Fa3Wgmma::launch_varlen`]).
#[derive(Debug, Clone, Copy)]
struct VarlenResolved {
    c: Config,
    f: Function,
    blocks: u32,
    /// The maps of Q and O, and of K and V.
    shapes: [([u64; 4], [u64; 3]); 2],
    /// The argument block without addresses, workspaces or offsets.
    args: AttnArgs,
}

impl Fa3Wgmma {
    /// `Ok` or the reason this version cannot run the packed problem `p` on `dev`.
    pub fn supports_varlen(
        &self,
        p: &VarlenShape,
        dev: &DeviceInfo,
    ) -> std::result::Result<(), String> {
        self.supports(&stand_in(p), dev)
    }

    /// Enqueues the packed forward of `p`. The kernel reads the offsets from `ops.cu_q`,
    /// `ops.cu_k` and checks each sequence's against `p` (a bad one's rows come out NaN and
    /// `ops.errors` records it). What depends on `p` alone (the config, the variant, the grid,
    /// the argument block) is worked out once per shape (the context's memo).
    pub fn launch_varlen(
        &self,
        ctx: &Context,
        p: &VarlenShape,
        ops: &VarlenOperands,
    ) -> Result<()> {
        check_varlen_buffers(p, ops)?;
        if p.total_q == 0 {
            return Ok(());
        }
        let unsupported = |reason| Error::Unsupported {
            kernel: self.name().into(),
            reason,
        };
        self.check_aligned(&ops.dense())?;
        for (name, b) in [("cu_seqlens_q", ops.cu_q), ("cu_seqlens_k", ops.cu_k)] {
            if b.ptr() % 4 != 0 {
                return Err(unsupported(format!(
                    "{name} starts at {:#x}, which is not 4-byte aligned (i32)",
                    b.ptr()
                )));
            }
        }
        let r = ctx
            .memo
            .get_or_try(&p.key(), || self.resolve_varlen(ctx, p))?;
        let [(qd, qs), (kd, ks)] = r.shapes;
        let (c, dt) = (&r.c, p.dtype);
        let tq = encode(ops.q.ptr(), dt, qd, qs, c.bm())?;
        let tk = encode(ops.k.ptr(), dt, kd, ks, c.bn)?;
        let tv = encode(ops.v.ptr(), dt, kd, ks, c.bn)?;
        let to = encode(ops.o.ptr(), dt, qd, qs, 64)?;
        let mut args = r.args.at(&ops.dense());
        args.work = ctx.scratch.attn_work_counters.at_least(ctx, 8)?;
        args.cu_q = ops.cu_q.ptr();
        args.cu_k = ops.cu_k.ptr();
        args.errors = ops.errors;
        self.enqueue(ctx, &r.f, c, r.blocks, [tq, tk, tv, to], args)
    }

    /// The packed launch of `p` but for its operands' addresses.
    fn resolve_varlen(&self, ctx: &Context, p: &VarlenShape) -> Result<VarlenResolved> {
        let dense = stand_in(p);
        let unsupported = |reason| Error::Unsupported {
            kernel: self.name().into(),
            reason,
        };
        let forced = ctx.overrides.attention.fa3(p.head_dim as u32);
        let c = Config::resolve(&dense, &ctx.info, &ctx.tuned, forced).map_err(unsupported)?;
        self.fits(&dense, &ctx.info, &c).map_err(unsupported)?;
        let es = p.dtype.size();
        // [1, heads, total, dim]: a sequence is a range of rows. The batch stride is never
        // stepped (one batch); the whole tensor's size keeps it a multiple of 16 bytes.
        let packed = |heads: usize, total: usize| {
            let st = Strides {
                batch: total * heads * p.head_dim,
                head: p.head_dim,
                seq: heads * p.head_dim,
            };
            map_shape(1, heads, total, p.head_dim, st, es)
        };
        // Always the work counter: the items of short sequences' missing blocks end at once, and
        // the counter hands their blocks the next item instead of leaving a ragged static split.
        let masking = Masking {
            varlen: true,
            window: p.window != Window::UNBOUNDED,
        };
        let f = ctx.function(&c.spec_masked(&ctx.arch(), p.dtype, true, masking))?;
        let mut args = AttnArgs::of(&dense);
        args.total_q = p.total_q as i32;
        args.total_k = p.total_k as i32;
        (args.win_left, args.win_right) = p.window.bounds(p.causal, WINDOW_UNBOUNDED);
        if p.causal {
            args.order_bh = c.order.min((p.batch * p.heads_q) as u32) as i32;
        }
        let (items, _) = c.grid(&dense, ctx.info.sm_count);
        Ok(VarlenResolved {
            c,
            f,
            blocks: items.min(ctx.info.sm_count.max(1) as u64) as u32,
            shapes: [packed(p.heads_q, p.total_q), packed(p.heads_kv, p.total_k)],
            args,
        })
    }

    /// The packed variants `kiln check` compiles: every head dim's default config, both dtypes,
    /// packed and/or windowed, with the scheduling modes the dense launch of each may take.
    pub(super) fn masked_variants(&self, arch: &str) -> Vec<crate::jit::KernelSpec> {
        let mut v = Vec::new();
        for d in crate::ops::attention::HEAD_DIMS {
            let c = Config::default_for(d as u32);
            for dt in crate::ops::attention::DTYPES {
                for m in Masking::OTHERS {
                    let modes: &[bool] = match (m.varlen, c.dynamic) {
                        (true, _) | (false, 2) => &[true],
                        (false, 0) => &[false],
                        _ => &[false, true],
                    };
                    for &dy in modes {
                        v.push(c.spec_masked(arch, dt, dy, m));
                    }
                }
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::VarlenProblem;

    #[test]
    fn the_stand_in_is_the_longest_sequences_as_a_batch() {
        let p = VarlenProblem {
            heads_kv: 2,
            causal: true,
            window: Window { left: 7, right: -1 },
            ..VarlenProblem::new(&[(3, 5), (70, 4), (0, 2)], 4, 128)
        };
        let d = stand_in(&p.shape());
        assert_eq!((d.batch, d.seqlen_q, d.seqlen_kv), (3, 70, 5));
        assert_eq!(
            (d.heads_q, d.heads_kv, d.causal, d.window),
            (4, 2, true, p.window)
        );
        let h100 = DeviceInfo::h100_sxm();
        assert!(Fa3Wgmma.supports_varlen(&p.shape(), &h100).is_ok());
        // Every head dim and dtype in each of the three variants, packed ones on the counter.
        let specs = Fa3Wgmma.masked_variants("sm_90a");
        let mut labels: Vec<String> = specs.iter().map(|s| s.label()).collect();
        labels.sort();
        labels.dedup();
        assert_eq!(labels.len(), specs.len());
        assert!(specs.len() >= 3 * 2 * 3, "{}", specs.len());
        let dense = Fa3Wgmma.variants("sm_90a");
        assert!(specs
            .iter()
            .all(|s| !dense[..dense.len() - specs.len()].contains(s)));
    }
}
