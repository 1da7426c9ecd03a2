//! NVRTC: compile one translation unit to a CUBIN for a named arch, keeping the program log
//! (it carries the ptxas report). Works on machines without a GPU.

use std::ffi::{c_char, c_int, CStr, CString};

use cudarc::nvrtc::sys;

use crate::error::{Error, Result};
use crate::libs;

/// NVRTC's (major, minor) version, loading the library on first use.
pub fn version() -> Result<(i32, i32)> {
    libs::ensure_loaded(&libs::NVRTC)?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: both pointers are valid for writes.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| Error::NvrtcMissing(format!("libnvrtc did not answer its version: {e:?}")))?;
    Ok((major, minor))
}

/// What NVRTC gave back for one program.
pub struct Output {
    pub cubin: Vec<u8>,
    pub log: String,
}

/// Compiles `source` (named `name`), resolving `#include "x"` from `headers` (name, text).
pub fn compile(
    name: &str,
    source: &str,
    headers: &[(&str, &str)],
    options: &[String],
) -> Result<Output> {
    libs::ensure_loaded(&libs::NVRTC)?;
    let cstr = |s: &str| {
        CString::new(s).map_err(|_| Error::invalid(format!("{name}: NUL byte in source")))
    };
    let src = cstr(source)?;
    let cname = cstr(name)?;
    let header_texts: Vec<CString> = headers
        .iter()
        .map(|(_, t)| cstr(t))
        .collect::<Result<_>>()?;
    let header_names: Vec<CString> = headers
        .iter()
        .map(|(n, _)| cstr(n))
        .collect::<Result<_>>()?;
    let text_ptrs: Vec<*const c_char> = header_texts.iter().map(|c| c.as_ptr()).collect();
    let name_ptrs: Vec<*const c_char> = header_names.iter().map(|c| c.as_ptr()).collect();
    let opts: Vec<CString> = options.iter().map(|o| cstr(o)).collect::<Result<_>>()?;
    let opt_ptrs: Vec<*const c_char> = opts.iter().map(|c| c.as_ptr()).collect();

    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer refers to a live NUL-terminated string for the duration of the call;
    // the arrays have the lengths passed.
    unsafe {
        sys::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            cname.as_ptr(),
            headers.len() as c_int,
            text_ptrs.as_ptr(),
            name_ptrs.as_ptr(),
        )
        .result()
        .map_err(|e| Error::Compile {
            kernel: name.into(),
            log: format!("nvrtcCreateProgram: {e:?}"),
        })?;
    }
    // SAFETY: `prog` is a live program; the option pointers outlive the call.
    let status =
        unsafe { sys::nvrtcCompileProgram(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr()) };
    let log = program_log(prog);
    let result = if status.result().is_err() {
        Err(Error::Compile {
            kernel: name.into(),
            log: log.clone(),
        })
    } else {
        cubin(prog).map(|cubin| Output { cubin, log })
    };
    // SAFETY: `prog` was created above and is destroyed once.
    unsafe {
        let _ = sys::nvrtcDestroyProgram(&mut prog);
    }
    result
}

fn program_log(prog: sys::nvrtcProgram) -> String {
    let mut size = 0usize;
    // SAFETY: `prog` is live; the buffer has the size NVRTC asked for.
    unsafe {
        if sys::nvrtcGetProgramLogSize(prog, &mut size)
            .result()
            .is_err()
            || size == 0
        {
            return String::new();
        }
        let mut buf = vec![0 as c_char; size];
        if sys::nvrtcGetProgramLog(prog, buf.as_mut_ptr())
            .result()
            .is_err()
        {
            return String::new();
        }
        CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
    }
}

fn cubin(prog: sys::nvrtcProgram) -> Result<Vec<u8>> {
    let mut size = 0usize;
    // SAFETY: `prog` is live and compiled; the buffer has the size NVRTC reported.
    unsafe {
        sys::nvrtcGetCUBINSize(prog, &mut size)
            .result()
            .map_err(|e| Error::Compile {
                kernel: "cubin".into(),
                log: format!("{e:?}"),
            })?;
        if size == 0 {
            return Err(Error::Compile {
                kernel: "cubin".into(),
                log: "NVRTC produced no CUBIN: the target must be a real arch such as sm_90a, not compute_90a".into(),
            });
        }
        let mut buf = vec![0u8; size];
        sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut c_char)
            .result()
            .map_err(|e| Error::Compile {
                kernel: "cubin".into(),
                log: format!("{e:?}"),
            })?;
        Ok(buf)
    }
}
