//! The attention forward problem: O = softmax(scale · Q·Kᵀ + mask)·V per (batch, query head), with
//! grouped key/value heads, an optional bottom-right-aligned causal mask, and BSHD or BHSD
//! storage, or any strides per tensor (each of Q, K, V and O where it lies). Validated once, so
//! that no kernel ever sees an impossible problem.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ops::attention::varlen::Window;
use crate::ops::gemm::DType;

/// How Q, K, V and O are stored when packed (O takes Q's layout; [`OperandStrides`] gives each
/// its own strides instead). LSE is always [B, H, Sq].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AttnLayout {
    /// [batch, seq, heads, dim]: the layout a fused QKV projection produces.
    Bshd,
    /// [batch, heads, seq, dim].
    Bhsd,
}

impl AttnLayout {
    pub const ALL: [AttnLayout; 2] = [AttnLayout::Bshd, AttnLayout::Bhsd];
    pub fn name(self) -> &'static str {
        match self {
            AttnLayout::Bshd => "BSHD",
            AttnLayout::Bhsd => "BHSD",
        }
    }
}

impl fmt::Display for AttnLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for AttnLayout {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_uppercase().as_str() {
            "BSHD" => Ok(AttnLayout::Bshd),
            "BHSD" => Ok(AttnLayout::Bhsd),
            _ => Err(Error::invalid(format!(
                "unknown layout `{s}`; use BSHD or BHSD"
            ))),
        }
    }
}

/// Element strides of one 4-D tensor: batch, head, sequence (dim is contiguous).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Strides {
    pub batch: usize,
    pub head: usize,
    pub seq: usize,
}

impl Strides {
    /// Packed strides of a [batch, seq, heads, dim] or [batch, heads, seq, dim] tensor.
    pub fn packed(layout: AttnLayout, heads: usize, seq: usize, dim: usize) -> Strides {
        match layout {
            AttnLayout::Bshd => Strides {
                batch: seq * heads * dim,
                head: dim,
                seq: heads * dim,
            },
            AttnLayout::Bhsd => Strides {
                batch: heads * seq * dim,
                head: seq * dim,
                seq: dim,
            },
        }
    }
    pub fn offset(&self, b: usize, h: usize, s: usize) -> usize {
        b * self.batch + h * self.head + s * self.seq
    }
    /// Elements from the base to one past the last of a [batch, heads, seq, dim] tensor (dim
    /// contiguous); 0 when it has none.
    pub fn span(&self, batch: usize, heads: usize, seq: usize, dim: usize) -> usize {
        if batch == 0 || heads == 0 || seq == 0 || dim == 0 {
            return 0;
        }
        self.offset(batch - 1, heads - 1, seq - 1) + dim
    }
}

/// Element strides of each of Q, K, V and O, when they are not the layout's packed ones: each
/// tensor read where it lies (transformers' queries in BSHD memory beside a KV cache in BHSD
/// memory, a slice of a fused QKV projection, a cache with room past the sequence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OperandStrides {
    pub q: Strides,
    pub k: Strides,
    pub v: Strides,
    pub o: Strides,
}

/// Every stride of a tensor the kernels read or write by TMA or 16-byte copies is a multiple of
/// this many 16-bit elements (16 bytes).
pub const STRIDE_ALIGN: usize = 8;

/// Head dimensions the kernels are specialised for.
pub const HEAD_DIMS: [usize; 3] = [64, 128, 256];

/// One attention forward to run. Construct with [`AttentionProblem::new`], adjust, then
/// [`validate`](Self::validate).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AttentionProblem {
    pub batch: usize,
    pub heads_q: usize,
    /// Key/value heads; must divide `heads_q` (equal: MHA, fewer: GQA, one: MQA).
    pub heads_kv: usize,
    pub seqlen_q: usize,
    pub seqlen_kv: usize,
    pub head_dim: usize,
    pub dtype: DType,
    /// Query i sees keys j <= i + (seqlen_kv - seqlen_q) (aligned bottom-right).
    pub causal: bool,
    pub scale: f32,
    pub layout: AttnLayout,
    /// The sliding window (flash-attention's `window_size`), on top of the causal mask.
    #[serde(default)]
    pub window: Window,
    /// Each tensor's own strides; `None`: packed as `layout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strides: Option<OperandStrides>,
}

/// An [`AttentionProblem`] as a hashable key (the scale by its bits): what launches are
/// memoised by, and what a handle knows has run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttentionKey {
    dims: [usize; 6],
    dtype: DType,
    causal: bool,
    scale_bits: u32,
    layout: AttnLayout,
    window: Window,
    strides: Option<OperandStrides>,
}

impl AttentionProblem {
    pub fn key(&self) -> AttentionKey {
        AttentionKey {
            dims: [
                self.batch,
                self.heads_q,
                self.heads_kv,
                self.seqlen_q,
                self.seqlen_kv,
                self.head_dim,
            ],
            dtype: self.dtype,
            causal: self.causal,
            scale_bits: self.scale.to_bits(),
            layout: self.layout,
            window: self.window,
            strides: self.strides,
        }
    }

    /// Multi-head attention with equal lengths, scale 1/sqrt(d), BSHD, bf16, not causal.
    pub fn new(batch: usize, heads: usize, seqlen: usize, head_dim: usize) -> Self {
        AttentionProblem {
            batch,
            heads_q: heads,
            heads_kv: heads,
            seqlen_q: seqlen,
            seqlen_kv: seqlen,
            head_dim,
            dtype: DType::Bf16,
            causal: false,
            scale: 1.0 / (head_dim as f32).sqrt(),
            layout: AttnLayout::Bshd,
            window: Window::UNBOUNDED,
            strides: None,
        }
    }

    /// Query heads per key/value head.
    pub fn group(&self) -> usize {
        self.heads_q / self.heads_kv.max(1)
    }

    /// The packed strides of the layout: Q and O.
    fn packed_q(&self) -> Strides {
        Strides::packed(self.layout, self.heads_q, self.seqlen_q, self.head_dim)
    }
    /// The packed strides of the layout: K and V.
    fn packed_kv(&self) -> Strides {
        Strides::packed(self.layout, self.heads_kv, self.seqlen_kv, self.head_dim)
    }
    pub fn q_strides(&self) -> Strides {
        self.strides.map_or_else(|| self.packed_q(), |s| s.q)
    }
    pub fn k_strides(&self) -> Strides {
        self.strides.map_or_else(|| self.packed_kv(), |s| s.k)
    }
    pub fn v_strides(&self) -> Strides {
        self.strides.map_or_else(|| self.packed_kv(), |s| s.v)
    }
    pub fn o_strides(&self) -> Strides {
        self.strides.map_or_else(|| self.packed_q(), |s| s.o)
    }
    /// Elements each of Q, K, V and O spans under its strides (its `*_elems` when packed).
    pub fn spans(&self) -> [usize; 4] {
        let (b, d) = (self.batch, self.head_dim);
        let (hq, sq, hk, sk) = (self.heads_q, self.seqlen_q, self.heads_kv, self.seqlen_kv);
        [
            self.q_strides().span(b, hq, sq, d),
            self.k_strides().span(b, hk, sk, d),
            self.v_strides().span(b, hk, sk, d),
            self.o_strides().span(b, hq, sq, d),
        ]
    }

    pub fn q_elems(&self) -> usize {
        self.batch * self.heads_q * self.seqlen_q * self.head_dim
    }
    pub fn kv_elems(&self) -> usize {
        self.batch * self.heads_kv * self.seqlen_kv * self.head_dim
    }
    pub fn lse_elems(&self) -> usize {
        self.batch * self.heads_q * self.seqlen_q
    }

    /// Signed offset of the causal diagonal: query i sees keys j <= i + offset.
    pub fn causal_offset(&self) -> i64 {
        self.seqlen_kv as i64 - self.seqlen_q as i64
    }

    /// Keys query row `i` attends to (a prefix of the keys, 0..visible, without a window; its
    /// end with one: see [`AttentionProblem::visible`]).
    pub fn visible_keys(&self, i: usize) -> usize {
        self.visible(i).end
    }

    /// The keys query row `i` attends to, under the causal mask and the window.
    pub fn visible(&self, i: usize) -> std::ops::Range<usize> {
        self.window
            .visible(self.causal, i, self.seqlen_q, self.seqlen_kv)
    }

    /// Unmasked (query, key) pairs of one head.
    pub fn pairs(&self) -> u64 {
        if !self.causal && self.window == Window::UNBOUNDED {
            return self.seqlen_q as u64 * self.seqlen_kv as u64;
        }
        (0..self.seqlen_q)
            .map(|i| self.visible(i).len() as u64)
            .sum()
    }

    /// 4·B·H·D per unmasked pair (two GEMMs of 2 flops per multiply-add).
    pub fn flops(&self) -> f64 {
        4.0 * self.batch as f64 * self.heads_q as f64 * self.head_dim as f64 * self.pairs() as f64
    }

    /// The fewest bytes a forward must move: read Q, K, V once, write O and LSE once.
    pub fn min_bytes(&self) -> f64 {
        let e = self.dtype.size() as f64;
        (2.0 * self.q_elems() as f64 + 2.0 * self.kv_elems() as f64) * e
            + 4.0 * self.lse_elems() as f64
    }

    /// Device bytes of Q, K, V, O (their spans) and the f32 LSE: what one run's operands occupy.
    pub fn device_bytes(&self) -> u64 {
        let e = self.dtype.size() as u64;
        let spans: u64 = self.spans().iter().map(|&n| n as u64).sum();
        spans * e + 4 * self.lse_elems() as u64
    }

    /// Checks sizes, heads, dims and dtype; names the argument that is wrong.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("batch", self.batch),
            ("heads", self.heads_q),
            ("kv_heads", self.heads_kv),
            ("seqlen_q", self.seqlen_q),
            ("seqlen_kv", self.seqlen_kv),
        ] {
            if v == 0 {
                return Err(Error::invalid(format!(
                    "{name} is 0; it must be at least 1"
                )));
            }
            if v > i32::MAX as usize {
                return Err(Error::invalid(format!(
                    "{name} = {v} exceeds the largest supported extent {}",
                    i32::MAX
                )));
            }
        }
        if !self.heads_q.is_multiple_of(self.heads_kv) {
            return Err(Error::invalid(format!(
                "kv_heads = {} does not divide heads = {}; key/value heads must divide query heads (GQA/MQA)",
                self.heads_kv, self.heads_q
            )));
        }
        check_dim_dtype_scale(self.head_dim, self.dtype, self.scale)?;
        self.window.check(self.seqlen_kv)?;
        let [q, k, v, o] = self.spans();
        let elems = [("Q", q), ("K", k), ("V", v), ("O", o)];
        for (name, n) in elems {
            if n as u64 >= 1u64 << 40 {
                return Err(Error::invalid(format!(
                    "{name} spans {n} elements, more than kiln addresses"
                )));
            }
        }
        if let Some(st) = self.strides {
            self.check_strides(&st)?;
        }
        Ok(())
    }

    /// Each stride of a dimension longer than 1 a positive multiple of [`STRIDE_ALIGN`] (TMA's
    /// 16 bytes; also what the 16-byte copies of the other kernels need).
    fn check_strides(&self, st: &OperandStrides) -> Result<()> {
        let (hq, sq, hk, sk) = (self.heads_q, self.seqlen_q, self.heads_kv, self.seqlen_kv);
        for (name, s, heads, seq) in [
            ("Q", st.q, hq, sq),
            ("K", st.k, hk, sk),
            ("V", st.v, hk, sk),
            ("O", st.o, hq, sq),
        ] {
            for (dim, stride, extent) in [
                ("batch", s.batch, self.batch),
                ("head", s.head, heads),
                ("sequence", s.seq, seq),
            ] {
                if extent > 1 && (stride == 0 || !stride.is_multiple_of(STRIDE_ALIGN)) {
                    return Err(Error::invalid(format!(
                        "{name}'s {dim} stride is {stride} elements; strides of 16-bit tensors must be positive multiples of {STRIDE_ALIGN} (16 bytes, what TMA addresses)"
                    )));
                }
            }
        }
        Ok(())
    }

    /// A short label, e.g. `b2 h16/16 s8192x8192 d128 causal BSHD bf16` (`strided` for
    /// tensors with their own strides).
    pub fn label(&self) -> String {
        let layout = match self.strides {
            Some(_) => "strided".to_string(),
            None => self.layout.to_string(),
        };
        format!(
            "b{} h{}/{} s{}x{} d{} {}{}{} {}",
            self.batch,
            self.heads_q,
            self.heads_kv,
            self.seqlen_q,
            self.seqlen_kv,
            self.head_dim,
            if self.causal { "causal " } else { "" },
            self.window.label(),
            layout,
            self.dtype
        )
    }
}

/// The head dim, dtype and scale checks every attention problem makes (dense, packed, paged).
pub(crate) fn check_dim_dtype_scale(head_dim: usize, dtype: DType, scale: f32) -> Result<()> {
    if !HEAD_DIMS.contains(&head_dim) {
        return Err(Error::invalid(format!(
            "head_dim = {head_dim} is not supported; use 64, 128 or 256"
        )));
    }
    if dtype == DType::F32 {
        return Err(Error::invalid(
            "dtype = f32 is not supported; attention inputs are bf16 or f16",
        ));
    }
    if !scale.is_finite() || scale <= 0.0 {
        return Err(Error::invalid(format!(
            "scale = {scale} must be finite and positive"
        )));
    }
    Ok(())
}

/// The packed and paged problems' head check: at least one key/value head, dividing the query
/// heads (GQA/MQA), then [`check_dim_dtype_scale`].
pub(crate) fn check_heads(
    heads_q: usize,
    heads_kv: usize,
    head_dim: usize,
    dtype: DType,
    scale: f32,
) -> Result<()> {
    if heads_q == 0 || heads_kv == 0 || !heads_q.is_multiple_of(heads_kv) {
        return Err(Error::invalid(format!(
            "kv_heads = {heads_kv} must be at least 1 and divide heads = {heads_q} (GQA/MQA)"
        )));
    }
    check_dim_dtype_scale(head_dim, dtype, scale)
}

#[cfg(test)]
mod tests {
    #[test]
    fn device_bytes_are_q_k_v_o_and_lse() {
        let mut p = AttentionProblem::new(2, 8, 100, 64);
        p.heads_kv = 2;
        let (q, kv, lse) = (2 * 8 * 100 * 64, 2 * 2 * 100 * 64, 2 * 8 * 100);
        assert_eq!(p.device_bytes(), (2 * q + 2 * kv) * 2 + 4 * lse);
        // The problem: 64 GiB each of Q, K, V and O, 1 GiB of LSE.
        let big = AttentionProblem::new(64, 64, 65536, 128);
        assert_eq!(big.device_bytes(), (4 * 64 + 1) << 30);
    }

    use super::*;

    #[test]
    fn flops_count_exactly_the_unmasked_pairs() {
        let p = AttentionProblem::new(2, 16, 8192, 128);
        assert_eq!(p.flops(), 4.0 * 2.0 * 16.0 * 128.0 * 8192.0 * 8192.0);
        let c = AttentionProblem {
            causal: true,
            ..AttentionProblem::new(1, 1, 4, 64)
        };
        // rows see 1, 2, 3, 4 keys
        assert_eq!(c.pairs(), 10);
        // bottom-right: 2 queries over 5 keys see 4 and 5 keys; 5 queries over 2 keys see 0,0,0,1,2
        let wide = AttentionProblem {
            seqlen_q: 2,
            seqlen_kv: 5,
            ..c
        };
        assert_eq!((wide.visible_keys(0), wide.visible_keys(1)), (4, 5));
        let tall = AttentionProblem {
            seqlen_q: 5,
            seqlen_kv: 2,
            ..c
        };
        assert_eq!(
            (0..5).map(|i| tall.visible_keys(i)).collect::<Vec<_>>(),
            vec![0, 0, 0, 1, 2]
        );
        assert_eq!(tall.pairs(), 3);
    }

    #[test]
    fn strides_follow_the_layout() {
        let s = Strides::packed(AttnLayout::Bshd, 4, 10, 64);
        assert_eq!((s.batch, s.head, s.seq), (2560, 64, 256));
        let s = Strides::packed(AttnLayout::Bhsd, 4, 10, 64);
        assert_eq!((s.batch, s.head, s.seq), (2560, 640, 64));
        assert_eq!(s.offset(1, 2, 3), 2560 + 1280 + 192);
    }

    #[test]
    fn validation_names_the_argument() {
        let ok = AttentionProblem::new(1, 8, 17, 64);
        ok.validate().unwrap();
        let e = AttentionProblem { heads_kv: 3, ..ok }
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("kv_heads = 3"), "{e}");
        let e = AttentionProblem { head_dim: 96, ..ok }
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("head_dim = 96"), "{e}");
        let e = AttentionProblem {
            dtype: DType::F32,
            ..ok
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("dtype"), "{e}");
        let e = AttentionProblem { seqlen_kv: 0, ..ok }
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("seqlen_kv"), "{e}");
        let e = AttentionProblem {
            scale: f32::NAN,
            ..ok
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("scale"), "{e}");
        assert!("bhsd".parse::<AttnLayout>().is_ok() && "bsd".parse::<AttnLayout>().is_err());
    }
}
