//! The MoE kernels' phase stamps (`kiln moe bench --weights F --timeline`): the events the
//! `KILN_MOE_TRACE` variants stamp (`kernels/moe/trace.cuh`), and a traced launch's buffer.

use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};

/// The GEMMs' events in the kernel's `MoeTraceEvent` order, each stamped once a CTA by the one
/// thread that sees it (the producer's and consumer 0's on a CTA's first unit; "mainloop end" on
/// its last). The bf16 kernel is not a dependent launch: it stamps no "dependency wait passed".
pub const TRACE_EVENTS: [&str; EVENTS] = [
    "entry",
    "barriers set up",
    "dependency wait passed",
    "tables in shared memory (block synced)",
    "producer: first stage's loads issued",
    "producer: last loads issued",
    "consumer 0: stage 0 full",
    "consumer 0: stage 1 full",
    "consumer 0: stage 2 full",
    "consumer 0: stage 4 full",
    "consumer 0: stage 8 full",
    "consumer 0: stage 16 full",
    "consumer 0: last stage full",
    "consumer 0: mainloop end",
    "consumer 0: stores issued",
    "consumer 1: stores issued",
];

/// The prefix kernel's events (its record's first two; lane 0 stamps both).
pub const PREFIX_EVENTS: [&str; 2] = ["prefix kernel: entry", "prefix kernel: tables written"];

/// Events a record holds (`MOE_TRACE_EVENTS`).
pub const EVENTS: usize = 16;

/// One record's stamps.
pub type MoeStamps = crate::ops::stamps::Stamps<EVENTS>;

/// What one traced launch stamped: the prefix kernel's record (all zeros where the launch built
/// no tables) and the GEMM's CTAs', in launch order.
#[derive(Debug, Clone, Default)]
pub struct MoeTrace {
    pub prefix: MoeStamps,
    pub ctas: Vec<MoeStamps>,
}

/// A traced launch's buffer: `ctas` records for the GEMM's CTAs, then the prefix kernel's.
pub struct TraceBuffer {
    buf: DeviceBuffer,
    ctas: usize,
}

impl TraceBuffer {
    /// Room for a grid of up to `ctas` CTAs.
    pub fn new(ctas: usize) -> Result<TraceBuffer> {
        Ok(TraceBuffer {
            buf: DeviceBuffer::new((ctas + 1) * MoeStamps::WORDS * 8)?,
            ctas,
        })
    }

    /// Zeroes every record (before each launch: a record keeps what it is not overwritten with).
    pub fn clear(&self, ctx: &Context) -> Result<()> {
        self.buf.fill_bytes(0, ctx)
    }

    /// The GEMM's pointer, for a grid of `grid` CTAs (refused past the buffer's room).
    pub fn gemm(&self, grid: u32) -> Result<u64> {
        if grid as usize > self.ctas {
            return Err(Error::invalid(format!(
                "a traced launch of {grid} CTAs; the trace buffer holds {}",
                self.ctas
            )));
        }
        Ok(self.buf.ptr())
    }

    /// The prefix kernel's pointer (its record, after the CTAs').
    pub fn prefix(&self) -> u64 {
        self.buf.ptr() + (self.ctas * MoeStamps::WORDS * 8) as u64
    }

    /// The stamps, once the stream has run the launch: the CTAs that entered (a record whose
    /// entry is 0 was never reached).
    pub fn read(&self) -> Result<MoeTrace> {
        let raw: Vec<u64> = self.buf.download((self.ctas + 1) * MoeStamps::WORDS)?;
        let mut records: Vec<MoeStamps> = MoeStamps::records(&raw).collect();
        let prefix = records.pop().unwrap_or_default();
        records.retain(MoeStamps::entered);
        Ok(MoeTrace {
            prefix,
            ctas: records,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_and_the_host_name_the_same_events() {
        let src = include_str!("../../../kernels/moe/trace.cuh");
        let start = src.find("enum MoeTraceEvent {").expect("the enum");
        let body = &src[start..src[start..].find('}').unwrap() + start];
        let names: Vec<&str> = body
            .lines()
            .skip(1)
            .map(|l| l.trim().trim_end_matches(','))
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(names.last(), Some(&"MOE_TRACE_EVENTS"));
        assert_eq!(names.len() - 1, EVENTS);
        assert_eq!(names[0], "MT_ENTRY");
        assert_eq!(names[EVENTS - 1], "MT_C1_END");
        assert!(src.contains("constexpr int MT_PREFIX_DONE = MT_SETUP;"));
    }

    /// The traced variants `--timeline` launches compile clean (no spills): the prefix kernel,
    /// kiln's bf16 grouped GEMM at 128x128, the 4-bit grouped GEMM's 128- and 160-token tiles
    /// (one expert of 200 and 300 rows) and the decode tile, both formats; and the 128-token tile
    /// building its own tables (`KILN_FP4_PDL=own`), with and without the stamps.
    #[test]
    fn the_traced_variants_compile_clean() {
        use crate::ops::gemm::DType;
        use crate::ops::moe::fp4::kernel::{Fp4Experts, Fp4Tile};
        use crate::ops::moe::fp4::Fp4Format;
        use crate::ops::moe::grouped_gemm::GroupedGemm;
        use crate::ops::moe::schedule::TileConfig;
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let traced = |s: crate::jit::KernelSpec| s.define("KILN_MOE_TRACE", 1);
        let mut specs = vec![traced(crate::ops::moe::tile_prefix::spec("sm_90a"))];
        let cfg = TileConfig::ALL
            .into_iter()
            .find(|c| c.bm == 128 && c.bn == 128 && c.cluster == 1)
            .expect("the 128x128 tile");
        specs.push(traced(GroupedGemm::spec(
            "sm_90a",
            DType::Bf16,
            DType::Bf16,
            cfg,
        )));
        for f in Fp4Format::ALL {
            for tile in [
                Fp4Tile::gemm_wide(128),
                Fp4Tile::gemm_wide(160),
                Fp4Tile::narrow(8, false),
            ] {
                specs.push(traced(Fp4Experts::spec(
                    "sm_90a",
                    DType::Bf16,
                    f,
                    false,
                    tile,
                )));
            }
            // KILN_FP4_PDL=own (ledger F223), alone and traced
            let own = Fp4Experts::spec("sm_90a", DType::Bf16, f, false, Fp4Tile::gemm_wide(128))
                .define("KILN_FP4_OWN", 1);
            specs.push(traced(own.clone()));
            specs.push(own);
        }
        crate::jit::testing::assert_compile_clean(&specs);
    }
}
