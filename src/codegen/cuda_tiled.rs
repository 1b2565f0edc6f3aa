//! Tiled programs on the GPU (`tcc-gpu --tiled`): a [`TileMachine`] over the CUDA
//! driver and cuBLAS, both loaded at run time (cargo feature `cuda`; without it
//! [`open`] says so).
//!
//! Every tensor is one device buffer of its stored tiles; a round's moves are
//! encoded ([`nvptx::tile_moves::encode`]) with the buffers' device addresses,
//! uploaded with their block tables in one copy, and launched as grids of the move kernels (packing,
//! then adding; products and `max`/`min`/`where` by their own kernel) around
//! one batched cuBLAS GEMM per matrix shape and operand layout (strided where
//! the products lie at equal distances, else through arrays of pointers, as
//! where operands are read in place from their tiles), all on the default
//! stream.

use crate::tiled::device::TileMachine;

#[cfg(feature = "cuda")]
use super::nvptx;

/// A machine on GPU 0 running the move kernel of `ptx` (what `tcc build
/// --target cuda --tiled` writes).
pub fn open(ptx: &str) -> Result<Box<dyn TileMachine>, String> {
    #[cfg(feature = "cuda")]
    {
        Ok(Box::new(imp::CudaMachine::new(ptx)?))
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = ptx;
        Err("this program was built without the `cuda` feature (cargo build --features cuda)".into())
    }
}

#[cfg(feature = "cuda")]
mod imp {
    use super::*;
    use crate::ids::TensorId;
    use crate::tiled::device::{Buf, Loc, MatLayout, Round};
    use cudarc::cublas::{result as blas, sys as blas_sys};
    use cudarc::driver::{result, sys};
    use nvptx::tile_moves::{encode_phase, Launch, MoveKernel, THREADS};
    use std::collections::HashMap;
    use std::ffi::{c_void, CString};

    fn e<E: std::fmt::Debug>(what: &str) -> impl Fn(E) -> String + '_ {
        move |x| format!("{what}: {x:?}")
    }

    /// A device allocation of `len` elements (f64 words).
    struct DevMem {
        ptr: sys::CUdeviceptr,
        len: usize,
    }

    impl DevMem {
        fn new(len: usize) -> Result<DevMem, String> {
            // SAFETY: a plain allocation (at least one word).
            let ptr =
                unsafe { result::malloc_sync(len.max(1) * 8) }.map_err(e(&format!("cuMemAlloc of {len} words")))?;
            Ok(DevMem { ptr, len })
        }
        /// Grows to at least `len` elements (contents lost).
        fn reserve(slot: &mut Option<DevMem>, len: usize) -> Result<sys::CUdeviceptr, String> {
            if slot.as_ref().is_none_or(|m| m.len < len) {
                // Kernels may still read the old allocation.
                result::ctx::synchronize().map_err(e("kernel execution"))?;
                *slot = None;
                *slot = Some(DevMem::new(len.max(1024))?);
            }
            Ok(slot.as_ref().expect("reserved").ptr)
        }
    }

    impl Drop for DevMem {
        fn drop(&mut self) {
            // SAFETY: allocated by malloc_sync, freed once.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }

    pub struct CudaMachine {
        module: sys::CUmodule,
        /// The kernels of [`MoveKernel::ALL`].
        kernels: Vec<sys::CUfunction>,
        blas: blas_sys::cublasHandle_t,
        bufs: HashMap<TensorId, DevMem>,
        scratch: Option<DevMem>,
        items: Option<DevMem>,
        /// Seconds spent encoding moves and words uploaded since the last
        /// [`TileMachine::take_host_work`].
        host_work: (f64, usize),
    }

    impl CudaMachine {
        pub fn new(ptx: &str) -> Result<CudaMachine, String> {
            crate::codegen::cuda::open_device()?;
            let src = CString::new(ptx).map_err(|_| "PTX holds a NUL byte".to_string())?;
            // SAFETY: a NUL-terminated PTX image.
            let module = unsafe { result::module::load_data(src.as_ptr() as *const c_void) }
                .map_err(e("cuModuleLoadData (PTX JIT)"))?;
            let mut kernels = Vec::new();
            for kind in MoveKernel::ALL {
                let name = kind.name();
                // SAFETY: a loaded module.
                let f = unsafe { result::module::get_function(module, CString::new(name).expect("name")) }.map_err(
                    |x| format!("the PTX has no `{name}` (write it with `tcc build --target cuda --tiled`): {x:?}"),
                )?;
                kernels.push(f);
            }
            // SAFETY: probing only loads the library.
            if !unsafe { blas_sys::is_culib_present() } {
                return Err("cuBLAS (libcublas.so) not found: add its folder to LD_LIBRARY_PATH".into());
            }
            let blas = blas::create_handle().map_err(e("cublasCreate"))?;
            Ok(CudaMachine {
                module,
                kernels,
                blas,
                bufs: HashMap::new(),
                scratch: None,
                items: None,
                host_work: (0.0, 0),
            })
        }

        fn ptr(&self, t: TensorId) -> Result<sys::CUdeviceptr, String> {
            self.bufs.get(&t).map(|m| m.ptr).ok_or_else(|| format!("tensor {} is not on the GPU", t.index()))
        }

        /// Launches `l` on the items and block tables uploaded to `dev` (the
        /// tables from word `tables`).
        fn launch(&self, l: &Launch, dev: sys::CUdeviceptr, tables: usize) -> Result<(), String> {
            if l.count == 0 {
                return Ok(());
            }
            if l.count > i32::MAX as usize {
                return Err(format!("{} move blocks in one launch", l.count));
            }
            let mut p = dev + l.items as u64 * 8;
            let mut t = dev + (tables + l.blocks) as u64 * 8;
            let mut params =
                [&mut p as *mut sys::CUdeviceptr as *mut c_void, &mut t as *mut sys::CUdeviceptr as *mut c_void];
            // SAFETY: the kernel takes a pointer to the launch's items and one to
            // its block table of `l.count` entries naming them; each item names
            // live buffers of this machine.
            unsafe {
                result::launch_kernel(
                    self.kernels[l.kernel.index()],
                    (l.count as u32, 1, 1),
                    (THREADS as u32, 1, 1),
                    0,
                    result::stream::null(),
                    &mut params,
                )
            }
            .map_err(e("cuLaunchKernel (tile moves)"))
        }
    }

    impl Drop for CudaMachine {
        fn drop(&mut self) {
            self.bufs.clear();
            self.scratch = None;
            self.items = None;
            // SAFETY: handles created in `new`, destroyed once.
            unsafe {
                let _ = blas::destroy_handle(self.blas);
                let _ = result::module::unload(self.module);
            }
        }
    }

    impl TileMachine for CudaMachine {
        fn alloc(&mut self, t: TensorId, len: usize) -> Result<(), String> {
            let m = match self.bufs.remove(&t) {
                Some(m) if m.len == len => m,
                _ => DevMem::new(len)?,
            };
            // SAFETY: the whole allocation, on the default stream.
            unsafe { result::memset_d8_async(m.ptr, 0, len * 8, result::stream::null()) }.map_err(e("cuMemsetD8"))?;
            self.bufs.insert(t, m);
            Ok(())
        }
        fn upload(&mut self, t: TensorId, data: &[f64]) -> Result<(), String> {
            let m = DevMem::new(data.len())?;
            // SAFETY: the allocation holds `data.len()` words.
            unsafe { result::memcpy_htod_sync(m.ptr, data) }.map_err(e("cuMemcpyHtoD"))?;
            self.bufs.insert(t, m);
            Ok(())
        }
        fn download(&mut self, t: TensorId, out: &mut [f64]) -> Result<(), String> {
            let m = self.bufs.get(&t).ok_or("an output is not on the GPU")?;
            if m.len != out.len() {
                return Err(format!("output of {} words read into {}", m.len, out.len()));
            }
            // SAFETY: the allocation holds exactly `out.len()` words.
            unsafe { result::memcpy_dtoh_sync(out, m.ptr) }.map_err(e("cuMemcpyDtoH"))
        }
        fn release(&mut self, t: TensorId) {
            self.bufs.remove(&t);
        }
        fn zero(&mut self, t: TensorId, offset: usize, len: usize) -> Result<(), String> {
            let p = self.ptr(t)?;
            // SAFETY: inside the tensor's allocation (the plan's ranges are its tiles).
            unsafe { result::memset_d8_async(p + offset as u64 * 8, 0, len * 8, result::stream::null()) }
                .map_err(e("cuMemsetD8"))
        }
        fn round(&mut self, r: &Round) -> Result<(), String> {
            let scratch = DevMem::reserve(&mut self.scratch, r.scratch)?;
            let (mut items, mut blocks) = (Vec::new(), Vec::new());
            {
                let bufs = &self.bufs;
                let addr = |l: &Loc| -> u64 {
                    let base = match l.buf {
                        Buf::Scratch => scratch,
                        Buf::Tensor(t) => bufs.get(&t).map_or(0, |m| m.ptr),
                    };
                    base + l.offset as u64 * 8
                };
                // Pack items, then add items, each kernel's together; the block
                // tables after all items.
                let t0 = std::time::Instant::now();
                let launches = [
                    encode_phase(&r.pack, &addr, &mut items, &mut blocks)?,
                    encode_phase(&r.add, &addr, &mut items, &mut blocks)?,
                ];
                let tables = items.len();
                items.extend_from_slice(&blocks);
                // Each GEMM as a strided batch, or through pointer arrays (at
                // this word of the upload) where its items do not lie at equal
                // distances (operands read in place from stored tiles).
                let mut batches = Vec::with_capacity(r.gemms.len());
                for g in &r.gemms {
                    let batch = g.strided().ok_or(items.len());
                    if batch.is_err() {
                        items.extend(g.items.iter().map(|i| addr(&i.a)));
                        items.extend(g.items.iter().map(|i| addr(&i.b)));
                        items.extend(g.items.iter().map(|i| scratch + i.c as u64 * 8));
                    }
                    batches.push(batch);
                }
                self.host_work.0 += t0.elapsed().as_secs_f64();
                self.host_work.1 += items.len();
                let dev = DevMem::reserve(&mut self.items, items.len())?;
                // SAFETY: the allocation holds at least `items.len()` words; the
                // copy waits for the kernels before it on the default stream.
                unsafe { result::memcpy_htod_sync(dev, &items) }.map_err(e("cuMemcpyHtoD (items)"))?;
                for l in &launches[0] {
                    self.launch(l, dev, tables)?;
                }
                for (g, batch) in r.gemms.iter().zip(batches) {
                    let (m, n, k) = (g.m as i32, g.n as i32, g.k as i32);
                    let op = |l: MatLayout| {
                        if l.transposed {
                            blas_sys::cublasOperation_t::CUBLAS_OP_T
                        } else {
                            blas_sys::cublasOperation_t::CUBLAS_OP_N
                        }
                    };
                    let (lda, ldb) = (g.la.ld as i32, g.lb.ld as i32);
                    let (al, be) = (1.0f64, 0.0f64);
                    // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: a row-major
                    // operand is its transpose in column-major order (no op), a
                    // transposed one takes op T.
                    match batch {
                        Ok((first, [sa, sb, sc])) => {
                            // SAFETY: the matrices lie inside their buffers by construction.
                            unsafe {
                                blas::dgemm_strided_batched(
                                    self.blas,
                                    op(g.lb),
                                    op(g.la),
                                    n,
                                    m,
                                    k,
                                    &al,
                                    addr(&first.b) as *const f64,
                                    ldb,
                                    sb as i64,
                                    addr(&first.a) as *const f64,
                                    lda,
                                    sa as i64,
                                    &be,
                                    (scratch + first.c as u64 * 8) as *mut f64,
                                    n.max(1),
                                    sc as i64,
                                    g.batch() as i32,
                                )
                            }
                            .map_err(e("cublasDgemmStridedBatched"))?;
                        }
                        Err(p) => {
                            let ptr = |j: usize| dev + (p + j * g.batch()) as u64 * 8;
                            // SAFETY: the three uploaded arrays of `batch` device
                            // addresses name matrices inside their buffers.
                            unsafe {
                                blas_sys::cublasDgemmBatched(
                                    self.blas,
                                    op(g.lb),
                                    op(g.la),
                                    n,
                                    m,
                                    k,
                                    &al,
                                    ptr(1) as *const *const f64,
                                    ldb,
                                    ptr(0) as *const *const f64,
                                    lda,
                                    &be,
                                    ptr(2) as *const *mut f64,
                                    n.max(1),
                                    g.batch() as i32,
                                )
                            }
                            .result()
                            .map_err(e("cublasDgemmBatched"))?;
                        }
                    }
                }
                for l in &launches[1] {
                    self.launch(l, dev, tables)?;
                }
            }
            Ok(())
        }
        fn finish(&mut self) -> Result<(), String> {
            result::ctx::synchronize().map_err(e("kernel execution"))
        }
        fn take_host_work(&mut self) -> (f64, usize) {
            std::mem::take(&mut self.host_work)
        }
    }
}
