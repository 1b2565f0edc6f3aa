//! `tcc run` of a program with complex tensors (`c64`, `c128`).
//!
//! The JIT (or the GPU, `--target cuda`) runs the program lowered to real pairs ([`crate::tir::complex`]); the
//! interpreter (`--interp`, and the oracle of `--check`) runs the unlowered program
//! with complex arithmetic ([`crate::interp_complex`]). Complex data crosses every
//! interface interleaved: `.npy` files are `complex128` (`<c16`) or `complex64`
//! (`<c8`); the split into the parts' arrays (and back) costs one pass over the data.
//!
//! The report has one line per output like real runs, with the sum and checksum
//! printed as `(re, im)`: `norm2 = sqrt(Σ |z|²)`, `sum = Σ z`, `checksum = Σ z·(1 +
//! (k mod 7))`. Error codes: E0324 a run mode that does not take complex programs
//! (from `main`); E0325 a real array given for a complex tensor or the reverse.

use super::compare::{compare, tolerance};
use super::compiled::{jit_error, per_second};
use super::{
    create_output_dir, fail, input_shape_error, interp_error, read_input, resolve_inputs, unit_inputs, OutputRow,
    RunOptions, Summary,
};
use crate::error::CommandError;
use crate::interp::{self, round_to};
use crate::interp_complex::{self as ci, CDense, C};
use crate::npy;
use crate::sema::hir::{ElemType, Hir, TensorId, UnitId};
use crate::tensor::Dense;
use crate::tir::complex::{join_parts, lower, ComplexMap};
use std::collections::HashMap;
use std::io::Write;

/// How the units of a complex program run.
pub enum ComplexExec<'a> {
    /// `--interp`: the complex interpreter.
    Interp,
    /// The lowered program, JIT-compiled.
    Compiled(&'a super::compiled::CompiledRun),
    /// The lowered program on the GPU (`--target cuda`).
    Cuda(&'a crate::codegen::cuda::CudaRun),
    /// The lowered program on tiles, in this process (`--tiled`).
    Tiled(&'a crate::tiled::run::TiledRun),
    /// The lowered program's unit run by the caller on its parts (`tcc-gpu`: the
    /// plan `tcc build --target cuda` wrote); compared with the complex
    /// interpreter when `check`.
    Parts { check: bool, exec: &'a mut UnitPartsExec<'a> },
}

/// What runs unit `u` of a lowered program on its parts: the outputs' parts and
/// report lines.
pub type UnitPartsExec<'a> =
    dyn FnMut(UnitId, &HashMap<TensorId, Dense>) -> Result<(HashMap<TensorId, Dense>, Vec<String>), CommandError> + 'a;

/// `tcc run` of a complex program (see the module documentation).
pub fn run_complex(
    hir: &Hir,
    opts: &RunOptions,
    mut exec: ComplexExec<'_>,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let units = hir.select_units(opts.program.as_deref())?;
    let (low, map) = lower(hir);
    let loaded = load_inputs(hir, &units, opts)?;
    let prepared = matches!(exec, ComplexExec::Tiled(_))
        .then(|| crate::pipeline::prepare(hir, &crate::pipeline::PipelineOptions::default()));
    create_output_dir(opts)?;
    for u in units {
        let inputs = unit_inputs(hir, u, &loaded, |t| random_input(&low, &map, t, opts.seed).map(Some))?;
        let (outputs, extra) = match &mut exec {
            ComplexExec::Interp => (ci::run_unit(hir, u, &inputs).map_err(interp_error)?, Vec::new()),
            ComplexExec::Compiled(c) => compiled(hir, &low, &map, u, &inputs, c)?,
            ComplexExec::Cuda(c) => cuda(hir, &low, &map, u, &inputs, c)?,
            ComplexExec::Parts { check, exec } => lowered(hir, &low, &map, u, &inputs, *check, &mut |p| exec(u, p))?,
            ComplexExec::Tiled(r) => {
                let prepared = prepared.as_ref().expect("prepared for tiled runs");
                lowered(hir, &low, &map, u, &inputs, r.check, &mut |parts| {
                    crate::tiled::run::run_unit(hir, prepared, u, parts, opts.seed, r)
                })?
            }
        };
        write_report(hir, u, &outputs, &extra, out)?;
        if let Some(dir) = opts.output_dir.as_deref() {
            let save = |t: TensorId, v: &CDense| {
                let tensor = &hir.tensors[t];
                let path = dir.join(format!("{}.npy", tensor.name));
                let (d, elem) = to_interface(v, tensor.elem);
                npy::write_file(&path, &d, elem).map_err(|e| fail("E0709", e.0, None))
            };
            if opts.save_inputs {
                for t in hir.unit_inputs(u) {
                    save(t, &inputs[&t])?;
                }
            }
            let mut ids: Vec<&TensorId> = outputs.keys().collect();
            ids.sort();
            for t in ids {
                save(*t, &outputs[t])?;
            }
        }
    }
    Ok(())
}

/// The random input of `t`: for a complex tensor, its lowered parts' random fills
/// (so the JIT, given the parts, and the interpreter see the same values).
fn random_input(low: &Hir, map: &ComplexMap, t: TensorId, seed: u64) -> Result<CDense, CommandError> {
    let re = interp::fill_random(low, t, seed).map_err(interp_error)?;
    let im = match map.parts(t) {
        Some((_, im)) => Some(interp::fill_random(low, im, seed).map_err(interp_error)?),
        None => None,
    };
    Ok(join_parts(&re, im.as_ref()))
}

/// A value as an interface carries it: a complex one as a real array with a last
/// dimension of 2, (re, im) interleaved, each part rounded to the part type.
fn to_interface(v: &CDense, elem: ElemType) -> (Dense, ElemType) {
    let part = elem.real_part();
    if elem.is_complex() {
        let mut shape = v.shape.clone();
        shape.push(2);
        let data = v.data.iter().flat_map(|z| [round_to(part, z.re), round_to(part, z.im)]).collect();
        (Dense { shape, data }, elem)
    } else {
        (Dense { shape: v.shape.clone(), data: v.data.iter().map(|z| round_to(part, z.re)).collect() }, elem)
    }
}

/// What runs a lowered unit: its outputs (the parts' arrays) and report lines.
type PartsExec<'a> =
    dyn FnMut(&HashMap<TensorId, Dense>) -> Result<(HashMap<TensorId, Dense>, Vec<String>), CommandError> + 'a;

/// Runs the lowered unit with the JIT: split the inputs, run, join the outputs;
/// with `--check`, compare with the complex interpreter.
fn compiled(
    hir: &Hir,
    low: &Hir,
    map: &ComplexMap,
    u: UnitId,
    inputs: &HashMap<TensorId, CDense>,
    c: &super::compiled::CompiledRun,
) -> Result<(HashMap<TensorId, CDense>, Vec<String>), CommandError> {
    lowered(hir, low, map, u, inputs, c.check, &mut |parts| {
        let r = crate::codegen::llvm::jit_run(low, u, parts, &c.codegen, c.repeat.max(1)).map_err(jit_error)?;
        let gflops = per_second(r.flops, r.run_s) / 1e9;
        let line = format!(
            "time = {:.6} s  ({gflops:.2} real GFLOP/s after lowering, {} threads; compile {:.3} s)",
            r.run_s,
            tcc_runtime::kernels::num_threads(),
            r.compile_s
        );
        Ok((r.outputs, vec![line]))
    })
}

/// Runs the lowered unit on the GPU (`--target cuda`): its plan and PTX from the
/// lowered program, run like a real one; with `--check`, compared with the
/// complex interpreter.
fn cuda(
    hir: &Hir,
    low: &Hir,
    map: &ComplexMap,
    u: UnitId,
    inputs: &HashMap<TensorId, CDense>,
    c: &crate::codegen::cuda::CudaRun,
) -> Result<(HashMap<TensorId, CDense>, Vec<String>), CommandError> {
    lowered(hir, low, map, u, inputs, c.check, &mut |parts| {
        let t0 = std::time::Instant::now();
        let (plan, ptx) = crate::codegen::nvptx::ptx_for(low, &[u], &c.plan).map_err(|e| fail("E0712", e.0, None))?;
        let compile_s = t0.elapsed().as_secs_f64();
        let r = crate::codegen::cuda::run_plan(low, &plan, &ptx, 0, parts, c.repeat.max(1), c.streams)?;
        let tflops = per_second(r.flops, r.run_s) / 1e12;
        let line = format!(
            "time = {:.3} ms  ({tflops:.3} real TFLOP/s after lowering on {}; compile {compile_s:.3} s)",
            r.run_s * 1e3,
            r.device
        );
        Ok((r.outputs, vec![line]))
    })
}

/// Splits the inputs into their parts, runs `exec` on them, joins the outputs;
/// with `check`, compares them with the complex interpreter.
fn lowered(
    hir: &Hir,
    low: &Hir,
    map: &ComplexMap,
    u: UnitId,
    inputs: &HashMap<TensorId, CDense>,
    check: bool,
    exec: &mut PartsExec<'_>,
) -> Result<(HashMap<TensorId, CDense>, Vec<String>), CommandError> {
    let parts = map.split(inputs);
    let (got, mut extra) = exec(&parts)?;
    let mut outputs = HashMap::new();
    for t in hir.unit_outputs(u) {
        let value = map.join(t, &got).ok_or_else(|| fail("E0712", "internal: a part of an output is missing", None))?;
        outputs.insert(t, value);
    }
    if check {
        let want = ci::run_unit(hir, u, inputs).map_err(interp_error)?;
        let flat = |m: &HashMap<TensorId, CDense>| -> HashMap<TensorId, Dense> {
            m.iter().map(|(&t, v)| (t, to_interface(v, hir.tensors[t].elem).0)).collect()
        };
        let tol = tolerance(low, u);
        match compare(&flat(&outputs), &flat(&want), tol, |t| hir.tensors[t].name.clone()) {
            Ok(rel) => extra.push(format!(
                "check: matches the complex interpreter (max relative difference {rel:.2e}, tolerance {tol:.0e})"
            )),
            Err(msg) => return Err(fail("E0713", format!("check failed: {msg}"), None)),
        }
    }
    Ok((outputs, extra))
}

/// `--input` files: complex tensors take complex arrays, real ones real arrays.
fn load_inputs(hir: &Hir, units: &[UnitId], opts: &RunOptions) -> Result<HashMap<TensorId, CDense>, CommandError> {
    let mut loaded = HashMap::new();
    for (name, path, targets) in resolve_inputs(hir, units, opts)? {
        let (value, file_elem) = read_input(&path)?;
        for t in targets {
            let tensor = &hir.tensors[t];
            if tensor.elem.is_complex() != file_elem.is_complex() {
                let (want, got) = if tensor.elem.is_complex() { ("complex", "real") } else { ("real", "complex") };
                return Err(fail(
                    "E0325",
                    format!(
                        "`--input {name}={}`: `{name}` is {want} ({}) but the file holds a {got} array ({})",
                        path.display(),
                        tensor.elem.name(),
                        file_elem.name()
                    ),
                    Some(if tensor.elem.is_complex() {
                        "save it with numpy as complex: `np.save(f, a.astype(np.complex128))`".to_string()
                    } else {
                        "pass the real part (`a.real`) if that is what is meant".to_string()
                    }),
                ));
            }
            let mut expected = hir.shape(t);
            if tensor.elem.is_complex() {
                expected.push(2);
            }
            if value.shape != expected {
                let mut shape = value.shape.clone();
                if tensor.elem.is_complex() {
                    shape.pop();
                    expected.pop();
                }
                return Err(input_shape_error(&name, &path, &expected, &shape, None));
            }
            let part = tensor.elem.real_part();
            let data = if tensor.elem.is_complex() {
                value.data.chunks_exact(2).map(|p| C::new(round_to(part, p[0]), round_to(part, p[1]))).collect()
            } else {
                value.data.iter().map(|&x| C::new(round_to(part, x), 0.0)).collect()
            };
            loaded.insert(t, CDense { shape: hir.shape(t), data });
        }
    }
    Ok(loaded)
}

/// The report's summaries of a complex value: its real and imaginary parts' (a
/// real value's imaginary part is zero).
fn summaries(v: &CDense, elem: ElemType) -> (Summary, Summary) {
    let (d, _) = to_interface(v, elem);
    let (re, im): (Vec<f64>, Vec<f64>) = if elem.is_complex() {
        d.data.chunks_exact(2).map(|p| (p[0], p[1])).unzip()
    } else {
        (d.data.clone(), vec![0.0; d.data.len()])
    };
    (Summary::of(&re), Summary::of(&im))
}

fn write_report(
    hir: &Hir,
    u: UnitId,
    outputs: &HashMap<TensorId, CDense>,
    extra: &[String],
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let rows: Vec<OutputRow> = hir
        .unit_outputs(u)
        .into_iter()
        .filter_map(|t| {
            let (re, im) = summaries(outputs.get(&t)?, hir.tensors[t].elem);
            Some(OutputRow { tensor: t, summary: re, summary_im: Some(im), symmetry: None, blocks: None })
        })
        .collect();
    super::write_unit_report(hir, u, &rows, extra, out)
}
