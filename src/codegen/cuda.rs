//! Running a [`GpuPlan`] on an NVIDIA GPU through cudarc (driver API and cuBLAS,
//! both loaded at run time: building tcc never needs CUDA). Compiled with the cargo
//! feature `cuda`; without it, or without a driver or device, every entry point
//! answers [`NO_DEVICE`] (`tcc run --target cuda` then exits with status 1).
//!
//! A run uploads the inputs once, then `repeat` times: clears every other buffer,
//! runs the steps (host loops move base pointers; independent top-level steps
//! on their own streams, [`nvptx::streams`]), and times that with CUDA events on
//! the null stream, which the other streams are ordered against; outputs are read
//! back after the last run.

use super::nvptx::{self, GpuOptions, GpuPlan, UnitPlan};
use crate::error::CommandError;
use crate::run::{fail, run_report, RunOptions};
use crate::sema::hir::{Hir, TensorId, UnitId};
use crate::tensor::Dense;
use std::collections::HashMap;
use std::io::Write;

/// The message of every run without a usable GPU.
pub const NO_DEVICE: &str = "no CUDA device found";

/// What a device run hands back: every output's values, and seconds of the fastest run.
type RawRun = (Vec<(TensorId, Vec<f64>)>, f64);

/// The result of a GPU run.
#[derive(Debug, Clone)]
pub struct GpuRun {
    pub outputs: HashMap<TensorId, Dense>,
    /// Seconds of the fastest run (device time between events).
    pub run_s: f64,
    pub flops: f64,
    pub device: String,
}

/// Settings of `tcc run --target cuda`.
#[derive(Debug, Clone, Default)]
pub struct CudaRun {
    pub check: bool,
    pub repeat: usize,
    /// Streams for independent steps ([`nvptx::streams`]; 1: one stream).
    pub streams: usize,
    pub plan: GpuOptions,
}

/// Opens device 0 and makes its context current (what every GPU entry point does first).
pub fn open_device() -> Result<String, String> {
    imp::open().map(|g| g.name.clone())
}

/// The name of device 0, or why there is none.
pub fn device() -> Result<String, String> {
    imp::open().map(|g| g.name.clone())
}

fn no_device(why: String) -> CommandError {
    fail("E0730", NO_DEVICE, Some(format!("{why}; `--target cuda` needs an NVIDIA GPU and its driver (libcuda.so)")))
}

/// Runs unit plan `unit` (an index into `plan.units`) with PTX `ptx` on `inputs`.
pub fn run_plan(
    hir: &Hir,
    plan: &GpuPlan,
    ptx: &str,
    unit: usize,
    inputs: &HashMap<TensorId, Dense>,
    repeat: usize,
    streams: usize,
) -> Result<GpuRun, CommandError> {
    let g = imp::open().map_err(no_device)?;
    let up = &plan.units[unit];
    let (outs, run_s) = imp::run(g, plan, ptx, up, inputs, repeat.max(1), streams)
        .map_err(|e| fail("E0721", format!("CUDA: {e}"), None))?;
    let outputs = outs.into_iter().map(|(t, d)| (t, Dense::from_vec(hir.shape(t), d))).collect();
    Ok(GpuRun { outputs, run_s, flops: up.flops, device: g.name.clone() })
}

/// `tcc run --target cuda`: plans, emits PTX (in process) and runs every selected
/// unit on the GPU, reporting like the interpreter.
pub fn run_cuda(hir: &Hir, opts: &RunOptions, c: &CudaRun, out: &mut dyn Write) -> Result<(), CommandError> {
    imp::open().map_err(no_device)?;
    run_report(hir, opts, out, &mut |u, inputs| {
        let t0 = std::time::Instant::now();
        let (plan, ptx) = nvptx::ptx_for(hir, &[u], &c.plan).map_err(|e| fail("E0712", e.0, None))?;
        let compile_s = t0.elapsed().as_secs_f64();
        let r = run_plan(hir, &plan, &ptx, 0, inputs, c.repeat, c.streams)?;
        Ok((r.outputs.clone(), report_lines(hir, u, &plan, &r, compile_s, c.check, inputs)?))
    })
}

/// The extra report lines of a GPU run: timing, and the check with `check`.
pub fn report_lines(
    hir: &Hir,
    u: UnitId,
    plan: &GpuPlan,
    r: &GpuRun,
    compile_s: f64,
    check: bool,
    inputs: &HashMap<TensorId, Dense>,
) -> Result<Vec<String>, CommandError> {
    let tflops = if r.run_s > 0.0 { r.flops / r.run_s / 1e12 } else { 0.0 };
    let (launches, gemms) = plan.units[0].launches();
    let mut extra = vec![format!(
        "time = {:.3} ms  ({tflops:.3} TFLOP/s on {}; {launches} kernel launches, {gemms} cuBLAS calls; compile {:.3} s)",
        r.run_s * 1e3,
        r.device,
        compile_s
    )];
    if check {
        let min_tol = if plan.uses_tf32() { crate::run::compare::TOL_TF32 } else { 0.0 };
        extra.push(crate::run::compare::check_against_interpreter_within(hir, u, &r.outputs, inputs, min_tol)?);
    }
    Ok(extra)
}

#[cfg(not(feature = "cuda"))]
mod imp {
    use super::*;
    pub struct Gpu {
        pub name: String,
    }
    pub fn open() -> Result<&'static Gpu, String> {
        Err("this tcc was built without the `cuda` feature (cargo build --features cuda)".into())
    }
    pub fn run(
        _: &Gpu,
        _: &GpuPlan,
        _: &str,
        _: &UnitPlan,
        _: &HashMap<TensorId, Dense>,
        _: usize,
        _: usize,
    ) -> Result<RawRun, String> {
        Err(NO_DEVICE.into())
    }
}

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use crate::codegen::nvptx::{arg_offset, read_elems, streams, write_elems, Elem, Step};
    use crate::sema::hir::IndexId;
    use cudarc::cublas::{result as blas, sys as blas_sys};
    use cudarc::driver::{result, sys};
    use std::ffi::{c_void, CString};
    use std::sync::OnceLock;

    pub struct Gpu {
        pub name: String,
        ctx: usize,
    }

    static GPU: OnceLock<Result<Gpu, String>> = OnceLock::new();

    /// Opens device 0 once per process (primary context, made current on use).
    pub fn open() -> Result<&'static Gpu, String> {
        let g = GPU.get_or_init(|| {
            // SAFETY: probing for the library only loads it.
            if !unsafe { sys::is_culib_present() } {
                return Err("the CUDA driver library (libcuda.so) is not installed".into());
            }
            result::init().map_err(|e| format!("cuInit failed: {e:?}"))?;
            let n = result::device::get_count().map_err(|e| format!("cuDeviceGetCount: {e:?}"))?;
            if n < 1 {
                return Err("the driver sees no device".into());
            }
            let dev = result::device::get(0).map_err(|e| format!("{e:?}"))?;
            // SAFETY: a valid device ordinal.
            let ctx = unsafe { result::primary_ctx::retain(dev) }.map_err(|e| format!("{e:?}"))?;
            let name = result::device::get_name(dev).unwrap_or_else(|_| "GPU".into());
            Ok(Gpu { name, ctx: ctx as usize })
        });
        let g = g.as_ref().map_err(|e| e.clone())?;
        // SAFETY: the primary context retained above.
        unsafe { result::ctx::set_current(g.ctx as sys::CUcontext) }.map_err(|e| format!("{e:?}"))?;
        Ok(g)
    }

    struct Mem(Vec<sys::CUdeviceptr>);
    impl Drop for Mem {
        fn drop(&mut self) {
            for &p in self.0.iter().filter(|&&p| p != 0) {
                // SAFETY: allocated by malloc_sync, freed once.
                let _ = unsafe { result::free_sync(p) };
            }
        }
    }

    struct Exec<'a> {
        plan: &'a GpuPlan,
        up: &'a UnitPlan,
        ptrs: Vec<sys::CUdeviceptr>,
        funcs: Vec<Option<sys::CUfunction>>,
        /// A cuBLAS handle per stream, made on first use and bound to its
        /// stream: one handle's workspace must not serve two streams at once.
        blas: HashMap<usize, blas_sys::cublasHandle_t>,
        /// The stream the steps now issued go to.
        stream: sys::CUstream,
    }

    /// The streams and events of a run's schedule ([`streams::schedule`]):
    /// with one stream the null stream, else blocking streams (ordered against
    /// the null stream, where the run clears buffers, records its timing
    /// events and copies results back).
    struct Streams {
        plan: Vec<streams::Scheduled>,
        streams: Vec<sys::CUstream>,
        events: Vec<Option<sys::CUevent>>,
    }

    impl Streams {
        fn new(up: &UnitPlan, kernels: &[nvptx::Kernel], n: usize) -> Result<Streams, String> {
            let plan = streams::schedule(up, kernels, n);
            let used = streams::streams_used(&plan);
            // Filled one by one: on an error, drop destroys what was made.
            let mut s = Streams { plan: Vec::new(), streams: Vec::new(), events: Vec::new() };
            if used <= 1 {
                s.streams.push(result::stream::null());
            }
            while s.streams.len() < used {
                s.streams
                    .push(result::stream::create(result::stream::StreamKind::Default).map_err(e("cuStreamCreate"))?);
            }
            for x in &plan {
                let ev = if x.record {
                    Some(
                        result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
                            .map_err(e("cuEventCreate"))?,
                    )
                } else {
                    None
                };
                s.events.push(ev);
            }
            s.plan = plan;
            Ok(s)
        }
    }

    impl Drop for Streams {
        fn drop(&mut self) {
            // SAFETY: created above, destroyed once; the null stream is not destroyed.
            unsafe {
                for ev in self.events.iter().flatten() {
                    let _ = result::event::destroy(*ev);
                }
                for &st in self.streams.iter().filter(|s| !s.is_null()) {
                    let _ = result::stream::destroy(st);
                }
            }
        }
    }

    fn e<E: std::fmt::Debug>(what: &str) -> impl Fn(E) -> String + '_ {
        move |x| format!("{what}: {x:?}")
    }

    impl Exec<'_> {
        fn ptr(&self, a: &nvptx::Arg, bound: &HashMap<IndexId, u64>) -> sys::CUdeviceptr {
            self.ptrs[a.buf] + arg_offset(a, bound) * self.up.buffers[a.buf].elem.bytes() as u64
        }

        /// The unit's top-level steps, each on its stream of `st`, after the
        /// events it waits for.
        fn scheduled(&mut self, steps: &[Step], st: &Streams) -> Result<(), String> {
            for (j, (step, x)) in steps.iter().zip(&st.plan).enumerate() {
                self.stream = st.streams[x.stream];
                for &w in &x.waits {
                    let ev = st.events[w].ok_or("internal: a step waits for an event never recorded")?;
                    // SAFETY: a live stream and event of this context.
                    unsafe {
                        result::stream::wait_event(self.stream, ev, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
                    }
                    .map_err(e("cuStreamWaitEvent"))?;
                }
                self.steps(std::slice::from_ref(step), &mut HashMap::new())?;
                if let Some(ev) = st.events[j] {
                    // SAFETY: as above.
                    unsafe { result::event::record(ev, self.stream) }.map_err(e("cuEventRecord"))?;
                }
            }
            Ok(())
        }

        fn steps(&mut self, steps: &[Step], bound: &mut HashMap<IndexId, u64>) -> Result<(), String> {
            for s in steps {
                match s {
                    Step::Loop { index, extent, body } => {
                        for v in 0..*extent {
                            bound.insert(*index, v);
                            self.steps(body, bound)?;
                        }
                        bound.remove(index);
                    }
                    Step::Memset { buf } => {
                        let b = &self.up.buffers[*buf];
                        // SAFETY: the whole allocation.
                        unsafe {
                            result::memset_d8_async(
                                self.ptrs[*buf],
                                0,
                                b.elements as usize * b.elem.bytes(),
                                self.stream,
                            )
                        }
                        .map_err(e("cuMemsetD8"))?;
                    }
                    Step::Launch { kernel, args } => {
                        let k = &self.plan.kernels[*kernel];
                        let f = self.funcs[*kernel].ok_or("kernel not loaded")?;
                        let mut vals: Vec<sys::CUdeviceptr> = args.iter().map(|a| self.ptr(a, bound)).collect();
                        let mut params: Vec<*mut c_void> =
                            vals.iter_mut().map(|v| v as *mut sys::CUdeviceptr as *mut c_void).collect();
                        let ([gx, gy, gz], block) = k.launch_dims();
                        if gx > i32::MAX as u64 || gy > 65535 || gz > 65535 {
                            return Err(format!("kernel {} needs a grid of {gx}×{gy}×{gz} blocks", k.name));
                        }
                        // SAFETY: the kernel takes one pointer per argument, each inside its buffer.
                        unsafe {
                            result::launch_kernel(
                                f,
                                (gx as u32, gy as u32, gz as u32),
                                (block, 1, 1),
                                0,
                                self.stream,
                                &mut params,
                            )
                        }
                        .map_err(e("cuLaunchKernel"))?;
                    }
                    Step::Choice(c) => self.steps(c.steps(), bound)?,
                    Step::Gemm(g) => {
                        let h = match self.blas.get(&(self.stream as usize)) {
                            Some(&h) => h,
                            None => {
                                // SAFETY: probing only loads the library.
                                if !unsafe { blas_sys::is_culib_present() } {
                                    return Err(
                                        "cuBLAS (libcublas.so) not found: add its folder to LD_LIBRARY_PATH".into()
                                    );
                                }
                                let h = blas::create_handle().map_err(e("cublasCreate"))?;
                                // SAFETY: a live handle and stream of this context.
                                unsafe { blas::set_stream(h, self.stream as _) }.map_err(e("cublasSetStream"))?;
                                self.blas.insert(self.stream as usize, h);
                                h
                            }
                        };
                        let op = |t: bool| {
                            if t {
                                blas_sys::cublasOperation_t::CUBLAS_OP_T
                            } else {
                                blas_sys::cublasOperation_t::CUBLAS_OP_N
                            }
                        };
                        // TF32 tensor cores for this call (`--tf32`), the default math otherwise.
                        let math = if g.tf32 {
                            blas_sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
                        } else {
                            blas_sys::cublasMath_t::CUBLAS_DEFAULT_MATH
                        };
                        // SAFETY: a live handle of this context.
                        let status = unsafe { blas_sys::cublasSetMathMode(h, math) };
                        if status != blas_sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                            return Err(format!("cublasSetMathMode: {status:?}"));
                        }
                        let (pa, pb, pc) = (self.ptr(&g.a, bound), self.ptr(&g.b, bound), self.ptr(&g.c, bound));
                        let (m, n, k) = (g.m as i32, g.n as i32, g.k as i32);
                        let (lda, ldb, ldc) = (g.lda as i32, g.ldb as i32, g.ldc as i32);
                        let (sa, sb, sc) = (g.stride_a as i64, g.stride_b as i64, g.stride_c as i64);
                        if g.half.is_some() {
                            // 16-bit A and B on tensor cores, f32 compute; C as its buffer is.
                            let ty = |a: &crate::codegen::nvptx::Arg| match self.up.buffers[a.buf].elem {
                                Elem::F64 => blas_sys::cudaDataType::CUDA_R_64F,
                                Elem::F32 => blas_sys::cudaDataType::CUDA_R_32F,
                                Elem::Bf16 => blas_sys::cudaDataType::CUDA_R_16BF,
                                Elem::F16 => blas_sys::cudaDataType::CUDA_R_16F,
                            };
                            let (al, be) = (g.alpha as f32, g.beta as f32);
                            // SAFETY: sizes and strides stay inside the buffers by construction.
                            unsafe {
                                blas::gemm_strided_batched_ex(
                                    h,
                                    op(g.transa),
                                    op(g.transb),
                                    m,
                                    n,
                                    k,
                                    (&al) as *const f32 as *const _,
                                    pa as *const _,
                                    ty(&g.a),
                                    lda,
                                    sa,
                                    pb as *const _,
                                    ty(&g.b),
                                    ldb,
                                    sb,
                                    (&be) as *const f32 as *const _,
                                    pc as *mut _,
                                    ty(&g.c),
                                    ldc,
                                    sc,
                                    g.batch as i32,
                                    blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                                    blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                                )
                            }
                            .map_err(e("cublasGemmStridedBatchedEx"))?;
                            continue;
                        }
                        // SAFETY: sizes and strides stay inside the buffers by construction.
                        unsafe {
                            match g.elem {
                                Elem::F64 => {
                                    let (al, be) = (g.alpha, g.beta);
                                    blas::dgemm_strided_batched(
                                        h,
                                        op(g.transa),
                                        op(g.transb),
                                        m,
                                        n,
                                        k,
                                        &al,
                                        pa as *const f64,
                                        lda,
                                        sa,
                                        pb as *const f64,
                                        ldb,
                                        sb,
                                        &be,
                                        pc as *mut f64,
                                        ldc,
                                        sc,
                                        g.batch as i32,
                                    )
                                }
                                Elem::F32 | Elem::Bf16 | Elem::F16 => {
                                    let (al, be) = (g.alpha as f32, g.beta as f32);
                                    blas::sgemm_strided_batched(
                                        h,
                                        op(g.transa),
                                        op(g.transb),
                                        m,
                                        n,
                                        k,
                                        &al,
                                        pa as *const f32,
                                        lda,
                                        sa,
                                        pb as *const f32,
                                        ldb,
                                        sb,
                                        &be,
                                        pc as *mut f32,
                                        ldc,
                                        sc,
                                        g.batch as i32,
                                    )
                                }
                            }
                        }
                        .map_err(e("cublas gemm"))?;
                    }
                }
            }
            Ok(())
        }
    }

    pub fn run(
        _g: &Gpu,
        plan: &GpuPlan,
        ptx: &str,
        up: &UnitPlan,
        inputs: &HashMap<TensorId, Dense>,
        repeat: usize,
        streams: usize,
    ) -> Result<RawRun, String> {
        let src = CString::new(ptx).map_err(|_| "PTX holds a NUL byte".to_string())?;
        // SAFETY: a NUL-terminated PTX image.
        let module = unsafe { result::module::load_data(src.as_ptr() as *const c_void) }
            .map_err(e("cuModuleLoadData (PTX JIT)"))?;
        let mut used = vec![false; plan.kernels.len()];
        fn mark(steps: &[Step], used: &mut [bool]) {
            for s in steps {
                match s {
                    Step::Loop { body, .. } => mark(body, used),
                    Step::Choice(c) => mark(c.steps(), used),
                    Step::Launch { kernel, .. } => used[*kernel] = true,
                    _ => {}
                }
            }
        }
        mark(&up.steps, &mut used);
        let mut funcs = Vec::new();
        for (k, u) in plan.kernels.iter().zip(&used) {
            funcs.push(if *u {
                // SAFETY: a loaded module.
                Some(
                    unsafe { result::module::get_function(module, CString::new(k.name.clone()).expect("name")) }
                        .map_err(e("cuModuleGetFunction"))?,
                )
            } else {
                None
            });
        }
        // Scratch buffers of alternatives that do not run get no memory (pointer 0).
        let used = up.used_buffers();
        let mut mem = Mem(Vec::new());
        for (b, &u) in up.buffers.iter().zip(&used) {
            // SAFETY: a plain allocation.
            let p = if u {
                unsafe { result::malloc_sync((b.elements as usize).max(1) * b.elem.bytes()) }
                    .map_err(e(&format!("cuMemAlloc ({} elements)", b.elements)))?
            } else {
                0
            };
            mem.0.push(p);
        }
        for (j, b) in up.buffers.iter().enumerate() {
            if let (true, Some(t)) = (b.input, b.tensor) {
                let d = inputs.get(&t).ok_or_else(|| format!("no value for input `{}`", b.name))?;
                let mut bytes = vec![0u8; b.elements as usize * b.elem.bytes()];
                write_elems(&mut bytes, b.elem, &d.data);
                // SAFETY: the allocation holds exactly these bytes.
                unsafe { result::memcpy_htod_sync(mem.0[j], &bytes) }.map_err(e("cuMemcpyHtoD"))?;
            }
        }
        let mut x = Exec { plan, up, ptrs: mem.0.clone(), funcs, blas: HashMap::new(), stream: result::stream::null() };
        let st = Streams::new(up, &plan.kernels, streams)?;
        let start = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(e("cuEventCreate"))?;
        let stop = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(e("cuEventCreate"))?;
        let mut best = f64::INFINITY;
        let mut outcome = Ok(());
        for _ in 0..repeat {
            // SAFETY: events and buffers of this context; the null stream.
            let r = unsafe {
                result::event::record(start, result::stream::null()).map_err(e("cuEventRecord"))?;
                let mut r = Ok(());
                for (j, b) in up.buffers.iter().enumerate() {
                    if !b.input && used[j] && !up.no_clear.contains(&j) {
                        if let Err(err) = result::memset_d8_async(
                            mem.0[j],
                            0,
                            b.elements as usize * b.elem.bytes(),
                            result::stream::null(),
                        ) {
                            r = Err(format!("cuMemsetD8: {err:?}"));
                        }
                    }
                }
                if r.is_ok() {
                    r = x.scheduled(&up.steps, &st);
                }
                result::event::record(stop, result::stream::null()).map_err(e("cuEventRecord"))?;
                result::event::synchronize(stop).map_err(e("kernel execution"))?;
                if r.is_ok() {
                    best = best.min(result::event::elapsed(start, stop).map_err(e("cuEventElapsedTime"))? as f64 / 1e3);
                }
                r
            };
            if r.is_err() {
                outcome = r;
                break;
            }
        }
        let mut outs = Vec::new();
        if outcome.is_ok() {
            for &t in &up.args[up.n_inputs..] {
                let j = up.buf_of(t).ok_or("output without a buffer")?;
                let b = &up.buffers[j];
                let mut bytes = vec![0u8; b.elements as usize * b.elem.bytes()];
                // SAFETY: the allocation holds exactly these bytes.
                unsafe { result::memcpy_dtoh_sync(&mut bytes, mem.0[j]) }.map_err(e("cuMemcpyDtoH"))?;
                outs.push((t, read_elems(&bytes, b.elem)));
            }
        }
        // SAFETY: handles created above, destroyed once.
        unsafe {
            let _ = result::event::destroy(start);
            let _ = result::event::destroy(stop);
            for &h in x.blas.values() {
                let _ = blas::destroy_handle(h);
            }
            let _ = result::module::unload(module);
        }
        drop(mem);
        outcome.map(|()| (outs, best))
    }
}
