//! Verification of the 4-bit MoE kernels: random weights for the experts that own rows (the
//! others poisoned), prepacked, one launch into a poisoned Y, scored against the float64
//! reference on the exact weights; and its shape suite.

use super::moe_fp4_data::{poison_byte, Fp4Case};
use super::moe_verify::{rows_to_check, score_against, settle, Mode};
use super::outcome::{Extra, Outcome};
use super::runner::{run, Check};
use super::verify::{bound, fresh_seed};
use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::ops::gemm::DType;
use crate::ops::moe::fp4::kernel::Fp4Layout;
use crate::ops::moe::fp4::kernel::{Fp4Experts, NAME};
use crate::ops::moe::fp4::{Fp4Format, Fp4Operands};
use crate::ops::moe::schedule::sched_bytes;
use crate::ops::moe::{MoeProblem, WeightLayout};
use crate::reference::data::HostData;

/// How the 4-bit checks name their output's bound in a failure.
pub(crate) const OUTPUT_BOUND: &str = "the bf16/f16 output bound";

/// The device buffers of one 4-bit call.
pub struct Fp4Buffers {
    pub x: DeviceBuffer,
    pub w: DeviceBuffer,
    pub escale: DeviceBuffer,
    pub y: DeviceBuffer,
    pub rows: DeviceBuffer,
    pub route: Option<DeviceBuffer>,
    pub sched: DeviceBuffer,
}

impl Fp4Buffers {
    pub fn operands(&self) -> Fp4Operands<'_> {
        Fp4Operands {
            x: &self.x,
            w: &self.w,
            escale: &self.escale,
            y: &self.y,
            rows: &self.rows,
            route: self.route.as_ref(),
            sched: &self.sched,
        }
    }
}

/// Verifies the 4-bit kernel on `p` with `f` weights once, with fresh inputs.
pub fn verify_fp4(ctx: &Context, p: &MoeProblem, f: Fp4Format, mode: Mode) -> Result<Outcome> {
    verify_fp4_seeded(ctx, p, f, mode, fresh_seed())
}

pub fn verify_fp4_seeded(
    ctx: &Context,
    p: &MoeProblem,
    f: Fp4Format,
    mode: Mode,
    seed: u64,
) -> Result<Outcome> {
    p.validate()?;
    run(ctx, &Fp4Check { p, f, mode }, seed)
}

/// The 4-bit kernel with `f` weights on one problem, as the runner checks it.
struct Fp4Check<'a> {
    p: &'a MoeProblem,
    f: Fp4Format,
    mode: Mode,
}

/// One 4-bit problem's host case, its weights' layout, Y's poison, and (once launched) the
/// buffers.
struct Fp4Drawn {
    case: Fp4Case,
    layout: Fp4Layout,
    poison: HostData,
    bufs: Option<Fp4Buffers>,
    seed: u64,
}

impl Check for Fp4Check<'_> {
    type Drawn = Fp4Drawn;

    fn blank(&self, seed: u64) -> Outcome {
        let (p, f) = (self.p, self.f);
        let extra = Extra::Moe { mode: self.mode };
        Outcome::new(
            format!("{NAME} ({f})"),
            p.label(),
            seed,
            bound(p.output),
            extra,
        )
    }

    /// Asked of the drawn layout instead.
    fn supports(&self, _ctx: &Context) -> std::result::Result<(), String> {
        Ok(())
    }

    fn draw(&self, _ctx: &Context, seed: u64) -> Result<Fp4Drawn> {
        let case = Fp4Case::random(self.p, self.f, seed)?;
        Ok(Fp4Drawn {
            layout: case.layout(self.p),
            case,
            poison: HostData::poison(self.p.output, self.p.y_elems()),
            bufs: None,
            seed,
        })
    }

    fn supports_drawn(&self, ctx: &Context, d: &Fp4Drawn) -> std::result::Result<(), String> {
        Fp4Experts::supports(self.p, &d.layout, &ctx.info)
    }

    fn launch(&self, ctx: &Context, d: &mut Fp4Drawn) -> Result<()> {
        let (p, case) = (self.p, &d.case);
        // every expert's weights poisoned, then the touched experts' bytes put in place
        let eb = d.layout.expert_bytes();
        let w = DeviceBuffer::new(p.experts * eb)?;
        w.fill_bytes(poison_byte(self.f), ctx)?;
        settle()?;
        for (i, &e) in case.touched.iter().enumerate() {
            w.upload_at(e * eb, &case.packed.bytes[i * eb..(i + 1) * eb])?;
        }
        let bufs = d.bufs.insert(Fp4Buffers {
            x: DeviceBuffer::from_host(case.x.bytes())?,
            w,
            escale: DeviceBuffer::from_host(&case.escale(p))?,
            y: DeviceBuffer::from_host(d.poison.bytes())?,
            rows: DeviceBuffer::from_host(p.rows_array())?,
            route: case
                .route
                .as_ref()
                .map(|r| DeviceBuffer::from_host(r.bytes()))
                .transpose()?,
            sched: DeviceBuffer::new(sched_bytes(p.experts))?,
        });
        settle()?;
        let ops = bufs.operands();
        Fp4Experts::check(p, &d.layout, &ops)?;
        match self.mode {
            Mode::Direct => Fp4Experts::launch(ctx, p, &d.layout, &ops),
            Mode::Graph => Err(Error::invalid(
                "the 4-bit kernels are verified by direct launches; leave out --graph",
            )),
        }
    }

    fn flops(&self) -> f64 {
        self.p.flops()
    }

    fn judge(&self, d: &Fp4Drawn, out: &mut Outcome) -> Result<()> {
        let p = self.p;
        let Some(bufs) = &d.bufs else {
            return Err(Error::invalid(
                "the 4-bit check was judged before its launch",
            ));
        };
        let got = HostData::from_bytes(
            p.output,
            &bufs.y.download::<u8>(p.y_elems() * p.output.size())?,
        );
        let rows = rows_to_check(p, d.seed);
        let reference = d.case.reference(p, &rows)?;
        score_against(p, &reference, &got, &d.poison, &rows).judge(out, rows.len(), OUTPUT_BOUND);
        Ok(())
    }
}

/// The 4-bit suite: empty experts, one expert with every row, 256 experts, ragged rows that are
/// a multiple of nothing, N and K off the tile grid, decode and prefill tiles, both SwiGLU weight
/// layouts, routed or not, the masked layout, bf16 and f16.
pub fn fp4_suite() -> Vec<MoeProblem> {
    use WeightLayout::{Interleaved as Il, Separate as Sep};
    let ragged: Vec<usize> = vec![0, 1, 40, 64, 65, 129, 0, 200, 255, 7];
    let many = super::moe_shapes::many_experts();
    let bf = |c: &[usize], n, k| MoeProblem::contiguous(c, n, k, DType::Bf16, DType::Bf16);
    let f16 = |c: &[usize], n, k| MoeProblem::contiguous(c, n, k, DType::F16, DType::F16);
    let sw = |p: MoeProblem, l, r| p.with_swiglu(l, r);
    let masked =
        |c: &[usize], rows| MoeProblem::masked(c, rows, 256, 512, DType::Bf16, DType::Bf16);
    let decode = masked(&[0, 1, 40, 64, 3, 0, 17, 9], 64);
    // decode: 1-8 rows an expert (wgmma N 8), 9-16 (N 16, and 8 for the experts with fewer)
    let two_or_three: Vec<usize> = (0..256).map(|i| [2, 3, 0, 2, 3][i % 5]).collect();
    let upto8 = [2, 0, 8, 1, 5, 3, 0, 7];
    let upto16 = [9, 16, 0, 2, 12, 1, 15];
    vec![
        // grouped GEMM: decode tiles, prefill tiles, empty experts, one expert, 256 experts
        bf(&[3, 0, 7, 1, 60, 0, 33], 256, 512),
        bf(&upto8, 264, 320),
        bf(&upto16, 256, 512),
        bf(&two_or_three, 256, 192),
        f16(&[4, 8, 1], 192, 256),
        f16(&[9, 0, 13], 136, 192),
        bf(&ragged, 256, 512),
        bf(&[0, 0, 77, 0], 200, 96),
        bf(&[1], 136, 160),
        bf(&[301], 520, 1056),
        bf(&many, 128, 128),
        f16(&[33, 0, 150], 264, 192),
        decode.clone(),
        // fused SwiGLU
        sw(bf(&[3, 0, 7, 1, 60, 0, 33], 256, 512), Sep, false),
        sw(bf(&ragged, 256, 512), Sep, true),
        // prefill on the register path (at most 128 rows an expert)
        sw(bf(&[100, 3, 0, 128, 70], 136, 256), Sep, true),
        sw(bf(&ragged, 256, 512), Il, true),
        sw(bf(&[0, 1, 0], 136, 96), Sep, true),
        sw(bf(&many, 128, 128), Il, false),
        sw(f16(&[5, 130, 0, 64], 192, 320), Sep, true),
        sw(decode, Sep, true),
        sw(bf(&upto8, 264, 320), Sep, true),
        sw(bf(&upto16, 256, 512), Il, true),
        sw(bf(&two_or_three, 128, 256), Sep, false),
        sw(f16(&[3, 0, 11], 192, 320), Sep, true),
        sw(f16(&[6, 1], 128, 128), Il, true),
        sw(masked(&[0, 3, 8, 1], 8), Sep, true),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::moe_fp4_data::{prepack_for, random_weights};
    use super::*;
    use crate::ops::moe::fp4::kernel::Fp4Path;
    use crate::ops::moe::fp4::Fp4Tile;

    #[test]
    fn the_suite_is_valid_and_covers_the_edges() {
        let s = fp4_suite();
        for p in &s {
            p.validate().unwrap();
        }
        assert!(s.iter().any(|p| p.experts == 256));
        assert!(s
            .iter()
            .any(|p| p.spans().iter().filter(|x| x.1 > 0).count() == 1));
        assert!(s.iter().any(|p| p.spans().iter().any(|x| x.1 == 0)));
        assert!(s.iter().any(|p| p.is_masked()));
        assert!(s.iter().any(|p| p
            .swiglu
            .is_some_and(|w| w.weights == WeightLayout::Interleaved)));
        // every tile the dispatch may pick, for both ops, and the narrow ones with f16 too
        for swiglu in [false, true] {
            // (the unpaired 8-token tile runs under KILN_FP4_CTAS=1 and the shared-memory tile
            // under KILN_FP4_PATH=dq only, on the same cases)
            let picked = |t: &Fp4Tile| t.ctas == 1 && t.path == Fp4Path::Rs;
            for tile in Fp4Tile::all(swiglu).into_iter().filter(picked) {
                assert!(
                    s.iter().any(|p| p.swiglu.is_some() == swiglu
                        && p.input == DType::Bf16
                        && Fp4Tile::choose(p) == tile),
                    "no bf16 case for {tile:?} (swiglu {swiglu})"
                );
            }
            for tile in &Fp4Tile::all(swiglu)[..2] {
                assert!(s.iter().any(|p| p.swiglu.is_some() == swiglu
                    && p.input == DType::F16
                    && Fp4Tile::choose(p) == *tile));
            }
        }
    }

    #[test]
    fn random_weights_prepack_for_every_suite_problem() {
        for p in fp4_suite().iter().filter(|p| p.experts <= 16) {
            for f in Fp4Format::ALL {
                let (w, w3) = random_weights(p, f, 5).unwrap();
                let packed = prepack_for(p, &w, w3.as_ref()).unwrap();
                assert_eq!(
                    (packed.n, packed.k, packed.swiglu),
                    (p.n, p.k, p.swiglu.is_some())
                );
                packed.check_activation(p.input == DType::Bf16).unwrap();
            }
        }
    }
}
