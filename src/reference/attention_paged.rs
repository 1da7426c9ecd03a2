//! Float64 decode over a paged KV cache: O and LSE of each sequence's query tokens against its
//! cached context, and the append of new K/V tokens into their pages.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::ops::attention::{AttnLayout, PagedProblem, Strides};
use crate::reference::attention_head::{gather, scatter, Head};

/// O [batch, seqlen_q, H, D] and LSE [batch, H, seqlen_q].
#[derive(Debug, Clone, PartialEq)]
pub struct PagedForward {
    pub o: Vec<f64>,
    pub lse: Vec<f64>,
}

/// The context of sequence `b`, head `hk`, as contiguous [context, D] rows.
fn gather_context(p: &PagedProblem, cache: &[f64], b: usize, hk: usize) -> Vec<f64> {
    (0..p.context(b))
        .flat_map(|t| {
            let at = p.cache_offset(b, t, hk);
            &cache[at..at + p.head_dim]
        })
        .copied()
        .collect()
}

/// The forward of a validated problem; `q` [batch, seqlen_q, H, D], caches
/// [num_pages, page_size, Hkv, D], as f64.
pub fn paged_forward(
    p: &PagedProblem,
    q: &[f64],
    k_cache: &[f64],
    v_cache: &[f64],
) -> PagedForward {
    let (sq, d) = (p.seqlen_q, p.head_dim);
    let qs = Strides::packed(AttnLayout::Bshd, p.heads_q, sq, d);
    let work: Vec<(usize, usize)> = (0..p.batch)
        .flat_map(|b| (0..p.heads_q).map(move |h| (b, h)))
        .collect();
    let heads: Vec<_> = work
        .par_iter()
        .map(|&(b, h)| {
            let (ctx, start) = (p.context(b), p.start(b));
            let (kh, vh) = (
                gather_context(p, k_cache, b, h / p.group()),
                gather_context(p, v_cache, b, h / p.group()),
            );
            let qh = gather(q, &qs, b, h, 0..sq, d);
            // Bottom-right: the last query token sees the whole context.
            // Left padding: keys before the sequence's start are not attended to.
            let spans: Vec<_> = (0..sq)
                .map(|i| {
                    let end = match p.causal {
                        true => (i + ctx + 1).saturating_sub(sq).min(ctx),
                        false => ctx,
                    };
                    start.min(end)..end
                })
                .collect();
            let head = Head {
                q: &qh,
                k: &kh,
                v: &vh,
                dim: d,
                scale: p.scale as f64,
            };
            head.forward(&spans)
        })
        .collect();
    let mut out = PagedForward {
        o: vec![0.0; p.q_elems()],
        lse: vec![0.0; p.batch * p.heads_q * sq],
    };
    for (&(b, h), f) in work.iter().zip(heads) {
        scatter(&mut out.o, &f.o, &qs, b, h, 0, d);
        let at = (b * p.heads_q + h) * sq;
        out.lse[at..at + sq].copy_from_slice(&f.lse);
    }
    out
}

/// Writes `new_tokens` tokens of K and V ([batch, new_tokens, Hkv, D]) into the caches as the last
/// `new_tokens` of each sequence's context: token t of the context goes to page
/// block_table[b][t / page_size], slot t % page_size.
pub fn append_kv(
    p: &PagedProblem,
    k_cache: &mut [f64],
    v_cache: &mut [f64],
    k_new: &[f64],
    v_new: &[f64],
    new_tokens: usize,
) -> Result<()> {
    let row = p.heads_kv * p.head_dim;
    let want = p.batch * new_tokens * row;
    if k_new.len() != want || v_new.len() != want {
        return Err(Error::invalid(format!(
            "new K/V hold {} and {} elements; {new_tokens} tokens of batch {} need {want} each",
            k_new.len(),
            v_new.len(),
            p.batch
        )));
    }
    for b in 0..p.batch {
        let ctx = p.context(b);
        if new_tokens > ctx {
            return Err(Error::invalid(format!(
                "{new_tokens} new tokens do not fit context_lens[{b}] = {ctx}; the context counts the new tokens"
            )));
        }
        for n in 0..new_tokens {
            let src = (b * new_tokens + n) * row;
            let dst = p.cache_offset(b, ctx - new_tokens + n, 0);
            k_cache[dst..dst + row].copy_from_slice(&k_new[src..src + row]);
            v_cache[dst..dst + row].copy_from_slice(&v_new[src..src + row]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::paged::tests::two_sequences;
    use crate::ops::attention::AttentionProblem;
    use crate::reference::attention::attention_rows;
    use crate::reference::attention_backward::tests::random;

    #[test]
    fn append_puts_token_t_in_its_page_slot() {
        let p = two_sequences();
        let mut k = vec![0.0; p.cache_elems()];
        let mut v = k.clone();
        let row = p.heads_kv * p.head_dim;
        let new_k: Vec<f64> = (0..2 * row).map(|x| 1.0 + x as f64).collect();
        append_kv(&p, &mut k, &mut v, &new_k, &new_k, 1).unwrap();
        // Sequence 0's token 39: page block_table[0][2] = 2, slot 7. Sequence 1's token 19:
        // page block_table[1][1] = 1, slot 3.
        assert_eq!(k[(2 * 16 + 7) * row..][..row], new_k[..row]);
        assert_eq!(v[(16 + 3) * row..][..row], new_k[row..]);
        assert_eq!(k.iter().filter(|x| **x != 0.0).count(), 2 * row);
        let e = append_kv(&p, &mut k, &mut v, &new_k, &new_k, 2).unwrap_err();
        assert!(e.to_string().contains("need"), "{e}");
    }

    #[test]
    fn paged_decode_equals_dense_attention_over_the_gathered_cache() {
        let mut p = two_sequences();
        // Dense K/V of each context [ctx, Hkv, D], appended into the cache's scattered pages.
        let row = p.heads_kv * p.head_dim;
        let ctx: Vec<usize> = vec![40, 20];
        let dense_k: Vec<Vec<f64>> = (0..2)
            .map(|b| random(ctx[b] * row, 40 + b as u64))
            .collect();
        let dense_v: Vec<Vec<f64>> = (0..2)
            .map(|b| random(ctx[b] * row, 50 + b as u64))
            .collect();
        let mut k_cache = random(p.cache_elems(), 60); // stale data that must not be read
        let mut v_cache = random(p.cache_elems(), 61);
        // Four tokens a step, as decode appends them; once sequence 1 is full its last four
        // tokens are written again, unchanged.
        for end in (4..=40).step_by(4) {
            let step = PagedProblem {
                context_lens: ctx.iter().map(|&c| c.min(end) as i32).collect(),
                ..p.clone()
            };
            let chunk = |x: &[Vec<f64>]| -> Vec<f64> {
                (0..2)
                    .flat_map(|b| {
                        let end = step.context(b);
                        x[b][(end - 4) * row..end * row].to_vec()
                    })
                    .collect()
            };
            let (kn, vn) = (chunk(&dense_k), chunk(&dense_v));
            append_kv(&step, &mut k_cache, &mut v_cache, &kn, &vn, 4).unwrap();
        }
        // Left padding: keys before a sequence's start are dropped, as if its context began
        // there (sequence 1's start leaves its first query row one key).
        for (causal, starts) in [(true, vec![]), (false, vec![]), (true, vec![5, 17])] {
            p.causal = causal;
            p.context_starts = starts;
            p.validate().unwrap();
            let q = random(p.q_elems(), 70);
            let f = paged_forward(&p, &q, &k_cache, &v_cache);
            for b in 0..2 {
                let start = p.start(b);
                let dense = AttentionProblem {
                    heads_kv: 2,
                    seqlen_q: 3,
                    seqlen_kv: ctx[b] - start,
                    causal,
                    scale: p.scale,
                    ..AttentionProblem::new(1, 4, 3, 64)
                };
                let qb = &q[b * p.seqlen_q * p.heads_q * 64..(b + 1) * p.seqlen_q * p.heads_q * 64];
                let (kb, vb) = (&dense_k[b][start * row..], &dense_v[b][start * row..]);
                for r in attention_rows(&dense, qb, kb, vb, &[0, 1, 2]) {
                    let at = ((b * 3 + r.i) * 4 + r.h) * 64;
                    for (x, y) in f.o[at..at + 64].iter().zip(&r.o) {
                        assert!((x - y).abs() < 1e-12, "b{b} h{} i{}: {x} vs {y}", r.h, r.i);
                    }
                    assert!((f.lse[(b * 4 + r.h) * 3 + r.i] - r.lse).abs() < 1e-12);
                }
            }
        }
    }
}
