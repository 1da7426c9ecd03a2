//! The check of a decode step on the GPU against the float64 reference (poisoned outputs, the
//! append included), and the GPU's own check of bad tables (NaN and the error flags).

use crate::device::{Context, DeviceBuffer, HostFlags};
use crate::error::Result;
use crate::harness::attention::decode::DecodeSpec;
use crate::harness::attention::verify::{judge_o_lse, lse_error, o_bound, o_error_of};
use crate::harness::attention::{device_inputs, host_inputs, upload};
use crate::harness::outcome::{Extra, Outcome};
use crate::harness::runner::{self, Check};
use crate::harness::verify::verdict;
use crate::ops::attention::decode_paged::{self, DecodeOperands, DecodePlan, DecodeShape};
use crate::ops::attention::kv_append::{self, AppendOperands};
use crate::ops::attention::PagedProblem;
use crate::reference::attention_paged::{append_kv, paged_forward};
use crate::reference::data::HostData;

/// `bytes` of [batch, S, heads, D] elements of `e` bytes as [batch, heads, S, D] memory (a dense
/// cache in transformers' order), or back with `back`.
fn swap_seq_heads(
    bytes: &[u8],
    e: usize,
    (b, s, h, d): (usize, usize, usize, usize),
    back: bool,
) -> Vec<u8> {
    let mut out = vec![0u8; bytes.len()];
    for bi in 0..b {
        for si in 0..s {
            for hi in 0..h {
                let bshd = ((bi * s + si) * h + hi) * d * e;
                let bhsd = ((bi * h + hi) * s + si) * d * e;
                let (from, to) = if back { (bhsd, bshd) } else { (bshd, bhsd) };
                out[to..to + d * e].copy_from_slice(&bytes[from..from + d * e]);
            }
        }
    }
    out
}

/// A cache's bytes as the device holds them for `spec` (a dense cache in BHSD order).
fn device_cache(spec: &DecodeSpec, p: &PagedProblem, host: &HostData) -> Result<DeviceBuffer> {
    let dims = (p.num_pages, p.page_size, p.heads_kv, p.head_dim);
    match spec.dense {
        true => DeviceBuffer::from_host(&swap_seq_heads(
            host.bytes(),
            host.dtype().size(),
            dims,
            false,
        )),
        false => DeviceBuffer::from_host(host.bytes()),
    }
}

/// One step's buffers: Q, the K and V caches (as the device holds them), O, LSE, and the block
/// table, the lengths and the first keys as `spec`'s shape reads them.
pub(super) struct DecodeBuffers {
    q: DeviceBuffer,
    k: DeviceBuffer,
    v: DeviceBuffer,
    o: DeviceBuffer,
    lse: DeviceBuffer,
    table: Option<DeviceBuffer>,
    lens: Option<DeviceBuffer>,
    starts: Option<DeviceBuffer>,
}

impl DecodeBuffers {
    /// The buffers around `[q, k, v]`: O and LSE allocated, the tables uploaded.
    fn around(
        ctx: &Context,
        spec: &DecodeSpec,
        p: &PagedProblem,
        [q, k, v]: [DeviceBuffer; 3],
    ) -> Result<DecodeBuffers> {
        let upload =
            |want: bool, host: &[i32]| want.then(|| DeviceBuffer::from_host(host)).transpose();
        Ok(DecodeBuffers {
            q,
            k,
            v,
            o: ctx.alloc(p.q_elems() * p.dtype.size())?,
            lse: ctx.alloc(spec.shape(p).lse_elems() * 4)?,
            table: upload(!spec.dense, &p.block_table)?,
            lens: upload(spec.shape(p).lengths, &p.context_lens)?,
            starts: upload(spec.left_pad, &p.context_starts)?,
        })
    }

    /// Q and the caches random from `seed`, made on the GPU (the bench's, the bad tables').
    pub(super) fn random(
        ctx: &Context,
        spec: &DecodeSpec,
        p: &PagedProblem,
        seed: u64,
    ) -> Result<Self> {
        let (qn, cache) = (p.q_elems(), p.cache_elems());
        let inputs = device_inputs(ctx, p.dtype, [qn, cache, cache], seed)?;
        DecodeBuffers::around(ctx, spec, p, inputs)
    }

    /// O and LSE poisoned: all-ones bytes, NaN in every dtype, so an unwritten element cannot
    /// pass.
    fn poison(&self, ctx: &Context) -> Result<()> {
        self.o.fill_bytes(0xFF, ctx)?;
        self.lse.fill_bytes(0xFF, ctx)
    }

    pub(super) fn operands(&self, errors: u64) -> DecodeOperands<'_> {
        DecodeOperands {
            q: &self.q,
            k_cache: &self.k,
            v_cache: &self.v,
            o: &self.o,
            lse: &self.lse,
            block_table: self.table.as_ref(),
            context_lens: self.lens.as_ref(),
            context_starts: self.starts.as_ref(),
            errors,
        }
    }

    /// O and LSE as downloaded.
    fn outputs(&self, p: &PagedProblem, s: &DecodeShape) -> Result<(HostData, Vec<f32>)> {
        let o = self.o.download::<u8>(p.q_elems() * p.dtype.size())?;
        Ok((
            HostData::from_bytes(p.dtype, &o),
            self.lse.download::<f32>(s.lse_elems())?,
        ))
    }
}

/// Runs `spec` once with the inputs of `seed`: the append (if any) and the step on the GPU,
/// O and LSE poisoned first, against the float64 reference on every row.
pub fn verify_decode(ctx: &Context, spec: &DecodeSpec, seed: u64) -> Result<Outcome> {
    runner::run(ctx, &Step { spec }, seed)
}

/// `spec`'s outcome with the inputs of `seed`, not yet judged.
fn blank(spec: &DecodeSpec, seed: u64, bound: f64, lse_max_error: f64) -> Outcome {
    let extra = Extra::Decode {
        spec: *spec,
        splits: 0,
        lse_max_error,
        append_mismatches: 0,
    };
    Outcome::new("decode_paged", spec.label(), seed, bound, extra)
}

/// Sets the decode extras measured by a check.
fn set_decode(out: &mut Outcome, step_splits: usize, appended_wrong: usize) {
    if let Extra::Decode {
        splits,
        append_mismatches,
        ..
    } = &mut out.extra
    {
        (*splits, *append_mismatches) = (step_splits, appended_wrong);
    }
}

/// One decode step (with its append) of one spec, as the runner checks it.
struct Step<'a> {
    spec: &'a DecodeSpec,
}

/// A decode step's problem, inputs (the cache in float64 for the reference, which the append
/// extends) and buffers.
struct StepDrawn {
    p: PagedProblem,
    s: DecodeShape,
    seed: u64,
    q: HostData,
    k64: Vec<f64>,
    v64: Vec<f64>,
    bufs: DecodeBuffers,
    splits: usize,
    append_mismatches: usize,
}

impl Check for Step<'_> {
    type Drawn = StepDrawn;

    fn blank(&self, seed: u64) -> Outcome {
        blank(self.spec, seed, o_bound(self.spec.dtype), f64::NAN)
    }

    fn supports(&self, _ctx: &Context) -> std::result::Result<(), String> {
        Ok(())
    }

    fn draw(&self, ctx: &Context, seed: u64) -> Result<StepDrawn> {
        let spec = self.spec;
        let p = spec.problem(seed)?;
        let s = spec.shape(&p);
        let (qn, cache) = (p.q_elems(), p.cache_elems());
        let [q, kc, vc] = host_inputs(p.dtype, [qn, cache, cache], seed.wrapping_add(1));
        let inputs = [
            DeviceBuffer::from_host(q.bytes())?,
            device_cache(spec, &p, &kc)?,
            device_cache(spec, &p, &vc)?,
        ];
        Ok(StepDrawn {
            bufs: DecodeBuffers::around(ctx, spec, &p, inputs)?,
            splits: DecodePlan::new(&s, &ctx.info).splits,
            k64: kc.to_f64(),
            v64: vc.to_f64(),
            append_mismatches: 0,
            q,
            p,
            s,
            seed,
        })
    }

    /// The append (checked against the reference's at once), then the step on poisoned O and LSE.
    fn launch(&self, ctx: &Context, d: &mut StepDrawn) -> Result<()> {
        let (spec, p) = (self.spec, &d.p);
        if spec.append > 0 {
            let n = p.batch * spec.append * p.heads_kv * p.head_dim;
            let new = host_inputs(p.dtype, [n, n], d.seed.wrapping_add(4));
            let [dkn, dvn] = upload(&new)?;
            let [kn, vn] = new;
            // (an append needs the lengths: with a full dense cache, every one is the cache's)
            let all = DeviceBuffer::from_host(&p.context_lens)?;
            let ops = AppendOperands {
                k_new: &dkn,
                v_new: &dvn,
                k_cache: &d.bufs.k,
                v_cache: &d.bufs.v,
                block_table: d.bufs.table.as_ref(),
                context_lens: d.bufs.lens.as_ref().unwrap_or(&all),
                errors: 0,
            };
            kv_append::launch(ctx, &d.s, spec.append, &ops)?;
            append_kv(
                p,
                &mut d.k64,
                &mut d.v64,
                &kn.to_f64(),
                &vn.to_f64(),
                spec.append,
            )?;
            ctx.synchronize()?;
            let bytes = p.cache_elems() * p.dtype.size();
            let dims = (p.num_pages, p.page_size, p.heads_kv, p.head_dim);
            for (buf, want) in [(&d.bufs.k, &d.k64), (&d.bufs.v, &d.v64)] {
                let mut raw = buf.download::<u8>(bytes)?;
                if spec.dense {
                    raw = swap_seq_heads(&raw, p.dtype.size(), dims, true);
                }
                let have = HostData::from_bytes(p.dtype, &raw);
                d.append_mismatches += (0..have.len()).filter(|&i| have.get(i) != want[i]).count();
            }
        }
        d.bufs.poison(ctx)?;
        let ops = d.bufs.operands(0);
        decode_paged::check_operands(&d.s, &ops)?;
        decode_paged::launch(ctx, &d.s, &ops)?;
        Ok(())
    }

    fn flops(&self) -> f64 {
        let sp = self.spec;
        4.0 * (sp.batch * sp.heads_q * sp.seqlen_q * sp.context * sp.head_dim) as f64
    }

    /// The step's own wait, whatever its size.
    fn wait(&self) -> std::time::Duration {
        std::time::Duration::from_secs(30)
    }

    fn judge(&self, d: &StepDrawn, out: &mut Outcome) -> Result<()> {
        let p = &d.p;
        let (have_o, have_lse) = d.bufs.outputs(p, &d.s)?;
        let want = paged_forward(p, &d.q.to_f64(), &d.k64, &d.v64);
        out.mismatches = (0..have_o.len())
            .filter(|&i| have_o.get(i).is_nan())
            .count()
            + have_lse.iter().filter(|x| x.is_nan()).count();
        out.rel_error = o_error_of(&have_o, &want.o);
        let lse = want.lse.iter().zip(&have_lse);
        out.set_lse_max_error(lse.map(|(&w, &h)| lse_error(h, w)).fold(0.0, f64::max));
        set_decode(out, d.splits, d.append_mismatches);
        let wrong = d.append_mismatches;
        judge_o_lse(
            out,
            p.dtype,
            &[(wrong > 0, &|| {
                format!("the append left {wrong} cache elements unlike the reference's")
            })],
        );
        Ok(())
    }
}

/// The guard against bad tables on the GPU, with no host check before the launch: sequence 0's
/// first page id is past the cache (paged only), sequence 1's length past its cache and (left
/// padded) sequence 2's first key past its length, so their O and LSE must come out NaN (never
/// a plausible value), every other sequence's finite, and the error flags must say which kinds
/// were seen (a length; a page id; a key start).
pub fn verify_bad_tables(ctx: &Context, spec: &DecodeSpec, seed: u64) -> Result<Outcome> {
    let mut p = spec.problem(seed)?;
    let s = spec.shape(&p);
    if !spec.dense {
        p.block_table[0] = p.num_pages as i32;
    }
    p.context_lens[1] = (p.max_pages * p.page_size + 1) as i32;
    if spec.left_pad {
        p.context_starts[2] = p.context_lens[2] + 1;
    }
    let bad_seq = |b: usize| b == 1 || (b == 0 && !spec.dense) || (b == 2 && spec.left_pad);
    let bufs = DecodeBuffers::random(ctx, spec, &p, seed)?;
    let flags = HostFlags::new(3)?;
    bufs.poison(ctx)?;
    let ops = bufs.operands(flags.device_ptr());
    decode_paged::check_operands(&s, &ops)?;
    let splits = decode_paged::launch(ctx, &s, &ops)?.splits;
    ctx.synchronize_within(std::time::Duration::from_secs(30), &spec.label())?;
    let (have_o, have_lse) = bufs.outputs(&p, &s)?;
    let (o_seq, lse_seq) = (p.seqlen_q * p.heads_q * p.head_dim, p.heads_q * p.seqlen_q);
    // Elements that disagree with their sequence's verdict (NaN for a bad one, finite after).
    let wrong = (0..have_o.len())
        .filter(|&i| have_o.get(i).is_nan() != bad_seq(i / o_seq))
        .count()
        + (0..have_lse.len())
            .filter(|&i| have_lse[i].is_nan() != bad_seq(i / lse_seq))
            .count();
    let want_flags = vec![1, u32::from(!spec.dense), u32::from(spec.left_pad)];
    let have_flags = flags.take();
    let (passed, message) = verdict(&[
        (wrong > 0, &|| {
            format!("{wrong} output elements disagree with their sequence's table: NaN for a bad one, finite otherwise")
        }),
        (have_flags != want_flags, &|| {
            format!("the error flags read {have_flags:?}, not {want_flags:?} (a length; a page id; a key start)")
        }),
    ]);
    let mut out = Outcome {
        passed,
        rel_error: 0.0,
        mismatches: wrong,
        message: format!("bad tables: {message}"),
        ..blank(spec, seed, 0.0, 0.0)
    };
    set_decode(&mut out, splits, 0);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::DType;

    #[test]
    fn a_dense_cache_swaps_sequence_and_head_and_back() {
        let host = HostData::random(DType::Bf16, 2 * 5 * 3 * 64, 1);
        let dims = (2, 5, 3, 64);
        let there = swap_seq_heads(host.bytes(), 2, dims, false);
        assert_ne!(there, host.bytes());
        assert_eq!(swap_seq_heads(&there, 2, dims, true), host.bytes());
    }
}
