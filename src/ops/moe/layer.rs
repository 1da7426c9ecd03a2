//! The whole MoE layer on the GPU: the routing kernel writes the per-expert offsets and the
//! expert-sorted row order; the fused SwiGLU gathers each row's token from X in its loads
//! (`LayerRows::Gather`), or from 1,024 rows on reads one sorted copy of X (faster at prefill,
//! [`MoeGather`]), and writes H [T k, I] in that order; the down
//! projection's epilogue weighs each row and adds it into its token's f32 accumulator row
//! (`LayerRows::Combine`, then one pass to the output dtype), or stores it weighed for the
//! ordered combine, which sums each token's k rows in pair order (deterministic). Every launch
//! reads what the one before wrote on the GPU: no host synchronisation, graph-capturable, and
//! the caller's workspace holds every intermediate ([`LayerLayout`]).
//!
//! Weights as transformers keeps them: `gate_up_proj` W13 [E, 2I, H] (rows 0..I gate, I..2I up,
//! read in place as W1 and W3 with an expert stride of 2IH) and `down_proj` W2 [E, H, I].

use serde::{Deserialize, Serialize};

use super::combine::{self, CombineShape};
use super::gather_rows;
use super::grouped_gemm::GroupedGemm;
use super::route::{self, RouteExtras, RouteLayout, RouteOperands, RouteProblem, TableSpec};
use super::schedule::sched_bytes;
use super::swiglu_dual::{Gather, SwiGluDual};
use super::{check_operands, LayerRows, MoeKernel, MoeOperands, MoeProblem, Rows, WeightLayout};
use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;
use crate::overrides::MoeGather;

pub const NAME: &str = "moe_layer";

/// How the k expert rows of a token are summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CombineMode {
    /// f32 reductions into an accumulator [T, H] in the down projection's epilogue, then one
    /// pass to the output dtype: the fastest; the order of the adds varies, so the last bit of
    /// an f32 sum may (a 16-bit output rarely does).
    #[default]
    Atomic,
    /// The weighed rows stored [T k, H] in the input dtype, then each token's summed in pair
    /// order in f32: the same bits on every run.
    Ordered,
}

impl std::str::FromStr for CombineMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<CombineMode> {
        match s {
            "atomic" => Ok(CombineMode::Atomic),
            "ordered" => Ok(CombineMode::Ordered),
            other => Err(Error::invalid(format!(
                "the combine `{other}` is not one kiln has; use atomic or ordered"
            ))),
        }
    }
}

/// One MoE layer: the routing of T tokens over E experts, hidden size H, expert width I.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LayerProblem {
    pub route: RouteProblem,
    pub hidden: usize,
    pub inter: usize,
    /// X's, the weights' and the output's dtype (bf16 or f16).
    pub dtype: DType,
    pub combine: CombineMode,
}

/// `n` rows split evenly over `e` experts, as offsets: the host's guess at rows only the GPU
/// knows, from which the tile shapes are chosen.
fn even_offsets(n: usize, e: usize) -> Vec<i32> {
    (0..=e)
        .map(|i| (n as u128 * i as u128 / e.max(1) as u128) as i32)
        .collect()
}

impl LayerProblem {
    pub fn tokens(&self) -> usize {
        self.route.tokens
    }
    pub fn experts(&self) -> usize {
        self.route.experts
    }
    pub fn top_k(&self) -> usize {
        self.route.top_k()
    }
    /// The down projection's output bytes: the f32 accumulator [T, H] (atomic) or the weighed
    /// rows [T k, H] (ordered).
    pub fn acc_bytes(&self) -> usize {
        match self.combine {
            CombineMode::Atomic => self.tokens() * self.hidden * 4,
            CombineMode::Ordered => self.pairs() * self.hidden * self.dtype.size(),
        }
    }

    /// Rows of the expert-sorted order: T k.
    pub fn pairs(&self) -> usize {
        self.route.pairs()
    }

    /// Checks sizes, dtypes and options; one sentence per problem.
    pub fn validate(&self) -> Result<()> {
        self.route.validate()?;
        if self.dtype == DType::F32 {
            return Err(Error::invalid(
                "the MoE layer runs in bf16 or f16 (f32 accumulation), not f32",
            ));
        }
        for (name, v) in [
            ("the hidden size H", self.hidden),
            ("the expert width I", self.inter),
        ] {
            if v == 0 || !v.is_multiple_of(8) {
                return Err(Error::invalid(format!(
                    "{name} is {v}; the MoE layer needs a positive multiple of 8 (rows of whole 16-byte units)"
                )));
            }
        }
        self.up().validate()?;
        self.down().validate()
    }

    fn rows(&self) -> Rows {
        Rows::Contiguous {
            x_rows: self.pairs(),
            offsets: even_offsets(self.pairs(), self.experts()),
        }
    }

    /// The gate/up projection: the fused SwiGLU over the sorted rows, gathering X's rows in its
    /// loads, W1 and W3 the two halves of W13 read in place.
    pub fn up(&self) -> MoeProblem {
        self.up_reading(false)
    }

    /// The gate/up projection as `gather` runs it: gathering X's rows in its loads, or (when it
    /// copies them first, [`MoeGather::copies`]) the plain kernel over the sorted copy.
    pub fn up_for(&self, gather: MoeGather) -> MoeProblem {
        self.up_reading(gather.copies(self.pairs()))
    }

    fn up_reading(&self, copied: bool) -> MoeProblem {
        MoeProblem {
            experts: self.experts(),
            n: self.inter,
            k: self.hidden,
            rows: self.rows(),
            input: self.dtype,
            output: self.dtype,
            swiglu: None,
            w_expert_stride: Some(2 * self.inter * self.hidden),
            layer: (!copied).then_some(LayerRows::Gather {
                source_rows: self.tokens(),
            }),
        }
        .with_swiglu(WeightLayout::Separate, false)
    }

    /// The down projection: its epilogue's combine, or the weighed rows of the ordered one.
    pub fn down(&self) -> MoeProblem {
        let (output, layer) = match self.combine {
            CombineMode::Atomic => (
                DType::F32,
                LayerRows::Combine {
                    tokens: self.tokens(),
                },
            ),
            CombineMode::Ordered => (self.dtype, LayerRows::Scaled),
        };
        MoeProblem {
            experts: self.experts(),
            n: self.hidden,
            k: self.inter,
            rows: self.rows(),
            input: self.dtype,
            output,
            swiglu: None,
            w_expert_stride: None,
            layer: Some(layer),
        }
    }

    /// Useful flops: three GEMMs of 2·(T k)·H·I each.
    pub fn flops(&self) -> f64 {
        6.0 * self.pairs() as f64 * self.hidden as f64 * self.inter as f64
    }

    pub fn label(&self) -> String {
        let r = &self.route;
        let src = match r.source {
            route::RouteSource::Logits { opts, bias, .. } => {
                let mut s = format!("{:?}", opts.scoring).to_lowercase();
                if opts.renormalize {
                    s += " renorm";
                }
                if let Some((g, kg)) = opts.groups {
                    s += &format!(" groups {g}/{kg}");
                }
                if bias {
                    s += " bias";
                }
                if opts.routed_scaling != 1.0 {
                    s += &format!(" x{}", opts.routed_scaling);
                }
                s
            }
            route::RouteSource::TopK { ids_i64, full, .. } => format!(
                "given top-k ({}{})",
                if ids_i64 { "i64" } else { "i32" },
                if full { ", [T, E] weights" } else { "" }
            ),
        };
        format!(
            "layer T={} E={} k={} H={} I={} {} {src} {:?}",
            r.tokens,
            r.experts,
            self.top_k(),
            self.hidden,
            self.inter,
            self.dtype,
            self.combine
        )
        .to_lowercase()
    }
}

/// Where each intermediate lives in the layer's workspace (byte offsets, 256-aligned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerLayout {
    pub route: RouteLayout,
    /// The routing's tables start at 0; then the two GEMMs' tile tables (gate/up, down), H
    /// [T k, I], and the accumulator
    /// [T, H] f32 (atomic) or the weighed rows [T k, H] (ordered). The accumulator's bytes
    /// first hold X's sorted copy [T k, H] when the layer copies it (the gate/up projection has
    /// read it before the down projection writes there), so they are the larger of the two.
    pub sched: usize,
    pub sched_down: usize,
    pub h: usize,
    pub acc: usize,
    pub bytes: usize,
}

impl LayerLayout {
    pub fn of(p: &LayerProblem) -> LayerLayout {
        let route = RouteLayout::of(&p.route);
        let es = p.dtype.size();
        let sched = route.bytes;
        let sched_down = sched + route::align256(sched_bytes(p.experts()));
        let h = sched_down + route::align256(sched_bytes(p.experts()));
        let acc = h + route::align256(p.pairs() * p.inter * es);
        let acc_bytes = p.acc_bytes();
        let copy_bytes = p.pairs() * p.hidden * es;
        LayerLayout {
            route,
            sched,
            sched_down,
            h,
            acc,
            bytes: acc + route::align256(acc_bytes.max(copy_bytes)),
        }
    }
}

/// The device memory of one layer call.
#[derive(Debug, Clone, Copy)]
pub struct LayerOperands {
    /// X [T, H].
    pub x: u64,
    /// W13 [E, 2I, H] and W2 [E, H, I].
    pub w13: u64,
    pub w2: u64,
    /// The routing's inputs (logits, or precomputed ids and weights; the bias).
    pub route: RouteOperands,
    /// The output [T, H] in X's dtype.
    pub out: u64,
}

/// The layer's own small kernels: routing and combine (its GEMMs are grouped_gemm's and
/// swiglu_dual's layer variants).
pub fn own_variants(arch: &str) -> Vec<KernelSpec> {
    let mut v = route::variants(arch);
    v.extend(combine::variants(arch));
    v.push(gather_rows::spec(arch));
    v
}

/// Every kernel a layer may launch: its own, the prefix kernel, the gathering SwiGLUs and the
/// down projection's combine variants.
pub fn variants(arch: &str) -> Vec<KernelSpec> {
    let mut v = own_variants(arch);
    v.push(super::tile_prefix::spec(arch));
    for g in [Gather::Tma, Gather::CpAsync] {
        v.extend(
            DType::INPUTS.iter().map(|&i| {
                SwiGluDual::spec_gather(arch, i, i, &crate::overrides::Overrides::NONE, g)
            }),
        );
    }
    v.extend(GroupedGemm::layer_variants(arch));
    v
}

/// A buffer over `bytes` at `ptr`.
///
/// # Safety
/// The memory must belong to the current context and outlive the launches that use it.
unsafe fn view(ptr: u64, bytes: usize) -> DeviceBuffer {
    DeviceBuffer::borrowed(ptr, bytes)
}

/// The steps of one layer call over its memory: [`Pipeline::route`], [`Pipeline::up`] (the
/// gathered SwiGLU) and [`Pipeline::down`] (the down projection, its combine and the pass to
/// the output), each reading what the one before wrote. Benches time them one by one.
pub struct Pipeline<'p> {
    p: &'p LayerProblem,
    ops: LayerOperands,
    workspace: u64,
    layout: LayerLayout,
    up: MoeProblem,
    down: MoeProblem,
    offsets: DeviceBuffer,
    row_token: DeviceBuffer,
    row_weight: DeviceBuffer,
    sched: DeviceBuffer,
    sched_down: DeviceBuffer,
    h: DeviceBuffer,
    x: DeviceBuffer,
    /// X's sorted copy (over the accumulator's bytes), read when [`Pipeline::copies`].
    xs: DeviceBuffer,
    w1: DeviceBuffer,
    w3: DeviceBuffer,
    w2: DeviceBuffer,
    acc: DeviceBuffer,
}

impl<'p> Pipeline<'p> {
    /// The steps of `p` over `ops`, with `workspace` holding [`LayerLayout::of`]`(p).bytes`
    /// bytes (`ops.route.workspace` is ignored: the routing's tables are its first bytes).
    /// Refuses a problem the kernels do not take (not Hopper, too many experts).
    ///
    /// # Safety
    /// Every address in `ops` and `workspace` must be device memory of the current context
    /// holding what [`LayerProblem`] says it holds (X [T, H], W13 [E, 2I, H], W2 [E, H, I] of
    /// `p.dtype`; the routing's inputs; the output [T, H]), alive until the stream has run
    /// every launch of the pipeline.
    pub unsafe fn new(
        ctx: &Context,
        p: &'p LayerProblem,
        ops: &LayerOperands,
        workspace: u64,
    ) -> Result<Pipeline<'p>> {
        let l = LayerLayout::of(p);
        let at = |off: usize| workspace + off as u64;
        let (t, e, r) = (p.tokens(), p.experts(), p.pairs());
        let (hd, i, es) = (p.hidden, p.inter, p.dtype.size());
        let gather = ctx.overrides.moe.gather;
        let (up, down) = (p.up_for(gather), p.down());
        let unsupported = |k: &dyn MoeKernel, reason: String| Error::Unsupported {
            kernel: format!("{NAME} ({})", k.name()),
            reason,
        };
        SwiGluDual
            .supports(&up, &ctx.info)
            .map_err(|r| unsupported(&SwiGluDual, r))?;
        GroupedGemm
            .supports(&down, &ctx.info)
            .map_err(|r| unsupported(&GroupedGemm, r))?;
        // SAFETY: the caller's memory as this function's contract states it, and the
        // workspace's parts laid out by `LayerLayout::of(p)` inside its `bytes`.
        let pipe = unsafe {
            Pipeline {
                p,
                ops: *ops,
                workspace,
                layout: l,
                up,
                down,
                offsets: view(at(l.route.offsets), 4 * (e + 1)),
                row_token: view(at(l.route.row_token), 4 * r),
                row_weight: view(at(l.route.row_weight), 4 * r),
                sched: view(at(l.sched), sched_bytes(e)),
                sched_down: view(at(l.sched_down), sched_bytes(e)),
                h: view(at(l.h), r * i * es),
                x: view(ops.x, t * hd * es),
                xs: view(at(l.acc), r * hd * es),
                w1: view(ops.w13, e * 2 * i * hd * es),
                w3: view(ops.w13 + (i * hd * es) as u64, (e * 2 * i - i) * hd * es),
                w2: view(ops.w2, e * hd * i * es),
                acc: view(at(l.acc), l.bytes - l.acc),
            }
        };
        check_operands(&pipe.up, &pipe.up_ops())?;
        check_operands(&pipe.down, &pipe.down_ops())?;
        Ok(pipe)
    }

    /// Whether the gate/up projection reads X's sorted copy: its problem gathers no rows.
    fn copies(&self) -> bool {
        self.up.layer.is_none()
    }

    fn up_ops(&self) -> MoeOperands<'_> {
        MoeOperands {
            x: if self.copies() { &self.xs } else { &self.x },
            w: &self.w1,
            w3: Some(&self.w3),
            y: &self.h,
            rows: &self.offsets,
            route: None,
            sched: &self.sched,
            row_map: Some(&self.row_token),
        }
    }

    fn down_ops(&self) -> MoeOperands<'_> {
        MoeOperands {
            x: &self.h,
            w: &self.w2,
            w3: None,
            y: &self.acc,
            rows: &self.offsets,
            route: Some(&self.row_weight),
            sched: &self.sched_down,
            row_map: (self.p.combine == CombineMode::Atomic).then_some(&self.row_token),
        }
    }

    /// The routing: counts, offsets and the row order into the workspace.
    pub fn route(&self, ctx: &Context) -> Result<()> {
        self.route_with(ctx, false)
    }

    /// The gate/up projection: H [T k, I] in the sorted order, X's rows gathered in the loads
    /// or copied into that order first.
    pub fn up(&self, ctx: &Context) -> Result<()> {
        self.up_with(ctx, true)
    }

    /// The down projection and the combine into the output.
    pub fn down(&self, ctx: &Context) -> Result<()> {
        self.down_with(ctx, true)
    }

    /// Every step, with the routing building both GEMMs' tile tables and zeroing the atomic
    /// accumulator (when X is not copied over it first): 3 launches fewer than the steps one by
    /// one, which is most of a decode step's host time (~4.3 us a launch on the H200's host).
    pub fn run(&self, ctx: &Context) -> Result<()> {
        self.route_with(ctx, true)?;
        self.up_with(ctx, false)?;
        self.down_with(ctx, false)
    }

    /// Whether the routing zeroes the accumulator in `run`.
    fn route_zeroes(&self) -> bool {
        self.p.combine == CombineMode::Atomic && !self.copies()
    }

    fn route_with(&self, ctx: &Context, fused: bool) -> Result<()> {
        let ops = RouteOperands {
            workspace: self.workspace,
            ..self.ops.route
        };
        if !fused {
            return route::launch(ctx, &self.p.route, &ops);
        }
        let (up_bm, up_fold) = SwiGluDual::tables(ctx);
        let (down_bm, down_fold) = ctx.memo.get_or_try(&(self.down.clone(), DownTables), || {
            Ok(GroupedGemm::tables(ctx, &self.down))
        })?;
        let extras = RouteExtras {
            tables: [
                Some(TableSpec {
                    sched: self.sched.ptr(),
                    bm: up_bm,
                    fold: up_fold,
                    sorted: false,
                }),
                Some(TableSpec {
                    sched: self.sched_down.ptr(),
                    bm: down_bm,
                    fold: down_fold,
                    sorted: false,
                }),
            ],
            zero: self
                .route_zeroes()
                .then(|| (self.acc.ptr(), self.p.acc_bytes())),
        };
        route::launch_fused(ctx, &self.p.route, &ops, &extras)
    }

    /// `build_tables`: the GEMM's tile tables first (else the fused routing built them).
    fn up_with(&self, ctx: &Context, build_tables: bool) -> Result<()> {
        if self.copies() {
            let p = self.p;
            gather_rows::launch(
                ctx,
                self.ops.x,
                self.xs.ptr(),
                self.row_token.ptr(),
                p.tokens(),
                p.pairs(),
                p.hidden * p.dtype.size(),
            )?;
        }
        SwiGluDual.launch_tables(ctx, &self.up, &self.up_ops(), build_tables)
    }

    /// `standalone`: the step alone, which builds its tables and zeroes its accumulator (in
    /// `run` the fused routing has done both, unless X's copy lay over the accumulator).
    fn down_with(&self, ctx: &Context, standalone: bool) -> Result<()> {
        let p = self.p;
        let shape = CombineShape {
            tokens: p.tokens(),
            top_k: p.top_k(),
            hidden: p.hidden,
            out: p.dtype,
        };
        let pair_row = self.workspace + self.layout.route.pair_row as u64;
        let atomic = p.combine == CombineMode::Atomic;
        if atomic && (standalone || !self.route_zeroes()) {
            // (a memset node in a captured graph: the accumulator starts at 0 on every replay)
            self.acc.fill_bytes(0, ctx)?;
        }
        GroupedGemm.launch_tables(ctx, &self.down, &self.down_ops(), standalone)?;
        if atomic {
            combine::launch_finish(ctx, &shape, self.acc.ptr(), self.ops.out, pair_row)
        } else {
            let rows = combine::Rows {
                ptr: self.acc.ptr(),
                dtype: p.dtype,
                count: p.pairs(),
            };
            combine::launch_rows(ctx, &shape, rows, 0, pair_row, self.ops.out)
        }
    }
}

/// Tags the memo entry of the down projection's table shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct DownTables;

/// Enqueues the whole layer on the context's stream: [`Pipeline::new`] then every step.
///
/// # Safety
/// As [`Pipeline::new`].
pub unsafe fn launch(
    ctx: &Context,
    p: &LayerProblem,
    ops: &LayerOperands,
    workspace: u64,
) -> Result<()> {
    // SAFETY: the caller's contract is Pipeline::new's.
    unsafe { Pipeline::new(ctx, p, ops, workspace) }?.run(ctx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::moe::route::{RouteOptions, RouteSource, Scoring};

    pub(crate) fn layer(t: usize, e: usize, k: usize, h: usize, i: usize) -> LayerProblem {
        LayerProblem {
            route: RouteProblem {
                tokens: t,
                experts: e,
                source: RouteSource::Logits {
                    dtype: DType::Bf16,
                    bias: false,
                    opts: RouteOptions::top_k(k, Scoring::Softmax),
                },
            },
            hidden: h,
            inter: i,
            dtype: DType::Bf16,
            combine: CombineMode::Atomic,
        }
    }

    #[test]
    fn the_gemms_of_a_layer_are_valid_problems() {
        let p = layer(4096, 64, 8, 2048, 1408);
        p.validate().unwrap();
        let up = p.up();
        assert_eq!(
            (up.n, up.k, up.x_rows(), up.x_elems()),
            (1408, 2048, 32768, 4096 * 2048)
        );
        assert_eq!(up.w_span_elems(), 63 * 2 * 1408 * 2048 + 1408 * 2048);
        let down = p.down();
        assert_eq!((down.n, down.k, down.y_elems()), (2048, 1408, 4096 * 2048));
        assert_eq!(down.output, DType::F32);
        // (the fused routing builds both GEMMs' tables with X's rows = the pairs, contiguous)
        for copied in [false, true] {
            let up = p.up_reading(copied);
            assert_eq!(up.x_rows(), p.pairs());
            assert!(matches!(up.rows, Rows::Contiguous { .. }));
        }
        assert_eq!(down.x_rows(), p.pairs());
        assert!(matches!(down.rows, Rows::Contiguous { .. }));
        let ordered = LayerProblem {
            combine: CombineMode::Ordered,
            ..p
        };
        assert_eq!(ordered.down().y_elems(), 32768 * 2048);
        assert!(p.label().contains("t=4096 e=64 k=8"));
    }

    #[test]
    fn the_workspace_holds_every_intermediate() {
        for p in [layer(1, 8, 2, 256, 128), layer(4096, 128, 8, 2048, 768)] {
            for combine in [CombineMode::Atomic, CombineMode::Ordered] {
                let p = LayerProblem { combine, ..p };
                let l = LayerLayout::of(&p);
                assert!(
                    l.route.bytes <= l.sched
                        && l.sched < l.sched_down
                        && l.sched_down < l.h
                        && l.h < l.acc
                        && l.acc < l.bytes
                );
                assert!(l.acc - l.h >= p.pairs() * p.inter * 2);
                let acc = match combine {
                    CombineMode::Atomic => p.tokens() * p.hidden * 4,
                    CombineMode::Ordered => p.pairs() * p.hidden * 2,
                };
                assert!(l.bytes - l.acc >= acc);
                assert_eq!(
                    [l.sched % 256, l.sched_down % 256, l.h % 256, l.acc % 256],
                    [0; 4]
                );
            }
        }
    }

    #[test]
    fn odd_sizes_are_refused() {
        let e = |p: LayerProblem| p.validate().unwrap_err().to_string();
        assert!(e(layer(4, 8, 2, 100, 128)).contains("hidden size H is 100"));
        assert!(e(layer(4, 8, 2, 128, 0)).contains("expert width I is 0"));
        assert!(e(layer(4, 8, 9, 128, 128)).contains("top_k = 9"));
        assert_eq!(even_offsets(10, 4), vec![0, 2, 5, 7, 10]);
    }
}
