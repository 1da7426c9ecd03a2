//! The `kiln._kiln` extension module: kiln's ops on (pointer, dtype, shape, strides) tuples that
//! the Python layer reads off torch tensors, one handle per GPU, launched on the caller's stream.

mod attention;
mod fp4;
mod fp8;
mod kvcache;
mod moe;
mod moe_fp4;
mod pointwise;
mod torch;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use kiln::api::{raw, AttentionOptions, DType, GemmOptions, Kiln, Problem, RawTensor};
use kiln::error::ArgumentKind;
use kiln::Error;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// What Python passes for a tensor: its data pointer, kiln's dtype name, shape and strides.
type PyTensor = (u64, String, Vec<usize>, Vec<isize>);

/// kiln's errors as the Python exceptions a PyTorch user expects: a wrong dtype is a TypeError,
/// any other wrong argument a ValueError, everything else (no GPU, CUDA) a RuntimeError.
fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::Argument {
            kind: ArgumentKind::DType,
            ..
        } => PyTypeError::new_err(msg),
        Error::Argument { .. } | Error::InvalidInput(_) | Error::Unsupported { .. } => {
            PyValueError::new_err(msg)
        }
        _ => PyRuntimeError::new_err(msg),
    }
}

fn dtype(arg: &str, name: &str) -> PyResult<DType> {
    match name {
        "bf16" => Ok(DType::Bf16),
        "f16" => Ok(DType::F16),
        "f32" => Ok(DType::F32),
        "i32" => Ok(DType::I32),
        // (torch.int64 has no short name in the Python layer: expert indices pass as "int64")
        "i64" | "int64" => Ok(DType::I64),
        "e4m3" => Ok(DType::E4m3),
        other => Err(PyTypeError::new_err(format!(
            "`{arg}` is {other}; kiln's views are bf16, f16, f32, i32, i64 or e4m3"
        ))),
    }
}

fn tensor(arg: &str, t: PyTensor, device: usize) -> PyResult<RawTensor> {
    let (ptr, dt, shape, strides) = t;
    Ok(RawTensor {
        ptr,
        dtype: dtype(arg, &dt)?,
        shape,
        strides,
        device,
    })
}

/// The handle of GPU `device`, opened on first use and kept for the process: the Python
/// package's one piece of process state, as torch keeps one cuBLAS handle per device.
fn handle(device: usize) -> PyResult<Arc<Kiln>> {
    static HANDLES: OnceLock<Mutex<HashMap<usize, Arc<Kiln>>>> = OnceLock::new();
    let mut map = HANDLES.get_or_init(Default::default).lock().map_err(|_| {
        PyRuntimeError::new_err("kiln's handle table is poisoned by an earlier panic")
    })?;
    if let Some(k) = map.get(&device) {
        return Ok(k.clone());
    }
    let k = Arc::new(Kiln::open(device).map_err(to_py)?);
    map.insert(device, k.clone());
    Ok(k)
}

fn stream_of(stream: usize) -> cudarc::driver::sys::CUstream {
    stream as cudarc::driver::sys::CUstream
}

/// Whether a GPU kiln can run on is present (driver loaded, at least one device).
#[pyfunction]
fn gpu_available() -> bool {
    kiln::device::init().is_ok()
}

/// `e` with the library's name of an argument replaced by the binding's (the library calls the
/// GEMM's output `c`; `kiln.gemm` calls it `out`).
pub(crate) fn renamed(e: Error, from: &str, to: &str) -> Error {
    match e {
        Error::Argument { arg, kind, message } => Error::Argument {
            arg: if arg == from { to.into() } else { arg },
            kind,
            message: message.replace(&format!("`{from}`"), &format!("`{to}`")),
        },
        e => e,
    }
}

/// `kiln.gemm` whole: `alpha * (a @ b) + beta * c` into `out` (allocated when `None`, in
/// `out_dtype` or a's dtype), checked, launched on torch's current stream; returns `out`.
#[pyfunction]
#[pyo3(signature = (a, b, out=None, out_dtype=None, alpha=1.0, beta=0.0, c=None))]
#[allow(clippy::too_many_arguments)]
fn gemm<'py>(
    py: Python<'py>,
    a: &Bound<'py, PyAny>,
    b: &Bound<'py, PyAny>,
    out: Option<&Bound<'py, PyAny>>,
    out_dtype: Option<&Bound<'py, PyAny>>,
    alpha: f32,
    beta: f32,
    c: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let ([a, b, out, c], device) =
        torch::read_all([("a", Some(a)), ("b", Some(b)), ("out", out), ("c", c)])?;
    let (a, b) = (a.expect("read"), b.expect("read"));
    let [m, n] = raw::gemm_output_shape(&a.raw, &b.raw).map_err(to_py)?;
    if let Some(c) = &c {
        if c.raw.shape != [m, n] {
            return Err(PyValueError::new_err(format!(
                "`c` has shape {}; expected ({m}, {n}) (alpha * a @ b + beta * c)",
                torch::shape_text(&c.raw.shape)
            )));
        }
    }
    let out = match out {
        Some(o) => {
            if let Some(d) = out_dtype {
                let want = torch::dtype_arg("out_dtype", d)?;
                if want != o.raw.dtype {
                    return Err(PyTypeError::new_err(format!(
                        "`out` is {} but `out_dtype` is {want}; give one or make them agree",
                        o.raw.dtype
                    )));
                }
            }
            o
        }
        None => {
            let dt = match out_dtype {
                Some(d) => {
                    let want = torch::dtype_arg("out_dtype", d)?;
                    if !matches!(want, DType::Bf16 | DType::F16 | DType::F32) {
                        return Err(PyTypeError::new_err(format!(
                            "`out_dtype` is {want}; kiln's GEMM writes bf16, f16 or f32"
                        )));
                    }
                    d.clone()
                }
                None => a.obj.getattr(pyo3::intern!(py, "dtype"))?,
            };
            torch::read("out", &torch::new_empty(&a.obj, &[m, n], &dt)?)?
        }
    };
    // With `c` and a non-zero beta, `out` starts as a copy of `c` (unless it is `c`).
    let beta = match &c {
        Some(c) if beta != 0.0 => {
            if c.raw.ptr != out.raw.ptr || c.raw.strides != out.raw.strides {
                out.obj
                    .call_method1(pyo3::intern!(py, "copy_"), (&c.obj,))?;
            }
            beta
        }
        _ => 0.0,
    };
    let opts = GemmOptions {
        alpha,
        beta,
        version: None,
    };
    let to_py_out = |e| to_py(renamed(e, "c", "out"));
    raw::check_gemm(device, &a.raw, &b.raw, &out.raw, &opts).map_err(to_py_out)?;
    let k = handle(device)?;
    let stream = torch::current_stream(py, device)?;
    // SAFETY: the tensors are live torch tensors of `device`, which the caller keeps alive until
    // torch's current stream there (`stream`) has run the launch (torch's own contract for the
    // tensors of an op); `out` was checked not to overlap the inputs.
    py.allow_threads(|| unsafe {
        raw::gemm(&k, stream_of(stream), &a.raw, &b.raw, &out.raw, &opts)
    })
    .map_err(to_py_out)?;
    Ok(out.obj)
}

fn get<'py, T: FromPyObject<'py>>(
    d: &Bound<'py, PyDict>,
    key: &str,
    default: Option<T>,
) -> PyResult<T> {
    match d.get_item(key)? {
        Some(v) => v.extract(),
        None => default.ok_or_else(|| {
            PyValueError::new_err(format!("a precompile problem needs the key `{key}`"))
        }),
    }
}

/// One problem dict as the op's argument descriptions: {"op": "gemm", "m", "n", "k", "dtype",
/// "out_dtype", "a_transposed", "b_transposed"} or {"op": "attention", "batch", "seqlen_q",
/// "seqlen_k", "heads", "kv_heads", "head_dim", "dtype", "causal"}.
fn problem(d: &Bound<'_, PyDict>) -> PyResult<Problem<'static>> {
    let op: String = get(d, "op", None)?;
    let dt = dtype("dtype", &get::<String>(d, "dtype", Some("bf16".into()))?)?;
    match op.as_str() {
        "gemm" => {
            let (m, n, k): (usize, usize, usize) =
                (get(d, "m", None)?, get(d, "n", None)?, get(d, "k", None)?);
            let out = dtype(
                "out_dtype",
                &get::<String>(d, "out_dtype", Some(dt.name().into()))?,
            )?;
            let a = if get(d, "a_transposed", Some(false))? {
                [1, m as isize]
            } else {
                [k as isize, 1]
            };
            let b = if get(d, "b_transposed", Some(false))? {
                [1, k as isize]
            } else {
                [n as isize, 1]
            };
            Ok(Problem::Gemm {
                a: RawTensor::describe(dt, &[m, k], &a),
                b: RawTensor::describe(dt, &[k, n], &b),
                c: RawTensor::describe(out, &[m, n], &[n as isize, 1]),
                opts: GemmOptions::default(),
            })
        }
        "attention" => {
            let b: usize = get(d, "batch", Some(1))?;
            let (sq, hq, hd): (usize, usize, usize) = (
                get(d, "seqlen_q", None)?,
                get(d, "heads", None)?,
                get(d, "head_dim", None)?,
            );
            let sk: usize = get(d, "seqlen_k", Some(sq))?;
            let hk: usize = get(d, "kv_heads", Some(hq))?;
            let bshd = |s: usize, h: usize| {
                RawTensor::describe(
                    dt,
                    &[b, s, h, hd],
                    &[(s * h * hd) as isize, (h * hd) as isize, hd as isize, 1],
                )
            };
            Ok(Problem::Attention {
                q: bshd(sq, hq),
                k: bshd(sk, hk),
                v: bshd(sk, hk),
                o: bshd(sq, hq),
                lse: Some(RawTensor::describe(
                    DType::F32,
                    &[b, hq, sq],
                    &[(hq * sq) as isize, sq as isize, 1],
                )),
                opts: AttentionOptions {
                    causal: get(d, "causal", Some(false))?,
                    ..AttentionOptions::default()
                },
            })
        }
        other => Err(PyValueError::new_err(format!(
            "a precompile problem's `op` is {other:?}; use \"gemm\" or \"attention\""
        ))),
    }
}

/// Compiles and loads what `problems` need on GPU `device`; returns the kernels newly loaded.
#[pyfunction]
fn precompile(py: Python<'_>, device: usize, problems: Vec<Bound<'_, PyDict>>) -> PyResult<usize> {
    let problems = problems.iter().map(problem).collect::<PyResult<Vec<_>>>()?;
    let k = handle(device)?;
    py.allow_threads(|| k.precompile(&problems)).map_err(to_py)
}

#[pymodule]
fn _kiln(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(gpu_available, m)?)?;
    m.add_function(wrap_pyfunction!(gemm, m)?)?;
    m.add_function(wrap_pyfunction!(attention::flash_attn, m)?)?;
    m.add_function(wrap_pyfunction!(attention::flash_attn_varlen, m)?)?;
    m.add_function(wrap_pyfunction!(attention::flash_attn_varlen_backward, m)?)?;
    m.add_function(wrap_pyfunction!(kvcache::flash_attn_kvcache, m)?)?;
    m.add_function(wrap_pyfunction!(kvcache::kv_append, m)?)?;
    m.add_function(wrap_pyfunction!(kvcache::check_errors, m)?)?;
    m.add_function(wrap_pyfunction!(attention::attention_backward, m)?)?;
    m.add_function(wrap_pyfunction!(moe::grouped_gemm, m)?)?;
    m.add_function(wrap_pyfunction!(moe::swiglu, m)?)?;
    m.add_function(wrap_pyfunction!(moe::moe_layer, m)?)?;
    m.add_function(wrap_pyfunction!(moe::moe_route, m)?)?;
    m.add_function(wrap_pyfunction!(moe::moe_route_layout, m)?)?;
    m.add_function(wrap_pyfunction!(moe::moe_combine, m)?)?;
    m.add_function(wrap_pyfunction!(fp8::fp8_gemm_nt, m)?)?;
    m.add_function(wrap_pyfunction!(fp8::fp8_grouped_gemm, m)?)?;
    m.add_function(wrap_pyfunction!(fp8::fp8_cast, m)?)?;
    m.add_function(wrap_pyfunction!(precompile, m)?)?;
    m.add_function(wrap_pyfunction!(fp4::fp4_quantize, m)?)?;
    m.add_function(wrap_pyfunction!(fp4::fp4_dequantize, m)?)?;
    m.add_function(wrap_pyfunction!(fp4::nvfp4_gemv, m)?)?;
    m.add_function(wrap_pyfunction!(fp4::nvfp4_gemv_layout, m)?)?;
    m.add_function(wrap_pyfunction!(moe_fp4::fp4_prepack_experts, m)?)?;
    m.add_function(wrap_pyfunction!(moe_fp4::fp4_experts, m)?)?;
    m.add_function(wrap_pyfunction!(moe_fp4::fp4_moe_layer, m)?)?;
    m.add_function(wrap_pyfunction!(fp8::fp8_moe_layer, m)?)?;
    m.add_function(wrap_pyfunction!(pointwise::rms_norm, m)?)?;
    m.add_function(wrap_pyfunction!(pointwise::rope, m)?)?;
    Ok(())
}
