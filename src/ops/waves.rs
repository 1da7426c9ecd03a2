//! Wave quantisation, shared by the tile choices of GEMM and MoE: how many waves of work units a
//! persistent grid of resident CTAs (132 SMs on an H100) runs, and the last-wave split rule.

/// Waves of `units` work units over `slots` resident CTAs (at least one): the units the busiest
/// CTA runs, so a partly filled last wave costs as much as a full one.
pub fn waves(units: u64, slots: u32) -> u64 {
    units.div_ceil(slots.max(1) as u64)
}

/// Units in the last, partial wave of `units` over `slots` (at least one); 0 when the waves are
/// whole.
pub fn last_wave(units: u32, slots: u32) -> u32 {
    units % slots.max(1)
}

/// The last-wave split rule (GEMM's tail split, the fused SwiGLU's in-kernel split): when `tiles`
/// on `slots` resident CTAs leave a last wave at most half full, its tiles are cut into as many K
/// slices as fill the idle slots (slots / tail tiles), at most `max_slices` and a quarter of the
/// `kblocks`; `None` when the waves are whole, there is one wave or less, or that is under 2.
pub fn last_wave_slices(tiles: u32, slots: u32, max_slices: u32, kblocks: u32) -> Option<u32> {
    let slots = slots.max(1);
    let tail = last_wave(tiles, slots);
    if tiles <= slots || tail == 0 || tail * 2 > slots {
        return None;
    }
    let s = (slots / tail).min(max_slices).min(kblocks / 4);
    (s >= 2).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waves_round_up_and_the_last_wave_holds_the_rest() {
        assert_eq!(waves(0, 132), 0);
        assert_eq!(waves(132, 132), 1);
        assert_eq!(waves(133, 132), 2);
        assert_eq!(waves(5, 0), 5);
        assert_eq!(last_wave(264, 132), 0);
        assert_eq!(last_wave(288, 132), 24);
        // 2004 tiles on 132 SMs leave 24 for a 16th wave: split in 5 (5 x 24 = 120 of 132)
        assert_eq!(last_wave_slices(2004, 132, 5, 64), Some(5));
        assert_eq!(last_wave_slices(2004, 132, 8, 64), Some(5));
        // too shallow, a last wave over half full, whole waves, one wave: not split
        assert_eq!(last_wave_slices(2004, 132, 5, 4), None);
        assert_eq!(last_wave_slices(200, 132, 5, 64), None);
        assert_eq!(last_wave_slices(264, 132, 5, 64), None);
        assert_eq!(last_wave_slices(100, 132, 5, 64), None);
    }
}
