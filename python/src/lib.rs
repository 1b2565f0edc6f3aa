//! `tcc._native`: the extension module behind the `tcc` Python package.
//!
//! * `compile(source, name, sizes)` checks a program and JIT-compiles every unit
//!   (programs and models) into one [`JitLibrary`] that stays loaded; it returns a
//!   `NativeLibrary` whose `program(k)` objects are called with keyword arrays.
//! * A call takes each input through the buffer protocol (numpy arrays, memoryviews,
//!   `array.array`, ...) or DLPack (`__dlpack__`, via `numpy.from_dlpack`), checks
//!   element type, exact shape and C-contiguity (or converts with `copy=True`),
//!   allocates the outputs with `numpy.empty`, and runs the generated code on the
//!   raw pointers with the GIL released. Complex arrays (complex128, complex64)
//!   and 16-bit ones (float16; bf16 as uint16 bits, `ml_dtypes.bfloat16` arrays
//!   taken as a uint16 view) go to the JIT library as they are: it splits/joins
//!   and widens/rounds them around the generated code (`jit_lib`'s module docs).
//!   bf16 outputs are allocated as uint16 and viewed as `ml_dtypes.bfloat16`
//!   unless the call's first bf16 input was bits (`Program::bf16_as_bits`).
//! * `optimize_path(inputs, output, sizes)` exposes tcc's contraction-order search
//!   (`tcc::tir::opmin::optimize_path`) for `tcc.contract_path`.
//!
//! Errors are raised as the classes of `tcc/errors.py` (`CompileError`,
//! `ArgumentError`, `TccError`).

use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tcc::codegen::llvm::jit_lib::{jit_library, CallError, JitLibrary};
use tcc::codegen::llvm::Options;
use tcc::sema::hir::{ElemType, Hir, Role, UnitKind};

// ---------------------------------------------------------------------------------
// Exceptions (defined in Python: tcc/errors.py)
// ---------------------------------------------------------------------------------

fn error_class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("tcc.errors")?.getattr(name)
}

fn raise(py: Python<'_>, class: &str, msg: String) -> PyErr {
    match error_class(py, class).and_then(|c| c.call1((msg,))) {
        Ok(e) => PyErr::from_value(e),
        Err(e) => e,
    }
}

fn arg_error(py: Python<'_>, msg: String) -> PyErr {
    raise(py, "ArgumentError", msg)
}

// ---------------------------------------------------------------------------------
// Compilation
// ---------------------------------------------------------------------------------

/// LLVM's global initialization and code generation run one at a time.
static COMPILE_LOCK: Mutex<()> = Mutex::new(());

fn diagnostics_to_py(py: Python<'_>, diags: &[tcc::diag::Diagnostic], src: &str) -> PyResult<Py<PyList>> {
    let list = PyList::empty(py);
    for d in diags {
        let start = tcc::diag::line_col(src, d.primary.span.start);
        let end = tcc::diag::line_col(src, d.primary.span.end);
        let o = PyDict::new(py);
        o.set_item("code", d.code)?;
        o.set_item("severity", if d.is_error() { "error" } else { "warning" })?;
        o.set_item("message", &d.message)?;
        o.set_item("line", start.line)?;
        o.set_item("column", start.column)?;
        o.set_item("end_line", end.line)?;
        o.set_item("end_column", end.column)?;
        o.set_item("label", &d.primary.message)?;
        o.set_item("hint", d.hint.as_deref())?;
        list.append(o)?;
    }
    Ok(list.unbind())
}

/// Applies `sizes=` (range name → size): run-time ranges (`range O;`) take their
/// size here (all of them must get one); a fixed range may be named with its own
/// size. Errors are `TccError`s with the diagnostic's `code` and `hint`.
fn bind_sizes(py: Python<'_>, hir: Hir, sizes: &BTreeMap<String, usize>) -> PyResult<Hir> {
    tcc::sema::sizes::bind_all_sizes(&hir, sizes).map_err(|e| {
        let message = e.message.replace("`--size ", "`sizes: ");
        let hint = match e.code {
            "E0745" => {
                let names: Vec<String> =
                    hir.runtime_ranges().iter().map(|&r| format!("{:?}: ...", hir.ranges[r].name)).collect();
                Some(format!("pass sizes={{{}}} to tcc.compile", names.join(", ")))
            }
            _ => e.hint.clone(),
        };
        let text = match &hint {
            Some(h) => format!("error[{}]: {message} (hint: {h})", e.code),
            None => format!("error[{}]: {message}", e.code),
        };
        let err = raise(py, "TccError", text);
        let v = err.value(py);
        let _ = v.setattr("code", e.code);
        let _ = v.setattr("hint", hint);
        err
    })
}

#[pyfunction]
#[pyo3(signature = (source, name, sizes=None, file_name=None, fuse="auto", mem_limit=None, max_intermediate=None))]
#[allow(clippy::too_many_arguments)]
fn compile(
    py: Python<'_>,
    source: &str,
    name: &str,
    sizes: Option<BTreeMap<String, usize>>,
    file_name: Option<&str>,
    fuse: &str,
    mem_limit: Option<u64>,
    max_intermediate: Option<u64>,
) -> PyResult<NativeLibrary> {
    use tcc::lir::fusion::FuseMode;
    let fuse = match fuse {
        "auto" => FuseMode::Auto,
        "none" => FuseMode::None,
        "max" => FuseMode::Max,
        other => return Err(PyValueError::new_err(format!("fuse must be 'auto', 'none' or 'max', not {other:?}"))),
    };
    let rates = tcc::lir::cost::CpuRates::load(None).map_err(|e| raise(py, "TccError", e))?;
    let (hir, diags) = tcc::compile(source, name);
    let hir = match hir {
        Some(h) => h,
        None => {
            let fname = file_name.unwrap_or("<string>");
            let text = tcc::diag::render(&diags, fname, source, false);
            let list = diagnostics_to_py(py, &diags, source)?;
            let e = error_class(py, "CompileError")?.call1((text, list))?;
            return Err(PyErr::from_value(e));
        }
    };
    let warnings = diagnostics_to_py(py, &diags, source)?;
    let hir = bind_sizes(py, hir, &sizes.unwrap_or_default())?;
    if hir.units.is_empty() {
        return Err(raise(py, "TccError", "the program has no statements: nothing to compile".into()));
    }
    if max_intermediate.is_some_and(|b| b < 8) {
        return Err(PyValueError::new_err("max_intermediate must be at least one element (8 bytes)"));
    }
    let mut opts = Options { fuse, rates, mem_limit, ..Options::default() };
    opts.order.slice_bytes = max_intermediate;
    if mem_limit.is_some() {
        // As `tcc build --mem-limit`: slices when no fusion fits, else an error.
        let mut p = tcc::pipeline::PipelineOptions::with_mem_limit(mem_limit);
        p.fusion.mode = fuse;
        p.fusion.rates = rates;
        p.order = opts.order.clone();
        let units: Vec<_> = hir.units.ids().collect();
        // A complex program is compiled lowered to real pairs: its limit is
        // checked on that program (as `tcc run` and `tcc build` do).
        let lowered = tcc::sema::complex::has_complex(&hir).then(|| tcc::tir::complex::lower(&hir).0);
        let p = tcc::pipeline::fit_mem_limit(lowered.as_ref().unwrap_or(&hir), &units, &p)
            .map_err(|e| raise(py, "TccError", e.to_string()))?;
        opts.order = p.order;
    }
    let lib = py.allow_threads(|| {
        let _g = COMPILE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        jit_library(&hir, &[], &opts)
    });
    let lib = lib.map_err(|e| raise(py, "TccError", format!("code generation failed: {e}")))?;
    Ok(NativeLibrary { lib: Arc::new(lib), warnings })
}

/// A compiled file: every unit, loaded.
#[pyclass(module = "tcc._native", frozen)]
struct NativeLibrary {
    lib: Arc<JitLibrary>,
    #[pyo3(get)]
    warnings: Py<PyList>,
}

#[pymethods]
impl NativeLibrary {
    /// Number of units (programs and models).
    fn __len__(&self) -> usize {
        self.lib.units.len()
    }

    /// Seconds spent generating and JIT-compiling the code.
    #[getter]
    fn compile_seconds(&self) -> f64 {
        self.lib.compile_s
    }

    /// The callable of unit `k`.
    fn program(&self, py: Python<'_>, k: usize) -> PyResult<Program> {
        let lib = &self.lib;
        let u = lib.units.get(k).ok_or_else(|| PyRuntimeError::new_err("no such unit"))?;
        let hir = &lib.hir;
        let np = numpy(py)?;
        let mut args = Vec::new();
        for (j, &t) in u.code.args.iter().enumerate() {
            let tensor = &hir.tensors[t];
            let shape = hir.shape(t);
            // The dtype outputs are allocated with (and inputs converted to): bf16
            // as its bit patterns (see `Program::bf16_as_bits`).
            let dtype = np.getattr(numpy_name(tensor.elem))?;
            args.push(ArgSpec {
                name: tensor.name.clone(),
                elem: tensor.elem,
                shape_py: PyTuple::new(py, &shape)?.unbind(),
                shape,
                dtype: dtype.unbind(),
                output: j >= u.code.n_inputs,
                param: tensor.role == Role::Param,
            });
        }
        // Outputs are returned in declaration order.
        let mut out_order: Vec<usize> = (u.code.n_inputs..u.code.args.len()).collect();
        out_order.sort_by_key(|&j| u.code.args[j]);
        let kind = match lib.hir.units[u.code.unit].kind {
            UnitKind::Program => "program",
            UnitKind::Model(_) => "model",
        };
        Ok(Program {
            lib: lib.clone(),
            k,
            name: u.code.name.clone(),
            kind,
            n_inputs: u.code.n_inputs,
            flops: u.code.flops,
            args,
            out_order,
        })
    }
}

struct ArgSpec {
    name: String,
    elem: ElemType,
    shape: Vec<usize>,
    shape_py: Py<PyTuple>,
    dtype: PyObject,
    output: bool,
    param: bool,
}

impl ArgSpec {
    fn describe(&self) -> String {
        let dims: Vec<String> = self.shape.iter().map(|d| d.to_string()).collect();
        format!("{}[{}]", self.elem.name(), dims.join(", "))
    }
}

/// The numpy dtype name of an element type's arrays (bf16: its bit patterns).
fn numpy_name(e: ElemType) -> &'static str {
    match e {
        ElemType::F64 => "float64",
        ElemType::F32 => "float32",
        ElemType::C128 => "complex128",
        ElemType::C64 => "complex64",
        ElemType::F16 => "float16",
        ElemType::BF16 => "uint16",
    }
}

/// `numpy.dtype(ml_dtypes.bfloat16)`, or `None` when ml_dtypes cannot be imported.
fn bfloat16(py: Python<'_>) -> Option<&Bound<'_, PyAny>> {
    static BF16: GILOnceCell<Option<PyObject>> = GILOnceCell::new();
    BF16.get_or_init(py, || {
        let bf = py.import("ml_dtypes").and_then(|m| m.getattr("bfloat16")).ok()?;
        numpy(py).ok()?.getattr("dtype").and_then(|d| d.call1((bf,))).ok().map(|d| d.unbind())
    })
    .as_ref()
    .map(|d| d.bind(py))
}

/// Whether `obj` is an array of `dtype` (numpy dtype equality).
fn has_dtype(obj: &Bound<'_, PyAny>, dtype: &Bound<'_, PyAny>) -> bool {
    obj.getattr("dtype").and_then(|d| d.eq(dtype)).unwrap_or(false)
}

/// Whether `obj` is an `ml_dtypes.bfloat16` array.
fn is_bfloat16(py: Python<'_>, obj: &Bound<'_, PyAny>) -> bool {
    bfloat16(py).is_some_and(|bf| has_dtype(obj, bf))
}

fn numpy(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static NP: GILOnceCell<Py<PyModule>> = GILOnceCell::new();
    NP.get_or_try_init(py, || Ok::<_, PyErr>(py.import("numpy")?.unbind())).map(|m| m.bind(py))
}

// ---------------------------------------------------------------------------------
// Buffers
// ---------------------------------------------------------------------------------

/// An acquired buffer, released on drop (with the GIL held: drop it before leaving
/// the function that holds the GIL).
struct Buf {
    view: Box<ffi::Py_buffer>,
}

impl Drop for Buf {
    fn drop(&mut self) {
        // SAFETY: the view was filled by a successful PyObject_GetBuffer; the GIL is held.
        unsafe { ffi::PyBuffer_Release(&mut *self.view) };
    }
}

impl Buf {
    /// The object's buffer, or `None` when it has no buffer protocol (or refuses
    /// the request, e.g. a read-only buffer asked for writing).
    fn get(obj: &Bound<'_, PyAny>, writable: bool) -> Option<Buf> {
        let mut view: Box<ffi::Py_buffer> = Box::new(unsafe { std::mem::zeroed() });
        let flags = ffi::PyBUF_STRIDES | ffi::PyBUF_FORMAT | if writable { ffi::PyBUF_WRITABLE } else { 0 };
        // SAFETY: a valid object and a zeroed view; the GIL is held.
        let rc = unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) };
        if rc != 0 {
            // SAFETY: clears the error PyObject_GetBuffer set; the GIL is held.
            unsafe { ffi::PyErr_Clear() };
            return None;
        }
        Some(Buf { view })
    }

    fn ptr(&self) -> *mut u8 {
        self.view.buf as *mut u8
    }

    fn shape(&self) -> Vec<usize> {
        let nd = self.view.ndim.max(0) as usize;
        if nd == 0 || self.view.shape.is_null() {
            if nd == 0 {
                return Vec::new();
            }
            return vec![(self.view.len / self.view.itemsize.max(1)) as usize];
        }
        // SAFETY: `shape` has `ndim` entries.
        (0..nd).map(|k| unsafe { *self.view.shape.add(k) } as usize).collect()
    }

    /// The element type whose interface arrays have this format (`uint16`: bf16
    /// bit patterns), or a description of another format.
    fn elem(&self) -> Result<ElemType, String> {
        let fmt = if self.view.format.is_null() {
            "B".to_string()
        } else {
            // SAFETY: a NUL-terminated format string.
            unsafe { std::ffi::CStr::from_ptr(self.view.format) }.to_string_lossy().into_owned()
        };
        let native = cfg!(target_endian = "little");
        let body = match fmt.as_bytes().first() {
            Some(b'@') | Some(b'=') => &fmt[1..],
            Some(b'<') if native => &fmt[1..],
            Some(b'>') | Some(b'!') if !native => &fmt[1..],
            _ => fmt.as_str(),
        };
        match (body, self.view.itemsize) {
            ("d", 8) => Ok(ElemType::F64),
            ("f", 4) => Ok(ElemType::F32),
            ("Zd", 16) => Ok(ElemType::C128),
            ("Zf", 8) => Ok(ElemType::C64),
            ("e", 2) => Ok(ElemType::F16),
            ("H", 2) => Ok(ElemType::BF16),
            _ => Err(format!("buffer format '{fmt}'")),
        }
    }

    fn c_contiguous(&self) -> bool {
        // SAFETY: a filled view.
        unsafe { ffi::PyBuffer_IsContiguous(&*self.view, b'C' as std::os::raw::c_char) != 0 }
    }
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

fn describe_dtype(obj: &Bound<'_, PyAny>, buf: &Buf, fallback: String) -> String {
    if let Ok(d) = obj.getattr("dtype") {
        if let Ok(s) = d.str() {
            return s.to_string();
        }
    }
    let _ = buf;
    fallback
}

/// Converts `obj` with `numpy.ascontiguousarray(obj, dtype)` (copy=True). Never
/// drops an imaginary part, and never takes numbers for bf16 bit patterns: a bf16
/// tensor takes a uint16 array as it is (bits), other values rounded to bf16
/// through ml_dtypes (refused without it).
fn contiguous_copy<'py>(py: Python<'py>, obj: &Bound<'py, PyAny>, spec: &ArgSpec) -> PyResult<Bound<'py, PyAny>> {
    let np = numpy(py)?;
    let cannot =
        |e: PyErr| arg_error(py, format!("argument `{}`: cannot convert it to {}: {e}", spec.name, spec.describe()));
    let arr = np.getattr("asarray")?.call1((obj,)).map_err(cannot)?;
    if !spec.elem.is_complex() && np.getattr("iscomplexobj")?.call1((&arr,))?.is_truthy()? {
        return Err(arg_error(
            py,
            format!(
                "argument `{}` has complex values ({}) but its tensor is real, {} (no silent real part: pass `.real` \
                 explicitly)",
                spec.name,
                arr.getattr("dtype")?.str()?,
                spec.describe()
            ),
        ));
    }
    let contiguous = np.getattr("ascontiguousarray")?;
    if spec.elem == ElemType::BF16 {
        let uint16 = np.getattr("dtype")?.call1(("uint16",))?;
        if has_dtype(&arr, &uint16) {
            return contiguous.call1((&arr,)).map_err(cannot);
        }
        let Some(bf) = bfloat16(py) else {
            return Err(arg_error(
                py,
                format!(
                    "argument `{}` ({}): converting {} values to bf16 needs ml_dtypes (pip install ml_dtypes); \
                     or pass the bf16 bit patterns as a uint16 array",
                    spec.name,
                    spec.describe(),
                    arr.getattr("dtype")?.str()?
                ),
            ));
        };
        return contiguous.call1((&arr, bf)).and_then(|a| a.call_method1("view", (uint16,))).map_err(cannot);
    }
    contiguous.call1((&arr, spec.dtype.bind(py))).map_err(cannot)
}

/// Validates (or with `copy`, converts) one input; returns the object that owns the
/// memory (kept alive for the call) and its buffer.
fn input_buffer<'py>(
    py: Python<'py>,
    prog: &str,
    obj: &Bound<'py, PyAny>,
    spec: &ArgSpec,
    copy: bool,
) -> PyResult<(Bound<'py, PyAny>, Buf)> {
    let mut cur = obj.clone();
    // ml_dtypes.bfloat16 arrays have no buffer protocol: a bf16 tensor takes their
    // bits (a uint16 view, no copy); another tensor takes them only converted.
    if is_bfloat16(py, &cur) {
        if spec.elem == ElemType::BF16 {
            cur = cur.call_method1("view", (numpy(py)?.getattr("uint16")?,))?;
        } else if copy {
            cur = contiguous_copy(py, &cur, spec)?;
        } else {
            return Err(arg_error(
                py,
                format!(
                    "{prog}: argument `{}` must have dtype {} ({}), got bfloat16 (no silent conversion: pass copy=True to convert)",
                    spec.name,
                    numpy_name(spec.elem),
                    spec.describe()
                ),
            ));
        }
    }
    let mut buf = Buf::get(&cur, false);
    if buf.is_none() {
        if cur.hasattr("__dlpack__")? {
            cur = numpy(py)?.getattr("from_dlpack")?.call1((&cur,)).map_err(|e| {
                arg_error(py, format!("{prog}: argument `{}`: cannot import it through DLPack: {e}", spec.name))
            })?;
            buf = Buf::get(&cur, false);
        } else if copy {
            cur = contiguous_copy(py, &cur, spec)?;
            buf = Buf::get(&cur, false);
        }
    }
    let Some(mut b) = buf else {
        return Err(arg_error(
            py,
            format!(
                "{prog}: argument `{}` must be an array ({}) with the buffer protocol or __dlpack__, got {}{}",
                spec.name,
                spec.describe(),
                type_name(obj),
                if copy { "" } else { " (copy=True converts sequences)" }
            ),
        ));
    };
    match b.elem() {
        Ok(e) if e == spec.elem => {}
        other => {
            if copy {
                cur = contiguous_copy(py, &cur, spec)?;
                b = Buf::get(&cur, false)
                    .ok_or_else(|| arg_error(py, "internal: no buffer after conversion".into()))?;
            } else {
                let got = match other {
                    Ok(e) => numpy_name(e).to_string(),
                    Err(f) => describe_dtype(&cur, &b, f),
                };
                return Err(arg_error(
                    py,
                    format!(
                        "{prog}: argument `{}` must have dtype {} ({}), got {got} (no silent conversion: pass copy=True to convert)",
                        spec.name,
                        match spec.elem {
                            ElemType::BF16 => "ml_dtypes.bfloat16 or uint16 (bf16 bit patterns)",
                            e => numpy_name(e),
                        },
                        spec.describe()
                    ),
                ));
            }
        }
    }
    let shape = b.shape();
    if shape != spec.shape {
        return Err(arg_error(
            py,
            format!(
                "{prog}: argument `{}` must have shape {:?} ({}), got shape {:?}",
                spec.name,
                spec.shape,
                spec.describe(),
                shape
            ),
        ));
    }
    if !b.c_contiguous() {
        if copy {
            cur = contiguous_copy(py, &cur, spec)?;
            b = Buf::get(&cur, false).ok_or_else(|| arg_error(py, "internal: no buffer after conversion".into()))?;
        } else {
            return Err(arg_error(
                py,
                format!(
                    "{prog}: argument `{}` is not C-contiguous (e.g. a transposed or sliced view); pass a contiguous \
                     array (numpy.ascontiguousarray) or copy=True",
                    spec.name
                ),
            ));
        }
    }
    Ok((cur, b))
}

/// Validates one array given in `out=` for output `spec`: writable, exactly its
/// element type (outputs are never converted), shape and C order. A bf16 output
/// takes an `ml_dtypes.bfloat16` array (written through a uint16 view) or a uint16
/// array of bit patterns. Returns the object that owns the memory and its buffer.
fn output_buffer<'py>(
    py: Python<'py>,
    prog: &str,
    obj: &Bound<'py, PyAny>,
    spec: &ArgSpec,
) -> PyResult<(Bound<'py, PyAny>, Buf)> {
    let mut cur = obj.clone();
    if spec.elem == ElemType::BF16 && is_bfloat16(py, &cur) {
        cur = cur.call_method1("view", (numpy(py)?.getattr("uint16")?,))?;
    }
    let Some(b) = Buf::get(&cur, true) else {
        return Err(arg_error(
            py,
            format!(
                "{prog}: out `{}` must be a writable array ({}) with the buffer protocol, got {}{}",
                spec.name,
                spec.describe(),
                type_name(obj),
                if Buf::get(&cur, false).is_some() { " that is read-only" } else { "" }
            ),
        ));
    };
    if b.elem().ok() != Some(spec.elem) {
        let got = match b.elem() {
            Ok(e) => numpy_name(e).to_string(),
            Err(f) => describe_dtype(&cur, &b, f),
        };
        return Err(arg_error(
            py,
            format!(
                "{prog}: out `{}` must have dtype {} ({}), got {got} (outputs are written as they are, never converted)",
                spec.name,
                match spec.elem {
                    ElemType::BF16 => "ml_dtypes.bfloat16 or uint16 (bf16 bit patterns)",
                    e => numpy_name(e),
                },
                spec.describe()
            ),
        ));
    }
    if b.shape() != spec.shape {
        return Err(arg_error(
            py,
            format!(
                "{prog}: out `{}` must have shape {:?} ({}), got shape {:?}",
                spec.name,
                spec.shape,
                spec.describe(),
                b.shape()
            ),
        ));
    }
    if !b.c_contiguous() {
        return Err(arg_error(
            py,
            format!(
                "{prog}: out `{}` is not C-contiguous (e.g. a transposed or sliced view); pass a contiguous array",
                spec.name
            ),
        ));
    }
    Ok((cur, b))
}

/// Refuses `out=` arrays that share memory with an input or with each other (the
/// generated code assumes its arguments do not overlap): `bufs` in argument
/// order, the outputs from `n_inputs` on.
fn check_disjoint(py: Python<'_>, prog: &str, bufs: &[&Buf], args: &[ArgSpec], n_inputs: usize) -> PyResult<()> {
    let range = |b: &Buf| (b.ptr() as usize, b.ptr() as usize + b.view.len.max(0) as usize);
    for o in n_inputs..bufs.len() {
        let (o0, o1) = range(bufs[o]);
        // Every input and every earlier output (inputs come first).
        for (x, other) in bufs[..o].iter().enumerate() {
            let (x0, x1) = range(other);
            if o0 < x1 && x0 < o1 {
                return Err(arg_error(
                    py,
                    format!(
                        "{prog}: out `{}` shares memory with {} `{}`: outputs must not overlap the inputs or each other",
                        args[o].name,
                        if x < n_inputs { "input" } else { "out" },
                        args[x].name
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Raw pointers for the call, sent to the thread that runs without the GIL.
struct Ptrs(Vec<(*mut u8, usize)>);
// SAFETY: the buffers stay acquired (and their owners alive) until the call returns.
unsafe impl Send for Ptrs {}

// ---------------------------------------------------------------------------------
// Programs
// ---------------------------------------------------------------------------------

/// One callable unit of a compiled file.
#[pyclass(module = "tcc._native", frozen)]
struct Program {
    lib: Arc<JitLibrary>,
    k: usize,
    #[pyo3(get)]
    name: String,
    #[pyo3(get)]
    kind: &'static str,
    n_inputs: usize,
    /// Floating-point operations of one call.
    #[pyo3(get)]
    flops: f64,
    args: Vec<ArgSpec>,
    out_order: Vec<usize>,
}

impl Program {
    fn arg_list(&self, py: Python<'_>, outputs: bool) -> PyResult<Py<PyList>> {
        let l = PyList::empty(py);
        for a in self.args.iter().filter(|a| a.output == outputs) {
            let d = PyDict::new(py);
            d.set_item("name", &a.name)?;
            d.set_item("dtype", a.elem.name())?;
            d.set_item("shape", a.shape_py.bind(py))?;
            d.set_item("param", a.param)?;
            l.append(d)?;
        }
        Ok(l.unbind())
    }

    /// Whether this call's bf16 outputs are returned as uint16 bit patterns (the
    /// convention of its first bf16 input, in declaration order, when that is a
    /// uint16 array or buffer), rather than `ml_dtypes.bfloat16` arrays (its first
    /// bf16 input is one, or was converted from other values with `copy=True`, or
    /// there is none). Always bits without ml_dtypes.
    fn bf16_as_bits(&self, py: Python<'_>, given: &[Option<Bound<'_, PyAny>>]) -> PyResult<bool> {
        if bfloat16(py).is_none() {
            return Ok(true);
        }
        let first = given.iter().zip(&self.args).find(|(_, a)| a.elem == ElemType::BF16).and_then(|(g, _)| g.as_ref());
        let Some(obj) = first else { return Ok(false) };
        if is_bfloat16(py, obj) {
            return Ok(false);
        }
        let np = numpy(py)?;
        let uint16 = np.getattr("dtype")?.call1(("uint16",))?;
        Ok(np.getattr("asarray")?.call1((obj,)).is_ok_and(|a| has_dtype(&a, &uint16)))
    }

    /// The arrays of `out=`, in argument order: one array (a program with one
    /// output), a tuple or list in the outputs' declaration order, or a dict by
    /// output name; every output given once.
    fn out_arrays<'py>(&self, py: Python<'py>, out: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let prog = &self.name;
        let outs = &self.args[self.n_inputs..];
        let declared: Vec<&str> = self.out_order.iter().map(|&j| self.args[j].name.as_str()).collect();
        let expected = || {
            format!("{} output{} ({})", declared.len(), if declared.len() == 1 { "" } else { "s" }, declared.join(", "))
        };
        let mut given: Vec<Option<Bound<'py, PyAny>>> = vec![None; outs.len()];
        if let Ok(d) = out.downcast::<PyDict>() {
            for (key, value) in d.iter() {
                let key = key.str()?.to_cow()?.into_owned();
                let Some(x) = outs.iter().position(|a| a.name == key) else {
                    return Err(arg_error(
                        py,
                        format!("{prog}: out has `{key}`, which is not an output; {prog} has {}", expected()),
                    ));
                };
                given[x] = Some(value);
            }
        } else if out.downcast::<PyTuple>().is_ok() || out.downcast::<PyList>().is_ok() {
            let items: Vec<Bound<'py, PyAny>> = out.try_iter()?.collect::<PyResult<_>>()?;
            if items.len() != declared.len() {
                return Err(arg_error(
                    py,
                    format!("{prog}: out has {} arrays, but {prog} has {} (in this order)", items.len(), expected()),
                ));
            }
            for (item, &j) in items.into_iter().zip(&self.out_order) {
                given[j - self.n_inputs] = Some(item);
            }
        } else if outs.len() == 1 {
            given[0] = Some(out.clone());
        } else {
            return Err(arg_error(
                py,
                format!(
                    "{prog}: out must be a tuple or list of arrays in declaration order, or a dict by name, for its {}",
                    expected()
                ),
            ));
        }
        let missing: Vec<&str> =
            given.iter().zip(outs).filter(|(g, _)| g.is_none()).map(|(_, a)| a.name.as_str()).collect();
        if !missing.is_empty() {
            return Err(arg_error(
                py,
                format!("{prog}: out lacks {} (every output is given, or none)", missing.join(", ")),
            ));
        }
        Ok(given.into_iter().map(|g| g.expect("checked")).collect())
    }

    fn input_names(&self) -> String {
        self.args[..self.n_inputs].iter().map(|a| a.name.as_str()).collect::<Vec<_>>().join(", ")
    }
}

#[pymethods]
impl Program {
    /// The inputs (keyword arguments), in the order the code takes them: dicts
    /// with `name`, `dtype`, `shape`, `param`.
    #[getter]
    fn inputs(&self, py: Python<'_>) -> PyResult<Py<PyList>> {
        self.arg_list(py, false)
    }

    /// The outputs, in declaration order (the order of the returned tuple).
    #[getter]
    fn outputs(&self, py: Python<'_>) -> PyResult<Py<PyList>> {
        let l = PyList::empty(py);
        let all = self.arg_list(py, true)?;
        let all = all.bind(py);
        // arg_list lists outputs in argument order; reorder by declaration.
        let n = self.n_inputs;
        for &j in &self.out_order {
            l.append(all.get_item(j - n)?)?;
        }
        Ok(l.unbind())
    }

    /// `copy` and `out` are the call's options, except in a program with an input
    /// of that name: there the keyword passes the input (and the option keeps its
    /// default), so every input can be passed.
    #[pyo3(signature = (*, copy = None, out = None, **kwargs))]
    fn __call__(
        &self,
        py: Python<'_>,
        copy: Option<&Bound<'_, PyAny>>,
        out: Option<&Bound<'_, PyAny>>,
        kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<PyObject> {
        let prog = &self.name;
        let is_input = |name: &str| self.args[..self.n_inputs].iter().any(|a| a.name == name);
        let mut keywords: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = Vec::new();
        let (mut copy_opt, mut out) = (copy.cloned(), out.cloned());
        for (name, value) in [("copy", &mut copy_opt), ("out", &mut out)] {
            if is_input(name) {
                if let Some(v) = value.take() {
                    keywords.push((PyString::new(py, name).into_any(), v));
                }
            }
        }
        let copy = match copy_opt {
            None => false,
            Some(v) => v
                .extract::<bool>()
                .map_err(|_| arg_error(py, format!("{prog}: copy must be True or False, got {}", type_name(&v))))?,
        };
        let out = out.as_ref();
        if let Some(kw) = kwargs {
            keywords.extend(kw.iter());
        }
        let mut given: Vec<Option<Bound<'_, PyAny>>> = vec![None; self.n_inputs];
        for (key, value) in keywords {
            let key = key.downcast::<PyString>()?.to_cow()?;
            match self.args[..self.n_inputs].iter().position(|a| a.name == *key) {
                Some(j) => given[j] = Some(value),
                None => {
                    let why = if self.args[self.n_inputs..].iter().any(|a| a.name == *key) {
                        "is an output (outputs are returned)"
                    } else {
                        "is not an input"
                    };
                    return Err(raise(
                        py,
                        "ArgumentError",
                        format!(
                            "{prog}: unexpected keyword argument `{key}`: it {why}; {prog} takes {}",
                            self.input_names()
                        ),
                    ));
                }
            }
        }
        let missing: Vec<String> = given
            .iter()
            .zip(&self.args)
            .filter(|(g, _)| g.is_none())
            .map(|(_, a)| format!("`{}` ({})", a.name, a.describe()))
            .collect();
        if !missing.is_empty() {
            return Err(raise(
                py,
                "ArgumentError",
                format!(
                    "{prog}: missing keyword argument{} {}",
                    if missing.len() > 1 { "s" } else { "" },
                    missing.join(", ")
                ),
            ));
        }
        let bf16_bits = self.bf16_as_bits(py, &given)?;
        // Inputs: validated (or converted) buffers; outputs: new arrays.
        let mut keep: Vec<(Bound<'_, PyAny>, Buf)> = Vec::with_capacity(self.args.len());
        for (j, g) in given.iter().enumerate() {
            let obj = g.as_ref().expect("checked");
            keep.push(input_buffer(py, prog, obj, &self.args[j], copy)?);
        }
        // Outputs: the caller's arrays (`out=`, checked, returned as given), or new ones.
        let given_out = out.map(|o| self.out_arrays(py, o)).transpose()?;
        match &given_out {
            Some(arrays) => {
                for (obj, a) in arrays.iter().zip(&self.args[self.n_inputs..]) {
                    keep.push(output_buffer(py, prog, obj, a)?);
                }
                let bufs: Vec<&Buf> = keep.iter().map(|(_, b)| b).collect();
                check_disjoint(py, prog, &bufs, &self.args, self.n_inputs)?;
            }
            None => {
                let empty = numpy(py)?.getattr("empty")?;
                for a in &self.args[self.n_inputs..] {
                    let arr = empty.call1((a.shape_py.bind(py), a.dtype.bind(py)))?;
                    let b = Buf::get(&arr, true)
                        .ok_or_else(|| PyRuntimeError::new_err("numpy.empty gave no writable buffer"))?;
                    keep.push((arr, b));
                }
            }
        }
        let ptrs = Ptrs(keep.iter().zip(&self.args).map(|((_, b), a)| (b.ptr(), a.shape.iter().product())).collect());
        let lib = &self.lib;
        let k = self.k;
        // SAFETY: every buffer has the declared element type, shape (so count) and
        // C order; outputs are fresh arrays (no overlap); all stay acquired until
        // `keep` is dropped, after the call.
        let r = py.allow_threads(move || {
            let p = ptrs;
            unsafe { lib.call(k, &p.0) }
        });
        match r {
            Ok(()) => {}
            Err(CallError::NoMem) => {
                return Err(PyMemoryError::new_err(format!(
                    "{prog}: the generated code could not allocate its temporaries"
                )))
            }
            Err(e) => return Err(raise(py, "TccError", format!("{prog}: {e}"))),
        }
        let mut outs: Vec<PyObject> = Vec::with_capacity(self.out_order.len());
        for &j in &self.out_order {
            if let Some(arrays) = &given_out {
                outs.push(arrays[j - self.n_inputs].clone().unbind());
                continue;
            }
            let arr = keep[j].0.clone();
            outs.push(match bfloat16(py) {
                Some(bf) if self.args[j].elem == ElemType::BF16 && !bf16_bits => {
                    arr.call_method1("view", (bf,))?.unbind()
                }
                _ => arr.unbind(),
            });
        }
        drop(keep);
        Ok(match outs.len() {
            0 => py.None(),
            1 => outs.pop().expect("one"),
            _ => PyTuple::new(py, outs)?.into_any().unbind(),
        })
    }

    fn __repr__(&self) -> String {
        let ins: Vec<String> =
            self.args[..self.n_inputs].iter().map(|a| format!("{}: {}", a.name, a.describe())).collect();
        let outs: Vec<String> =
            self.out_order.iter().map(|&j| format!("{}: {}", self.args[j].name, self.args[j].describe())).collect();
        format!("<tcc {} {}({}) -> ({})>", self.kind, self.name, ins.join(", "), outs.join(", "))
    }
}

// ---------------------------------------------------------------------------------
// Tiled programs
// ---------------------------------------------------------------------------------

/// A program held open in tiled storage (symmetry-packed, block-sparse): the
/// caller packs dense arrays into tiles (or writes tiles directly), runs, and
/// reads outputs back as dense arrays or as tiles. One process: every tile is
/// here (`tcc build --mpi` libraries spread them over MPI ranks).
#[pyclass(module = "tcc._native", unsendable)]
struct TiledSession {
    session: tcc::tiled::session::Session<'static>,
    /// Whether each input has been given values since the session opened.
    filled: Vec<bool>,
}

/// `(name, role, shape, stored elements, dense elements, tiles)` of a tensor.
type TensorRow = (String, &'static str, Vec<usize>, usize, usize, usize);
/// `(offset, start, extent)` of a stored tile.
type TileRow = (usize, Vec<usize>, Vec<usize>);

/// The session, sent to the thread that runs without the GIL.
struct SessionPtr(*mut tcc::tiled::session::Session<'static>);
// SAFETY: the session is borrowed mutably (pyo3's borrow flag) for the whole run.
unsafe impl Send for SessionPtr {}

impl TiledSession {
    fn tensor(&self, py: Python<'_>, name: &str) -> PyResult<(usize, bool, Vec<usize>)> {
        let t = self.session.tensor(name).ok_or_else(|| {
            let names: Vec<String> = (0..self.filled.len() + self.outputs())
                .filter_map(|t| self.session.describe(t).map(|d| d.0.to_string()))
                .collect();
            arg_error(py, format!("no tensor `{name}` among the program's inputs and outputs ({})", names.join(", ")))
        })?;
        let (_, output, shape) = self.session.describe(t).expect("named");
        Ok((t, output, shape))
    }

    fn outputs(&self) -> usize {
        (0..).take_while(|&t| self.session.describe(t).is_some()).count() - self.filled.len()
    }

    /// A float64 array of exactly `shape`, C-ordered (converted when `copy`).
    fn f64_buffer<'py>(
        py: Python<'py>,
        what: &str,
        obj: &Bound<'py, PyAny>,
        shape: &[usize],
        copy: bool,
    ) -> PyResult<(Bound<'py, PyAny>, Buf)> {
        let dtype = numpy(py)?.getattr("float64")?.unbind();
        let spec = ArgSpec {
            name: what.to_string(),
            elem: ElemType::F64,
            shape: shape.to_vec(),
            shape_py: PyTuple::new(py, shape)?.unbind(),
            dtype,
            param: false,
            output: false,
        };
        input_buffer(py, "tiled", obj, &spec, copy)
    }
}

#[pymethods]
impl TiledSession {
    #[new]
    #[pyo3(signature = (source, program=None, tile=None, threads=None, sizes=None))]
    fn new(
        py: Python<'_>,
        source: &str,
        program: Option<&str>,
        tile: Option<usize>,
        threads: Option<usize>,
        sizes: Option<std::collections::BTreeMap<String, i64>>,
    ) -> PyResult<TiledSession> {
        use tcc::tiled::session::{Session, SessionComm};
        let mut opts = tcc::tiled::TiledOptions::default();
        match tile {
            Some(0) => return Err(arg_error(py, "tile must be at least 1".into())),
            Some(t) => opts.tile = t,
            // As `tcc run --tiled`: the time model chooses.
            None => opts.auto_tile = true,
        }
        if let Some(n) = threads {
            if n == 0 {
                return Err(arg_error(py, "threads must be at least 1".into()));
            }
            opts.threads = n;
        }
        let comm = SessionComm::Owned(tcc_runtime::comm::threads::solo(tcc_runtime::comm::Backend::Threads));
        let session = {
            let _guard = COMPILE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
            let sizes: Vec<(String, i64)> = sizes.unwrap_or_default().into_iter().collect();
            Session::open(source, program, Ok(&sizes), comm, opts).map_err(|e| raise(py, "CompileError", e))?
        };
        let inputs = (0..).map_while(|t| session.describe(t)).filter(|d| !d.1).count();
        Ok(TiledSession { session, filled: vec![false; inputs] })
    }

    /// `(name, role, shape, stored elements, dense elements, tiles)` per input and output.
    fn tensors(&self) -> Vec<TensorRow> {
        (0..)
            .map_while(|t| self.session.describe(t).map(|d| (t, d)))
            .map(|(t, (name, output, shape))| {
                let tiles = self.session.tiles(t).unwrap_or_default();
                let stored = tiles.iter().map(|x| x.extent.iter().product::<usize>()).sum();
                let dense = shape.iter().product();
                (name.to_string(), if output { "output" } else { "input" }, shape, stored, dense, tiles.len())
            })
            .collect()
    }

    /// `(name, source name, source element type, component)` of every tensor
    /// that is a part of a complex source tensor (component 0: `X_re`, 1: `X_im`).
    fn complex_parts(&self) -> Vec<(String, String, &'static str, usize)> {
        (0..)
            .map_while(|t| self.session.describe(t).map(|d| (t, d.0.to_string())))
            .filter_map(|(t, name)| {
                let (src, elem, component) = self.session.complex_part(t)?;
                Some((name, src.to_string(), elem.name(), component))
            })
            .collect()
    }

    /// `(executed, dense)`: the flops run on tiles, and those of the same steps dense.
    fn flops(&self) -> (f64, f64) {
        self.session.flops()
    }

    /// The stored tiles of `name` in storage order: `(offset, start, extent)`,
    /// each a row-major box of the packed array.
    fn tiles(&self, py: Python<'_>, name: &str) -> PyResult<Vec<TileRow>> {
        let (t, _, _) = self.tensor(py, name)?;
        Ok(self.session.tiles(t).unwrap_or_default().into_iter().map(|x| (x.offset, x.start, x.extent)).collect())
    }

    /// Packs the dense array `array` into `name`'s tiles.
    #[pyo3(signature = (name, array, copy=false))]
    fn pack(&mut self, py: Python<'_>, name: &str, array: &Bound<'_, PyAny>, copy: bool) -> PyResult<()> {
        let (t, _, shape) = self.tensor(py, name)?;
        let (_owner, buf) = Self::f64_buffer(py, name, array, &shape, copy)?;
        let len: usize = shape.iter().product();
        // SAFETY: a C-contiguous float64 buffer of `shape`, acquired until `buf` drops.
        let dense = unsafe { std::slice::from_raw_parts(buf.ptr() as *const f64, len) };
        self.session.pack_dense(t, dense).map_err(|e| arg_error(py, format!("pack: {e}")))?;
        if let Some(f) = self.filled.get_mut(t) {
            *f = true;
        }
        Ok(())
    }

    /// The packed storage of `name` (its tiles back to back) as a new 1-D array.
    fn data<'py>(&mut self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let (t, _, _) = self.tensor(py, name)?;
        let data = self.session.data_mut(t).unwrap_or_default();
        let arr = numpy(py)?.getattr("empty")?.call1((data.len(), "float64"))?;
        let buf = Buf::get(&arr, true).ok_or_else(|| PyRuntimeError::new_err("numpy.empty gave no writable buffer"))?;
        // SAFETY: a fresh float64 array of `data.len()` elements.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf.ptr() as *mut f64, data.len()) };
        Ok(arr)
    }

    /// Writes `name`'s packed storage from a 1-D float64 array of its stored length
    /// (the layout of `tiles`; symmetric tiles hold the canonical elements).
    #[pyo3(signature = (name, array, copy=false))]
    fn set_data(&mut self, py: Python<'_>, name: &str, array: &Bound<'_, PyAny>, copy: bool) -> PyResult<()> {
        let (t, _, _) = self.tensor(py, name)?;
        let len = self.session.data_mut(t).map_or(0, |d| d.len());
        let (_owner, buf) = Self::f64_buffer(py, &format!("{name} (packed)"), array, &[len], copy)?;
        let data = self.session.data_mut(t).unwrap_or_default();
        // SAFETY: a C-contiguous float64 buffer of `len` elements.
        unsafe { std::ptr::copy_nonoverlapping(buf.ptr() as *const f64, data.as_mut_ptr(), len) };
        let checked = self.session.check_packed(t);
        if let Some(f) = self.filled.get_mut(t) {
            // Refused values stay written but do not count as given: `run` refuses.
            *f = checked.is_ok();
        }
        checked.map_err(|e| arg_error(py, format!("set_data: {e}")))?;
        Ok(())
    }

    /// The tensor `name` as a new dense array: every element, symmetric images
    /// with their signs, zeros outside the stored blocks.
    fn unpack<'py>(&mut self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        let (t, _, shape) = self.tensor(py, name)?;
        let arr = numpy(py)?.getattr("zeros")?.call1((PyTuple::new(py, &shape)?, "float64"))?;
        let buf = Buf::get(&arr, true).ok_or_else(|| PyRuntimeError::new_err("numpy.zeros gave no writable buffer"))?;
        let len: usize = shape.iter().product();
        // SAFETY: a fresh C-ordered float64 array of `shape`.
        let dense = unsafe { std::slice::from_raw_parts_mut(buf.ptr() as *mut f64, len) };
        self.session.unpack_dense(t, dense).map_err(|e| raise(py, "TccError", e))?;
        drop(buf);
        Ok(arr)
    }

    /// Runs the program on the inputs' tiles (every input must have been given).
    fn run(&mut self, py: Python<'_>) -> PyResult<()> {
        let missing: Vec<String> = self
            .filled
            .iter()
            .enumerate()
            .filter(|(_, f)| !**f)
            .filter_map(|(t, _)| self.session.describe(t).map(|d| format!("`{}`", d.0)))
            .collect();
        if !missing.is_empty() {
            return Err(arg_error(
                py,
                format!(
                    "run: input{} {} never given (pack or set_data)",
                    if missing.len() > 1 { "s" } else { "" },
                    missing.join(", ")
                ),
            ));
        }
        let ptr = SessionPtr(&mut self.session);
        let r = py.allow_threads(move || {
            let p = ptr;
            // SAFETY: see `SessionPtr`.
            unsafe { (*p.0).run() }
        });
        r.map_err(|e| raise(py, "TccError", e))
    }
}

// ---------------------------------------------------------------------------------
// Contraction order
// ---------------------------------------------------------------------------------

/// tcc's contraction-order search for one product: `inputs` (index ids per
/// operand), `output` (index ids), `sizes` (per index id). Returns
/// `(steps, flops, peak, method)`, each step `(a, b, indices, flops, size)` with
/// SSA operand ids (`< n`: input, `n + k`: step k).
#[pyfunction]
#[allow(clippy::type_complexity)]
fn optimize_path(
    py: Python<'_>,
    inputs: Vec<Vec<usize>>,
    output: Vec<usize>,
    sizes: Vec<usize>,
) -> PyResult<(Vec<(usize, usize, Vec<usize>, f64, f64)>, f64, f64, String)> {
    use tcc::tir::opmin::{optimize_path, Method, Options, Problem};
    let p = Problem { inputs, output, sizes, sym: Vec::new() };
    let path = py
        .allow_threads(|| optimize_path(&p, &Options::default()))
        .map_err(|e| raise(py, "TccError", format!("contract_path: {e}")))?;
    let steps = path.steps.iter().map(|s| (s.a, s.b, s.indices.clone(), s.flops, s.size)).collect();
    let method = match path.method {
        Method::Trivial => "trivial",
        Method::Exact => "exact",
        Method::Greedy => "greedy",
        Method::Hyper => "hyper",
    };
    Ok((steps, path.flops, path.peak, method.to_string()))
}

/// Bytes of large temporaries compiled code keeps mapped between calls, and
/// the most it may keep (`TCC_TEMP_CACHE`).
#[pyfunction]
fn temp_cache_info() -> (usize, usize) {
    (tcc_runtime::alloc::cached_bytes(), tcc_runtime::alloc::cache_limit())
}

/// Unmaps every kept temporary; returns the bytes given back to the system.
#[pyfunction]
fn release_temp_cache() -> usize {
    let bytes = tcc_runtime::alloc::cached_bytes();
    tcc_runtime::alloc::release_cache();
    bytes
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(temp_cache_info, m)?)?;
    m.add_function(wrap_pyfunction!(release_temp_cache, m)?)?;
    m.add_function(wrap_pyfunction!(optimize_path, m)?)?;
    m.add_class::<NativeLibrary>()?;
    m.add_class::<Program>()?;
    m.add_class::<TiledSession>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
