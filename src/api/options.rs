//! The public API's arguments besides tensors: each op's options, how MoE rows are given, the
//! SwiGLU weight layouts, the handle's options, and the problems `Kiln::precompile` takes.

use std::path::PathBuf;

use super::tensor::{RawTensor, TensorRef};
use super::TensorMut;
pub use crate::ops::attention::{AttnLayout, Window};

/// `C = alpha * A @ B + beta * C`.
#[derive(Debug, Clone, PartialEq)]
pub struct GemmOptions {
    pub alpha: f32,
    pub beta: f32,
    /// A registry version to run (`kiln list`), or `None` for the fastest that supports the
    /// problem.
    pub version: Option<String>,
}

impl Default for GemmOptions {
    fn default() -> Self {
        GemmOptions {
            alpha: 1.0,
            beta: 0.0,
            version: None,
        }
    }
}

/// Attention forward with flash-attention's semantics.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionOptions {
    /// Query i sees keys j <= i + (seqlen_k - seqlen_q) (aligned bottom-right).
    pub causal: bool,
    /// `None`: 1 / sqrt(head_dim).
    pub softmax_scale: Option<f32>,
    /// How the views' dimensions are ordered: `Bshd` ([batch, seqlen, heads, head_dim], the
    /// default) or `Bhsd`. The memory itself may be stored either way: the strides say which.
    pub layout: AttnLayout,
    /// A registry version to run, or `None` for the fastest that supports the problem.
    pub version: Option<String>,
    /// flash-attention's `window_size` (left, right; -1 unbounded): query i sees keys
    /// i + sk − sq − left ..= i + sk − sq + right.
    pub window: Window,
}

impl Default for AttentionOptions {
    fn default() -> Self {
        AttentionOptions {
            causal: false,
            softmax_scale: None,
            layout: AttnLayout::Bshd,
            version: None,
            window: Window::UNBOUNDED,
        }
    }
}

/// Attention backward with flash-attention's semantics: the forward's options, and whether dQ
/// is summed in a fixed order (flash-attention's `deterministic`).
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionBackwardOptions {
    /// As the forward ran: query i sees keys j <= i + (seqlen_k - seqlen_q).
    pub causal: bool,
    /// As the forward ran; `None`: 1 / sqrt(head_dim).
    pub softmax_scale: Option<f32>,
    /// How the views' dimensions are ordered, as [`AttentionOptions::layout`].
    pub layout: AttnLayout,
    /// Two runs give the same bits (dQ's key blocks added in order; somewhat slower).
    pub deterministic: bool,
    /// A backward version to run, or `None` for the fastest that supports the problem.
    pub version: Option<String>,
    /// As the forward ran: the sliding window ([`AttentionOptions::window`]).
    pub window: Window,
}

impl Default for AttentionBackwardOptions {
    fn default() -> Self {
        AttentionBackwardOptions {
            causal: false,
            softmax_scale: None,
            layout: AttnLayout::Bshd,
            deterministic: false,
            version: None,
            window: Window::UNBOUNDED,
        }
    }
}

/// Which rows of `x` belong to which expert. The i32 tensor is read on the GPU; `host`, when
/// given, is a copy of its contents that the call checks (offsets that decrease or overrun `x`
/// are refused) and uses to choose tile shapes. Without it the tiles are chosen for an even
/// split of the rows (offsets) or full experts (counts), and the GPU clamps whatever it reads
/// to `x`, so wrong device contents give wrong rows, never out-of-bounds accesses.
#[derive(Debug, Clone, Copy)]
pub enum MoeRows<'a, T = TensorRef<'a>> {
    /// `x` is [rows, K], sorted by expert; expert e owns rows offsets[e] .. offsets[e + 1]
    /// (`offsets`: i32 [E + 1]).
    Offsets { offsets: T, host: Option<&'a [i32]> },
    /// `x` is [E, max_rows, K]; expert e owns its first counts[e] rows (`counts`: i32 [E]).
    Counts { counts: T, host: Option<&'a [i32]> },
}

impl<'a, T> MoeRows<'a, T> {
    pub fn tensor(&self) -> &T {
        match self {
            MoeRows::Offsets { offsets, .. } => offsets,
            MoeRows::Counts { counts, .. } => counts,
        }
    }
    pub fn host(&self) -> Option<&'a [i32]> {
        match self {
            MoeRows::Offsets { host, .. } | MoeRows::Counts { host, .. } => *host,
        }
    }
    pub fn is_counts(&self) -> bool {
        matches!(self, MoeRows::Counts { .. })
    }
    /// The same rows with the tensor mapped (e.g. a view to its description).
    pub fn map<U>(&self, f: impl FnOnce(&T) -> U) -> MoeRows<'a, U> {
        match self {
            MoeRows::Offsets { offsets, host } => MoeRows::Offsets {
                offsets: f(offsets),
                host: *host,
            },
            MoeRows::Counts { counts, host } => MoeRows::Counts {
                counts: f(counts),
                host: *host,
            },
        }
    }
}

/// The gate (W1) and up (W3) projections of the fused SwiGLU.
#[derive(Debug, Clone, Copy)]
pub enum SwigluWeights<T> {
    /// W13 [E, 2N, K] whose rows alternate blocks of 128 rows of W1 and of W3 (N a multiple of
    /// 128).
    Interleaved(T),
    /// W1 and W3, each [E, N, K].
    Separate { w1: T, w3: T },
}

impl<T> SwigluWeights<T> {
    pub fn map<U>(&self, mut f: impl FnMut(&T) -> U) -> SwigluWeights<U> {
        match self {
            SwigluWeights::Interleaved(w) => SwigluWeights::Interleaved(f(w)),
            SwigluWeights::Separate { w1, w3 } => SwigluWeights::Separate {
                w1: f(w1),
                w3: f(w3),
            },
        }
    }
}

/// How a handle is set up.
#[derive(Debug, Clone, Default)]
pub struct KilnOptions {
    /// Where compiled kernels are cached on disk; `None`: `KILN_CACHE_DIR` or the default.
    pub jit_cache_dir: Option<PathBuf>,
    /// A kiln store whose tuned configs the handle's launches use (`kiln tune` writes them);
    /// `None`: none, every version runs its heuristic (see [`crate::api::TunedTable`]).
    pub tuned_store: Option<PathBuf>,
    /// Experiment knobs (the `KILN_*` variables of the CLI), for A/B timing from Rust; the
    /// defaults are kiln's fastest settings.
    pub overrides: crate::overrides::Overrides,
}

/// One call to prepare with [`crate::api::Kiln::precompile`]: the same arguments as the op,
/// as descriptions ([`RawTensor::describe`], or [`Problem::gemm`] and friends from views).
/// Only shapes, strides, dtypes, options and the base alignment matter.
#[derive(Debug, Clone)]
pub enum Problem<'a> {
    Gemm {
        a: RawTensor,
        b: RawTensor,
        c: RawTensor,
        opts: GemmOptions,
    },
    Attention {
        q: RawTensor,
        k: RawTensor,
        v: RawTensor,
        o: RawTensor,
        lse: Option<RawTensor>,
        opts: AttentionOptions,
    },
    /// q, k, v, o, dout, lse, dq, dk, dv in that order (boxed: nine tensors).
    AttentionBackward {
        tensors: Box<[RawTensor; 9]>,
        opts: AttentionBackwardOptions,
    },
    GroupedGemm {
        x: RawTensor,
        w: RawTensor,
        rows: MoeRows<'a, RawTensor>,
        y: RawTensor,
    },
    Swiglu {
        x: RawTensor,
        w: SwigluWeights<RawTensor>,
        rows: MoeRows<'a, RawTensor>,
        routing: Option<RawTensor>,
        h: RawTensor,
    },
}

impl<'a> Problem<'a> {
    /// The problem of `Kiln::gemm(stream, a, b, c, opts)`.
    pub fn gemm(a: &TensorRef, b: &TensorRef, c: &TensorMut, opts: &GemmOptions) -> Self {
        Problem::Gemm {
            a: a.info().to_raw(),
            b: b.info().to_raw(),
            c: c.info().to_raw(),
            opts: opts.clone(),
        }
    }

    /// The problem of `Kiln::attention(stream, q, k, v, o, lse, opts)`.
    pub fn attention(
        q: &TensorRef,
        k: &TensorRef,
        v: &TensorRef,
        o: &TensorMut,
        lse: Option<&TensorMut>,
        opts: &AttentionOptions,
    ) -> Self {
        Problem::Attention {
            q: q.info().to_raw(),
            k: k.info().to_raw(),
            v: v.info().to_raw(),
            o: o.info().to_raw(),
            lse: lse.map(|l| l.info().to_raw()),
            opts: opts.clone(),
        }
    }

    /// The problem of `Kiln::attention_backward(stream, saved, dout, (dq, dk, dv), opts)`.
    pub fn attention_backward(
        saved: crate::api::ForwardSaved,
        dout: &TensorRef,
        (dq, dk, dv): (&TensorMut, &TensorMut, &TensorMut),
        opts: &AttentionBackwardOptions,
    ) -> Self {
        Problem::AttentionBackward {
            tensors: Box::new([
                saved.q.info().to_raw(),
                saved.k.info().to_raw(),
                saved.v.info().to_raw(),
                saved.o.info().to_raw(),
                dout.info().to_raw(),
                saved.lse.info().to_raw(),
                dq.info().to_raw(),
                dk.info().to_raw(),
                dv.info().to_raw(),
            ]),
            opts: opts.clone(),
        }
    }

    /// The problem of `Kiln::grouped_gemm(stream, x, w, rows, y)`.
    pub fn grouped_gemm(x: &TensorRef, w: &TensorRef, rows: &MoeRows<'a>, y: &TensorMut) -> Self {
        Problem::GroupedGemm {
            x: x.info().to_raw(),
            w: w.info().to_raw(),
            rows: rows.map(|t| t.info().to_raw()),
            y: y.info().to_raw(),
        }
    }

    /// The problem of `Kiln::swiglu(stream, x, w, rows, routing, h)`.
    pub fn swiglu(
        x: &TensorRef,
        w: &SwigluWeights<TensorRef>,
        rows: &MoeRows<'a>,
        routing: Option<&TensorRef>,
        h: &TensorMut,
    ) -> Self {
        Problem::Swiglu {
            x: x.info().to_raw(),
            w: w.map(|t| t.info().to_raw()),
            rows: rows.map(|t| t.info().to_raw()),
            routing: routing.map(|r| r.info().to_raw()),
            h: h.info().to_raw(),
        }
    }
}
