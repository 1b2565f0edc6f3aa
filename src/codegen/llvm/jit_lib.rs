//! A JIT-compiled library that stays loaded: every unit of a program compiled once
//! into one module, the execution engine kept alive, and each unit's entry point
//! exposed as a function pointer that takes raw buffers (no copies). This is what
//! the Python package (`python/`) calls; [`super::jit_run`] is the one-shot variant
//! the command line uses.
//!
//! The caller owns the buffers and must pass, for every argument of
//! [`JitUnit::code`]`.args`, a pointer to the tensor's declared number of elements
//! of its declared element type, dense and row-major. [`JitLibrary::call`] checks
//! the element counts given with the pointers (and nulls) before running; outputs
//! are overwritten (computed from zero).
//!
//! Complex and 16-bit arguments are taken as every interface of tcc takes them:
//! complex ones interleaved (`c128`: (re, im) pairs of f64; `c64`: of f32), 16-bit
//! ones as their bit patterns (`u16`: bf16 bits for `bf16`, IEEE half bits for
//! `f16`). The generated code is that of the program lowered to real pairs
//! ([`crate::tir::complex`]) or run in f32 ([`crate::tir::half`]), so a call of
//! such a unit splits (widens) its inputs into temporaries, runs, and joins (rounds
//! once, to nearest even, [`crate::half`]) its outputs back, as the C wrappers of
//! `tcc build` libraries do ([`crate::codegen::cabi_complex`],
//! [`crate::codegen::cabi_half`]): one extra pass over those arguments and twice
//! their size in temporary memory, whose allocation failure is
//! [`CallError::NoMem`]; outputs are written only when the code succeeded.
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

/// Where an argument of the generated code comes from, in a unit whose caller's
/// arguments are not the code's own (complex and 16-bit programs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feed {
    /// The caller's argument `k` itself.
    Direct(usize),
    /// Part `p` (0: real, 1: imaginary) of the caller's complex argument `k`.
    Part(usize, usize),
    /// The caller's 16-bit argument `k`, in f32.
    Widened(usize),
}

/// One callable unit.
#[derive(Debug, Clone)]
pub struct JitUnit {
    /// The unit as callers see it: its arguments are tensors of [`JitLibrary::hir`]
    /// (for a complex program, one per complex tensor, not its parts).
    pub code: UnitCode,
    /// Element count of each argument (in [`UnitCode::args`] order; complex
    /// elements for a complex argument).
    pub lens: Vec<usize>,
    /// Element type of each argument.
    pub elems: Vec<ElemType>,
    /// The generated code's arguments, when they are not the caller's (empty: the
    /// same).
    feeds: Vec<Feed>,
    entry: Entry,
}

/// Units compiled into one JIT module that stays loaded.
pub struct JitLibrary {
    /// The program callers see: the prepared program (tensor ids of inputs and
    /// outputs are the original's); for a complex or 16-bit program, the source
    /// program (the code runs its lowering to real pairs, or in f32).
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
    // Complex programs run lowered to real pairs; 16-bit tensors run in f32 (the
    // code generator stores them so), both behind conversions in `call`.
    let complex = crate::sema::complex::has_complex(hir);
    let converted = complex || crate::sema::half::has_half(hir);
    let (lowered, map) = if complex { crate::tir::complex::lower(hir) } else { Default::default() };
    let target = if complex { &lowered } else { hir };
    let ctx: *mut Context = Box::into_raw(Box::new(Context::create()));
    // SAFETY: the context lives until `JitLibrary::drop` (or the error path below),
    // after everything created in it.
    let ctx_ref: &'static Context = unsafe { &*ctx };
    let built = (|| {
        let c = compile(ctx_ref, target, &all, &opts)?;
        let engine = super::jit_engine(&c)?;
        let mut units = Vec::new();
        for inner in &c.units {
            let addr = engine
                .get_function_address(&format!("tcc_{}__argv", inner.name))
                .map_err(|e| err(format!("LLVM JIT: {e:?}")))?;
            // SAFETY: the generated function has this signature (see the module docs of `llvm`).
            let entry: Entry = unsafe { std::mem::transmute::<usize, Entry>(addr) };
            let code = if complex {
                let (args, n_inputs) = crate::codegen::cabi::abi_args(hir, inner.unit);
                UnitCode { args, n_inputs, ..inner.clone() }
            } else {
                inner.clone()
            };
            // Callers see the source program's tensors (the prepared one has
            // 16-bit tensors in f32, and complex ones in parts).
            let shown = if converted { hir } else { &c.hir };
            let feeds = feeds(shown, &map, &code, inner)?;
            let mut lens = Vec::new();
            let mut elems = Vec::new();
            for &t in &code.args {
                lens.push(shown.num_elements(t).ok_or_else(|| err("tensor too large"))?);
                elems.push(shown.tensors[t].elem);
            }
            units.push(JitUnit { code, lens, elems, feeds, entry });
        }
        let shown = if converted { hir.clone() } else { c.hir };
        Ok::<_, CodegenError>((c.module, engine, shown, units))
    })();
    match built {
        Ok((module, engine, shown, units)) => Ok(JitLibrary {
            hir: shown,
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

/// The generated code's arguments (`inner`) from the caller's (`code`, tensors
/// of `shown`): empty when they are the same.
fn feeds(
    shown: &Hir,
    map: &crate::tir::complex::ComplexMap,
    code: &UnitCode,
    inner: &UnitCode,
) -> Result<Vec<Feed>, CodegenError> {
    let converted = code.args.iter().any(|&t| {
        let e = shown.tensors[t].elem;
        e.is_complex() || e.is_half()
    });
    if !converted {
        return Ok(Vec::new());
    }
    let position = |t| code.args.iter().position(|&a| a == t);
    inner
        .args
        .iter()
        .map(|&t| {
            // The imaginary part of a complex argument, or an argument itself (the
            // real part of a complex one keeps its id).
            if let Some((&src, _)) = map.im.iter().find(|(_, &im)| im == t) {
                return position(src).map(|k| Feed::Part(k, 1));
            }
            let k = position(t)?;
            let e = shown.tensors[t].elem;
            Some(if e.is_complex() {
                Feed::Part(k, 0)
            } else if e.is_half() {
                Feed::Widened(k)
            } else {
                Feed::Direct(k)
            })
        })
        .collect::<Option<Vec<Feed>>>()
        .ok_or_else(|| err("internal: an argument of the generated code is no argument of the unit"))
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
    /// type ([`JitUnit::elems`]; complex ones interleaved, 16-bit ones as bit
    /// patterns, see the module documentation), writable for outputs; outputs must not overlap any
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
        if u.feeds.is_empty() {
            let ptrs: Vec<*mut u8> = args.iter().map(|a| a.0).collect();
            // SAFETY: checked counts; the caller guarantees the rest.
            let rc = unsafe { (u.entry)(ptrs.as_ptr(), std::ptr::null()) };
            return if rc == 0 { Ok(()) } else { Err(CallError::NoMem) };
        }
        // Complex and 16-bit arguments: the code's own buffers, filled from the
        // inputs, and the outputs written back from them after a successful run.
        let mut temps: Vec<Vec<Temp>> = Vec::with_capacity(args.len());
        for (j, (&(p, n), &e)) in args.iter().zip(&u.elems).enumerate() {
            let input = j < u.code.n_inputs && n > 0;
            temps.push(match e {
                ElemType::C128 => {
                    let (mut re, mut im) = (zeros::<f64>(n)?, zeros::<f64>(n)?);
                    if input {
                        // SAFETY: `n` complex elements: 2n f64.
                        let z = unsafe { std::slice::from_raw_parts(p as *const f64, 2 * n) };
                        split(z, &mut re, &mut im);
                    }
                    vec![Temp::F64(re), Temp::F64(im)]
                }
                ElemType::C64 => {
                    let (mut re, mut im) = (zeros::<f32>(n)?, zeros::<f32>(n)?);
                    if input {
                        // SAFETY: `n` complex elements: 2n f32.
                        let z = unsafe { std::slice::from_raw_parts(p as *const f32, 2 * n) };
                        split(z, &mut re, &mut im);
                    }
                    vec![Temp::F32(re), Temp::F32(im)]
                }
                ElemType::BF16 | ElemType::F16 => {
                    let mut w = zeros::<f32>(n)?;
                    if input {
                        // SAFETY: `n` 16-bit elements.
                        let h = unsafe { std::slice::from_raw_parts(p as *const u16, n) };
                        let widen =
                            if e == ElemType::BF16 { crate::half::bf16_to_f32 } else { crate::half::f16_to_f32 };
                        map_into(&mut w, h, widen);
                    }
                    vec![Temp::F32(w)]
                }
                ElemType::F64 | ElemType::F32 => Vec::new(),
            });
        }
        let ptrs: Vec<*mut u8> = u
            .feeds
            .iter()
            .map(|f| match *f {
                Feed::Direct(k) => args[k].0,
                Feed::Part(k, p) => temps[k][p].ptr(),
                Feed::Widened(k) => temps[k][0].ptr(),
            })
            .collect();
        // SAFETY: the caller's buffers as above; the temporaries have the counts of
        // the arguments they stand for.
        let rc = unsafe { (u.entry)(ptrs.as_ptr(), std::ptr::null()) };
        if rc != 0 {
            return Err(CallError::NoMem);
        }
        for (j, ((&(p, n), &e), t)) in args.iter().zip(&u.elems).zip(&temps).enumerate().skip(u.code.n_inputs) {
            if n == 0 {
                continue;
            }
            match (e, &t[..]) {
                (ElemType::C128, [Temp::F64(re), Temp::F64(im)]) => {
                    // SAFETY: a writable output of `n` complex elements.
                    join(unsafe { std::slice::from_raw_parts_mut(p as *mut f64, 2 * n) }, re, im)
                }
                (ElemType::C64, [Temp::F32(re), Temp::F32(im)]) => {
                    // SAFETY: as above.
                    join(unsafe { std::slice::from_raw_parts_mut(p as *mut f32, 2 * n) }, re, im)
                }
                (ElemType::BF16 | ElemType::F16, [Temp::F32(w)]) => {
                    // SAFETY: a writable output of `n` 16-bit elements.
                    let h = unsafe { std::slice::from_raw_parts_mut(p as *mut u16, n) };
                    let round = if e == ElemType::BF16 { crate::half::f32_to_bf16 } else { crate::half::f32_to_f16 };
                    map_into(h, w, round);
                }
                (ElemType::F64 | ElemType::F32, []) => {}
                _ => unreachable!("argument {j}: temporaries made above for its type"),
            }
        }
        Ok(())
    }
}

/// The code's own buffer for a complex or 16-bit argument.
enum Temp {
    F64(Vec<f64>),
    F32(Vec<f32>),
}

impl Temp {
    fn ptr(&mut self) -> *mut u8 {
        match self {
            Temp::F64(v) => v.as_mut_ptr() as *mut u8,
            Temp::F32(v) => v.as_mut_ptr() as *mut u8,
        }
    }
}

/// `n` zeros (f32 or f64), or [`CallError::NoMem`] when they cannot be
/// allocated. Zeroed by the allocator (`calloc`: fresh pages are not written
/// twice), since every one is overwritten (inputs by the split, outputs by the
/// code).
fn zeros<T: Zeroable>(n: usize) -> Result<Vec<T>, CallError> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<T>(n).map_err(|_| CallError::NoMem)?;
    // SAFETY: a layout of nonzero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) } as *mut T;
    if p.is_null() {
        return Err(CallError::NoMem);
    }
    // SAFETY: allocated by the global allocator with `T`'s alignment for `n`
    // elements, all initialized (all-zero bits are 0.0 for f32 and f64).
    Ok(unsafe { Vec::from_raw_parts(p, n, n) })
}

/// Types whose all-zero bit pattern is a valid value (zero).
trait Zeroable: Copy {}
impl Zeroable for f32 {}
impl Zeroable for f64 {}

/// A buffer that the chunks of a parallel pass write, each its own range.
struct Shared<T>(*mut T);

// SAFETY: every user writes disjoint ranges ([`chunks`]) of a buffer that
// outlives the pass.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// Elements `lo..hi` as a slice.
    ///
    /// # Safety
    /// `lo..hi` is inside the buffer and no other chunk touches it.
    #[allow(clippy::mut_from_ref)]
    unsafe fn range(&self, lo: usize, hi: usize) -> &mut [T] {
        std::slice::from_raw_parts_mut(self.0.add(lo), hi - lo)
    }
}

/// `f(lo, hi)` over `0..n` in chunks of 2^16 on the runtime's threads
/// (TCC_NUM_THREADS): these copying passes are memory-bound, and one thread
/// alone reaches a fraction of the bandwidth (a 2048² c128 `conj` took 76 ms
/// against numpy's 12 ms with single-threaded passes).
fn chunks(n: usize, f: impl Fn(usize, usize) + Sync) {
    const CHUNK: usize = 1 << 16;
    tcc_runtime::kernels::parallel_for(n.div_ceil(CHUNK), |c| f(c * CHUNK, ((c + 1) * CHUNK).min(n)));
}

/// `dst[i] = f(src[i])`, in parallel chunks.
fn map_into<S: Copy + Sync, D: Send>(dst: &mut [D], src: &[S], f: impl Fn(S) -> D + Sync) {
    let n = dst.len().min(src.len());
    let d = Shared(dst.as_mut_ptr());
    chunks(n, |lo, hi| {
        // SAFETY: chunks are disjoint ranges inside `dst`.
        let out = unsafe { d.range(lo, hi) };
        out.iter_mut().zip(&src[lo..hi]).for_each(|(o, &x)| *o = f(x));
    });
}

/// Interleaved (re, im) pairs into their parts.
fn split<T: Copy + Send + Sync>(z: &[T], re: &mut [T], im: &mut [T]) {
    let n = re.len().min(im.len()).min(z.len() / 2);
    let (r, i) = (Shared(re.as_mut_ptr()), Shared(im.as_mut_ptr()));
    chunks(n, |lo, hi| {
        // SAFETY: chunks are disjoint ranges inside `re` and `im`.
        let (rs, is) = unsafe { (r.range(lo, hi), i.range(lo, hi)) };
        for ((pair, r), i) in z[2 * lo..2 * hi].chunks_exact(2).zip(rs).zip(is) {
            *r = pair[0];
            *i = pair[1];
        }
    });
}

/// Parts into interleaved (re, im) pairs.
fn join<T: Copy + Send + Sync>(z: &mut [T], re: &[T], im: &[T]) {
    let n = re.len().min(im.len()).min(z.len() / 2);
    let zs = Shared(z.as_mut_ptr());
    chunks(n, |lo, hi| {
        // SAFETY: chunks are disjoint ranges inside `z` (pairs lo..hi).
        let out = unsafe { zs.range(2 * lo, 2 * hi) };
        for ((pair, &r), &i) in out.chunks_exact_mut(2).zip(&re[lo..hi]).zip(&im[lo..hi]) {
            pair[0] = r;
            pair[1] = i;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parallel passes over sizes around and across chunk boundaries equal
    /// the element-by-element definitions.
    #[test]
    fn parallel_split_join_and_map_cover_every_element() {
        for n in [0usize, 1, 65535, 65536, 65537, 3 * 65536 + 17] {
            let z: Vec<f64> = (0..2 * n).map(|x| x as f64 * 0.5 - 7.0).collect();
            let (mut re, mut im) = (vec![f64::NAN; n], vec![f64::NAN; n]);
            split(&z, &mut re, &mut im);
            assert!((0..n).all(|i| re[i] == z[2 * i] && im[i] == z[2 * i + 1]), "split {n}");
            let mut back = vec![f64::NAN; 2 * n];
            join(&mut back, &re, &im);
            assert_eq!(back, z, "join {n}");
            let bits: Vec<u16> = (0..n).map(|i| (i % 65536) as u16).collect();
            let mut w = vec![f32::NAN; n];
            map_into(&mut w, &bits, crate::half::bf16_to_f32);
            assert!(w.iter().zip(&bits).all(|(x, &b)| x.to_bits() == crate::half::bf16_to_f32(b).to_bits()), "map {n}");
        }
    }

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

    fn compiled(src: &str) -> Hir {
        let (hir, diags) = crate::compile(src, "t");
        hir.unwrap_or_else(|| panic!("{diags:?}"))
    }

    /// A complex unit takes interleaved arrays and gives the complex interpreter's
    /// values; real arguments go through as they are.
    #[test]
    fn complex_arguments_are_interleaved() {
        use crate::interp_complex::{run_unit, CDense, C};
        let hir = compiled(
            "range N = 3; range K = 4; index i, j : N; index k : K;
             input tensor A[i,k] : c128; input tensor B[k,j] : c64; input tensor R[i,j];
             output tensor C[i,j] : c128; output tensor D[i] : c64;
             C[i,j] = A[i,k] * conj(B[k,j]) + R[i,j];
             D[i] = 2 * conj(A[i,k]) * B[k,i];",
        );
        let lib = jit_library(&hir, &[], &Options::default()).unwrap();
        let u = &lib.units[0];
        let names: Vec<&str> = u.code.args.iter().map(|&t| lib.hir.tensors[t].name.as_str()).collect();
        assert_eq!(names, ["A", "B", "R", "C", "D"]);
        assert_eq!(u.lens, [12, 12, 9, 9, 3]);
        let val = |k: usize| C::new((k as f64 * 0.37).sin(), (k as f64 * 0.91).cos());
        let mut a: Vec<f64> = (0..12).flat_map(|k| [val(k).re, val(k).im]).collect();
        // c64 values exactly representable in f32.
        let b32: Vec<C> = (0..12).map(|k| C::new(val(k + 20).re as f32 as f64, val(k + 20).im as f32 as f64)).collect();
        let mut b: Vec<f32> = b32.iter().flat_map(|z| [z.re as f32, z.im as f32]).collect();
        let mut r: Vec<f64> = (0..9).map(|k| k as f64 - 4.0).collect();
        let mut c = vec![f64::NAN; 18];
        let mut d = vec![f32::NAN; 6];
        let args = [
            (a.as_mut_ptr() as *mut u8, 12),
            (b.as_mut_ptr() as *mut u8, 12),
            (r.as_mut_ptr() as *mut u8, 9),
            (c.as_mut_ptr() as *mut u8, 9),
            (d.as_mut_ptr() as *mut u8, 3),
        ];
        unsafe { lib.call(0, &args) }.unwrap();
        let t = |n: &str| hir.tensors.ids().find(|&t| hir.tensors[t].name == n).unwrap();
        let mut inputs = std::collections::HashMap::new();
        inputs.insert(t("A"), CDense { shape: vec![3, 4], data: (0..12).map(val).collect() });
        inputs.insert(t("B"), CDense { shape: vec![4, 3], data: b32 });
        inputs.insert(t("R"), CDense { shape: vec![3, 3], data: r.iter().map(|&x| C::new(x, 0.0)).collect() });
        let want = run_unit(&hir, crate::ids::UnitId::new(0), &inputs).unwrap();
        for (k, z) in want[&t("C")].data.iter().enumerate() {
            assert!((c[2 * k] - z.re).abs() < 1e-12 && (c[2 * k + 1] - z.im).abs() < 1e-12, "C[{k}]");
        }
        for (k, z) in want[&t("D")].data.iter().enumerate() {
            assert!((d[2 * k] as f64 - z.re).abs() < 1e-5 && (d[2 * k + 1] as f64 - z.im).abs() < 1e-5, "D[{k}]");
        }
        // Counts are complex elements: the parts' count is refused.
        let mut args = args;
        args[0].1 = 24;
        let e = unsafe { lib.call(0, &args) }.unwrap_err();
        assert_eq!(e, CallError::Length { name: "A".into(), expected: 12, got: 24 });
    }

    /// A 16-bit unit takes and gives bit patterns: inputs widened exactly, outputs
    /// rounded once from the f32 result.
    #[test]
    fn half_arguments_are_bit_patterns() {
        use crate::half::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
        let hir = compiled(
            "range N = 3; range K = 5; index i : N; index k : K;
             input tensor X[i,k] : f16; input tensor W[k] : bf16; input tensor S[i] : f32;
             output tensor Y[i] : bf16; output tensor Z[i] : f16;
             Y[i] = X[i,k] * W[k]; Z[i] = S[i] - X[i,k];",
        );
        let lib = jit_library(&hir, &[], &Options::default()).unwrap();
        assert_eq!(lib.units[0].elems, [ElemType::F16, ElemType::BF16, ElemType::F32, ElemType::BF16, ElemType::F16]);
        let mut x: Vec<u16> = (0..15).map(|k| f32_to_f16(k as f32 * 0.3 - 2.0)).collect();
        let mut w: Vec<u16> = (0..5).map(|k| f32_to_bf16(1.0 / (k as f32 + 1.5))).collect();
        let mut s: Vec<f32> = vec![100.0, -3.0, 0.25];
        let (mut y, mut z) = (vec![0u16; 3], vec![0u16; 3]);
        let args = [
            (x.as_mut_ptr() as *mut u8, 15),
            (w.as_mut_ptr() as *mut u8, 5),
            (s.as_mut_ptr() as *mut u8, 3),
            (y.as_mut_ptr() as *mut u8, 3),
            (z.as_mut_ptr() as *mut u8, 3),
        ];
        unsafe { lib.call(0, &args) }.unwrap();
        for i in 0..3 {
            let xs: Vec<f32> = (0..5).map(|k| f16_to_f32(x[i * 5 + k])).collect();
            let dot: f32 = xs.iter().zip(&w).map(|(&a, &b)| a * bf16_to_f32(b)).sum();
            let got = bf16_to_f32(y[i]);
            assert!((got - dot).abs() <= dot.abs() * 2f32.powi(-8) * 1.01, "Y[{i}]: {got} vs {dot}");
            let sub: f32 = s[i] - xs.iter().sum::<f32>();
            let got = f16_to_f32(z[i]);
            assert!((got - sub).abs() <= sub.abs() * 2f32.powi(-11) * 1.01, "Z[{i}]: {got} vs {sub}");
        }
    }
}
