//! A JIT-compiled library that stays loaded: every unit of a program compiled once
//! into one module, the execution engine kept alive, and each unit's entry point
//! exposed as a function pointer that takes raw buffers (no copies). This is what
//! the Python package (`python/`) calls; [`super::jit_run`] is the one-shot variant
//! the command line uses.
//!
//! The caller owns the buffers and must pass, for every argument of
//! [`JitUnit::args`], a pointer to the tensor's declared number of elements of its
//! declared element type, dense and row-major. [`JitLibrary::call`] checks the
//! element counts given with the pointers (and nulls) before running; outputs are
//! overwritten (computed from zero).
//!
//! The LLVM context is owned by the library (boxed, freed after the engine and the
//! module), so a `JitLibrary` is a plain `'static` value; it is `Send + Sync`: after
//! construction only the generated machine code is used, which is re-entrant.

use super::{compile, err, CodegenError, Options, UnitCode};
use crate::sema::hir::{ElemType, Hir, UnitId};
use inkwell::context::Context;
use inkwell::execution_engine::ExecutionEngine;
use inkwell::module::Module;
use std::mem::ManuallyDrop;

/// The generated `tcc_NAME__argv` entry point: one pointer per argument, and the
/// run-time sizes (none here: the program's sizes are all fixed before compiling).
pub type Entry = unsafe extern "C" fn(*const *mut u8, *const i64) -> i32;

/// One callable unit.
#[derive(Debug, Clone)]
pub struct JitUnit {
    pub code: UnitCode,
    /// Element count of each argument (in [`UnitCode::args`] order).
    pub lens: Vec<usize>,
    /// Element type of each argument.
    pub elems: Vec<ElemType>,
    entry: Entry,
}

/// Units compiled into one JIT module that stays loaded.
pub struct JitLibrary {
    /// The prepared program (tensor ids of inputs and outputs are the original's).
    pub hir: Hir,
    pub units: Vec<JitUnit>,
    /// Seconds spent generating, optimizing and JIT-compiling.
    pub compile_s: f64,
    module: ManuallyDrop<Module<'static>>,
    engine: ManuallyDrop<ExecutionEngine<'static>>,
    ctx: *mut Context,
}

// SAFETY: after construction the engine, module and context are only dropped (on
// one thread, by `Drop`); calls go through plain function pointers to re-entrant
// generated code that touches only the buffers it is given and its own temporaries.
unsafe impl Send for JitLibrary {}
unsafe impl Sync for JitLibrary {}

impl Drop for JitLibrary {
    fn drop(&mut self) {
        // SAFETY: the module (which refers to the engine that owns it) goes first,
        // then the engine, then the context both were created in; none is used again.
        unsafe {
            ManuallyDrop::drop(&mut self.module);
            ManuallyDrop::drop(&mut self.engine);
            drop(Box::from_raw(self.ctx));
        }
    }
}

impl std::fmt::Debug for JitLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JitLibrary").field("units", &self.units).field("compile_s", &self.compile_s).finish()
    }
}

/// Compiles `units` of `hir` (all of them when empty) for the host CPU and keeps
/// them loaded.
pub fn jit_library(hir: &Hir, units: &[UnitId], opts: &Options) -> Result<JitLibrary, CodegenError> {
    let t0 = std::time::Instant::now();
    let all: Vec<UnitId> = if units.is_empty() { hir.units.ids().collect() } else { units.to_vec() };
    // Every size is a constant here (callers fix run-time ranges first), so the
    // entry points never read their sizes argument.
    super::require_bound(hir, &[])?;
    let opts = Options { c_abi: false, runtime_ranges: Vec::new(), ..opts.clone() };
    let ctx: *mut Context = Box::into_raw(Box::new(Context::create()));
    // SAFETY: the context lives until `JitLibrary::drop` (or the error path below),
    // after everything created in it.
    let ctx_ref: &'static Context = unsafe { &*ctx };
    let built = (|| {
        let c = compile(ctx_ref, hir, &all, &opts)?;
        let engine = super::jit_engine(&c)?;
        let mut units = Vec::new();
        for code in &c.units {
            let addr = engine
                .get_function_address(&format!("tcc_{}__argv", code.name))
                .map_err(|e| err(format!("LLVM JIT: {e:?}")))?;
            // SAFETY: the generated function has this signature (see the module docs of `llvm`).
            let entry: Entry = unsafe { std::mem::transmute::<usize, Entry>(addr) };
            let mut lens = Vec::new();
            let mut elems = Vec::new();
            for &t in &code.args {
                lens.push(hir.num_elements(t).ok_or_else(|| err("tensor too large"))?);
                elems.push(hir.tensors[t].elem);
            }
            units.push(JitUnit { code: code.clone(), lens, elems, entry });
        }
        Ok::<_, CodegenError>((c.module, engine, c.hir, units))
    })();
    match built {
        Ok((module, engine, prepared, units)) => Ok(JitLibrary {
            hir: prepared,
            units,
            compile_s: t0.elapsed().as_secs_f64(),
            module: ManuallyDrop::new(module),
            engine: ManuallyDrop::new(engine),
            ctx,
        }),
        Err(e) => {
            // SAFETY: everything created in the context was dropped with `built`.
            unsafe { drop(Box::from_raw(ctx)) };
            Err(e)
        }
    }
}

/// Why a call was refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("expected {expected} arguments, got {got}")]
    Arity { expected: usize, got: usize },
    #[error("argument `{name}` has {got} elements, expected {expected}")]
    Length { name: String, expected: usize, got: usize },
    #[error("argument `{name}` is a null pointer")]
    Null { name: String },
    #[error("the generated code could not allocate its temporaries")]
    NoMem,
}

impl JitLibrary {
    /// Runs unit number `k` (an index into [`Self::units`]) on `args`: one
    /// `(pointer, element count)` per argument in [`UnitCode::args`] order.
    ///
    /// # Safety
    /// Each pointer must point to `count` valid elements of the argument's element
    /// type ([`JitUnit::elems`]), writable for outputs; outputs must not overlap any
    /// other argument; the memory must stay valid and unaliased by writers for the
    /// duration of the call.
    pub unsafe fn call(&self, k: usize, args: &[(*mut u8, usize)]) -> Result<(), CallError> {
        let u = &self.units[k];
        if args.len() != u.lens.len() {
            return Err(CallError::Arity { expected: u.lens.len(), got: args.len() });
        }
        for (j, (&(p, n), &want)) in args.iter().zip(&u.lens).enumerate() {
            let name = || self.hir.tensors[u.code.args[j]].name.clone();
            if n != want {
                return Err(CallError::Length { name: name(), expected: want, got: n });
            }
            if p.is_null() && n > 0 {
                return Err(CallError::Null { name: name() });
            }
        }
        let ptrs: Vec<*mut u8> = args.iter().map(|a| a.0).collect();
        // SAFETY: checked counts; the caller guarantees the rest.
        let rc = unsafe { (u.entry)(ptrs.as_ptr(), std::ptr::null()) };
        if rc != 0 {
            return Err(CallError::NoMem);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_units_loaded_and_calls_them_repeatedly() {
        let src = "range I = 3; range K = 4; index i : I; index k : K;
            input tensor A[i,k]; input tensor B[k]; output tensor C[i];
            C[i] = A[i,k] * B[k];
            program twice { C[i] = 2 * A[i,k] * B[k]; }";
        let (hir, diags) = crate::compile(src, "mv");
        let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
        let lib = jit_library(&hir, &[], &Options::default()).unwrap();
        assert_eq!(lib.units.len(), 2);
        let mut a: Vec<f64> = (0..12).map(|x| x as f64).collect();
        let mut b = vec![1.0, 2.0, 3.0, 4.0];
        for (k, scale) in [(0, 1.0), (1, 2.0), (0, 1.0)] {
            let mut c = vec![f64::NAN; 3];
            let args =
                [(a.as_mut_ptr() as *mut u8, 12), (b.as_mut_ptr() as *mut u8, 4), (c.as_mut_ptr() as *mut u8, 3)];
            unsafe { lib.call(k, &args) }.unwrap();
            let want: Vec<f64> = (0..3).map(|i| scale * (0..4).map(|k| a[i * 4 + k] * b[k]).sum::<f64>()).collect();
            assert_eq!(c, want);
        }
        let mut c = vec![0.0; 2];
        let args = [(a.as_mut_ptr() as *mut u8, 12), (b.as_mut_ptr() as *mut u8, 4), (c.as_mut_ptr() as *mut u8, 2)];
        let e = unsafe { lib.call(0, &args) }.unwrap_err();
        assert_eq!(e, CallError::Length { name: "C".into(), expected: 3, got: 2 });
    }
}
