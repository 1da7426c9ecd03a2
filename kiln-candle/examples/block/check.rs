//! The check: each kiln op against the float64 reference of its own inputs, then the whole block
//! (kiln's ops and candle's own) against the float64 block.

use anyhow::{bail, Result};
use candle_core::{DType, Device, IndexOp, Tensor, D};
use kiln::harness::attention::verify::{o_bound, LSE_BOUND};
use kiln::harness::verify::bound;
use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::reference::{ref_attention, ref_grouped, ref_linear, ref_swiglu, route, silu};
use crate::{host, randn, rel, Report, B, E, HD, HID, HKV, HQ, INTER, S, TOPK};

pub fn check(dev: &Device, seed: u64) -> Result<()> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let t = B * S;
    let ws = 1.0 / (HID as f64).sqrt();
    let (x, xh) = randn(&mut rng, &[B, S, HID], 1.0, dev)?;
    let (wq, wqh) = randn(&mut rng, &[HQ * HD, HID], ws, dev)?;
    let (wk, wkh) = randn(&mut rng, &[HKV * HD, HID], ws, dev)?;
    let (wv, wvh) = randn(&mut rng, &[HKV * HD, HID], ws, dev)?;
    let (wo, woh) = randn(&mut rng, &[HID, HQ * HD], ws, dev)?;
    let (wr, wrh) = randn(&mut rng, &[E, HID], ws, dev)?;
    let (w1, w1h) = randn(&mut rng, &[E, INTER, HID], ws, dev)?;
    let (w3, w3h) = randn(&mut rng, &[E, INTER, HID], ws, dev)?;
    let (w2, w2h) = randn(&mut rng, &[E, HID, INTER], 1.0 / (INTER as f64).sqrt(), dev)?;
    println!(
        "block: B{B} S{S} hidden {HID}, attention Hq {HQ} Hkv {HKV} d{HD} causal, MoE {E} experts top-{TOPK} intermediate {INTER}, bf16, seed {seed}"
    );
    println!("| check                                                  | rel. error | bound      |      |");
    println!("|--------------------------------------------------------|------------|------------|------|");
    let mut rep = Report { failed: 0 };
    let gb = bound(kiln::ops::gemm::DType::Bf16);
    let ab = o_bound(kiln::ops::gemm::DType::Bf16);

    // --- kiln's ops, each against the reference of its own (bf16) inputs.
    let x2 = x.reshape((t, HID))?;
    let q = kiln_candle::linear(&x2, &wq)?;
    rep.row(
        "kiln GEMM q = x Wqᵀ (Wq read transposed)",
        rel(&host(&q)?, &ref_linear(&xh, &wqh, t, HID, HQ * HD)),
        gb,
    );
    let k = kiln_candle::linear(&x2, &wk)?;
    let v = kiln_candle::linear(&x2, &wv)?;
    // A column-major A as well: (xᵀ)ᵀ from a transposed copy.
    let xt = x2.t()?.contiguous()?;
    let q2 = kiln_candle::matmul(&xt.t()?, &wq.t()?)?;
    rep.row(
        "kiln GEMM, both operands column-major",
        rel(&host(&q2)?, &ref_linear(&xh, &wqh, t, HID, HQ * HD)),
        gb,
    );
    let (q4, k4, v4) = (
        q.reshape((B, S, HQ, HD))?,
        k.reshape((B, S, HKV, HD))?,
        v.reshape((B, S, HKV, HD))?,
    );
    let (qh, kh, vh) = (host(&q4)?, host(&k4)?, host(&v4)?);
    let (o, lse) = kiln_candle::flash_attn_lse(&q4, &k4, &v4, None, true)?;
    let (oref, lseref) = ref_attention(&qh, &kh, &vh, true);
    rep.row(
        "kiln flash attention (BSHD, GQA 4:1, causal)",
        rel(&host(&o)?, &oref),
        ab,
    );
    let lse_err = host(&lse)?
        .iter()
        .zip(&lseref)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    rep.row("kiln attention LSE (max abs. error)", lse_err, LSE_BOUND);
    let (o_nc, _) = ref_attention(&qh, &kh, &vh, false);
    rep.row(
        "kiln flash attention, not causal",
        rel(
            &host(&kiln_candle::flash_attn(&q4, &k4, &v4, None, false)?)?,
            &o_nc,
        ),
        ab,
    );
    // Packed: the batch's two sequences as one packed batch (offsets 0, S, 2S).
    let cu = Tensor::new(&[0i32, S as i32, 2 * S as i32], dev)?;
    let o_var = Tensor::apply_op3_no_bwd(
        &q4.reshape((t, HQ, HD))?,
        &k4.reshape((t, HKV, HD))?,
        &v4.reshape((t, HKV, HD))?,
        &kiln_candle::FlashAttnVarlen {
            cu_seqlens_q: cu.clone(),
            cu_seqlens_k: cu,
            max_seqlen_q: S,
            max_seqlen_k: S,
            softmax_scale: None,
            causal: true,
        },
    )?;
    rep.row(
        "kiln packed attention (2 sequences, causal)",
        rel(&host(&o_var)?, &oref),
        ab,
    );
    let attn = kiln_candle::linear(&o.reshape((t, HQ * HD))?, &wo)?;
    let h1 = (&x2 + &attn)?;
    let h1h = host(&h1)?;
    let logits = kiln_candle::linear(&h1, &wr)?;
    let logits_h = host(&logits)?;
    rep.row(
        "kiln GEMM router logits (N = 8)",
        rel(&logits_h, &ref_linear(&h1h, &wrh, t, HID, E)),
        gb,
    );
    // The routing is chosen on the host from kiln's logits and shared by every path, so that
    // the paths differ only in arithmetic.
    let (tok, wt, off) = route(&logits_h);
    let idx = Tensor::new(tok.as_slice(), dev)?;
    let offsets = Tensor::new(off.as_slice(), dev)?;
    let routing = Tensor::new(wt.as_slice(), dev)?;
    let xs = h1.index_select(&idx, 0)?;
    let hm = kiln_candle::swiglu(&xs, &w1, &w3, &offsets, Some(&routing))?;
    let ys = kiln_candle::grouped_gemm(&hm, &w2, &offsets)?;
    // The references of the two MoE ops from their own inputs.
    let (xsh, hmh) = (host(&xs)?, host(&hm)?);
    let hm_ref = ref_swiglu(&xsh, (&w1h, &w3h), &off, Some(&wt), HID, INTER);
    let ys_ref = ref_grouped(&hmh, &w2h, &off, INTER, HID);
    rep.row(
        "kiln fused SwiGLU (routing weight applied)",
        rel(&hmh, &hm_ref),
        gb,
    );
    rep.row(
        "kiln grouped GEMM (down projection)",
        rel(&host(&ys)?, &ys_ref),
        gb,
    );
    let moe =
        Tensor::zeros((t, HID), DType::F32, dev)?.index_add(&idx, &ys.to_dtype(DType::F32)?, 0)?;
    let kiln_out = (&h1 + moe.to_dtype(DType::BF16)?)?;

    // --- candle's own ops (as candle-transformers' llama and mixtral compose them).
    let lin = |x: &Tensor, w: &Tensor| x.matmul(&w.t()?);
    let cq = lin(&x2, &wq)?
        .reshape((B, S, HQ, HD))?
        .transpose(1, 2)?
        .contiguous()?;
    let ck = repeat_kv(&lin(&x2, &wk)?.reshape((B, S, HKV, HD))?.transpose(1, 2)?)?;
    let cv = repeat_kv(&lin(&x2, &wv)?.reshape((B, S, HKV, HD))?.transpose(1, 2)?)?;
    let co = composed_attention(&cq, &ck, &cv, Some(&causal_mask(S, DType::BF16, dev)?))?;
    let co = co.transpose(1, 2)?.contiguous()?.reshape((t, HQ * HD))?;
    let ch1 = (&x2 + lin(&co, &wo)?)?;
    let mut cmoe = Tensor::zeros((t, HID), DType::F32, dev)?;
    for e in 0..E {
        let (r0, r1) = (off[e] as usize, off[e + 1] as usize);
        if r0 == r1 {
            continue;
        }
        let ie = idx.i(r0..r1)?;
        let xe = ch1.index_select(&ie, 0)?;
        let g = candle_nn::ops::silu(&lin(&xe, &w1.i(e)?)?)?;
        let h = (g * lin(&xe, &w3.i(e)?)?)?;
        let y = lin(&h, &w2.i(e)?)?.to_dtype(DType::F32)?;
        let y = y.broadcast_mul(&routing.i(r0..r1)?.unsqueeze(1)?)?;
        cmoe = cmoe.index_add(&ie, &y, 0)?;
    }
    let candle_out = (&ch1 + cmoe.to_dtype(DType::BF16)?)?;

    // --- The float64 block from the bf16 inputs, with the shared routing.
    let qr = ref_linear(&xh, &wqh, t, HID, HQ * HD);
    let kr = ref_linear(&xh, &wkh, t, HID, HKV * HD);
    let vr = ref_linear(&xh, &wvh, t, HID, HKV * HD);
    let (or, _) = ref_attention(&qr, &kr, &vr, true);
    let ar = ref_linear(&or, &woh, t, HQ * HD, HID);
    let h1r: Vec<f64> = xh.iter().zip(&ar).map(|(a, b)| a + b).collect();
    let mut outr = h1r.clone();
    for e in 0..E {
        let (r0, r1) = (off[e] as usize, off[e + 1] as usize);
        for r in r0..r1 {
            let i = tok[r] as usize;
            let xi = &h1r[i * HID..(i + 1) * HID];
            let g = ref_linear(xi, &w1h[e * INTER * HID..][..INTER * HID], 1, HID, INTER);
            let u = ref_linear(xi, &w3h[e * INTER * HID..][..INTER * HID], 1, HID, INTER);
            let h: Vec<f64> = g.iter().zip(&u).map(|(g, u)| silu(*g) * u).collect();
            let y = ref_linear(&h, &w2h[e * HID * INTER..][..HID * INTER], 1, INTER, HID);
            for c in 0..HID {
                outr[i * HID + c] += wt[r] as f64 * y[c];
            }
        }
    }
    let ke = rel(&host(&kiln_out)?, &outr);
    let ce = rel(&host(&candle_out)?, &outr);
    rep.row("block: candle's own ops against float64", ce, f64::INFINITY);
    rep.row(
        "block: kiln's ops against float64 (≤ 2 candle + GEMM)",
        ke,
        2.0 * ce + gb,
    );
    rep.row(
        "block: kiln against candle",
        rel(&host(&kiln_out)?, &host(&candle_out)?),
        ke + ce,
    );

    // --- The MoE's experts in FP8 and 4 bits, on the same routed rows.
    let moe = crate::lowprec::Moe {
        xs: &xs,
        xsh: &xsh,
        hm: &hm,
        hmh: &hmh,
        routing: &routing,
        wt: &wt,
        offsets: &offsets,
        off: &off,
        w: [(&w1, &w1h), (&w3, &w3h), (&w2, &w2h)],
    };
    crate::lowprec::check(dev, &mut rep, &moe)?;
    if rep.failed > 0 {
        bail!("{} of the checks above failed (seed {seed})", rep.failed);
    }
    println!("all checks passed");
    Ok(())
}

/// [B, HKV, S, D] → [B, HQ, S, D], each KV head repeated for its query heads.
fn repeat_kv(x: &Tensor) -> Result<Tensor> {
    let (b, hkv, s, d) = x.dims4()?;
    let g = HQ / hkv;
    Ok(x.unsqueeze(2)?
        .expand((b, hkv, g, s, d))?
        .reshape((b, hkv * g, s, d))?)
}

/// The additive causal mask [S, S] (-inf above the diagonal) in `dtype`.
pub fn causal_mask(s: usize, dtype: DType, dev: &Device) -> Result<Tensor> {
    let mask: Vec<f32> = (0..s * s)
        .map(|i| {
            if i % s > i / s {
                f32::NEG_INFINITY
            } else {
                0.0
            }
        })
        .collect();
    Ok(Tensor::from_vec(mask, (s, s), dev)?.to_dtype(dtype)?)
}

/// candle's composed attention over [B, H, S, D]: softmax(q kᵀ / sqrt(D) + mask) v, in the
/// inputs' dtype.
pub fn composed_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
) -> Result<Tensor> {
    let d = q.dim(D::Minus1)?;
    let mut att = (q.matmul(&k.t()?)? * (1.0 / (d as f64).sqrt()))?;
    if let Some(mask) = mask {
        att = att.broadcast_add(mask)?;
    }
    Ok(candle_nn::ops::softmax_last_dim(&att)?.matmul(v)?)
}
