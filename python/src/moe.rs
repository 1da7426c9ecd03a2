//! The mixture-of-experts ops of the extension: the grouped GEMM and the fused SwiGLU over
//! experts, rows given by offsets (contiguous) or counts (masked); the whole layer (routing,
//! gathered SwiGLU, down projection with its combine), and its routing and combine alone.

use kiln::api::{
    raw, CombineMode, MoeLayerOptions, MoeRouting, MoeRows, RawTensor, RouteOptions, SwigluWeights,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::torch::{self, Arg};
use crate::{handle, renamed, stream_of, tensor, to_py, PyTensor};

/// The output [rows, n] of an MoE op on `x`, allocated in x's dtype when `x` is 2-D and the
/// weights `w` 3-D; otherwise `x` stands in for it (the checks refuse `x` or `w` first).
fn moe_output<'py>(x: &Arg<'py>, w: &Arg<'py>, n: impl Fn(usize) -> usize) -> PyResult<Arg<'py>> {
    match (x.raw.shape.as_slice(), w.raw.shape.as_slice()) {
        ([rows, _], [_, wrows, _]) => {
            let dtype = x.obj.getattr(pyo3::intern!(x.obj.py(), "dtype"))?;
            torch::read("y", &torch::new_empty(&x.obj, &[*rows, n(*wrows)], &dtype)?)
        }
        _ => Ok(Arg {
            obj: x.obj.clone(),
            raw: x.raw.clone(),
        }),
    }
}

/// `kiln.moe.grouped_gemm` past its offsets' conversions: y[rows of e] = x[rows of e] @ w[e]ᵀ
/// on torch's current stream; returns y (rows no expert owns are left unwritten).
#[pyfunction]
pub fn grouped_gemm<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    w: &Bound<'py, PyAny>,
    offsets: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let ([x, w, offsets], device) =
        torch::read_all([("x", Some(x)), ("w", Some(w)), ("offsets", Some(offsets))])?;
    let (x, w, offsets) = (x.expect("read"), w.expect("read"), offsets.expect("read"));
    let y = moe_output(&x, &w, |wrows| wrows)?;
    let rows = MoeRows::Offsets {
        offsets: offsets.raw,
        host: None,
    };
    raw::check_grouped_gemm(device, &x.raw, &w.raw, &rows, &y.raw).map_err(to_py)?;
    let k = handle(device)?;
    let stream = torch::current_stream(py, device)?;
    // SAFETY: as in `gemm`.
    py.allow_threads(|| unsafe {
        raw::grouped_gemm(&k, stream_of(stream), &x.raw, &w.raw, &rows, &y.raw)
    })
    .map_err(to_py)?;
    Ok(y.obj)
}

/// W13 [E, 2N, K] (transformers' `gate_up_proj`: rows 0..N gate, N..2N up) as the views W1
/// and W3 [E, N, K] in its memory; `None` when it is not such a tensor (the checks then refuse
/// it as W1).
fn concat_halves(w13: &RawTensor) -> Option<(RawTensor, RawTensor)> {
    let ([e, two_n, k], [se, sn, sk]) = (w13.shape.as_slice(), w13.strides.as_slice()) else {
        return None;
    };
    if two_n % 2 != 0 {
        return None;
    }
    let n = two_n / 2;
    let half = RawTensor {
        shape: vec![*e, n, *k],
        strides: vec![*se, *sn, *sk],
        ..w13.clone()
    };
    let up = RawTensor {
        ptr: w13.ptr + (n as isize * sn * w13.dtype.size() as isize) as u64,
        ..half.clone()
    };
    Some((half, up))
}

/// `kiln.moe.swiglu` past its offsets' conversions: h = silu(x W1ᵀ) * (x W3ᵀ) [* routing] per
/// expert, W1 and W3 separate (`w3`), interleaved in `w1`, or with `concat` the two halves of
/// `w1` (transformers' gate_up_proj, read in place); returns h.
#[pyfunction]
#[pyo3(signature = (x, w1, w3, offsets, routing=None, concat=false))]
pub fn swiglu<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    w1: &Bound<'py, PyAny>,
    w3: Option<&Bound<'py, PyAny>>,
    offsets: &Bound<'py, PyAny>,
    routing: Option<&Bound<'py, PyAny>>,
    concat: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let w1_name = if w3.is_some() { "w1" } else { "w13" };
    let ([x, w1, w3, offsets, routing], device) = torch::read_all([
        ("x", Some(x)),
        (w1_name, Some(w1)),
        ("w3", w3),
        ("offsets", Some(offsets)),
        ("routing_weights", routing),
    ])?;
    let (x, w1, offsets) = (x.expect("read"), w1.expect("read"), offsets.expect("read"));
    let halved = w3.is_none();
    let h = moe_output(&x, &w1, |wrows| if halved { wrows / 2 } else { wrows })?;
    let w = match (w3, concat.then(|| concat_halves(&w1.raw)).flatten()) {
        (Some(w3), _) => SwigluWeights::Separate {
            w1: w1.raw,
            w3: w3.raw,
        },
        (None, Some((gate, up))) => SwigluWeights::Separate { w1: gate, w3: up },
        (None, None) => SwigluWeights::Interleaved(w1.raw),
    };
    let rows = MoeRows::Offsets {
        offsets: offsets.raw,
        host: None,
    };
    let routing = routing.map(|r| r.raw);
    let named = |e| to_py(renamed(e, "routing", "routing_weights"));
    raw::check_swiglu(device, &x.raw, &w, &rows, routing.as_ref(), &h.raw).map_err(named)?;
    let k = handle(device)?;
    let stream = torch::current_stream(py, device)?;
    // SAFETY: as in `gemm`.
    py.allow_threads(|| unsafe {
        raw::swiglu(
            &k,
            stream_of(stream),
            &x.raw,
            &w,
            &rows,
            routing.as_ref(),
            &h.raw,
        )
    })
    .map_err(named)?;
    Ok(h.obj)
}

/// A layer's routing as Python passes it: (router_logits, bias, top_k_index, top_k_weights,
/// top_k, scoring, renormalize, (n_group, topk_group) or None, routed_scaling); either the
/// logits or the index and weights are given.
pub(crate) type PyRouting = (
    Option<PyTensor>,
    Option<PyTensor>,
    Option<PyTensor>,
    Option<PyTensor>,
    usize,
    String,
    bool,
    Option<(usize, usize)>,
    f32,
);

pub(crate) fn routing(device: usize, r: PyRouting) -> PyResult<MoeRouting<RawTensor>> {
    let (logits, bias, index, weights, top_k, scoring, renormalize, groups, routed_scaling) = r;
    match (logits, index, weights) {
        (Some(l), None, None) => Ok(MoeRouting::Logits {
            logits: tensor("router_logits", l, device)?,
            bias: bias.map(|b| tensor("bias", b, device)).transpose()?,
            opts: RouteOptions {
                top_k,
                scoring: scoring.parse().map_err(to_py)?,
                renormalize,
                groups,
                routed_scaling,
            },
        }),
        (None, Some(i), Some(w)) => Ok(MoeRouting::TopK {
            index: tensor("top_k_index", i, device)?,
            weights: tensor("top_k_weights", w, device)?,
        }),
        _ => Err(PyValueError::new_err(
            "give the router logits, or top_k_index with top_k_weights",
        )),
    }
}

fn combine_mode(s: &str) -> PyResult<MoeLayerOptions> {
    Ok(MoeLayerOptions {
        combine: s.parse::<CombineMode>().map_err(to_py)?,
    })
}

/// `kiln.moe.experts` and `kiln.moe.layer` whole, as `kiln.gemm` is: the tensors read in one
/// pass, the routing from the logits (with its options) or transformers' top-k, the output
/// [T, H] allocated through torch, the library's checks, the pipeline enqueued on torch's
/// current stream with the handle's workspace (grown once per size, kept while graphs may
/// use it). Returns the output.
#[pyfunction]
#[pyo3(signature = (x, w13, w2, router_logits, bias, top_k_index, top_k_weights, top_k, scoring, renormalize, n_group, topk_group, routed_scaling, combine))]
#[allow(clippy::too_many_arguments)]
pub fn moe_layer<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    w13: &Bound<'py, PyAny>,
    w2: &Bound<'py, PyAny>,
    router_logits: Option<&Bound<'py, PyAny>>,
    bias: Option<&Bound<'py, PyAny>>,
    top_k_index: Option<&Bound<'py, PyAny>>,
    top_k_weights: Option<&Bound<'py, PyAny>>,
    top_k: usize,
    scoring: &str,
    renormalize: bool,
    n_group: usize,
    topk_group: usize,
    routed_scaling: f32,
    combine: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let ([x, w13, w2, logits, bias, index, weights], device) = torch::read_all([
        ("hidden_states", Some(x)),
        ("gate_up_proj", Some(w13)),
        ("down_proj", Some(w2)),
        ("router_logits", router_logits),
        ("bias", bias),
        ("top_k_index", top_k_index),
        ("top_k_weights", top_k_weights),
    ])?;
    let (x, w13, w2) = (x.expect("read"), w13.expect("read"), w2.expect("read"));
    let r = match (logits, index, weights) {
        (Some(l), None, None) => MoeRouting::Logits {
            logits: l.raw,
            bias: bias.map(|b| b.raw),
            opts: RouteOptions {
                top_k,
                scoring: scoring.parse().map_err(to_py)?,
                renormalize,
                groups: (n_group > 0).then_some((n_group, topk_group)),
                routed_scaling,
            },
        },
        (None, Some(i), Some(w)) => MoeRouting::TopK {
            index: i.raw,
            weights: w.raw,
        },
        _ => {
            return Err(PyValueError::new_err(
                "give the router logits, or top_k_index with top_k_weights",
            ))
        }
    };
    let opts = combine_mode(combine)?;
    let dtype = x.obj.getattr(pyo3::intern!(py, "dtype"))?;
    let out = match x.raw.shape.as_slice() {
        [t, h] => torch::read("out", &torch::new_empty(&x.obj, &[*t, *h], &dtype)?)?,
        // (the checks refuse x before out is looked at)
        _ => Arg {
            obj: x.obj.clone(),
            raw: x.raw.clone(),
        },
    };
    let tensors = (&x.raw, &w13.raw, &w2.raw);
    raw::check_moe_layer(device, tensors, &r, &out.raw, &opts).map_err(to_py)?;
    let k = handle(device)?;
    let stream = torch::current_stream(py, device)?;
    // SAFETY: as in `gemm`; the handle's workspace is used in stream order (torch's current
    // stream) by every call on it.
    py.allow_threads(|| unsafe {
        raw::moe_layer(&k, stream_of(stream), tensors, &r, &out.raw, None, &opts)
    })
    .map_err(to_py)?;
    Ok(out.obj)
}

/// Where the routing of these arguments writes its tables, as {name: (byte offset, entries)}
/// for counts, offsets, row_token, row_weight, pair_row, topk_ids and topk_weights, and
/// "bytes": the workspace's size; None for no tokens.
#[pyfunction]
pub fn moe_route_layout(
    py: Python<'_>,
    device: usize,
    experts: usize,
    route: PyRouting,
) -> PyResult<Option<Py<PyDict>>> {
    let r = routing(device, route)?;
    let Some(l) = raw::moe_route_layout(device, &r, experts).map_err(to_py)? else {
        return Ok(None);
    };
    let pairs = match &r {
        MoeRouting::Logits { logits, opts, .. } => logits.shape[0] * opts.top_k,
        MoeRouting::TopK { index, .. } => index.shape.iter().product(),
    };
    let d = PyDict::new(py);
    for (name, off, n) in [
        ("counts", l.counts, experts),
        ("offsets", l.offsets, experts + 1),
        ("row_token", l.row_token, pairs),
        ("row_weight", l.row_weight, pairs),
        ("pair_row", l.pair_row, pairs),
        ("topk_ids", l.topk_ids, pairs),
        ("topk_weights", l.topk_weights, pairs),
    ] {
        d.set_item(name, (off, n))?;
    }
    d.set_item("bytes", l.bytes)?;
    Ok(Some(d.into()))
}

/// The routing alone into `workspace` (laid out as `moe_route_layout` says).
#[pyfunction]
pub fn moe_route(
    py: Python<'_>,
    device: usize,
    stream: usize,
    experts: usize,
    workspace: PyTensor,
    route: PyRouting,
) -> PyResult<()> {
    let r = routing(device, route)?;
    let ws = tensor("workspace", workspace, device)?;
    let k = handle(device)?;
    // SAFETY: as in `gemm`; the workspace is a torch allocation of the layout's size.
    py.allow_threads(|| unsafe { raw::moe_route(&k, stream_of(stream), &r, experts, &ws) })
        .map(drop)
        .map_err(to_py)
}

/// out[t] = sum over j of w[r] rows[r], r = pair_row[t k + j] (the routing's combine).
#[pyfunction]
#[pyo3(signature = (device, stream, rows, pair_row, row_weight, out))]
pub fn moe_combine(
    py: Python<'_>,
    device: usize,
    stream: usize,
    rows: PyTensor,
    pair_row: PyTensor,
    row_weight: Option<PyTensor>,
    out: PyTensor,
) -> PyResult<()> {
    let (rows, pair_row, out) = (
        tensor("rows", rows, device)?,
        tensor("pair_row", pair_row, device)?,
        tensor("out", out, device)?,
    );
    let w = row_weight
        .map(|w| tensor("row_weight", w, device))
        .transpose()?;
    let k = handle(device)?;
    // SAFETY: as in `gemm`.
    py.allow_threads(|| unsafe {
        raw::moe_combine(&k, stream_of(stream), &rows, &pair_row, w.as_ref(), &out)
    })
    .map_err(to_py)
}
