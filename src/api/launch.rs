//! From a checked plan to the registry's kernels: the caller's memory as borrowed buffers, the
//! version to run (the one asked for, else the fastest that supports the problem, falling back
//! to the next when one refuses at launch), and the handle's workspaces where an op needs one.

use super::validate::{AttentionPlan, GemmPlan, MoePlan, Operand};
use super::workspace::Workspaces;
use crate::device::{Context, DeviceBuffer, DeviceInfo};
use crate::error::{Error, Result};
use crate::ops::attention::{check_buffers, AttentionOperands};
use crate::ops::gemm::{self, GemmOperands};
use crate::ops::moe::grouped_gemm::GroupedGemm;
use crate::ops::moe::schedule::TileConfig;
use crate::ops::moe::{check_operands, schedule, version_for, MoeOperands};
use crate::ops::registry::Registry;
use crate::overrides::MoeOverrides;

/// The attention version the default dispatch leaves out: it materialises the whole score
/// matrix through cuBLAS (a reference point, like the GEMM's vendor baseline).
const ATTENTION_BASELINE: &str = "composed";

/// A buffer over an operand's memory.
///
/// # Safety
/// The operand must describe memory of the current context that outlives the launch.
pub(crate) unsafe fn borrow(op: Operand) -> DeviceBuffer {
    DeviceBuffer::borrowed(op.ptr, op.bytes)
}

/// Refuses a version `asked` for other than `only`, the one version that runs `what`.
pub(crate) fn only_version(asked: Option<&str>, only: &str, what: &str) -> Result<()> {
    match asked.filter(|&v| v != only) {
        Some(v) => Err(Error::Unsupported {
            kernel: v.into(),
            reason: format!("only {only} runs {what}"),
        }),
        None => Ok(()),
    }
}

/// Launches with the first of `versions` that does not refuse the problem at launch.
fn first_that_launches<'k, K: ?Sized + 'k>(
    op: &str,
    versions: impl IntoIterator<Item = &'k K>,
    name: impl Fn(&K) -> &'static str,
    mut launch: impl FnMut(&K) -> Result<()>,
) -> Result<()> {
    let mut reasons = Vec::new();
    for k in versions {
        match launch(k) {
            Err(Error::Unsupported { reason, .. }) => {
                reasons.push(format!("{}: {reason}", name(k)))
            }
            r => return r,
        }
    }
    Err(Error::Unsupported {
        kernel: format!("every {op} version"),
        reason: reasons.join("; "),
    })
}

/// Enqueues `plan` on the context's stream.
pub(crate) fn gemm(
    reg: &Registry,
    ctx: &Context,
    plan: &GemmPlan,
    version: Option<&str>,
) -> Result<()> {
    let p = &plan.problem;
    // SAFETY: the plan's operands are checked views of the caller's memory, which the caller
    // keeps alive until the stream has run the launch.
    let (a, b, c) = unsafe { (borrow(plan.a), borrow(plan.b), borrow(plan.c)) };
    p.check_buffers(a.bytes(), b.bytes(), c.bytes())?;
    let ops = GemmOperands {
        a: &a,
        b: &b,
        c: &c,
    };
    let dev = &ctx.info;
    if version.is_some() {
        return reg
            .select_gemm(p, dev, &ctx.tuned, version)?
            .launch(ctx, p, &ops);
    }
    let top = reg.select_gemm(p, dev, &ctx.tuned, None)?;
    let rest = reg.gemm().iter().rev().map(|k| k.as_ref()).filter(|k| {
        !k.is_vendor()
            && k.name() != gemm::planted::NAME
            && k.name() != top.name()
            && k.supports(p, dev).is_ok()
    });
    first_that_launches(
        "gemm",
        std::iter::once(top).chain(rest),
        |k| k.name(),
        |k| k.launch(ctx, p, &ops),
    )
}

/// Enqueues `plan` on the context's stream; without a caller's LSE the kernels write the
/// handle's.
pub(crate) fn attention(
    reg: &Registry,
    ctx: &Context,
    ws: &mut Workspaces,
    capturing: bool,
    plan: &AttentionPlan,
    version: Option<&str>,
) -> Result<()> {
    let p = &plan.problem;
    let lse = match plan.lse {
        Some(l) => l,
        None => {
            let bytes = p.lse_elems() * 4;
            Operand {
                ptr: ws.lse.at_least(ctx, bytes, capturing)?,
                bytes,
            }
        }
    };
    // SAFETY: as in `gemm`; the LSE workspace lives as long as the handle.
    let (q, k, v, o, l) = unsafe {
        (
            borrow(plan.q),
            borrow(plan.k),
            borrow(plan.v),
            borrow(plan.o),
            borrow(lse),
        )
    };
    let ops = AttentionOperands {
        q: &q,
        k: &k,
        v: &v,
        o: &o,
        lse: &l,
    };
    check_buffers(p, &ops)?;
    let dev = &ctx.info;
    if version.is_some() {
        return reg.select_attention(p, dev, version)?.launch(ctx, p, &ops);
    }
    // The versions that support the problem, fastest first, are worked out once per problem
    // (the context's memo): a warm call walks no `supports` of the ladder.
    let all = reg.attention();
    let supported: std::rc::Rc<[usize]> =
        ctx.memo.get_or_try(&(p.key(), AttentionDispatch), || {
            let mut refused = Vec::new();
            let ok: Vec<usize> = (0..all.len())
                .rev()
                .filter(|&i| all[i].name() != ATTENTION_BASELINE)
                .filter(|&i| match all[i].supports(p, dev) {
                    Ok(()) => true,
                    Err(r) => {
                        refused.push(format!("{}: {r}", all[i].name()));
                        false
                    }
                })
                .collect();
            if ok.is_empty() {
                return Err(Error::Unsupported {
                    kernel: "every attention version".into(),
                    reason: refused.join("; "),
                });
            }
            Ok(ok.into())
        })?;
    first_that_launches(
        "attention",
        supported.iter().map(|&i| all[i].as_ref()),
        |k| k.name(),
        |k| k.launch(ctx, p, &ops),
    )
}

/// Tags the memo entry of the attention versions a problem may run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct AttentionDispatch;

/// The MoE version for `plan` and its tile shape: what, besides the problem, decides which
/// kernels a launch loads.
pub(crate) fn moe_choice(
    plan: &MoePlan,
    dev: &DeviceInfo,
    o: &MoeOverrides,
) -> (&'static str, Option<TileConfig>) {
    let p = &plan.problem;
    match version_for(p, o) {
        "grouped_gemm" => (
            "grouped_gemm",
            Some(GroupedGemm::config(p, dev.sm_count, o)),
        ),
        other => (other, None),
    }
}

/// Enqueues `plan` (the prefix-sum kernel, then the grouped GEMM or SwiGLU) on the context's
/// stream, with the handle's schedule workspace.
pub(crate) fn moe(
    reg: &Registry,
    ctx: &Context,
    ws: &mut Workspaces,
    capturing: bool,
    plan: &MoePlan,
) -> Result<()> {
    let p = &plan.problem;
    let sched_bytes = schedule::sched_bytes(p.experts);
    let sched = Operand {
        ptr: ws.moe_sched.at_least(ctx, sched_bytes, capturing)?,
        bytes: sched_bytes,
    };
    // SAFETY: as in `gemm`; the schedule workspace lives as long as the handle.
    let (x, w, y, rows, sched) = unsafe {
        (
            borrow(plan.x),
            borrow(plan.w),
            borrow(plan.y),
            borrow(plan.rows),
            borrow(sched),
        )
    };
    // SAFETY: as above.
    let w3 = plan.w3.map(|o| unsafe { borrow(o) });
    // SAFETY: as above.
    let route = plan.route.map(|o| unsafe { borrow(o) });
    let ops = MoeOperands {
        x: &x,
        w: &w,
        w3: w3.as_ref(),
        y: &y,
        rows: &rows,
        route: route.as_ref(),
        sched: &sched,
        row_map: None,
    };
    check_operands(p, &ops)?;
    let k = reg.moe_version(version_for(p, &ctx.overrides.moe))?;
    k.supports(p, &ctx.info)
        .map_err(|reason| Error::Unsupported {
            kernel: k.name().into(),
            reason,
        })?;
    k.launch(ctx, p, &ops)
}
