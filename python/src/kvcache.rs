//! Decode over a KV cache on torch tensors (`flash_attn_kvcache`: paged with a block table, or a
//! dense cache per sequence as transformers keeps it; with the append of new tokens and each
//! sequence's first key), the append alone (the custom op's), and the report of bad input the
//! GPU found.

use kiln::api::{raw, DType, PagedOptions};
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;

use crate::attention::{flag, handle_or_check, in_place, output, returned, scale_of};
use crate::torch::{self, Arg};
use crate::{handle, stream_of, to_py};

/// An int `cache_seqlens`: checked against the tokens a sequence's cache holds (`room`, when
/// the cache's shape is known), then made a tensor of that length for every sequence of `q`'s
/// batch on `q`'s device.
fn lengths_of_int<'py>(q: &Arg<'py>, n: i64, room: Option<usize>) -> PyResult<Arg<'py>> {
    if n < 0 || room.is_some_and(|r| n as usize > r) {
        return Err(PyValueError::new_err(format!(
            "`cache_seqlens` is {n}; it must be 0 to the tokens the cache holds{}",
            room.map_or(String::new(), |r| format!(" ({r})"))
        )));
    }
    let py = q.obj.py();
    let batch = q.raw.shape.first().copied().unwrap_or(0);
    let kwargs = pyo3::types::PyDict::new(py);
    kwargs.set_item(intern!(py, "dtype"), torch::torch_dtype(py, DType::I32)?)?;
    let full = q
        .obj
        .call_method(intern!(py, "new_full"), ((batch,), n), Some(&kwargs))?;
    torch::read("cache_seqlens", &full)
}

/// The tokens one sequence's cache holds: a dense cache's rows, or pages x page size.
fn room(k_cache: &Arg, table: Option<&Arg>) -> Option<usize> {
    let rows = *k_cache.raw.shape.get(1)?;
    match table {
        Some(t) => Some(rows * t.raw.shape.get(1)?),
        None => Some(rows),
    }
}

/// `kiln.flash_attn_with_kvcache` whole: q [B, Sq, Hq, D] (read where it lies), the caches
/// (pages [num_pages, page_size, Hkv, D] with `block_table`, else [B, S, Hkv, D] per sequence,
/// any strides the kernels address), `cache_seqlens` (tensor or int), `cache_leftpad` (each
/// sequence's first key); with `k` and `v` the new tokens are appended first (at the lengths,
/// which then count them). out packed like q (allocated), the LSE [B, Hq, Sq] f32 with
/// `return_softmax_lse`; returns out or (out, lse).
#[pyfunction]
#[pyo3(signature = (q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, softmax_scale=None, causal=None, return_softmax_lse=false, check_tables=None, cache_leftpad=None))]
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_kvcache<'py>(
    py: Python<'py>,
    q: &Bound<'py, PyAny>,
    k_cache: &Bound<'py, PyAny>,
    v_cache: &Bound<'py, PyAny>,
    k: Option<&Bound<'py, PyAny>>,
    v: Option<&Bound<'py, PyAny>>,
    cache_seqlens: Option<&Bound<'py, PyAny>>,
    block_table: Option<&Bound<'py, PyAny>>,
    softmax_scale: Option<f64>,
    causal: Option<&Bound<'py, PyAny>>,
    return_softmax_lse: bool,
    check_tables: Option<&Bound<'py, PyAny>>,
    cache_leftpad: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let causal = flag("causal", causal)?;
    let check_tables = flag("check_tables", check_tables)?;
    if k.is_some() != v.is_some() {
        return Err(PyValueError::new_err(
            "give both `k` and `v` (the new tokens to append) or neither",
        ));
    }
    if k.is_some() && cache_seqlens.is_none() {
        return Err(PyValueError::new_err(
            "appending `k` and `v` needs `cache_seqlens` (where each sequence's new tokens go)",
        ));
    }
    let given_int: Option<i64> = match cache_seqlens {
        Some(c) if !c.hasattr(intern!(py, "data_ptr"))? => Some(c.extract().map_err(|_| {
            PyValueError::new_err(
                "`cache_seqlens` must be an int32 tensor [batch] (or an int) of the cached tokens per sequence",
            )
        })?),
        _ => None,
    };
    let lens_tensor = cache_seqlens.filter(|_| given_int.is_none());
    let ([q, kc, vc, k, v, table, lens, starts], device) = torch::read_all([
        ("q", Some(q)),
        ("k_cache", Some(k_cache)),
        ("v_cache", Some(v_cache)),
        ("k", k),
        ("v", v),
        ("block_table", block_table),
        ("cache_seqlens", lens_tensor),
        ("cache_leftpad", cache_leftpad),
    ])?;
    let q = in_place("q", q.expect("read"))?;
    let (kc, vc) = (kc.expect("read"), vc.expect("read"));
    let lens = match given_int {
        Some(n) => Some(lengths_of_int(&q, n, room(&kc, table.as_ref()))?),
        None => lens,
    };
    let shape = q.raw.shape.clone();
    let opts = PagedOptions {
        causal,
        softmax_scale: Some(scale_of(softmax_scale, shape.last().copied().unwrap_or(0))),
        check_tables,
    };
    // The append first: the new tokens go at each length, which then counts them.
    let lens = match (k, v, lens) {
        (Some(k), Some(v), Some(lens)) => {
            let (kr, vr, kcr, vcr) = (&k.raw, &v.raw, &kc.raw, &vc.raw);
            let tr = table.as_ref().map(|t| &t.raw);
            raw::check_kv_append(device, kr, vr, kcr, vcr, tr, &lens.raw).map_err(to_py)?;
            let n_new = k.raw.shape.get(1).copied().unwrap_or(0);
            let (k, v) = (torch::contiguous("k", &k)?, torch::contiguous("v", &v)?);
            let after = torch::read(
                "cache_seqlens",
                &lens.obj.call_method1(intern!(py, "__add__"), (n_new,))?,
            )?;
            append(
                py,
                device,
                (&k, &v),
                (&kc, &vc),
                table.as_ref(),
                &after,
                check_tables,
            )?;
            Some(after)
        }
        (_, _, lens) => lens,
    };
    let o = output("out", &q, &shape, None)?;
    let lse = match &shape[..] {
        &[b, s, h, _] if return_softmax_lse => {
            Some(output("lse", &q, &[b, h, s], Some(DType::F32))?)
        }
        _ => None,
    };
    let raw_of = |a: &Option<Arg>| a.as_ref().map(|a| a.raw.clone());
    let (table, lens, starts) = (raw_of(&table), raw_of(&lens), raw_of(&starts));
    let tables = (table.as_ref(), lens.as_ref(), starts.as_ref());
    let (qr, kr, vr, or) = (&q.raw, &kc.raw, &vc.raw, &o.raw);
    let lr = lse.as_ref().map(|l| &l.raw);
    let check = || raw::check_attention_paged(device, qr, kr, vr, tables, or, lr, &opts);
    let h = handle_or_check(device, check)?;
    let stream = torch::current_stream(py, device)?;
    // SAFETY: the tensors are live torch tensors of `device`, which the caller keeps alive until
    // torch's current stream there has run the launch; `out` and `lse` are new. Every table
    // entry is checked on the GPU before it addresses the cache.
    py.allow_threads(|| unsafe {
        raw::attention_paged(&h, stream_of(stream), qr, kr, vr, tables, or, lr, &opts)
    })
    .map_err(to_py)?;
    returned(o, lse)
}

/// The append of `k`, `v` [B, n_new, Hkv, D] (packed) into the caches at `lens` - n_new.
fn append(
    py: Python<'_>,
    device: usize,
    (k, v): (&Arg, &Arg),
    (kc, vc): (&Arg, &Arg),
    table: Option<&Arg>,
    lens: &Arg,
    check_tables: bool,
) -> PyResult<()> {
    let (kr, vr, kcr, vcr, lr) = (&k.raw, &v.raw, &kc.raw, &vc.raw, &lens.raw);
    let tr = table.map(|t| &t.raw);
    let check = || raw::check_kv_append(device, kr, vr, kcr, vcr, tr, lr);
    let h = handle_or_check(device, check)?;
    let stream = torch::current_stream(py, device)?;
    // SAFETY: as in `flash_attn_kvcache` (the caches are the outputs).
    py.allow_threads(|| unsafe {
        raw::kv_append(
            &h,
            stream_of(stream),
            kr,
            vr,
            kcr,
            vcr,
            tr,
            lr,
            check_tables,
        )
    })
    .map_err(to_py)
}

/// New K/V tokens written into their pages, or a dense cache's positions without a block table
/// (`flash_attn_with_kvcache`'s `k` and `v`; the `kiln::kv_append` custom op's body):
/// `cache_seqlens` count the new tokens.
#[pyfunction]
#[pyo3(signature = (k, v, k_cache, v_cache, block_table, cache_seqlens, check_tables=false))]
#[allow(clippy::too_many_arguments)]
pub fn kv_append<'py>(
    py: Python<'py>,
    k: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
    k_cache: &Bound<'py, PyAny>,
    v_cache: &Bound<'py, PyAny>,
    block_table: Option<&Bound<'py, PyAny>>,
    cache_seqlens: &Bound<'py, PyAny>,
    check_tables: bool,
) -> PyResult<()> {
    let ([k, v, kc, vc, table, lens], device) = torch::read_all([
        ("k", Some(k)),
        ("v", Some(v)),
        ("k_cache", Some(k_cache)),
        ("v_cache", Some(v_cache)),
        ("block_table", block_table),
        ("cache_seqlens", Some(cache_seqlens)),
    ])?;
    let [k, v, kc, vc, lens] = [k, v, kc, vc, lens].map(|a| a.expect("read"));
    append(
        py,
        device,
        (&k, &v),
        (&kc, &vc),
        table.as_ref(),
        &lens,
        check_tables,
    )
}

/// Waits for GPU `device`, then raises for bad input its kernels found since the last report
/// (decode tables, packed offsets; nothing when the handle has not run).
#[pyfunction]
pub fn check_errors(py: Python<'_>, device: usize) -> PyResult<()> {
    let h = handle(device)?;
    py.allow_threads(|| raw::check_errors(&h)).map_err(to_py)
}
