//! `Kiln::precompile`: runs each problem once on the handle's own stream, on scratch memory, so
//! that its kernels are compiled and loaded and its workspaces sized; afterwards the same
//! problem may be captured in a CUDA graph. Synchronises (it is the setup step).

use super::handle::Kiln;
use super::info::TensorInfo;
use super::launch;
use super::options::{AttentionBackwardOptions, MoeRows, Problem, SwigluWeights};
use super::tensor::RawTensor;
use super::validate::{self, Operand};
use crate::device::{Context, DeviceBuffer};
use crate::error::Result;

/// Bytes of the stand-in for the MoE tensors: with every expert empty the kernels take no tile,
/// so they read no row of x or w and write no row of y (the harness's graph warm-up does the
/// same); a valid, aligned address is all the TMA maps need.
const MOE_STANDIN_BYTES: usize = 64 << 10;

/// Scratch memory for a warm-up: `bytes` zeroed on the context's stream, plus room to offset a
/// base to any alignment below 256 bytes.
fn scratch(ctx: &Context, bytes: usize) -> Result<DeviceBuffer> {
    let b = ctx.alloc(bytes + 256)?;
    b.fill_bytes(0, ctx)?;
    Ok(b)
}

/// `op` moved into `buf`, keeping its base's alignment class (what the dispatch looks at).
fn into(buf: &DeviceBuffer, op: Operand) -> Operand {
    Operand {
        ptr: buf.ptr() + op.align_class() % 16,
        bytes: op.bytes,
    }
}

impl Kiln {
    /// A problem's tensor as the handle's: descriptions carry no device, and may have no base.
    fn described(&self, arg: &str, t: &RawTensor) -> Result<TensorInfo> {
        let mut t = t.clone();
        t.device = self.ordinal();
        t.info(arg, true)
    }

    /// JIT-compiles and loads every kernel `problems` need and sizes the handle's workspaces
    /// for them, by running each once on scratch memory (results discarded), so that the same
    /// calls may then be captured in a CUDA graph. Problems already run are skipped. Returns
    /// the number of kernels loaded.
    pub fn precompile(&self, problems: &[Problem]) -> Result<usize> {
        let before = self.loaded()?;
        for p in problems {
            self.prepare(p)?;
        }
        Ok(self.loaded()? - before)
    }

    fn prepare(&self, problem: &Problem) -> Result<()> {
        match problem {
            Problem::Gemm { a, b, c, opts } => {
                let (a, b, c) = (
                    self.described("a", a)?,
                    self.described("b", b)?,
                    self.described("c", c)?,
                );
                let Some(plan) = validate::gemm(self.ordinal(), &a, &b, &c, opts)? else {
                    return Ok(());
                };
                let v = opts.version.as_deref();
                let key = plan.key(v);
                if self.is_prepared(&key)? {
                    return Ok(());
                }
                self.run_keyed(
                    None,
                    &key,
                    || plan.problem.label(),
                    |ctx, _, _| {
                        let buf = scratch(ctx, plan.a.bytes.max(plan.b.bytes).max(plan.c.bytes))?;
                        let warm = validate::GemmPlan {
                            a: into(&buf, plan.a),
                            b: into(&buf, plan.b),
                            c: into(&buf, plan.c),
                            ..plan.clone()
                        };
                        launch::gemm(&self.registry, ctx, &warm, v)?;
                        ctx.synchronize()
                    },
                )
            }
            Problem::Attention {
                q,
                k,
                v,
                o,
                lse,
                opts,
            } => {
                let lse = lse.as_ref().map(|l| self.described("lse", l)).transpose()?;
                let Some(plan) = validate::attention(
                    self.ordinal(),
                    &self.described("q", q)?,
                    &self.described("k", k)?,
                    &self.described("v", v)?,
                    &self.described("o", o)?,
                    lse.as_ref(),
                    opts,
                )?
                else {
                    return Ok(());
                };
                let version = opts.version.as_deref();
                let key = plan.key(version);
                if self.is_prepared(&key)? {
                    return Ok(());
                }
                self.run_keyed(
                    None,
                    &key,
                    || plan.problem.label(),
                    |ctx, ws, _| {
                        let ops = [plan.q, plan.k, plan.v, plan.o];
                        let most = ops.iter().chain(plan.lse.as_ref()).map(|o| o.bytes).max();
                        let buf = scratch(ctx, most.unwrap_or(0))?;
                        let warm = validate::AttentionPlan {
                            q: into(&buf, plan.q),
                            k: into(&buf, plan.k),
                            v: into(&buf, plan.v),
                            o: into(&buf, plan.o),
                            lse: plan.lse.map(|l| into(&buf, l)),
                            ..plan.clone()
                        };
                        launch::attention(&self.registry, ctx, ws, false, &warm, version)?;
                        ctx.synchronize()
                    },
                )
            }
            Problem::AttentionBackward { tensors, opts } => self.prepare_backward(tensors, opts),
            Problem::GroupedGemm { x, w, rows, y } => {
                let rows = self.described_rows(rows)?;
                let plan = validate::grouped_gemm(
                    self.ordinal(),
                    &self.described("x", x)?,
                    &self.described("w", w)?,
                    &rows,
                    &self.described("y", y)?,
                )?;
                self.prepare_moe(plan)
            }
            Problem::Swiglu {
                x,
                w,
                rows,
                routing,
                h,
            } => {
                let rows = self.described_rows(rows)?;
                let w = match w {
                    SwigluWeights::Interleaved(w) => {
                        SwigluWeights::Interleaved(self.described("w13", w)?)
                    }
                    SwigluWeights::Separate { w1, w3 } => SwigluWeights::Separate {
                        w1: self.described("w1", w1)?,
                        w3: self.described("w3", w3)?,
                    },
                };
                let routing = routing
                    .as_ref()
                    .map(|r| self.described("routing", r))
                    .transpose()?;
                let plan = validate::swiglu(
                    self.ordinal(),
                    &self.described("x", x)?,
                    &w,
                    &rows,
                    routing.as_ref(),
                    &self.described("h", h)?,
                )?;
                self.prepare_moe(plan)
            }
        }
    }

    fn prepare_backward(
        &self,
        tensors: &[RawTensor; 9],
        opts: &AttentionBackwardOptions,
    ) -> Result<()> {
        let names = ["q", "k", "v", "o", "dout", "lse", "dq", "dk", "dv"];
        let t = names
            .iter()
            .zip(tensors)
            .map(|(n, t)| self.described(n, t))
            .collect::<Result<Vec<_>>>()?;
        let Some(plan) = validate::attention_backward(
            self.ordinal(),
            (&t[0], &t[1], &t[2], &t[3]),
            &t[4],
            Some(&t[5]),
            (&t[6], &t[7], &t[8]),
            opts,
        )?
        else {
            return Ok(());
        };
        let version = opts.version.as_deref();
        let key = plan.key(version);
        if self.is_prepared(&key)? {
            return Ok(());
        }
        self.run(None, &key, &plan.problem.label(), |ctx, _, _| {
            let ops = [
                plan.q, plan.k, plan.v, plan.o, plan.d_o, plan.lse, plan.dq, plan.dk, plan.dv,
            ];
            let buf = scratch(ctx, ops.iter().map(|o| o.bytes).max().unwrap_or(0))?;
            let [q, k, v, o, d_o, lse, dq, dk, dv] = ops.map(|op| into(&buf, op));
            let warm = validate::AttentionBackwardPlan {
                q,
                k,
                v,
                o,
                d_o,
                lse,
                dq,
                dk,
                dv,
                ..plan.clone()
            };
            super::backward::launch(&self.registry, ctx, &warm, version)?;
            ctx.synchronize()
        })
    }

    fn described_rows<'a>(&self, rows: &MoeRows<'a, RawTensor>) -> Result<MoeRows<'a, TensorInfo>> {
        let (arg, t) = match rows {
            MoeRows::Offsets { offsets, .. } => ("offsets", offsets),
            MoeRows::Counts { counts, .. } => ("counts", counts),
        };
        let info = self.described(arg, t)?;
        Ok(rows.map(|_| info))
    }

    fn prepare_moe(&self, plan: Option<validate::MoePlan>) -> Result<()> {
        let Some(plan) = plan else {
            return Ok(());
        };
        let key = plan.key(launch::moe_choice(
            &plan,
            self.device(),
            &self.overrides.moe,
        ));
        if self.is_prepared(&key)? {
            return Ok(());
        }
        self.run_keyed(
            None,
            &key,
            || plan.problem.label(),
            |ctx, ws, _| {
                let standin = scratch(ctx, MOE_STANDIN_BYTES)?;
                // Every expert empty: zero offsets or counts.
                let rows = scratch(ctx, plan.rows.bytes)?;
                let warm = validate::MoePlan {
                    x: into(&standin, plan.x),
                    w: into(&standin, plan.w),
                    w3: plan.w3.map(|o| into(&standin, o)),
                    y: into(&standin, plan.y),
                    rows: Operand {
                        ptr: rows.ptr(),
                        bytes: plan.rows.bytes,
                    },
                    route: plan.route.map(|o| into(&standin, o)),
                    ..plan.clone()
                };
                launch::moe(&self.registry, ctx, ws, false, &warm)?;
                ctx.synchronize()
            },
        )
    }
}
