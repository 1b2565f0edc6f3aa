//! Host emulation (tests on machines without a GPU).

use super::gen::{build_module, Mode};
use super::*;
use crate::tensor::Dense;
use inkwell::context::Context;
use inkwell::targets::{CodeModel, InitializationConfig, RelocMode, Target, TargetMachine};
use inkwell::OptimizationLevel;
use std::sync::atomic::{AtomicU64, Ordering};

/// The host's target machine, for kernels generated to run here (`x86-64`: the
/// emulation needs no more).
pub(super) fn host_machine() -> Result<TargetMachine, CodegenError> {
    Target::initialize_native(&InitializationConfig::default()).map_err(|e| err(format!("LLVM: {e}")))?;
    let triple = TargetMachine::get_default_triple();
    let target = Target::from_triple(&triple).map_err(|e| err(format!("LLVM: {e}")))?;
    target
        .create_target_machine(
            &triple,
            "x86-64",
            "",
            OptimizationLevel::Default,
            RelocMode::Default,
            CodeModel::JITDefault,
        )
        .ok_or_else(|| err("LLVM: no host target machine"))
}

/// Runs a unit plan on the CPU: kernels generated for the host and run thread by
/// thread, cuBLAS calls by a plain loop with cuBLAS's semantics. Same outputs as the
/// GPU up to rounding; slow, for tests.
pub fn emulate(
    plan: &GpuPlan,
    unit: usize,
    inputs: &HashMap<TensorId, Dense>,
) -> Result<HashMap<TensorId, Dense>, CodegenError> {
    let ctx = Context::create();
    let tm = host_machine()?;
    let up = &plan.units[unit];
    let module = build_module(&ctx, &plan.kernels, Mode::Host, &tm)?;
    let ee = module.create_jit_execution_engine(OptimizationLevel::Default).map_err(|e| err(e.to_string()))?;
    // The f16 conversions the host kernels call.
    if let Some(f) = module.get_function(super::gen::HOST_F16_TO_F32) {
        ee.add_global_mapping(&f, f16_to_f32 as extern "C" fn(u16) -> f32 as usize);
    }
    if let Some(f) = module.get_function(super::gen::HOST_F32_TO_F16) {
        ee.add_global_mapping(&f, f32_to_f16 as extern "C" fn(f32) -> u16 as usize);
    }
    // The kernels' counts of misaligned vector stores (super::tiled::store_vector).
    let misaligned: HashMap<String, Box<AtomicU64>> = plan
        .kernels
        .iter()
        .filter_map(|k| {
            let g = module.get_global(&super::tiled::misaligned_global(&k.name))?;
            let c = Box::new(AtomicU64::new(0));
            ee.add_global_mapping(&g, c.as_ptr() as usize);
            Some((k.name.clone(), c))
        })
        .collect();
    // Buffers 16-byte aligned, as cuMemAlloc's are (256): the kernels' vector
    // stores are checked against that alignment.
    let mut bufs: Vec<DevBuf> = up.buffers.iter().map(|b| DevBuf::new(b.elements as usize * b.elem.bytes())).collect();
    // Buffers the plan says need no clearing start as NaN: a plan that reads one
    // before writing it whole shows in the outputs.
    for &j in &up.no_clear {
        let b = &up.buffers[j];
        write_elems(&mut bufs[j], b.elem, &vec![f64::NAN; b.elements as usize]);
    }
    for (j, b) in up.buffers.iter().enumerate() {
        if let Some(t) = b.tensor {
            if b.input {
                let d = inputs.get(&t).ok_or_else(|| err(format!("no value for input `{}`", b.name)))?;
                write_elems(&mut bufs[j], b.elem, &d.data);
            }
        }
    }
    let mut bound = HashMap::new();
    emulate_steps(&up.steps, plan, up, &ee, &misaligned, &mut bufs, &mut bound)?;
    let mut out = HashMap::new();
    for &t in &up.args[up.n_inputs..] {
        let j = up.buf_of(t).ok_or_else(|| err("output without a buffer"))?;
        out.insert(t, Dense::from_vec(up.buffers[j].shape.clone(), read_elems(&bufs[j], up.buffers[j].elem)));
    }
    Ok(out)
}

/// A zeroed byte buffer starting on a 16-byte boundary.
struct DevBuf {
    words: Vec<u128>,
    len: usize,
}

impl DevBuf {
    fn new(len: usize) -> DevBuf {
        DevBuf { words: vec![0; len.div_ceil(16)], len }
    }
}

impl std::ops::Deref for DevBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` bytes lie inside `words`; u8 has no alignment needs.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr() as *const u8, self.len) }
    }
}

impl std::ops::DerefMut for DevBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `self` is borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr() as *mut u8, self.len) }
    }
}

fn emulate_steps(
    steps: &[Step],
    plan: &GpuPlan,
    up: &UnitPlan,
    ee: &inkwell::execution_engine::ExecutionEngine,
    misaligned: &HashMap<String, Box<AtomicU64>>,
    bufs: &mut [DevBuf],
    bound: &mut HashMap<IndexId, u64>,
) -> Result<(), CodegenError> {
    for s in steps {
        match s {
            Step::Loop { index, extent, body } => {
                for v in 0..*extent {
                    bound.insert(*index, v);
                    emulate_steps(body, plan, up, ee, misaligned, bufs, bound)?;
                }
                bound.remove(index);
            }
            Step::Memset { buf } => bufs[*buf].fill(0),
            Step::Launch { kernel, args } => {
                let k = &plan.kernels[*kernel];
                let addr = ee.get_function_address(&k.name).map_err(|e| err(format!("JIT: {e:?}")))?;
                let ptrs: Vec<*mut u8> = args
                    .iter()
                    .map(|a| {
                        let off = arg_offset(a, bound) as usize * up.buffers[a.buf].elem.bytes();
                        // SAFETY: offsets stay inside the buffer by construction.
                        unsafe { bufs[a.buf].as_mut_ptr().add(off) }
                    })
                    .collect();
                if k.by_blocks() {
                    // One call per block.
                    let ([gx, gy, gz], _) = k.launch_dims();
                    for z in 0..gz {
                        for y in 0..gy {
                            for x in 0..gx {
                                call(addr, &[x, y, z], &ptrs)?;
                            }
                        }
                    }
                } else {
                    for t in 0..k.threads() {
                        call(addr, &[t], &ptrs)?;
                    }
                }
                // A vector access the device would make at an address that is
                // no multiple of its size (a fault there).
                let n = misaligned.get(&k.name).map_or(0, |c| c.load(Ordering::Relaxed));
                if n > 0 {
                    return Err(err(format!("{}: {n} vector accesses at addresses not aligned to their size", k.name)));
                }
            }
            Step::Choice(c) => emulate_steps(c.steps(), plan, up, ee, misaligned, bufs, bound)?,
            Step::Gemm(g) => {
                let rd = |j: usize| read_elems(&bufs[j], up.buffers[j].elem);
                let (a, b) = (rd(g.a.buf), rd(g.b.buf));
                let mut c = rd(g.c.buf);
                let (oa, ob, oc) = (arg_offset(&g.a, bound), arg_offset(&g.b, bound), arg_offset(&g.c, bound));
                for bt in 0..g.batch {
                    for i in 0..g.m {
                        for j in 0..g.n {
                            let mut s = 0.0;
                            for l in 0..g.k {
                                let av = if g.transa {
                                    a[(oa + bt * g.stride_a + l + i * g.lda) as usize]
                                } else {
                                    a[(oa + bt * g.stride_a + i + l * g.lda) as usize]
                                };
                                let bv = if g.transb {
                                    b[(ob + bt * g.stride_b + j + l * g.ldb) as usize]
                                } else {
                                    b[(ob + bt * g.stride_b + l + j * g.ldb) as usize]
                                };
                                s += av * bv;
                            }
                            let at = (oc + bt * g.stride_c + i + j * g.ldc) as usize;
                            // beta 0 ignores what C held (cuBLAS reads no C then).
                            c[at] = if g.beta == 0.0 { g.alpha * s } else { g.beta * c[at] + g.alpha * s };
                        }
                    }
                }
                let e = up.buffers[g.c.buf].elem;
                write_elems(&mut bufs[g.c.buf], e, &c);
            }
        }
    }
    Ok(())
}

extern "C" fn f16_to_f32(h: u16) -> f32 {
    crate::half::f16_to_f32(h)
}

extern "C" fn f32_to_f16(x: f32) -> u16 {
    crate::half::f32_to_f16(x)
}

/// Calls a JIT-compiled kernel with its ids (a thread's, or a block's three) and
/// its pointers.
fn call(addr: usize, ids: &[u64], p: &[*mut u8]) -> Result<(), CodegenError> {
    type P = *mut u8;
    // SAFETY: `addr` is a generated function whose signature the ids and pointers
    // match (one i64 per id, one pointer per argument); pointers are inside their buffers.
    unsafe {
        match (ids, p) {
            (&[t], &[a]) => std::mem::transmute::<usize, unsafe extern "C" fn(u64, P)>(addr)(t, a),
            (&[t], &[a, b]) => std::mem::transmute::<usize, unsafe extern "C" fn(u64, P, P)>(addr)(t, a, b),
            (&[t], &[a, b, c]) => std::mem::transmute::<usize, unsafe extern "C" fn(u64, P, P, P)>(addr)(t, a, b, c),
            (&[t], &[a, b, c, d]) => {
                std::mem::transmute::<usize, unsafe extern "C" fn(u64, P, P, P, P)>(addr)(t, a, b, c, d)
            }
            (&[t], &[a, b, c, d, e]) => {
                std::mem::transmute::<usize, unsafe extern "C" fn(u64, P, P, P, P, P)>(addr)(t, a, b, c, d, e)
            }
            (&[x, y, z], &[a, b]) => {
                std::mem::transmute::<usize, unsafe extern "C" fn(u64, u64, u64, P, P)>(addr)(x, y, z, a, b)
            }
            (&[x, y, z], &[a, b, c]) => {
                std::mem::transmute::<usize, unsafe extern "C" fn(u64, u64, u64, P, P, P)>(addr)(x, y, z, a, b, c)
            }
            _ => return Err(err(format!("emulate: {} ids and {} arguments not supported", ids.len(), p.len()))),
        }
    }
    Ok(())
}
