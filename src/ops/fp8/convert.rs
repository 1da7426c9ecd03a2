//! Host side of `kernels/quant/fp8_convert.cu`: the GPU's FP8 conversions run over given f32
//! values and over all 256 codes, for comparison with the CPU's (`crate::formats::fp8`).

use crate::device::{Context, LaunchConfig};
use crate::error::Result;
use crate::formats::Fp8Format;
use crate::jit::KernelSpec;

/// The one specialisation of the conversion kernel.
pub fn spec(arch: &str) -> KernelSpec {
    KernelSpec::new("quant/fp8_convert.cu", "fp8_convert", arch)
}

/// What the GPU made of the inputs: their e4m3 and e5m2 codes, and every code decoded.
#[derive(Debug, Clone)]
pub struct DeviceConversions {
    pub e4m3: Vec<u8>,
    pub e5m2: Vec<u8>,
    pub decoded_e4m3: Vec<f32>,
    pub decoded_e5m2: Vec<f32>,
}

impl DeviceConversions {
    pub fn codes(&self, fmt: Fp8Format) -> &[u8] {
        match fmt {
            Fp8Format::E4m3 => &self.e4m3,
            Fp8Format::E5m2 => &self.e5m2,
        }
    }
    pub fn decoded(&self, fmt: Fp8Format) -> &[f32] {
        match fmt {
            Fp8Format::E4m3 => &self.decoded_e4m3,
            Fp8Format::E5m2 => &self.decoded_e5m2,
        }
    }
}

/// Runs the conversions of `xs` on the GPU (synchronously).
pub fn convert_on_device(ctx: &Context, xs: &[f32]) -> Result<DeviceConversions> {
    let n = xs.len();
    let x = ctx.alloc(4 * n.max(1))?;
    x.upload(xs)?;
    let (e4, e5) = (ctx.alloc(n.max(1))?, ctx.alloc(n.max(1))?);
    let (d4, d5) = (ctx.alloc(256 * 4)?, ctx.alloc(256 * 4)?);
    let f = ctx.function(&spec(&ctx.arch()))?;
    let threads = 256u32;
    let blocks = (n.max(256) as u32).div_ceil(threads);
    let (mut px, mut pn) = (x.ptr(), n as i32);
    let (mut p4, mut p5, mut pd4, mut pd5) = (e4.ptr(), e5.ptr(), d4.ptr(), d5.ptr());
    // SAFETY: the kernel takes (const float*, int, u8*, u8*, float*, float*); x holds n floats,
    // e4 and e5 n bytes, d4 and d5 256 floats, all alive until the synchronisation below.
    unsafe {
        f.launch(
            ctx.stream,
            &LaunchConfig::simple((blocks, 1, 1), threads),
            &mut [
                &mut px as *mut u64 as *mut _,
                &mut pn as *mut i32 as *mut _,
                &mut p4 as *mut u64 as *mut _,
                &mut p5 as *mut u64 as *mut _,
                &mut pd4 as *mut u64 as *mut _,
                &mut pd5 as *mut u64 as *mut _,
            ],
        )?;
    }
    ctx.synchronize()?;
    Ok(DeviceConversions {
        e4m3: e4.download(n)?,
        e5m2: e5.download(n)?,
        decoded_e4m3: d4.download(256)?,
        decoded_e5m2: d5.download(256)?,
    })
}

/// The values worth converting: every FP8 value of both formats, the midpoints between
/// neighbours and the f32 on either side of each, the saturation boundaries, infinities, NaN,
/// signed zeros, f32 subnormals, and `random` values over a wide range (seeded).
pub fn probe_values(random: usize, seed: u64) -> Vec<f32> {
    use rand::{Rng, SeedableRng};
    let mut v: Vec<f32> = Vec::new();
    for fmt in Fp8Format::ALL {
        let mut vals: Vec<f32> = (0u8..0x80)
            .map(|c| fmt.decode(c))
            .filter(|x| x.is_finite())
            .collect();
        vals.sort_by(f32::total_cmp);
        vals.push(fmt.max() * 1.25);
        for w in vals.windows(2) {
            let mid = ((w[0] as f64 + w[1] as f64) / 2.0) as f32;
            for x in [
                w[0],
                mid,
                f32::from_bits(mid.to_bits().saturating_sub(1)),
                f32::from_bits(mid.to_bits() + 1),
            ] {
                v.push(x);
                v.push(-x);
            }
        }
    }
    v.extend([
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        0.0,
        -0.0,
        f32::MAX,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        -f32::from_bits(1),
    ]);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    for _ in 0..random {
        let e: i32 = rng.gen_range(-20..20);
        let m: f32 = rng.gen_range(-2.0..2.0);
        v.push(m * 2f32.powi(e));
    }
    v
}

/// Compares the GPU's conversions of `xs` with the CPU's: the mismatches, as sentences (empty
/// when bit-exact). Decoded NaN codes need only be NaN.
pub fn mismatches(xs: &[f32], dev: &DeviceConversions) -> Vec<String> {
    let mut out = Vec::new();
    for fmt in Fp8Format::ALL {
        for (i, &x) in xs.iter().enumerate() {
            let (g, c) = (dev.codes(fmt)[i], fmt.encode(x));
            if g != c {
                out.push(format!(
                    "{fmt} encode({x:e} = {:#010x}): GPU {g:#04x}, CPU {c:#04x}",
                    x.to_bits()
                ));
            }
        }
        for code in 0..=255u8 {
            let (g, c) = (dev.decoded(fmt)[code as usize], fmt.decode(code));
            if !(g.to_bits() == c.to_bits() || g.is_nan() && c.is_nan()) {
                out.push(format!("{fmt} decode({code:#04x}): GPU {g:e}, CPU {c:e}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jit::Jit;

    #[test]
    fn probes_cover_ties_and_the_saturation_boundary() {
        let v = probe_values(10, 1);
        assert!(v.contains(&432.0) && v.contains(&448.0) && v.contains(&57344.0));
        assert!(v.iter().any(|x| x.is_nan()));
        assert!(v.contains(&-f32::from_bits(1)));
        // the CPU agrees with itself through the comparison
        let fake = DeviceConversions {
            e4m3: v.iter().map(|&x| Fp8Format::E4m3.encode(x)).collect(),
            e5m2: v.iter().map(|&x| Fp8Format::E5m2.encode(x)).collect(),
            decoded_e4m3: (0..=255u8).map(|c| Fp8Format::E4m3.decode(c)).collect(),
            decoded_e5m2: (0..=255u8).map(|c| Fp8Format::E5m2.decode(c)).collect(),
        };
        assert!(mismatches(&v, &fake).is_empty());
        let mut bad = fake.clone();
        bad.e4m3[0] ^= 1;
        assert_eq!(mismatches(&v, &bad).len(), 1);
    }

    #[test]
    fn the_device_conversions_compile_for_sm_90a() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let c = Jit::without_cache().compile(&spec("sm_90a")).unwrap();
        assert!(!c.cubin.is_empty());
        assert!(!c.resources.spills(), "{:?}", c.resources);
        // the conversions are the cvt instructions, not a software emulation
        assert!(c.log.is_empty() || !c.log.contains("error"), "{}", c.log);
    }
}
