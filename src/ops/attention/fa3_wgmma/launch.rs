//! fa3_wgmma's launch: Q, K, V and O as rank-4 tensor maps (encoded by `device::tma`), the checks a config must pass on a
//! device, the workspaces it needs, and the kernel launch itself.

use super::config::{Config, Masking};
use super::workspaces::Parts;
use super::Fa3Wgmma;
use crate::device::{
    Context, DeviceInfo, Function, LaunchConfig, TensorMap, TiledArgs, TmaDType, TmaSwizzle,
};
use crate::error::{Error, Result};
use crate::ops::attention::AttentionKernel;
use crate::ops::attention::{
    AttentionOperands, AttentionProblem, AttnArgs, Strides, Window, WINDOW_UNBOUNDED,
};
use crate::ops::gemm::{alignment, DType};

/// A rank-4 map's dims and its byte strides.
type MapShape = ([u64; 4], [u64; 3]);

/// A launch of one problem with one config, worked out but for the operands' addresses
/// ([`Fa3Wgmma::resolve`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Resolved {
    c: Config,
    f: Function,
    blocks: u32,
    dynamic: bool,
    shapes: [MapShape; 4],
    dtype: DType,
    /// The argument block without addresses or workspaces.
    args: AttnArgs,
    split_bytes: Option<usize>,
    parts: Option<Parts>,
}

/// The map shapes of Q, K, V and O (each its own strides): what a launch encodes and the tests
/// check.
fn operand_shapes(p: &AttentionProblem) -> [MapShape; 4] {
    let es = p.dtype.size();
    let (b, d) = (p.batch, p.head_dim);
    let q = |st| map_shape(b, p.heads_q, p.seqlen_q, d, st, es);
    let kv = |st| map_shape(b, p.heads_kv, p.seqlen_kv, d, st, es);
    [
        q(p.q_strides()),
        kv(p.k_strides()),
        kv(p.v_strides()),
        q(p.o_strides()),
    ]
}

/// The (dims, byte strides of dims 1..3) of a rank-4 map over [batch, heads, seq, dim].
pub fn map_shape(
    batch: usize,
    heads: usize,
    seq: usize,
    dim: usize,
    st: Strides,
    es: usize,
) -> ([u64; 4], [u64; 3]) {
    (
        [dim as u64, seq as u64, heads as u64, batch as u64],
        [
            (st.seq * es) as u64,
            (st.head * es) as u64,
            (st.batch * es) as u64,
        ],
    )
}

/// The driver's arguments for a rank-4 map with boxes of 64 dims x `rows` rows and 128-byte
/// swizzle; rows past the sequence end read as zeros.
fn tiled(addr: u64, dtype: DType, dims: [u64; 4], strides: [u64; 3], rows: u32) -> TiledArgs {
    let ty = match dtype {
        DType::F16 => TmaDType::F16,
        _ => TmaDType::Bf16,
    };
    TiledArgs::new(ty, addr, dims, strides, [64, rows, 1, 1], TmaSwizzle::B128)
}

/// Encodes the map [`tiled`] describes (also the backward's maps, `bwd_fa3_wgmma`).
pub fn encode(
    addr: u64,
    dtype: DType,
    dims: [u64; 4],
    strides: [u64; 3],
    rows: u32,
) -> Result<TensorMap> {
    tiled(addr, dtype, dims, strides, rows)
        .encode(|| format!("cuTensorMapEncodeTiled (rank 4, dims {dims:?}, strides {strides:?})"))
}

impl Fa3Wgmma {
    /// Whether `cfg` can run `p` on `dev` (shared memory, the 32-bit work index).
    pub(super) fn fits(
        &self,
        p: &AttentionProblem,
        dev: &DeviceInfo,
        cfg: &Config,
    ) -> std::result::Result<(), String> {
        let smem = cfg.smem_bytes();
        if smem > dev.smem_optin_bytes {
            return Err(format!(
                "needs {smem} bytes of shared memory per block ({cfg:?}); this GPU allows {}",
                dev.smem_optin_bytes
            ));
        }
        let (items, _) = cfg.grid(p, dev.sm_count);
        if items > i32::MAX as u64 {
            return Err(format!(
                "{items} work items (query blocks x heads x batch) exceed the kernel's 32-bit index"
            ));
        }
        Ok(())
    }

    pub(super) fn launch_config(
        &self,
        ctx: &Context,
        p: &AttentionProblem,
        ops: &AttentionOperands,
        c: &Config,
    ) -> Result<()> {
        let r = self.resolve(ctx, p, c)?;
        self.run(ctx, ops, &r)
    }

    /// What a launch of `p` with `c` works out before the operands' addresses matter: the
    /// loaded variant, the grid, the maps' shapes, the argument block and the workspaces'
    /// sizes (the default launch keeps it in the context's memo, [`Fa3Wgmma::launch`]).
    pub(super) fn resolve(
        &self,
        ctx: &Context,
        p: &AttentionProblem,
        c: &Config,
    ) -> Result<Resolved> {
        let dynamic = c.dynamic_for(p);
        let masking = Masking {
            varlen: false,
            window: p.window != Window::UNBOUNDED,
        };
        let f = ctx.function(&c.spec_masked(&ctx.arch(), p.dtype, dynamic, masking))?;
        let mut args = AttnArgs::of(p);
        (args.win_left, args.win_right) = p.window.bounds(p.causal, WINDOW_UNBOUNDED);
        if p.causal {
            args.order_bh = c.order.min((p.batch * p.heads_q) as u32) as i32;
            // Causal query blocks end at the last row, so a ragged block is the top one, which
            // the diagonal leaves a key tile or two (kernels/attention/fa3_wgmma.cu, `Work`).
            let bm = c.bm() as usize;
            args.q_row0 = (p.seqlen_q as i64 - (p.seqlen_q.div_ceil(bm) * bm) as i64) as i32;
        }
        let (_, blocks) = c.grid(p, ctx.info.sm_count);
        let parts = c.parts(p, blocks);
        if let Some(pt) = parts {
            args.parts_from = pt.from as i32;
            args.parts = pt.parts as i32;
        }
        Ok(Resolved {
            c: *c,
            f,
            blocks,
            dynamic,
            shapes: operand_shapes(p),
            dtype: p.dtype,
            args,
            split_bytes: c.split_ws_bytes(p, blocks),
            parts,
        })
    }

    /// Runs `r` on `ops`: the tensor maps, the workspaces and the launch.
    pub(super) fn run(&self, ctx: &Context, ops: &AttentionOperands, r: &Resolved) -> Result<()> {
        self.check_aligned(ops)?;
        let (c, dt) = (&r.c, r.dtype);
        let [(qd, qs), (kd, ks), (vd, vs), (od, os)] = r.shapes;
        let tq = encode(ops.q.ptr(), dt, qd, qs, c.bm())?;
        let tk = encode(ops.k.ptr(), dt, kd, ks, c.bn)?;
        let tv = encode(ops.v.ptr(), dt, vd, vs, c.bn)?;
        // Each consumer warpgroup stores its 64 rows of O (with two Q buffers).
        let to = encode(ops.o.ptr(), dt, od, os, 64)?;
        let mut args = r.args.at(ops);
        if r.dynamic {
            args.work = ctx.scratch.attn_work_counters.at_least(ctx, 8)?;
        }
        if let Some(bytes) = r.split_bytes {
            args.split_ws = ctx.scratch.attn_split.at_least(ctx, bytes)?;
        }
        if let Some(pt) = r.parts {
            args.parts_ws = ctx.scratch.attn_parts.at_least(ctx, pt.ws_bytes)?;
            args.parts_done = ctx
                .scratch
                .attn_parts_done
                .at_least(ctx, pt.items as usize * 4)?;
        }
        self.enqueue(ctx, &r.f, c, r.blocks, [tq, tk, tv, to], args)
    }

    /// Refuses Q, K, V or O not 16-byte aligned (TMA).
    pub(super) fn check_aligned(&self, ops: &AttentionOperands) -> Result<()> {
        for (name, ptr) in [
            ("Q", ops.q.ptr()),
            ("K", ops.k.ptr()),
            ("V", ops.v.ptr()),
            ("O", ops.o.ptr()),
        ] {
            if alignment(ptr) < 16 {
                return Err(Error::Unsupported {
                    kernel: self.name().into(),
                    reason: format!(
                        "{name} starts at {ptr:#x}, which is not 16-byte aligned (TMA)"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Launches `f` on `blocks` blocks with the maps of Q, K, V and O and the argument block.
    pub(super) fn enqueue(
        &self,
        ctx: &Context,
        f: &Function,
        c: &Config,
        blocks: u32,
        maps: [TensorMap; 4],
        mut args: AttnArgs,
    ) -> Result<()> {
        let [mut tq, mut tk, mut tv, mut to] = maps;
        let cfg = LaunchConfig {
            smem_bytes: c.smem_bytes(),
            ..LaunchConfig::simple((blocks, 1, 1), c.threads())
        };
        // SAFETY: the parameters match the kernel's (four 128-byte maps, then AttnArgs); the maps
        // describe the caller's live, checked buffers; every base is 16-byte aligned and every
        // stride a multiple of 16 bytes (packed rows of 64 to 256 16-bit elements, or strides
        // the problem's validation held to STRIDE_ALIGN); the packed variant's offsets are the
        // caller's checked i32 [batch + 1] buffers.
        unsafe {
            f.launch(
                ctx.stream,
                &cfg,
                &mut [
                    tq.as_param(),
                    tk.as_param(),
                    tv.as_param(),
                    to.as_param(),
                    args.as_param(),
                ],
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttnLayout;

    /// What this module's own rank-4 encoder handed the driver before the crate had one encoder
    /// (copied from it).
    fn old_call(
        addr: u64,
        dtype: DType,
        dims: [u64; 4],
        strides: [u64; 3],
        rows: u32,
    ) -> crate::device::TmaCall {
        use cudarc::driver::sys;
        let ty = match dtype {
            DType::F16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            _ => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        };
        (
            ty,
            4,
            addr,
            dims.to_vec(),
            strides.to_vec(),
            vec![64, rows, 1, 1],
            vec![1; 4],
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }

    #[test]
    fn the_maps_hand_the_driver_what_they_did_before() {
        let gqa = AttentionProblem {
            heads_kv: 2,
            ..AttentionProblem::new(3, 8, 100, 128)
        };
        let bhsd = AttentionProblem {
            layout: AttnLayout::Bhsd,
            dtype: DType::F16,
            ..AttentionProblem::new(2, 16, 4096, 64)
        };
        let d256 = AttentionProblem::new(1, 4, 777, 256);
        for p in [gqa, bhsd, d256] {
            let [(qd, qs), (kd, ks), _, _] = operand_shapes(&p);
            for (dims, strides, rows) in [(qd, qs, 192), (kd, ks, 176), (kd, ks, 80), (qd, qs, 64)]
            {
                let addr = 0x7f00_0000_0000;
                assert_eq!(
                    tiled(addr, p.dtype, dims, strides, rows).call(),
                    old_call(addr, p.dtype, dims, strides, rows),
                    "{p:?} rows {rows}"
                );
            }
        }
    }

    #[test]
    fn maps_follow_the_layout_and_refusals_name_the_reason() {
        let p = AttentionProblem {
            heads_kv: 2,
            ..AttentionProblem::new(3, 8, 100, 128)
        };
        let (d, s) = map_shape(p.batch, p.heads_kv, p.seqlen_kv, 128, p.k_strides(), 2);
        assert_eq!(d, [128, 100, 2, 3]);
        assert_eq!(s, [2 * 128 * 2, 128 * 2, 100 * 2 * 128 * 2]); // BSHD: seq stride = H*D
        let b = AttentionProblem {
            layout: AttnLayout::Bhsd,
            ..p
        };
        let (_, s) = map_shape(b.batch, b.heads_q, b.seqlen_q, 128, b.q_strides(), 2);
        assert_eq!(s, [256, 100 * 256, 8 * 100 * 256]);
        // Each tensor its own strides: transformers' queries in BSHD memory, K and V in a BHSD
        // cache with room for 4096 tokens, O written BHSD.
        let st = |batch, head, seq| Strides { batch, head, seq };
        let mixed = AttentionProblem {
            strides: Some(crate::ops::attention::OperandStrides {
                q: st(100 * 8 * 128, 128, 8 * 128),
                k: st(2 * 4096 * 128, 4096 * 128, 128),
                v: st(2 * 4096 * 128 + 64, 4096 * 128, 128),
                o: st(8 * 100 * 128, 100 * 128, 128),
            }),
            ..p
        };
        let [(qd, qs), (kd, ks), (_, vs), (od, os)] = operand_shapes(&mixed);
        assert_eq!(
            (qd, od, kd),
            ([128, 100, 8, 3], [128, 100, 8, 3], [128, 100, 2, 3])
        );
        assert_eq!(qs, [8 * 256, 256, 100 * 8 * 256]);
        assert_eq!(ks, [256, 4096 * 256, 2 * 4096 * 256]);
        assert_eq!(vs[2], (2 * 4096 * 128 + 64) * 2);
        assert_eq!(os, [256, 100 * 256, 8 * 100 * 256]);
        let h100 = DeviceInfo::h100_sxm();
        assert!(Fa3Wgmma.supports(&p, &h100).is_ok());
        for d in [64, 256] {
            let q = AttentionProblem::new(1, 1, 10, d);
            assert!(Fa3Wgmma.supports(&q, &h100).is_ok(), "d{d}");
        }
    }
}
