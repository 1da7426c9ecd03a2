//! Decode over a KV cache on the GPU: problems with shuffled pages, or a dense cache per sequence
//! as transformers keeps it (BHSD memory with spare rows, read through a transposed view), the
//! check against the float64 reference (poisoned outputs, the append included), the GPU's own
//! check of bad tables (NaN and the error flags), the shape suite, and the timing.

use rand::{seq::SliceRandom, Rng, SeedableRng};
use serde::Serialize;

use crate::device::{Context, DeviceBuffer, HostFlags};
use crate::error::Result;
use crate::harness::attention::verify::{judge_o_lse, lse_error, o_bound, o_error};
use crate::harness::bench::{sample_launches, stats, BenchOptions, L2Flusher};
use crate::harness::device_data::random_buffer;
use crate::harness::outcome::{Extra, Outcome};
use crate::harness::runner::{self, Check};
use crate::harness::verify::verdict;
use crate::ops::attention::decode_paged::{
    self, DecodeOperands, DecodePlan, DecodeShape, DecodeStrides,
};
use crate::ops::attention::kv_append::{self, AppendOperands};
use crate::ops::attention::PagedProblem;
use crate::ops::gemm::DType;
use crate::reference::attention_paged::{append_kv, paged_forward};
use crate::reference::data::HostData;

/// What a decode problem is made from (the CLI's flags, the suite's rows).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DecodeSpec {
    pub batch: usize,
    pub heads_q: usize,
    pub heads_kv: usize,
    pub head_dim: usize,
    pub seqlen_q: usize,
    pub page_size: usize,
    /// The longest context (every sequence's, unless `random_lengths`).
    pub context: usize,
    /// Lengths drawn from seqlen_q..=context per sequence.
    pub random_lengths: bool,
    pub causal: bool,
    pub dtype: DType,
    /// New K/V tokens appended by `kv_append` before the step (0: none).
    pub append: usize,
    /// A dense cache per sequence instead of pages: stored [batch, heads_kv, S, D] and read
    /// through its [batch, S, heads_kv, D] view, S = `context` + [`DENSE_SPARE`] with lengths
    /// (`random_lengths`), else S = `context` and no lengths (each sequence attends to all).
    #[serde(default)]
    pub dense: bool,
    /// Left padding: each sequence's keys start at a seeded position (flash-attention's
    /// `cache_leftpad`; transformers' static cache under a left-padded batch), drawn from
    /// 0..=length - seqlen_q, so that every query still sees a key.
    #[serde(default)]
    pub left_pad: bool,
}

/// Rows a dense cache holds past the longest context when lengths are given (a static cache).
pub const DENSE_SPARE: usize = 40;

impl DecodeSpec {
    /// The problem: every page of the cache in a seeded shuffled order, table entries past a
    /// context left at -1 (never read), scale 1/sqrt(d). Validated. A dense cache is the same
    /// problem with one page of the cache's length per sequence (page b is sequence b), which
    /// the reference reads alike.
    pub fn problem(&self, seed: u64) -> Result<PagedProblem> {
        if self.dense {
            return self.dense_problem(seed);
        }
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let max_pages = self.context.div_ceil(self.page_size.max(1)).max(1);
        let context_lens = self.lengths(&mut rng);
        let num_pages = self.batch * max_pages;
        let mut ids: Vec<i32> = (0..num_pages as i32).collect();
        ids.shuffle(&mut rng);
        let mut block_table = vec![-1; num_pages];
        for (b, &ctx) in context_lens.iter().enumerate() {
            let row = b * max_pages..b * max_pages + (ctx as usize).div_ceil(self.page_size.max(1));
            block_table[row.clone()].copy_from_slice(&ids[row]);
        }
        let mut p = self.paged_problem_of(block_table, context_lens, num_pages, max_pages);
        p.context_starts = self.starts(&p.context_lens, &mut rng);
        p.validate()?;
        Ok(p)
    }

    /// Each sequence's first key with `left_pad` (0..=length - seqlen_q, seeded), else none.
    fn starts(&self, lens: &[i32], rng: &mut rand::rngs::SmallRng) -> Vec<i32> {
        match self.left_pad {
            true => lens
                .iter()
                .map(|&c| rng.gen_range(0..=(c - self.seqlen_q as i32).max(0)))
                .collect(),
            false => Vec::new(),
        }
    }

    /// The dense cache's problem: S rows per sequence, one "page" each (page b is sequence b),
    /// lengths drawn as for pages.
    fn dense_problem(&self, seed: u64) -> Result<PagedProblem> {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let context_lens = self.lengths(&mut rng);
        let p = PagedProblem {
            context_starts: self.starts(&context_lens, &mut rng),
            num_pages: self.batch,
            page_size: self.dense_rows(),
            max_pages: 1,
            block_table: (0..self.batch as i32).collect(),
            context_lens,
            ..self.paged_problem_of(Vec::new(), Vec::new(), 0, 0)
        };
        self.shape(&p).validate()?;
        Ok(p)
    }

    /// Each sequence's context: drawn from seqlen_q..=context with `random_lengths`, else all.
    fn lengths(&self, rng: &mut rand::rngs::SmallRng) -> Vec<i32> {
        (0..self.batch)
            .map(|_| match self.random_lengths {
                true => rng.gen_range(self.seqlen_q.min(self.context)..=self.context) as i32,
                false => self.context as i32,
            })
            .collect()
    }

    /// The problem of this spec with these tables and page counts.
    fn paged_problem_of(
        &self,
        block_table: Vec<i32>,
        context_lens: Vec<i32>,
        num_pages: usize,
        max_pages: usize,
    ) -> PagedProblem {
        PagedProblem {
            batch: self.batch,
            heads_q: self.heads_q,
            heads_kv: self.heads_kv,
            head_dim: self.head_dim,
            seqlen_q: self.seqlen_q,
            num_pages,
            page_size: self.page_size,
            max_pages,
            block_table,
            context_lens,
            context_starts: Vec::new(),
            causal: self.causal,
            scale: 1.0 / (self.head_dim as f32).sqrt(),
            dtype: self.dtype,
        }
    }

    /// Rows of a dense cache per sequence.
    pub fn dense_rows(&self) -> usize {
        match self.random_lengths {
            true => self.context + DENSE_SPARE,
            false => self.context,
        }
    }

    /// The launch shape of `p` (this spec's problem): packed pages, or the dense cache's BHSD
    /// memory read as [batch, S, heads_kv, D], with lengths only when they differ.
    pub fn shape(&self, p: &PagedProblem) -> DecodeShape {
        let s = DecodeShape::of(p);
        if !self.dense {
            return s;
        }
        let (rows, hkv, d) = (p.page_size, p.heads_kv, p.head_dim);
        let bhsd = [hkv * rows * d, d, rows * d];
        DecodeShape {
            paged: false,
            lengths: self.random_lengths || self.left_pad,
            strides: DecodeStrides {
                k: bhsd,
                v: bhsd,
                ..s.strides
            },
            ..s
        }
    }

    pub fn label(&self) -> String {
        let cache = match self.dense {
            true => format!("dense{}", self.dense_rows()),
            false => format!("page{}", self.page_size),
        };
        format!(
            "decode B{} H{}/{} d{} q{} {} ctx{}{}{}{}{} {}",
            self.batch,
            self.heads_q,
            self.heads_kv,
            self.head_dim,
            self.seqlen_q,
            cache,
            self.context,
            if self.random_lengths { " random" } else { "" },
            if self.left_pad { " left-padded" } else { "" },
            if self.causal { " causal" } else { "" },
            if self.append > 0 {
                format!(" +{}", self.append)
            } else {
                String::new()
            },
            self.dtype
        )
    }
}

/// The suite: page sizes 16/64/256; contexts 1, 15, 16, 17 and random; GQA 1, 4 and 8; 1, 4
/// and 16 query tokens; head dims 64, 128 and 256; both dtypes; causal or not; with appends.
pub fn decode_suite() -> Vec<DecodeSpec> {
    let base = DecodeSpec {
        batch: 3,
        heads_q: 4,
        heads_kv: 1,
        head_dim: 128,
        seqlen_q: 1,
        page_size: 16,
        context: 17,
        random_lengths: false,
        causal: false,
        dtype: DType::Bf16,
        append: 0,
        dense: false,
        left_pad: false,
    };
    let mut v = Vec::new();
    let mut n = 0usize;
    for page_size in [16, 64, 256] {
        for context in [1, 15, 16, 17, 300] {
            for d in [64, 128, 256] {
                n += 1;
                v.push(DecodeSpec {
                    page_size,
                    context,
                    random_lengths: context == 300,
                    head_dim: d,
                    dtype: if n.is_multiple_of(2) {
                        DType::F16
                    } else {
                        DType::Bf16
                    },
                    ..base
                });
            }
        }
    }
    // GQA 1/4/8 x 1/4/16 query tokens (causal bottom-right past one token), 2 and 16 KV heads.
    for (hq, hkv) in [(2, 2), (16, 4), (16, 2)] {
        for sq in [1, 4, 16] {
            for d in [64, 128, 256] {
                v.push(DecodeSpec {
                    heads_q: hq,
                    heads_kv: hkv,
                    seqlen_q: sq,
                    head_dim: d,
                    context: 200,
                    random_lengths: true,
                    causal: sq > 1,
                    page_size: if sq == 4 { 64 } else { 16 },
                    ..base
                });
            }
        }
    }
    // Appends (the step's own tokens written first), and one sequence split many ways.
    for (sq, causal) in [(1, false), (4, true), (16, true)] {
        v.push(DecodeSpec {
            seqlen_q: sq,
            append: sq,
            causal,
            heads_q: 8,
            heads_kv: 2,
            context: 100,
            random_lengths: true,
            ..base
        });
    }
    v.push(DecodeSpec {
        batch: 1,
        heads_q: 8,
        heads_kv: 8,
        context: 20000,
        page_size: 256,
        ..base
    });
    // Splits with GQA and causal queries; two row blocks per KV head (8 x 16 rows) with an append.
    v.push(DecodeSpec {
        batch: 1,
        heads_q: 32,
        heads_kv: 8,
        seqlen_q: 4,
        causal: true,
        context: 3000,
        page_size: 64,
        ..base
    });
    v.push(DecodeSpec {
        batch: 2,
        heads_q: 16,
        heads_kv: 2,
        seqlen_q: 16,
        causal: true,
        append: 16,
        context: 5000,
        random_lengths: true,
        dtype: DType::F16,
        ..base
    });
    v.extend(dense_suite(&base));
    v
}

/// Dense caches as transformers keeps them: a whole cache per sequence without lengths (its
/// dynamic cache at one token, and long enough to split), caches with spare rows and lengths per
/// sequence (its static cache), causal query tokens, an append, every head dim, both dtypes.
fn dense_suite(base: &DecodeSpec) -> Vec<DecodeSpec> {
    let rows = [
        // (head dim, query tokens, heads, kv heads, context, lengths, append, dtype)
        (128, 1, 32, 8, 577, false, 0, DType::Bf16),
        (64, 1, 16, 2, 300, true, 0, DType::F16),
        (256, 4, 8, 8, 1000, true, 0, DType::Bf16),
        (128, 16, 16, 4, 5000, true, 16, DType::F16),
        (128, 1, 8, 1, 20000, false, 0, DType::Bf16),
        (64, 2, 4, 4, 17, true, 2, DType::Bf16),
    ];
    // Left padding (each sequence's keys from a seeded start): transformers' static cache under
    // a left-padded batch, 1 and 4 query tokens, one long enough to split; and a paged cache.
    let padded = [
        (128, 1, 32, 8, 2048, true, DType::Bf16),
        (64, 4, 16, 2, 300, true, DType::F16),
        (256, 1, 8, 8, 1000, true, DType::Bf16),
        (128, 1, 8, 1, 20000, true, DType::Bf16),
        (128, 2, 16, 4, 500, false, DType::F16),
    ];
    rows.iter()
        .map(
            |&(d, sq, hq, hkv, context, random, append, dtype)| DecodeSpec {
                batch: if context > 10000 { 1 } else { 3 },
                heads_q: hq,
                heads_kv: hkv,
                head_dim: d,
                seqlen_q: sq,
                context,
                random_lengths: random,
                causal: sq > 1,
                dtype,
                append,
                dense: true,
                ..*base
            },
        )
        .chain(
            padded
                .iter()
                .map(|&(d, sq, hq, hkv, context, dense, dtype)| DecodeSpec {
                    batch: if context > 10000 { 1 } else { 4 },
                    heads_q: hq,
                    heads_kv: hkv,
                    head_dim: d,
                    seqlen_q: sq,
                    context,
                    random_lengths: true,
                    causal: sq > 1,
                    dtype,
                    dense,
                    left_pad: true,
                    page_size: if dense { base.page_size } else { 64 },
                    ..*base
                }),
        )
        .collect()
}

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
struct DecodeBuffers {
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
    fn random(ctx: &Context, spec: &DecodeSpec, p: &PagedProblem, seed: u64) -> Result<Self> {
        let (dt, cache) = (p.dtype, p.cache_elems());
        let inputs = [
            random_buffer(ctx, dt, p.q_elems(), seed)?,
            random_buffer(ctx, dt, cache, seed.wrapping_add(1))?,
            random_buffer(ctx, dt, cache, seed.wrapping_add(2))?,
        ];
        DecodeBuffers::around(ctx, spec, p, inputs)
    }

    /// O and LSE poisoned: all-ones bytes, NaN in every dtype, so an unwritten element cannot
    /// pass.
    fn poison(&self, ctx: &Context) -> Result<()> {
        self.o.fill_bytes(0xFF, ctx)?;
        self.lse.fill_bytes(0xFF, ctx)
    }

    fn operands(&self, errors: u64) -> DecodeOperands<'_> {
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
        let q = HostData::random(p.dtype, p.q_elems(), seed.wrapping_add(1));
        let kc = HostData::random(p.dtype, p.cache_elems(), seed.wrapping_add(2));
        let vc = HostData::random(p.dtype, p.cache_elems(), seed.wrapping_add(3));
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
            let kn = HostData::random(p.dtype, n, d.seed.wrapping_add(4));
            let vn = HostData::random(p.dtype, n, d.seed.wrapping_add(5));
            let (dkn, dvn) = (
                DeviceBuffer::from_host(kn.bytes())?,
                DeviceBuffer::from_host(vn.bytes())?,
            );
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
        out.rel_error = o_error(want.o.iter().enumerate().map(|(i, &w)| (have_o.get(i), w)));
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

/// Problems for [`verify_bad_tables`]: one split, several (the bad page seen by one split), a
/// dense cache with lengths, and one left-padded.
pub fn bad_table_specs() -> [DecodeSpec; 4] {
    let base = DecodeSpec {
        batch: 3,
        heads_q: 8,
        heads_kv: 2,
        head_dim: 128,
        seqlen_q: 2,
        page_size: 16,
        context: 40,
        random_lengths: false,
        causal: true,
        dtype: DType::Bf16,
        append: 0,
        dense: false,
        left_pad: false,
    };
    [
        base,
        DecodeSpec {
            context: 5000,
            page_size: 64,
            ..base
        },
        DecodeSpec {
            dense: true,
            random_lengths: true,
            context: 300,
            ..base
        },
        DecodeSpec {
            dense: true,
            random_lengths: true,
            left_pad: true,
            context: 300,
            ..base
        },
    ]
}

/// One decode timing: event times with L2 flushed, and the cache bytes the step must read.
#[derive(Debug, Clone, Serialize)]
pub struct DecodeTiming {
    pub spec: DecodeSpec,
    pub splits: usize,
    pub median_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    pub reps: usize,
    /// K and V bytes of every context, once.
    pub cache_bytes: u64,
    pub gbps: f64,
    pub times_ms: Vec<f64>,
}

/// Times one decode step of `spec` (random data made on the GPU; the append is not timed).
pub fn time_decode(
    ctx: &Context,
    spec: &DecodeSpec,
    seed: u64,
    opt: &BenchOptions,
) -> Result<DecodeTiming> {
    let p = spec.problem(seed)?;
    let s = spec.shape(&p);
    let bufs = DecodeBuffers::random(ctx, spec, &p, seed)?;
    ctx.synchronize()?;
    let ops = bufs.operands(0);
    decode_paged::check_operands(&s, &ops)?;
    let flusher = L2Flusher::new(ctx)?;
    let mut splits = 1;
    let times = sample_launches(ctx, &flusher, opt, || {
        splits = decode_paged::launch(ctx, &s, &ops)?.splits;
        Ok(())
    })?;
    let (median, min, max) = stats(&mut times.clone());
    let cache_bytes = s.cache_bytes_read(&p.context_lens);
    Ok(DecodeTiming {
        spec: *spec,
        splits,
        median_us: median * 1e3,
        min_us: min * 1e3,
        max_us: max * 1e3,
        reps: times.len(),
        cache_bytes,
        gbps: cache_bytes as f64 / (median * 1e-3) / 1e9,
        times_ms: times,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_shuffle_pages_and_leave_unused_entries_unread() {
        let spec = DecodeSpec {
            random_lengths: true,
            context: 100,
            batch: 5,
            ..decode_suite()[0]
        };
        let p = spec.problem(7).unwrap();
        assert_eq!((p.max_pages, p.num_pages), (7, 35));
        let mut used: Vec<i32> = p.block_table.iter().copied().filter(|&x| x >= 0).collect();
        let pages: usize = p
            .context_lens
            .iter()
            .map(|&c| (c as usize).div_ceil(16))
            .sum();
        assert_eq!(used.len(), pages);
        used.sort_unstable();
        used.dedup();
        assert_eq!(used.len(), pages, "a page is shared");
        assert_ne!(p, spec.problem(8).unwrap());
        assert!(p.context_lens.iter().all(|&c| (1..=100).contains(&c)));
    }

    #[test]
    fn the_suite_covers_the_issues_boundaries() {
        let s = decode_suite();
        for ps in [16, 64, 256] {
            assert!(s.iter().any(|x| x.page_size == ps));
        }
        for ctx in [1, 15, 16, 17] {
            assert!(s.iter().any(|x| x.context == ctx && !x.random_lengths));
        }
        for g in [1, 4, 8] {
            assert!(s.iter().any(|x| x.heads_q / x.heads_kv == g));
        }
        for sq in [1, 4, 16] {
            assert!(s.iter().any(|x| x.seqlen_q == sq));
        }
        assert!(s.iter().any(|x| x.append > 0 && x.causal));
        // On an H100 some problems split their contexts and some need two row blocks.
        let h100 = crate::device::DeviceInfo::h100_sxm();
        let plans: Vec<DecodePlan> = s
            .iter()
            .map(|x| DecodePlan::new(&x.shape(&x.problem(1).unwrap()), &h100))
            .collect();
        assert!(plans.iter().filter(|p| p.splits > 1).count() >= 3);
        assert!(plans.iter().any(|p| p.m_groups > 1 && p.splits > 1));
        // the bad-table check runs with one split and with several
        let plan = |x: &DecodeSpec| DecodePlan::new(&x.shape(&x.problem(1).unwrap()), &h100);
        let [one, many, dense, padded] = bad_table_specs();
        assert_eq!(plan(&one).splits, 1);
        assert!(plan(&many).splits > 1);
        assert!(dense.dense && padded.left_pad);
        // left padding: dense and paged, one split and several
        let lp: Vec<&DecodeSpec> = s.iter().filter(|x| x.left_pad).collect();
        assert!(lp.iter().any(|x| x.dense) && lp.iter().any(|x| !x.dense));
        assert!(lp.iter().any(|x| plan(x).splits > 1));
        for x in &lp {
            let p = x.problem(5).unwrap();
            assert!(p.context_starts.iter().any(|&st| st > 0), "{}", x.label());
        }
        // dense caches: with and without lengths, and one that splits
        let d: Vec<&DecodeSpec> = s.iter().filter(|x| x.dense).collect();
        assert!(d.iter().any(|x| x.random_lengths) && d.iter().any(|x| !x.random_lengths));
        assert!(d.iter().any(|x| plan(x).splits > 1 && !x.random_lengths));
        assert!(d.iter().any(|x| x.append > 0));
    }

    #[test]
    fn a_dense_cache_is_one_page_per_sequence_in_bhsd_memory() {
        let spec = DecodeSpec {
            dense: true,
            random_lengths: true,
            context: 30,
            ..decode_suite()[0]
        };
        let p = spec.problem(3).unwrap();
        assert_eq!(
            (p.num_pages, p.page_size, p.max_pages),
            (3, 30 + DENSE_SPARE, 1)
        );
        assert_eq!(p.block_table, vec![0, 1, 2]);
        let s = spec.shape(&p);
        assert!(!s.paged && s.lengths);
        let (rows, d) = (30 + DENSE_SPARE, spec.head_dim);
        assert_eq!(s.strides.k, [rows * d, d, rows * d]); // one KV head
                                                          // the permutation and its inverse
        let host = HostData::random(DType::Bf16, 2 * 5 * 3 * 64, 1);
        let dims = (2, 5, 3, 64);
        let there = swap_seq_heads(host.bytes(), 2, dims, false);
        assert_ne!(there, host.bytes());
        assert_eq!(swap_seq_heads(&there, 2, dims, true), host.bytes());
        // without lengths, the cache is exactly the context
        let full = DecodeSpec {
            random_lengths: false,
            ..spec
        };
        assert_eq!(full.problem(1).unwrap().page_size, 30);
        assert!(!full.shape(&full.problem(1).unwrap()).lengths);
    }
}
