//! The GPU's own check of packed offsets, which a caller without host copies never sees on the
//! host: a sequence whose offsets are bad (not cumulative within the packed rows, or longer than
//! the `max_seqlen_q` that sized the grid) comes out NaN where its rows lie, every other sequence
//! as the float64 reference has it, nothing outside O and LSE is written, and the error word is
//! set.

use crate::device::{Context, DeviceBuffer, HostFlags};
use crate::error::Result;
use crate::harness::attention::varlen::{blank, VarlenBuffers};
use crate::harness::attention::verify::{o_bound, o_error};
use crate::harness::outcome::Outcome;
use crate::harness::verify::{verdict, within};
use crate::ops::attention::fa3_wgmma::{Fa3Wgmma, VarlenOperands};
use crate::ops::attention::{VarlenProblem, VarlenShape};
use crate::ops::gemm::DType;
use crate::reference::{attention_varlen::varlen_forward, data::HostData};

/// Bytes of canary before and after O and LSE.
const GUARD: usize = 4096;
const CANARY: u8 = 0x5A;

/// One case: its name, the launch shape and offsets it gives the kernel (edits of the clean
/// problem's), the sequences whose rows must be NaN, and those that must match the reference.
struct Case {
    name: &'static str,
    shape: VarlenShape,
    cu_q: Vec<i32>,
    cu_k: Vec<i32>,
    nan: Vec<usize>,
    good: Vec<usize>,
}

/// The clean problem: four sequences, one of a single query row, GQA, causal, d128.
fn clean() -> VarlenProblem {
    VarlenProblem {
        heads_kv: 2,
        causal: true,
        ..VarlenProblem::new(&[(70, 70), (130, 90), (1, 5), (200, 200)], 4, 128)
    }
}

fn cases(p: &VarlenProblem) -> Vec<Case> {
    let (s, cq, ck) = (p.shape(), &p.cu_seqlens_q, &p.cu_seqlens_k);
    let edit = |v: &[i32], at: usize, to: i32| {
        let mut v = v.to_vec();
        v[at] = to;
        v
    };
    let case = |name, shape, cu_q, cu_k, nan: &[usize], good: &[usize]| Case {
        name,
        shape,
        cu_q,
        cu_k,
        nan: nan.to_vec(),
        good: good.to_vec(),
    };
    let (long, past) = (VarlenShape { max_q: 150, ..s }, p.total_k as i32 + 5);
    vec![
        case(
            "a sequence longer than max_seqlen_q",
            long,
            cq.clone(),
            ck.clone(),
            &[3],
            &[0, 1, 2],
        ),
        case(
            "the last key offset past the packed rows",
            s,
            cq.clone(),
            edit(ck, 4, past),
            &[3],
            &[0, 1, 2],
        ),
        case(
            "a first offset other than 0",
            s,
            edit(cq, 0, 5),
            ck.clone(),
            &[0],
            &[1, 2, 3],
        ),
        // (sequence 1 ends before it starts; sequence 2 then claims rows of 0 and 1)
        case(
            "offsets that decrease",
            s,
            edit(cq, 2, 60),
            ck.clone(),
            &[],
            &[3],
        ),
    ]
}

/// Each case of bad offsets: the error word set, the bad sequences' rows (within the packed
/// rows and the grid) NaN, the others within the bound of the float64 reference, the canaries
/// around O and LSE untouched.
pub fn verify_bad_offsets(ctx: &Context, seed: u64) -> Result<Vec<Outcome>> {
    let p = clean();
    p.validate()?;
    let (inputs, bufs) = VarlenBuffers::random(&p, seed)?;
    let [q, k, v] = inputs.each_ref().map(HostData::to_f64);
    let want = varlen_forward(&p, &q, &k, &v);
    let (o_bytes, lse_bytes) = (p.q_elems() * 2, p.heads_q * p.total_q * 4);
    let (o_all, lse_all) = (
        DeviceBuffer::new(o_bytes + 2 * GUARD)?,
        DeviceBuffer::new(lse_bytes + 2 * GUARD)?,
    );
    // SAFETY: the middles of two live allocations, used only while they live.
    let (o, lse) = unsafe {
        (
            DeviceBuffer::borrowed(o_all.ptr() + GUARD as u64, o_bytes),
            DeviceBuffer::borrowed(lse_all.ptr() + GUARD as u64, lse_bytes),
        )
    };
    let row = p.heads_q * p.head_dim;
    let mut out = Vec::new();
    for case in cases(&p) {
        let (cu_q, cu_k) = (
            DeviceBuffer::from_host(&case.cu_q)?,
            DeviceBuffer::from_host(&case.cu_k)?,
        );
        for b in [&o_all, &lse_all] {
            b.fill_bytes(CANARY, ctx)?;
        }
        o.fill_bytes(0xFF, ctx)?;
        lse.fill_bytes(0xFF, ctx)?;
        let flags = HostFlags::new(1)?;
        let ops = VarlenOperands {
            o: &o,
            lse: &lse,
            cu_q: &cu_q,
            cu_k: &cu_k,
            errors: flags.device_ptr(),
            ..bufs.operands()
        };
        Fa3Wgmma.launch_varlen(ctx, &case.shape, &ops)?;
        ctx.synchronize_within(std::time::Duration::from_secs(30), case.name)?;
        let have = HostData::from_bytes(DType::Bf16, &o.download::<u8>(o_bytes)?);
        let canaries_hit = [(&o_all, o_bytes), (&lse_all, lse_bytes)]
            .iter()
            .map(|(b, n)| -> Result<usize> {
                let all = b.download::<u8>(n + 2 * GUARD)?;
                let (head, tail) = (&all[..GUARD], &all[GUARD + n..]);
                Ok(head.iter().chain(tail).filter(|&&x| x != CANARY).count())
            })
            .sum::<Result<usize>>()?;
        // The bad sequences' rows as the kernel clamps them: within the packed rows, at most
        // max_q of them.
        let nan_rows: Vec<usize> = case
            .nan
            .iter()
            .flat_map(|&s| {
                let lo = (case.cu_q[s].max(0) as usize).min(p.total_q);
                let hi = (case.cu_q[s + 1].max(0) as usize)
                    .clamp(lo, p.total_q)
                    .min(lo + case.shape.max_q);
                lo..hi
            })
            .collect();
        let not_nan = nan_rows
            .iter()
            .flat_map(|&r| r * row..(r + 1) * row)
            .filter(|&i| !have.get(i).is_nan())
            .count();
        let good = case.good.iter().flat_map(|&s| {
            let (rq, _) = p.rows(s);
            rq.start * row..rq.end * row
        });
        let nonfinite = good.clone().filter(|&i| !have.get(i).is_finite()).count();
        let rel = o_error(good.map(|i| (have.get(i), want.o[i])));
        let flagged = flags.take()[0] != 0;
        let (passed, message) = verdict(&[
            (!flagged, &|| "the error word was not set".into()),
            (canaries_hit > 0, &|| {
                format!("{canaries_hit} bytes around O and LSE were written")
            }),
            (not_nan > 0, &|| {
                format!("{not_nan} elements of the bad sequences' rows are not NaN")
            }),
            (nonfinite > 0, &|| {
                format!("{nonfinite} elements of the good sequences are NaN or unwritten")
            }),
            (!within(rel, o_bound(DType::Bf16)), &|| {
                format!("the good sequences' relative error is {rel:.2e}")
            }),
        ]);
        let label = format!("bad offsets: {}", case.name);
        let mut o = Outcome {
            passed,
            rel_error: rel,
            mismatches: nonfinite,
            message,
            ..blank(label, seed, o_bound(DType::Bf16))
        };
        o.set_lse_max_error(0.0);
        out.push(o);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_names_bad_and_good_sequences_apart() {
        let p = clean();
        p.validate().unwrap();
        for c in cases(&p) {
            assert!(!c.good.is_empty(), "{}", c.name);
            assert!(c.nan.iter().all(|s| !c.good.contains(s)), "{}", c.name);
            // the edits make the offsets bad as the host check sees them, or the grid short
            let edited = VarlenProblem {
                cu_seqlens_q: c.cu_q.clone(),
                cu_seqlens_k: c.cu_k.clone(),
                ..p.clone()
            };
            assert!(
                edited.validate().is_err() || c.shape.max_q < edited.shape().max_q,
                "{}",
                c.name
            );
        }
    }
}
