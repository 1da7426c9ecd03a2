//! The checks NVFP4 and MXFP4 share: a [rows, K] input whose K is whole blocks and whose values
//! are finite, and packed code and scale buffers of the lengths that shape implies.

use crate::error::{Error, Result};

/// `x` as f32, after checking that it holds rows x k finite values and that k is whole blocks.
pub(crate) fn finite_input<T: Copy + Into<f32>>(
    format: &str,
    block: usize,
    x: &[T],
    rows: usize,
    k: usize,
) -> Result<Vec<f32>> {
    check_k(format, block, k)?;
    if Some(x.len()) != rows.checked_mul(k) {
        return Err(Error::invalid(format!(
            "the {format} input holds {} values but [{rows}, {k}] needs {}: pass a row-major \
             matrix of exactly rows x K elements",
            x.len(),
            rows.saturating_mul(k)
        )));
    }
    let xs: Vec<f32> = x.iter().map(|&v| v.into()).collect();
    if let Some(i) = xs.iter().position(|v| !v.is_finite()) {
        return Err(Error::invalid(format!(
            "element ({}, {}) of the {format} input is {}: e2m1 has no NaN or infinity, so \
             clean or clamp the input before quantising",
            i / k.max(1),
            i % k.max(1),
            xs[i]
        )));
    }
    Ok(xs)
}

/// Checks that packed codes and scales have the lengths [rows, K/2] and [rows, K/block] need.
pub(crate) fn check_buffers(
    format: &str,
    block: usize,
    rows: usize,
    k: usize,
    codes: usize,
    scales: usize,
) -> Result<()> {
    check_k(format, block, k)?;
    let elements = rows.checked_mul(k).ok_or_else(|| {
        Error::invalid(format!("the {format} shape [{rows}, {k}] overflows memory"))
    })?;
    if codes != elements / 2 {
        return Err(Error::invalid(format!(
            "the {format} codes hold {codes} bytes but [{rows}, {k}] packs into {} (two e2m1 \
             per byte): pass the codes of exactly this shape",
            elements / 2
        )));
    }
    if scales != elements / block {
        return Err(Error::invalid(format!(
            "the {format} scales hold {scales} values but [{rows}, {k}] has {} blocks of \
             {block}: pass one scale per block, [{rows}, {}]",
            elements / block,
            k / block
        )));
    }
    Ok(())
}

/// Checks that K is a whole number of blocks.
pub(crate) fn check_k(format: &str, block: usize, k: usize) -> Result<()> {
    if !k.is_multiple_of(block) {
        return Err(Error::invalid(format!(
            "K = {k} is not a multiple of {block}: {format} scales blocks of {block} along K, \
             so pad K with zeros to {}",
            k.next_multiple_of(block)
        )));
    }
    Ok(())
}

/// The largest magnitude of `xs` (finite values), 0 for none.
pub(crate) fn amax(xs: &[f32]) -> f32 {
    xs.iter().fold(0.0f32, |m, x| m.max(x.abs()))
}

/// A small deterministic generator for the 4-bit formats' tests (64-bit LCG, top bits).
#[cfg(test)]
pub(super) struct Lcg(pub(super) u64);

#[cfg(test)]
impl Lcg {
    pub(super) fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
    pub(super) fn below(&mut self, n: u32) -> u32 {
        self.next() % n
    }
    /// A value in [-1, 1) times 2^[-e, e].
    pub(super) fn spread(&mut self, e: i32) -> f32 {
        let u = self.next() as f32 / (1u32 << 31) as f32 - 0.5;
        2.0 * u * 2f32.powi(self.below(2 * e as u32 + 1) as i32 - e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_shapes_and_values_are_refused_with_the_reason() {
        let x = vec![1.0f32; 64];
        let e = finite_input("nvfp4", 16, &x, 2, 24).unwrap_err();
        assert!(
            e.to_string().contains("K = 24 is not a multiple of 16"),
            "{e}"
        );
        assert_eq!(e.exit_code(), 2);
        let e = finite_input("nvfp4", 16, &x, 3, 32).unwrap_err();
        assert!(e.to_string().contains("holds 64 values"), "{e}");
        let mut y = x.clone();
        y[33] = f32::NAN;
        let e = finite_input("mxfp4", 32, &y, 2, 32).unwrap_err();
        assert!(e.to_string().contains("element (1, 1)"), "{e}");
        y[33] = f32::NEG_INFINITY;
        assert!(finite_input("mxfp4", 32, &y, 2, 32).is_err());
        assert_eq!(finite_input("mxfp4", 32, &x, 2, 32).unwrap(), x);
        assert!(check_buffers("nvfp4", 16, 2, 32, 32, 4).is_ok());
        let e = check_buffers("nvfp4", 16, 2, 32, 31, 4).unwrap_err();
        assert!(e.to_string().contains("codes hold 31 bytes"), "{e}");
        let e = check_buffers("nvfp4", 16, 2, 32, 32, 2).unwrap_err();
        assert!(e.to_string().contains("[2, 2]"), "{e}");
    }
}
