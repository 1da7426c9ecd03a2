//! Torch tensors as kiln reads them: each object's data_ptr(), dtype, shape, stride() and device
//! read in one pass here, the current stream, and outputs allocated through torch. The ops'
//! checks and launches then run in Rust, so that a warm call costs about what a torch op costs.

use kiln::api::{DType, RawTensor};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyTuple};

/// kiln's dtype for torch's dtype name (`str(t.dtype)`), or `None` for one kiln has no view of.
fn dtype_of(torch_name: &str) -> Option<DType> {
    Some(match torch_name {
        "torch.bfloat16" => DType::Bf16,
        "torch.float16" => DType::F16,
        "torch.float32" => DType::F32,
        "torch.int32" => DType::I32,
        "torch.float8_e4m3fn" => DType::E4m3,
        _ => return None,
    })
}

/// kiln's dtype of a torch dtype object (`out_dtype=` arguments), named `arg` in errors.
pub fn dtype_arg(arg: &str, d: &Bound<'_, PyAny>) -> PyResult<DType> {
    let name = d.str()?;
    let name = name.to_str()?;
    dtype_of(name).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "`{arg}` is {}; kiln's views are bf16, f16, f32, i32 or e4m3",
            name.trim_start_matches("torch.")
        ))
    })
}

/// One tensor argument: the object and kiln's description of it.
pub struct Arg<'py> {
    pub obj: Bound<'py, PyAny>,
    pub raw: RawTensor,
}

/// The CUDA device index of `t`, or an error naming it. A torch tensor answers `is_cuda` and
/// `get_device()` (a tenth of the cost of its `device` object); anything else is read through
/// `device.type` and `device.index`.
fn cuda_index(name: &str, t: &Bound<'_, PyAny>) -> PyResult<usize> {
    let py = t.py();
    if let Ok(is_cuda) = t.getattr(intern!(py, "is_cuda")) {
        if is_cuda.is_truthy()? {
            let i: i64 = t.call_method0(intern!(py, "get_device"))?.extract()?;
            return Ok(i.max(0) as usize);
        }
    }
    let device = t.getattr(intern!(py, "device"))?;
    let kind = device.getattr(intern!(py, "type"))?;
    if kind.extract::<&str>()? != "cuda" {
        return Err(PyValueError::new_err(format!(
            "`{name}` is on the {} device; kiln's ops run on CUDA tensors (move it with `.cuda()`)",
            device.str()?
        )));
    }
    let index: Option<usize> = device.getattr(intern!(py, "index"))?.extract()?;
    Ok(index.unwrap_or(0))
}

/// torch's dtype objects of kiln's views, when torch is importable (they are singletons: a
/// tensor's dtype is found by identity, without formatting its name).
fn known_dtypes(py: Python<'_>) -> &[(Py<PyAny>, DType)] {
    static DTYPES: GILOnceCell<Vec<(Py<PyAny>, DType)>> = GILOnceCell::new();
    DTYPES.get_or_init(py, || {
        let Ok(torch) = py.import("torch") else {
            return Vec::new();
        };
        [
            ("bfloat16", DType::Bf16),
            ("float16", DType::F16),
            ("float32", DType::F32),
            ("int32", DType::I32),
            ("float8_e4m3fn", DType::E4m3),
            ("int64", DType::I64),
        ]
        .into_iter()
        .filter_map(|(n, d)| torch.getattr(n).ok().map(|o| (o.unbind(), d)))
        .collect()
    })
}

/// The arguments read as int64 (expert indices as torch.topk gives them); elsewhere int64 is
/// refused here, with the hint to make it i32.
const INT64_ARGS: [&str; 1] = ["top_k_index"];

/// kiln's dtype of `t`, or an error naming it.
fn dtype_arg_of(name: &str, t: &Bound<'_, PyAny>) -> PyResult<DType> {
    let py = t.py();
    let dt = t.getattr(intern!(py, "dtype"))?;
    if let Some((_, d)) = known_dtypes(py).iter().find(|(o, _)| o.bind(py).is(&dt)) {
        if *d != DType::I64 || INT64_ARGS.contains(&name) {
            return Ok(*d);
        }
    }
    if INT64_ARGS.contains(&name) && dt.str()?.to_str()? == "torch.int64" {
        return Ok(DType::I64);
    }
    let dt_name = dt.str()?;
    dtype_of(dt_name.to_str()?).ok_or_else(|| {
        let shown = dt_name.to_str().unwrap_or("?").trim_start_matches("torch.");
        // (torch's default integer type: index tables, lengths and offsets are i32 in kiln)
        let hint = if shown == "int64" {
            " (`.int()` makes an int64 index tensor i32)"
        } else {
            ""
        };
        PyTypeError::new_err(format!(
            "`{name}` is {shown}; kiln's views are bf16, f16, f32, i32 or e4m3{hint}"
        ))
    })
}

/// torch's dtype object for kiln's `d` (torch must be importable).
pub fn torch_dtype(py: Python<'_>, d: DType) -> PyResult<Bound<'_, PyAny>> {
    known_dtypes(py)
        .iter()
        .find(|(_, k)| *k == d)
        .map(|(o, _)| o.bind(py).clone())
        .ok_or_else(|| PyTypeError::new_err(format!("torch has no {d} dtype here")))
}

/// Reads `t` (a torch tensor, or anything with its attributes), which must be on a CUDA device.
pub fn read<'py>(name: &'static str, t: &Bound<'py, PyAny>) -> PyResult<Arg<'py>> {
    let py = t.py();
    let device = cuda_index(name, t)?;
    let dtype = dtype_arg_of(name, t)?;
    let raw = RawTensor {
        ptr: t.call_method0(intern!(py, "data_ptr"))?.extract()?,
        dtype,
        shape: t.getattr(intern!(py, "shape"))?.extract()?,
        strides: t.call_method0(intern!(py, "stride"))?.extract()?,
        device,
    };
    Ok(Arg {
        obj: t.clone(),
        raw,
    })
}

/// Reads the tensors of one call (`None` entries are left out) and returns the CUDA device they
/// share, or an error naming the first that is elsewhere.
pub fn read_all<'py, const N: usize>(
    tensors: [(&'static str, Option<&Bound<'py, PyAny>>); N],
) -> PyResult<([Option<Arg<'py>>; N], usize)> {
    let mut first: Option<(&str, usize)> = None;
    let mut out: [Option<Arg<'py>>; N] = std::array::from_fn(|_| None);
    for (slot, (name, t)) in out.iter_mut().zip(tensors) {
        let Some(t) = t else { continue };
        let a = read(name, t)?;
        match first {
            None => first = Some((name, a.raw.device)),
            Some((f, d)) if d != a.raw.device => {
                return Err(PyValueError::new_err(format!(
                    "`{name}` is on cuda:{} but `{f}` is on cuda:{d}; put every tensor of one call on the same GPU",
                    a.raw.device
                )))
            }
            Some(_) => {}
        }
        *slot = Some(a);
    }
    Ok((out, first.map_or(0, |(_, d)| d)))
}

/// torch's functions the ops call, looked up once.
struct Torch {
    raw_stream: Py<PyAny>,
}

fn torch(py: Python<'_>) -> PyResult<&Torch> {
    static TORCH: GILOnceCell<Torch> = GILOnceCell::new();
    TORCH.get_or_try_init(py, || {
        let c = py.import("torch._C")?;
        Ok(Torch {
            raw_stream: c.getattr("_cuda_getCurrentRawStream")?.unbind(),
        })
    })
}

/// The raw handle of torch's current stream on `device`: kiln launches there.
pub fn current_stream(py: Python<'_>, device: usize) -> PyResult<usize> {
    torch(py)?.raw_stream.bind(py).call1((device,))?.extract()
}

/// A new tensor of `shape` and torch dtype `dtype` on `like`'s device (`like.new_empty`).
pub fn new_empty<'py>(
    like: &Bound<'py, PyAny>,
    shape: &[usize],
    dtype: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = like.py();
    let kwargs = PyDict::new(py);
    kwargs.set_item(intern!(py, "dtype"), dtype)?;
    like.call_method(
        intern!(py, "new_empty"),
        (PyTuple::new(py, shape)?,),
        Some(&kwargs),
    )
}

/// A shape as Python prints a tuple: `(3, 4)`, `(3,)`.
pub fn shape_text(shape: &[usize]) -> String {
    match shape {
        [d] => format!("({d},)"),
        _ => {
            let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            format!("({})", parts.join(", "))
        }
    }
}

/// A bool argument, or a TypeError naming it (`1` is not `True`).
pub fn bool_arg(name: &str, v: &Bound<'_, PyAny>) -> PyResult<bool> {
    match v.downcast::<pyo3::types::PyBool>() {
        Ok(b) => Ok(b.is_true()),
        Err(_) => Err(PyTypeError::new_err(format!(
            "`{name}` is {}; expected True or False",
            v.get_type().name()?
        ))),
    }
}

/// `t.contiguous()`, read again as `name`: a packed copy (or `t` itself when packed).
pub fn contiguous<'py>(name: &'static str, t: &Arg<'py>) -> PyResult<Arg<'py>> {
    let py = t.obj.py();
    read(name, &t.obj.call_method0(intern!(py, "contiguous"))?)
}
