//! What the library's host path of an attention call costs on the CPU, piece by piece, without
//! a GPU: the argument checks (the plan), the handle's key (hashed), the launch memo's lookup,
//! and, for comparison, what a warm call did before the memo (a Debug-formatted key and label,
//! the config, the kernel spec and its hash). The driver's part (tensor maps ~0.06 µs each, the
//! launch) is the GPU host's to measure (`examples/call_cost.rs`). Median of 9 rounds, ns per
//! call. `cargo run --release --example attention_host_pieces [-- --calls N]`

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use kiln::api::validate;
use kiln::device::{DeviceInfo, LaunchMemo};
use kiln::ops::attention::fa3_wgmma::Fa3Wgmma;
use kiln::ops::attention::AttentionKernel;
use kiln::{AttentionOptions, DType, RawTensor, VarlenOffsets};

/// Median ns per call of `f` over 9 rounds of `calls` calls.
fn ns(calls: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..calls / 10 + 1 {
        f();
    }
    let mut rounds: Vec<f64> = (0..9)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..calls {
                f();
            }
            t.elapsed().as_secs_f64() * 1e9 / calls as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[4]
}

fn t(ptr: u64, dtype: DType, shape: &[usize], strides: &[isize]) -> RawTensor {
    RawTensor {
        ptr,
        dtype,
        shape: shape.to_vec(),
        strides: strides.to_vec(),
        device: 0,
    }
}

fn main() -> ExitCode {
    let calls = std::env::args()
        .skip_while(|a| a != "--calls")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(200_000usize);
    let bf = DType::Bf16;
    let hasher = RandomState::new();
    let memo = LaunchMemo::default();
    let mut rows: Vec<(&str, f64)> = Vec::new();

    // flash_attn_func, bench_calls' problem: B1 S128 Hq8 Hkv2 d128 causal, q BSHD, k and v
    // transformers' BHSD cache memory seen [B, S, H, D], the LSE not wanted.
    let (s, hq, hkv, d) = (128usize, 8usize, 2usize, 128usize);
    let q = t(
        0x1000_0000,
        bf,
        &[1, s, hq, d],
        &[(s * hq * d) as isize, (hq * d) as isize, d as isize, 1],
    );
    let kv_strides = [(hkv * s * d) as isize, d as isize, (s * d) as isize, 1];
    let k = t(0x2000_0000, bf, &[1, s, hkv, d], &kv_strides);
    let v = t(0x3000_0000, bf, &[1, s, hkv, d], &kv_strides);
    let o = t(0x4000_0000, bf, &[1, s, hq, d], &q.strides);
    let opts = AttentionOptions {
        causal: true,
        softmax_scale: Some(0.088),
        ..AttentionOptions::default()
    };
    let info = |x: &RawTensor, n: &str| x.info(n, false).expect("valid");
    let (qi, ki, vi, oi) = (info(&q, "q"), info(&k, "k"), info(&v, "v"), info(&o, "o"));
    rows.push((
        "attention: raw tensors to infos (4)",
        ns(calls, || {
            black_box((info(&q, "q"), info(&k, "k"), info(&v, "v"), info(&o, "o")));
        }),
    ));
    let plan = validate::attention(0, &qi, &ki, &vi, &oi, None, &opts)
        .expect("valid")
        .expect("a problem");
    rows.push((
        "attention: validate (the plan)",
        ns(calls, || {
            black_box(validate::attention(0, &qi, &ki, &vi, &oi, None, &opts).ok());
        }),
    ));
    rows.push((
        "attention: the handle's key, hashed",
        ns(calls, || {
            black_box(hasher.hash_one(plan.key(None)));
        }),
    ));
    let p = plan.problem;
    let _: std::rc::Rc<[usize]> = memo
        .get_or_try(&(p.key(), 1u8), || Ok(vec![2, 1].into()))
        .expect("made");
    let _: u64 = memo.get_or_try(&(p.key(), 2u8), || Ok(7)).expect("made");
    rows.push((
        "attention: two memo hits (versions, launch)",
        ns(calls, || {
            let a: std::rc::Rc<[usize]> = memo
                .get_or_try(&(p.key(), 1u8), || Ok(vec![].into()))
                .expect("kept");
            let b: u64 = memo.get_or_try(&(p.key(), 2u8), || Ok(0)).expect("kept");
            black_box((a, b));
        }),
    ));
    // Before: the key and label formatted, every version's `supports`, the config, the spec and
    // its lookup (what the memo now keeps).
    let h100 = DeviceInfo::h100_sxm();
    let mut loaded = HashMap::new();
    let cfg = Fa3Wgmma.baseline(&p, &h100).expect("fa3 takes d128");
    let spec = Fa3Wgmma.spec_for("sm_90a", &p, &cfg).expect("a spec");
    loaded.insert(spec, 1u32);
    rows.push((
        "before: key and label formatted",
        ns(calls, || {
            black_box((
                format!("attention {p:?} {:?} lse false", None::<&str>),
                p.label(),
            ));
        }),
    ));
    rows.push((
        "before: supports + config + spec + lookup",
        ns(calls / 4, || {
            black_box(Fa3Wgmma.supports(&p, &h100).is_ok());
            let cfg = Fa3Wgmma.baseline(&p, &h100).expect("fa3 takes d128");
            let spec = Fa3Wgmma.spec_for("sm_90a", &p, &cfg).expect("a spec");
            black_box(loaded.get(&spec));
        }),
    ));

    // Decode over transformers' dense cache: B8, 1 query token, Hq32 Hkv8 d128, S 2048, lengths
    // and first keys (a static cache, left padding).
    let (b, hq, hkv, smax) = (8usize, 32usize, 8usize, 2048usize);
    let qd = t(
        0x1000_0000,
        bf,
        &[b, 1, hq, d],
        &[(hq * d) as isize, (hq * d) as isize, d as isize, 1],
    );
    let cs = [
        (hkv * smax * d) as isize,
        d as isize,
        (smax * d) as isize,
        1,
    ];
    let (kc, vc) = (
        t(0x2000_0000, bf, &[b, smax, hkv, d], &cs),
        t(0x6000_0000, bf, &[b, smax, hkv, d], &cs),
    );
    let od = t(0x4000_0000, bf, &[b, 1, hq, d], &qd.strides);
    let lens = t(0x5000_0000, DType::I32, &[b], &[1]);
    let starts = t(0x5000_1000, DType::I32, &[b], &[1]);
    let di = [&qd, &kc, &vc, &od, &lens, &starts].map(|x| info(x, "t"));
    let decode = || {
        validate::paged(
            0,
            &di[0],
            &di[1],
            &di[2],
            None,
            Some(&di[4]),
            Some(&di[5]),
            &di[3],
            None,
            false,
            None,
        )
    };
    let dplan = decode().expect("valid").expect("a step");
    rows.push((
        "decode: validate (the plan)",
        ns(calls, || {
            black_box(decode().ok());
        }),
    ));
    rows.push((
        "decode: the handle's key, hashed",
        ns(calls, || {
            black_box(hasher.hash_one(("decode", dplan.shape.key(), false)));
        }),
    ));
    let _: u64 = memo.get_or_try(&dplan.shape.key(), || Ok(3)).expect("made");
    rows.push((
        "decode: the memo hit",
        ns(calls, || {
            let r: u64 = memo.get_or_try(&dplan.shape.key(), || Ok(0)).expect("kept");
            black_box(r);
        }),
    ));
    rows.push((
        "before: decode key formatted",
        ns(calls, || {
            black_box(format!("paged {:?} lse {}", dplan.shape, false));
        }),
    ));

    // Packed attention without host copies: 3 sequences, 356 rows, Hq8 Hkv2 d128, causal.
    let (tq, hq, hkv) = (356usize, 8usize, 2usize);
    let qp = t(
        0x1000_0000,
        bf,
        &[tq, hq, d],
        &[(hq * d) as isize, d as isize, 1],
    );
    let kp = t(
        0x2000_0000,
        bf,
        &[tq, hkv, d],
        &[(hkv * d) as isize, d as isize, 1],
    );
    let vp = t(0x3000_0000, bf, &[tq, hkv, d], &kp.strides);
    let op = t(0x4000_0000, bf, &[tq, hq, d], &qp.strides);
    let cu = t(0x5000_0000, DType::I32, &[4], &[1]);
    let vi_ = [&qp, &kp, &vp, &op, &cu].map(|x| info(x, "t"));
    let offsets = VarlenOffsets {
        cu_q: &vi_[4],
        cu_k: &vi_[4],
        max_seqlen_q: 128,
        max_seqlen_k: 128,
        host: None,
    };
    let packed =
        || validate::attention_varlen(0, &vi_[0], &vi_[1], &vi_[2], &vi_[3], None, &offsets, &opts);
    let vplan = packed().expect("valid").expect("a call");
    rows.push((
        "varlen: validate (no host copy)",
        ns(calls, || {
            black_box(packed().ok());
        }),
    ));
    rows.push((
        "varlen: the handle's key, hashed",
        ns(calls, || {
            black_box(hasher.hash_one(vplan.key(None)));
        }),
    ));

    println!("| piece (CPU, no GPU) | ns per call |");
    println!("|---|---|");
    for (what, n) in &rows {
        println!("| {what} | {n:.0} |");
    }
    ExitCode::SUCCESS
}
