//! `tcc run --interp`: fills or loads inputs, runs every unit with the reference
//! interpreter, prints a summary of each output and optionally writes `.npy` files.
//!
//! The report, one block per unit run (in file order), is stable and meant to be
//! read by people and scripts alike:
//!
//! ```text
//! program matmul (1 statement)
//!   C  f64[4, 3]  norm2 = 1.23456789012e0  sum = -3.21000000000e-1  checksum = 4.50000000000e0
//! ```
//!
//! The header is `program NAME` or `model NAME` with the number of statements; each
//! output written (in order of first write) gets a line with its name, element type
//! and shape, and three numbers printed with 12 significant digits (`{:.11e}`); see
//! [`Summary`]. A unit that writes no output prints `  (no outputs)`. Warnings (an
//! output that breaks its declared symmetry, a file overwritten) go to stderr.
//!
//! Error codes: E0702 unknown `--program`; E0703 `--input` names no tensor; E0704
//! `--input` names a tensor that is not an input; E0705 `--input` for an input no
//! unit run reads; E0706 unreadable or invalid `.npy` file; E0707 wrong shape;
//! E0708 a problem too large for the interpreter; E0709 cannot write an output file;
//! E0710 the same tensor given twice; E0711 cannot write the report.

pub mod compare;
pub mod compiled;
pub mod complex;
pub mod sizes;

use crate::error::CommandError;
use crate::interp::{self, InterpError};
use crate::npy;
use crate::sema::hir::{Hir, Role, TensorId, UnitId, UnitKind};
use crate::tensor::Dense;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;

/// What `tcc run` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Seed of the random fill of inputs not given with `--input`.
    pub seed: u64,
    /// `--input NAME=file.npy`
    pub inputs: Vec<(String, PathBuf)>,
    /// `--output-dir DIR`: write each output as `DIR/NAME.npy`.
    pub output_dir: Option<PathBuf>,
    /// `--save-inputs`: also write the inputs used into the output directory.
    pub save_inputs: bool,
    /// `--program NAME`: run only this unit.
    pub program: Option<String>,
}

/// A `tcc run` failure (bad input file, wrong shape, ...): exit code 1.
pub fn fail(code: &'static str, message: impl Into<String>, hint: Option<String>) -> CommandError {
    CommandError::new(code, message, hint)
}

/// Relative tolerance (to the tensor's largest magnitude) of the symmetry check of
/// outputs declared symmetric or antisymmetric.
pub const SYMMETRY_RTOL: f64 = 1e-12;

/// The three numbers `tcc run` prints per output, computed from the values as the
/// output's element type stores them (an `f32` output is rounded to `f32` first,
/// exactly as its `.npy` file holds it). With `x[k]` the elements in row-major (C)
/// order, `k = 0, 1, ...`:
///
/// * `norm2 = sqrt(Σ_k x[k]²)`
/// * `sum = Σ_k x[k]`
/// * `checksum = Σ_k x[k] · (1 + (k mod 7))` — position-sensitive, so a transposed
///   or shifted result does not pass. In numpy:
///   `(x.ravel(order="C").astype(float) * (1 + np.arange(x.size) % 7)).sum()`
///   (or `math.fsum` of those products for the last few digits).
///
/// Sums are compensated (Neumaier), so they are within an ulp or two of the exact
/// sum of the (exactly representable) products.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub norm2: f64,
    pub sum: f64,
    pub checksum: f64,
}

impl Summary {
    pub fn of(data: &[f64]) -> Summary {
        let mut parts = SummaryParts::default();
        for (k, &x) in data.iter().enumerate() {
            parts.add(k, x);
        }
        SummaryParts::combine(&[parts.to_array()])
    }
}

/// A [`Summary`] of some of a tensor's elements, kept as compensated sums, so
/// that ranks that each hold part of a tensor summarize it without making it
/// whole: each adds its elements (with their row-major positions `k`), the
/// parts travel as [`SummaryParts::to_array`] and [`SummaryParts::combine`]
/// gives every rank the same summary, within an ulp or two of the exact one.
#[derive(Default)]
pub struct SummaryParts {
    sq: Neumaier,
    sum: Neumaier,
    check: Neumaier,
}

impl SummaryParts {
    pub fn add(&mut self, k: usize, x: f64) {
        self.sq.add(x * x);
        self.sum.add(x);
        self.check.add(x * (1 + k % 7) as f64);
    }

    pub fn to_array(&self) -> [f64; 6] {
        let (a, b, c) = (&self.sq, &self.sum, &self.check);
        [a.sum, a.comp, b.sum, b.comp, c.sum, c.comp]
    }

    /// The summary of parts (in a fixed order, so that every rank gets the same).
    pub fn combine(parts: &[[f64; 6]]) -> Summary {
        let total = |i: usize| {
            let mut acc = Neumaier::default();
            for p in parts {
                acc.add(p[i]);
            }
            let comp: f64 = parts.iter().map(|p| p[i + 1]).sum();
            Neumaier { sum: acc.sum, comp: acc.comp + comp }.value()
        };
        Summary { norm2: total(0).sqrt(), sum: total(2), checksum: total(4) }
    }
}

/// Neumaier's compensated summation.
#[derive(Default)]
struct Neumaier {
    sum: f64,
    comp: f64,
}

impl Neumaier {
    fn add(&mut self, x: f64) {
        let t = self.sum + x;
        if self.sum.abs() >= x.abs() {
            self.comp += (self.sum - t) + x;
        } else {
            self.comp += (x - t) + self.sum;
        }
        self.sum = t;
    }
    fn value(&self) -> f64 {
        // Past an infinity the compensation is NaN (inf - inf) and means nothing:
        // the sum is the infinity (or NaN), as numpy reports it.
        if self.sum.is_finite() {
            self.sum + self.comp
        } else {
            self.sum
        }
    }
}

/// A number as the report prints it: 12 significant digits; `inf`, `-inf` and
/// `nan` as numpy prints them.
pub fn fmt_num(x: f64) -> String {
    if x.is_nan() {
        "nan".to_string()
    } else {
        format!("{x:.11e}")
    }
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

fn names(list: impl IntoIterator<Item = String>) -> String {
    let v: Vec<String> = list.into_iter().map(|n| format!("`{n}`")).collect();
    if v.is_empty() {
        "none".to_string()
    } else {
        v.join(", ")
    }
}

/// E0754: the memory for a tensor could not be allocated (checked before using it,
/// with fallible allocation, so that a memory limit is an error, not an abort).
pub fn out_of_memory(message: String) -> CommandError {
    fail(
        "E0754",
        message,
        Some("the tensors of this run do not fit in the memory this process may use: try smaller range sizes or raise the limit (`ulimit -v`, cgroups)".into()),
    )
}

/// The `tcc run` error for an interpreter failure.
pub fn interp_error(e: InterpError) -> CommandError {
    match e {
        InterpError::TensorTooLarge { .. } | InterpError::LoopTooLarge { .. } => fail(
            "E0708",
            e.to_string(),
            Some("the reference interpreter runs plain loops: try smaller range sizes".into()),
        ),
        InterpError::OutOfMemory(_) => out_of_memory(e.to_string()),
        InterpError::MissingInput { .. } | InterpError::ShapeMismatch { .. } => fail("E0707", e.to_string(), None),
        InterpError::SubscriptOutOfBounds { .. } => fail("E0749", e.to_string(), None),
        InterpError::Unsupported(_) => fail("E0324", e.to_string(), None),
    }
}

/// Runs the units of a checked file with the reference interpreter and writes the
/// report to `out`.
pub fn run_interp(hir: &Hir, opts: &RunOptions, out: &mut dyn Write) -> Result<(), CommandError> {
    run_report(hir, opts, out, &mut |u, inputs| {
        let outputs = interp::run_unit(hir, u, inputs).map_err(interp_error)?;
        Ok((outputs, Vec::new()))
    })
}

/// Checks what `tcc run` would refuse before running anything (unknown program,
/// bad `--input`, an output directory that cannot be created), so that a
/// distributed run fails on every rank alike, before any communication.
pub fn check_options(hir: &Hir, opts: &RunOptions) -> Result<(), CommandError> {
    let units = hir.select_units(opts.program.as_deref())?;
    load_inputs(hir, &units, opts)?;
    create_output_dir(opts)?;
    Ok(())
}

/// Creates `--output-dir` (E0709 when it cannot be).
fn create_output_dir(opts: &RunOptions) -> Result<(), CommandError> {
    if let Some(dir) = opts.output_dir.as_deref() {
        std::fs::create_dir_all(dir)
            .map_err(|e| fail("E0709", format!("cannot create the output directory `{}`: {e}", dir.display()), None))?;
    }
    Ok(())
}

/// The inputs unit `u` reads: those read with `--input` (`loaded`), the others
/// made by `fill` (left out where it makes none).
fn unit_inputs<V: Clone>(
    hir: &Hir,
    u: UnitId,
    loaded: &HashMap<TensorId, V>,
    mut fill: impl FnMut(TensorId) -> Result<Option<V>, CommandError>,
) -> Result<HashMap<TensorId, V>, CommandError> {
    let mut inputs = HashMap::new();
    for t in hir.unit_inputs(u) {
        let v = match loaded.get(&t) {
            Some(v) => v.clone(),
            None => match fill(t)? {
                Some(v) => v,
                None => continue,
            },
        };
        inputs.insert(t, v);
    }
    Ok(inputs)
}

/// Reads the `.npy` file of an `--input` (E0706 when it cannot be read).
fn read_input(path: &std::path::Path) -> Result<(Dense, crate::sema::hir::ElemType), CommandError> {
    npy::read_file(path).map_err(|e| fail("E0706", e.0, None))
}

/// E0707: the array of `--input NAME=FILE` does not have the tensor's shape.
fn input_shape_error(
    name: &str,
    path: &std::path::Path,
    expected: &[usize],
    found: &[usize],
    hint: Option<String>,
) -> CommandError {
    fail(
        "E0707",
        format!(
            "`--input {name}={}`: `{name}` has shape {expected:?} but the file holds an array of shape {found:?}",
            path.display()
        ),
        hint,
    )
}

/// What an executor returns for one unit: every output written, and extra report
/// lines (timing, checks) printed after the outputs, indented by the caller.
pub type UnitResult = (HashMap<TensorId, Dense>, Vec<String>);

/// How a unit is executed: its outputs (and extra report lines) from its inputs.
pub type UnitExec<'a> = dyn FnMut(UnitId, &HashMap<TensorId, Dense>) -> Result<UnitResult, CommandError> + 'a;

/// Per output, how it breaks its declared symmetry, where the executor knows
/// already (tiled runs: only tiles that are their own images can, see
/// [`crate::tiled::outputs`]): the report then skips walking the dense image.
pub type KnownSymmetry = std::cell::RefCell<HashMap<TensorId, Option<String>>>;

/// The report of `tcc run` with units executed by `exec` (the interpreter, compiled
/// code, a distributed run): the same lines whatever executes them, so reports
/// compare line by line.
pub fn run_report(
    hir: &Hir,
    opts: &RunOptions,
    out: &mut dyn Write,
    exec: &mut UnitExec<'_>,
) -> Result<(), CommandError> {
    run_report_with(hir, opts, out, true, None, exec)
}

/// [`run_report`]; without `fill_inputs`, `exec` gets only the inputs read with
/// `--input` and makes the others itself (tiled runs generate them tile by tile,
/// never as dense arrays), and `--save-inputs` is refused.
pub fn run_report_with(
    hir: &Hir,
    opts: &RunOptions,
    out: &mut dyn Write,
    fill_inputs: bool,
    known_symmetry: Option<&KnownSymmetry>,
    exec: &mut UnitExec<'_>,
) -> Result<(), CommandError> {
    if opts.save_inputs && !fill_inputs {
        return Err(fail("E0760", "--save-inputs does not apply to tiled runs (inputs are never made dense)", None));
    }
    let units = hir.select_units(opts.program.as_deref())?;
    let loaded = load_inputs(hir, &units, opts)?;
    create_output_dir(opts)?;
    let dir = opts.output_dir.as_deref();
    // Which unit wrote each file, to warn when a later unit overwrites it.
    let mut files: HashMap<PathBuf, (TensorId, String)> = HashMap::new();

    for u in units {
        let unit = &hir.units[u];
        let inputs = unit_inputs(hir, u, &loaded, |t| {
            if fill_inputs {
                interp::fill_random(hir, t, opts.seed).map(Some).map_err(interp_error)
            } else {
                Ok(None)
            }
        })?;
        let (mut outputs, extra) = exec(u, &inputs)?;
        let mut rows = Vec::new();
        for t in hir.unit_outputs(u) {
            let tensor = &hir.tensors[t];
            let value = outputs.get_mut(&t).expect("run_unit returns every output written");
            for x in &mut value.data {
                *x = interp::round_to(tensor.elem, *x);
            }
            let known = known_symmetry.and_then(|k| k.borrow_mut().remove(&t));
            let symmetry = known.unwrap_or_else(|| interp::tensor_symmetry_violation(&*value, tensor, SYMMETRY_RTOL));
            let blocks = interp::block_violation(hir, t, &*value);
            rows.push(OutputRow { tensor: t, summary: Summary::of(&value.data), summary_im: None, symmetry, blocks });
        }
        write_unit_report(hir, u, &rows, &extra, out)?;

        if let Some(dir) = dir {
            let mut save = |t: TensorId, value: &Dense| -> Result<(), CommandError> {
                let tensor = &hir.tensors[t];
                let path = dir.join(format!("{}.npy", tensor.name));
                match files.get(&path) {
                    // The same input (same values) saved by an earlier unit.
                    Some((prev, _)) if *prev == t && tensor.role.is_read_only() => return Ok(()),
                    Some((_, prev_unit)) => eprintln!(
                        "warning[W0702]: `{}` written by `{prev_unit}` is overwritten by `{}` (use --program to run one unit)",
                        path.display(),
                        unit.name
                    ),
                    None => {}
                }
                npy::write_file(&path, value, tensor.elem).map_err(|e| fail("E0709", e.0, None))?;
                files.insert(path, (t, unit.name.clone()));
                Ok(())
            };
            if opts.save_inputs {
                for t in hir.unit_inputs(u) {
                    save(t, &inputs[&t])?;
                }
            }
            for row in &rows {
                save(row.tensor, &outputs[&row.tensor])?;
            }
        }
    }
    Ok(())
}

/// One output's line of the report and the warnings about it.
pub struct OutputRow {
    pub tensor: TensorId,
    pub summary: Summary,
    /// Of a program with complex tensors: the imaginary parts' summary (zero for
    /// a real output), and the line prints `sum` and `checksum` as (re, im).
    pub summary_im: Option<Summary>,
    /// How the output breaks its declared symmetry (W0701), if it does.
    pub symmetry: Option<String>,
    /// Where it is nonzero outside its declared blocks (W0704), if it is.
    pub blocks: Option<String>,
}

/// The report of one unit: its line, one line per output (warnings on stderr),
/// then `extra`, indented.
pub(crate) fn write_unit_report(
    hir: &Hir,
    u: UnitId,
    rows: &[OutputRow],
    extra: &[String],
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let report_err = |e: std::io::Error| fail("E0711", format!("cannot write the report: {e}"), None);
    let unit = &hir.units[u];
    let kind = match unit.kind {
        UnitKind::Program => "program",
        UnitKind::Model(_) => "model",
    };
    writeln!(out, "{kind} {} ({})", unit.name, plural(unit.stmts.len(), "statement")).map_err(report_err)?;
    if rows.is_empty() {
        writeln!(out, "  (no outputs)").map_err(report_err)?;
    }
    let label = |t: TensorId| {
        let tensor = &hir.tensors[t];
        let shape = hir.shape(t).iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
        (tensor.name.clone(), format!("{}[{shape}]", tensor.elem.name()))
    };
    let labels: Vec<(String, String)> = rows.iter().map(|r| label(r.tensor)).collect();
    let w_name = labels.iter().map(|l| l.0.chars().count()).max().unwrap_or(0);
    let w_ty = labels.iter().map(|l| l.1.len()).max().unwrap_or(0);
    for (row, (name, ty)) in rows.iter().zip(&labels) {
        let s = row.summary;
        match row.summary_im {
            None => writeln!(
                out,
                "  {name:<w_name$}  {ty:<w_ty$}  norm2 = {}  sum = {}  checksum = {}",
                fmt_num(s.norm2),
                fmt_num(s.sum),
                fmt_num(s.checksum)
            ),
            // norm2 = sqrt(Σ |z|²), sum = Σ z, checksum = Σ z·(1 + (k mod 7)).
            Some(im) => writeln!(
                out,
                "  {name:<w_name$}  {ty:<w_ty$}  norm2 = {}  sum = ({}, {})  checksum = ({}, {})",
                fmt_num((s.norm2 * s.norm2 + im.norm2 * im.norm2).sqrt()),
                fmt_num(s.sum),
                fmt_num(im.sum),
                fmt_num(s.checksum),
                fmt_num(im.checksum)
            ),
        }
        .map_err(report_err)?;
        if let Some(v) = &row.symmetry {
            eprintln!(
                "warning[W0701]: output `{name}` of {kind} `{}` does not have its declared symmetry: {v}",
                unit.name
            );
        }
        if let Some(v) = &row.blocks {
            eprintln!(
                "warning[W0704]: output `{name}` of {kind} `{}` is nonzero outside its declared blocks: {v}",
                unit.name
            );
        }
    }
    for line in extra {
        writeln!(out, "  {line}").map_err(report_err)?;
    }
    Ok(())
}

/// The report of a run whose outputs no process holds whole (distributed tiled
/// runs): the same lines as [`run_report`], from the rows `exec` returns per
/// unit (summaries the ranks computed together). `--output-dir` files are
/// written by the ranks, so this only warns when a later unit overwrites one.
pub fn run_report_summarized(
    hir: &Hir,
    opts: &RunOptions,
    out: &mut dyn Write,
    exec: &mut dyn FnMut(UnitId) -> Result<(Vec<OutputRow>, Vec<String>), CommandError>,
) -> Result<(), CommandError> {
    let mut files: HashMap<String, String> = HashMap::new();
    for u in hir.select_units(opts.program.as_deref())? {
        let (rows, extra) = exec(u)?;
        write_unit_report(hir, u, &rows, &extra, out)?;
        if let Some(dir) = opts.output_dir.as_deref() {
            let unit = &hir.units[u].name;
            for row in &rows {
                let file = dir.join(format!("{}.npy", hir.tensors[row.tensor].name)).display().to_string();
                if let Some(prev) = files.insert(file.clone(), unit.clone()) {
                    eprintln!(
                        "warning[W0702]: `{file}` written by `{prev}` is overwritten by `{unit}` (use --program to run one unit)"
                    );
                }
            }
        }
    }
    Ok(())
}

/// E0328: a 16-bit tensor takes only arrays of its own dtype, and a 16-bit array
/// goes only to a tensor of its type; values are never converted or reinterpreted
/// silently across a 16-bit type.
fn half_dtype_mismatch(
    name: &str,
    path: &std::path::Path,
    want: crate::sema::hir::ElemType,
    got: crate::sema::hir::ElemType,
) -> CommandError {
    let descr = |e: crate::sema::hir::ElemType| match e {
        crate::sema::hir::ElemType::BF16 => "bf16 (`<u2` bit patterns)",
        crate::sema::hir::ElemType::F16 => "f16 (`<f2`)",
        e => e.name(),
    };
    fail(
        "E0328",
        format!("`--input {name}={}`: `{name}` is {} but the file holds {}", path.display(), descr(want), descr(got)),
        Some(match want {
            crate::sema::hir::ElemType::BF16 => {
                "save bf16 arrays as their bits: `np.save(f, x.astype(ml_dtypes.bfloat16).view(np.uint16))`".to_string()
            }
            crate::sema::hir::ElemType::F16 => "save it as float16: `np.save(f, x.astype(np.float16))`".to_string(),
            w => format!("convert it to {} before saving, or declare `{name}` with the file's type", w.name()),
        }),
    )
}

fn role_name(r: Role) -> &'static str {
    match r {
        Role::Input => "an input",
        Role::Output => "an output",
        Role::Temporary => "a temporary",
        Role::Param => "a parameter",
    }
}

/// Reads every `--input`, checking that it names an input some selected unit reads
/// and that the array has the tensor's shape. Values are rounded to the tensor's
/// element type.
fn load_inputs(hir: &Hir, units: &[UnitId], opts: &RunOptions) -> Result<HashMap<TensorId, Dense>, CommandError> {
    let mut loaded: HashMap<TensorId, Dense> = HashMap::new();
    for (name, path, targets) in resolve_inputs(hir, units, opts)? {
        let path = path.as_path();
        let (value, file_elem) = read_input(path)?;
        for t in targets {
            let tensor = &hir.tensors[t];
            if (tensor.elem.is_half() || file_elem.is_half()) && tensor.elem != file_elem {
                return Err(half_dtype_mismatch(&name, path, tensor.elem, file_elem));
            }
            let expected = hir.shape(t);
            if value.shape != expected {
                let dims = tensor
                    .dims
                    .iter()
                    .map(|&r| format!("{} ({})", hir.ranges[r].name, hir.ranges[r].size))
                    .collect::<Vec<_>>()
                    .join(", ");
                let hint = format!("the dimensions of `{name}` range over {dims}");
                return Err(input_shape_error(&name, path, &expected, &value.shape, Some(hint)));
            }
            let mut v = value.clone();
            for x in &mut v.data {
                *x = interp::round_to(tensor.elem, *x);
            }
            if let Some(msg) = interp::tensor_symmetry_violation(&v, tensor, SYMMETRY_RTOL) {
                eprintln!(
                    "warning[W0703]: input `{name}` from `{}` does not have its declared symmetry: {msg}",
                    path.display()
                );
            }
            if let Some(msg) = interp::block_violation(hir, t, &v) {
                eprintln!(
                    "warning[W0705]: input `{name}` from `{}` is nonzero outside its declared blocks: {msg}",
                    path.display()
                );
            }
            loaded.insert(t, v);
        }
    }
    Ok(loaded)
}

/// The tensors every `--input NAME=FILE` supplies, without reading the files:
/// (name, file, the inputs named so that some selected unit reads). E0703 no
/// such tensor, E0704 not an input, E0705 read by no unit run, E0710 given twice.
/// Distributed tiled runs read the files themselves, tile by tile.
pub fn resolve_inputs(
    hir: &Hir,
    units: &[UnitId],
    opts: &RunOptions,
) -> Result<Vec<(String, PathBuf, Vec<TensorId>)>, CommandError> {
    let mut read: Vec<TensorId> = Vec::new();
    for &u in units {
        for t in hir.unit_inputs(u) {
            if !read.contains(&t) {
                read.push(t);
            }
        }
    }
    let read_names = || names(read.iter().map(|&t| hir.tensors[t].name.clone()));
    let mut out = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for (name, path) in &opts.inputs {
        if seen.contains(&name.as_str()) {
            return Err(fail("E0710", format!("`--input {name}=...` is given more than once"), None));
        }
        seen.push(name);
        let candidates: Vec<TensorId> = hir.tensors.ids().filter(|&t| hir.tensors[t].name == *name).collect();
        if candidates.is_empty() {
            return Err(fail(
                "E0703",
                format!("`--input {name}={}`: there is no tensor named `{name}`", path.display()),
                Some(format!("the inputs read are: {}", read_names())),
            ));
        }
        let targets: Vec<TensorId> = candidates.iter().copied().filter(|t| read.contains(t)).collect();
        if targets.is_empty() {
            let t = candidates[0];
            let role = hir.tensors[t].role;
            return Err(if candidates.iter().any(|&c| hir.tensors[c].role.is_read_only()) {
                fail(
                    "E0705",
                    format!("`--input {name}={}`: no program run reads `{name}`", path.display()),
                    Some(format!("the inputs read are: {}", read_names())),
                )
            } else {
                fail(
                    "E0704",
                    format!("`--input {name}={}`: `{name}` is {}, not an input", path.display(), role_name(role)),
                    Some(format!("only inputs and parameters can be supplied; the inputs read are: {}", read_names())),
                )
            });
        }
        out.push((name.clone(), path.clone(), targets));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::test_hir::*;
    use crate::sema::hir::{ElemType, ModelId, SymGroup, SymKind};
    use std::path::Path;

    /// `matmul`: C[i,j] = A[i,p] * B[p,j] (i, j over 2 values, p over 3), and a
    /// second program `energy`: e = A[i,p] * A[i,p].
    fn two_programs() -> B {
        let mut b = B::default();
        let r2 = b.range("I", 2);
        let r3 = b.range("P", 3);
        b.indices("ij", r2);
        b.indices("p", r3);
        b.tensor("A", Role::Input, "ip");
        b.tensor("B", Role::Input, "pj");
        b.tensor("C", Role::Output, "ij");
        b.tensor("e", Role::Output, "");
        b.unit("matmul", UnitKind::Program);
        let f = vec![b.t("A", "ip"), b.t("B", "pj")];
        b.stmt("C", "ij", false, vec![term(1.0, f)]);
        b.unit("energy", UnitKind::Program);
        let f = vec![b.t("A", "ip"), b.t("A", "ip")];
        b.stmt("e", "", false, vec![term(1.0, f)]);
        b
    }

    fn run_to_string(hir: &Hir, opts: &RunOptions) -> Result<String, CommandError> {
        let mut out = Vec::new();
        run_interp(hir, opts, &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    fn write(dir: &Path, name: &str, shape: &[usize], data: &[f64]) -> PathBuf {
        let p = dir.join(name);
        npy::write_file(&p, &Dense::from_vec(shape.to_vec(), data.to_vec()), ElemType::F64).unwrap();
        p
    }

    #[test]
    fn summary_by_hand() {
        let x: Vec<f64> = (0..9).map(|k| k as f64).collect();
        let s = Summary::of(&x);
        assert_eq!(s.sum, 36.0);
        assert_eq!(s.norm2, 204f64.sqrt());
        // weights 1..7 then 1, 2: Σ k·w
        let expect: f64 = [0., 2., 6., 12., 20., 30., 42., 7., 16.].iter().sum();
        assert_eq!(s.checksum, expect);
        assert_eq!(fmt_num(s.checksum), "1.35000000000e2");
        assert_eq!(fmt_num(-0.00123456789012345), "-1.23456789012e-3");
        assert_eq!(Summary::of(&[]).checksum, 0.0);
        // Infinities and NaN as numpy reports them (the compensation used to
        // turn an infinite sum into NaN).
        let s = Summary::of(&[1.0, f64::INFINITY, 2.0]);
        assert_eq!((s.norm2, s.sum, s.checksum), (f64::INFINITY, f64::INFINITY, f64::INFINITY));
        assert_eq!(fmt_num(s.norm2), "inf");
        let s = Summary::of(&[f64::NEG_INFINITY, 1.0]);
        assert_eq!((s.norm2, s.sum), (f64::INFINITY, f64::NEG_INFINITY));
        assert_eq!(fmt_num(s.sum), "-inf");
        assert_eq!(fmt_num(Summary::of(&[f64::INFINITY, f64::NEG_INFINITY]).sum), "nan");
    }

    #[test]
    fn report_with_supplied_inputs() {
        let b = two_programs();
        let dir = tempfile::tempdir().unwrap();
        let a = write(dir.path(), "a.npy", &[2, 3], &[1., 2., 3., 4., 5., 6.]);
        let bb = write(dir.path(), "b.npy", &[3, 2], &[7., 8., 9., 10., 11., 12.]);
        let opts = RunOptions { inputs: vec![("A".into(), a), ("B".into(), bb)], ..Default::default() };
        let text = run_to_string(&b.hir, &opts).unwrap();
        // C = [[58, 64], [139, 154]]; checksum 58·1 + 64·2 + 139·3 + 154·4 = 1219.
        // e = 1 + 4 + 9 + 16 + 25 + 36 = 91.
        let norm = (58f64 * 58. + 64. * 64. + 139. * 139. + 154. * 154.).sqrt();
        assert_eq!(
            text,
            format!(
                "program matmul (1 statement)\n  C  f64[2, 2]  norm2 = {}  sum = 4.15000000000e2  checksum = 1.21900000000e3\n\
                 program energy (1 statement)\n  e  f64[]  norm2 = 9.10000000000e1  sum = 9.10000000000e1  checksum = 9.10000000000e1\n",
                fmt_num(norm)
            )
        );
    }

    #[test]
    fn random_runs_are_deterministic_and_seeded() {
        let b = two_programs();
        let opts = RunOptions { seed: 3, ..Default::default() };
        let one = run_to_string(&b.hir, &opts).unwrap();
        assert_eq!(one, run_to_string(&b.hir, &opts).unwrap());
        let other = run_to_string(&b.hir, &RunOptions { seed: 4, ..Default::default() }).unwrap();
        assert_ne!(one, other);
    }

    #[test]
    fn program_selection() {
        let b = two_programs();
        let opts = RunOptions { program: Some("energy".into()), ..Default::default() };
        let text = run_to_string(&b.hir, &opts).unwrap();
        assert!(text.starts_with("program energy (1 statement)\n  e  f64[]  norm2 = "), "{text}");
        assert_eq!(text.lines().count(), 2);

        let opts = RunOptions { program: Some("nope".into()), ..Default::default() };
        let e = run_to_string(&b.hir, &opts).unwrap_err();
        assert_eq!(e.code, "E0702");
        assert_eq!(e.message, "there is no program or model named `nope`");
        assert_eq!(e.hint.as_deref(), Some("the file defines: `matmul`, `energy`"));
    }

    #[test]
    fn input_errors() {
        let mut b = two_programs();
        b.tensor("X", Role::Temporary, "ij");
        let dir = tempfile::tempdir().unwrap();
        let good = write(dir.path(), "a.npy", &[2, 3], &[0.; 6]);
        let bad = write(dir.path(), "bad.npy", &[3, 2], &[0.; 6]);
        let run = |inputs: Vec<(&str, PathBuf)>, program: Option<&str>| {
            let opts = RunOptions {
                inputs: inputs.into_iter().map(|(n, p)| (n.to_string(), p)).collect(),
                program: program.map(str::to_string),
                ..Default::default()
            };
            run_to_string(&b.hir, &opts).unwrap_err()
        };
        let e = run(vec![("Q", good.clone())], None);
        assert_eq!((e.code, e.hint.as_deref()), ("E0703", Some("the inputs read are: `A`, `B`")));
        let e = run(vec![("C", good.clone())], None);
        assert_eq!(e.code, "E0704");
        assert!(e.message.ends_with("`C` is an output, not an input"), "{}", e.message);
        let e = run(vec![("X", good.clone())], None);
        assert!(e.message.ends_with("`X` is a temporary, not an input"), "{}", e.message);
        let e = run(vec![("B", good.clone())], Some("energy"));
        assert_eq!(e.code, "E0705");
        assert!(e.message.ends_with("no program run reads `B`"), "{}", e.message);
        let e = run(vec![("A", bad.clone())], None);
        assert_eq!(e.code, "E0707");
        assert!(
            e.message.ends_with("`A` has shape [2, 3] but the file holds an array of shape [3, 2]"),
            "{}",
            e.message
        );
        assert_eq!(e.hint.as_deref(), Some("the dimensions of `A` range over I (2), P (3)"));
        let e = run(vec![("A", dir.path().join("missing.npy"))], None);
        assert_eq!(e.code, "E0706");
        std::fs::write(dir.path().join("junk.npy"), b"hello").unwrap();
        let e = run(vec![("A", dir.path().join("junk.npy"))], None);
        assert_eq!(e.code, "E0706");
        assert!(e.message.contains("not a .npy file"), "{}", e.message);
        let e = run(vec![("A", good.clone()), ("A", good)], None);
        assert_eq!(e.code, "E0710");
    }

    #[test]
    fn too_large_is_an_error() {
        let mut b = B::default();
        let r = b.range("N", 1 << 16);
        b.indices("ab", r);
        b.tensor("A", Role::Input, "ab");
        b.tensor("s", Role::Output, "");
        let f = vec![b.t("A", "ab")];
        b.stmt("s", "", false, vec![term(1.0, f)]);
        let e = run_to_string(&b.hir, &RunOptions::default()).unwrap_err();
        assert_eq!(e.code, "E0708");
        assert!(e.message.contains("tensor `A` would have 4294967296 elements"), "{}", e.message);
    }

    #[test]
    fn output_files_and_saved_inputs() {
        let mut b = two_programs();
        b.hir.tensors[TensorId::new(2)].elem = ElemType::F32; // C is f32
        let dir = tempfile::tempdir().unwrap();
        let out_dir = dir.path().join("out/nested");
        let opts = RunOptions { seed: 9, output_dir: Some(out_dir.clone()), save_inputs: true, ..Default::default() };
        let text = run_to_string(&b.hir, &opts).unwrap();
        assert!(text.contains("  C  f32[2, 2]  norm2 = "), "{text}");
        let (a, ea) = npy::read_file(&out_dir.join("A.npy")).unwrap();
        let (bb, _) = npy::read_file(&out_dir.join("B.npy")).unwrap();
        let (c, ec) = npy::read_file(&out_dir.join("C.npy")).unwrap();
        let (e, _) = npy::read_file(&out_dir.join("e.npy")).unwrap();
        assert_eq!((ea, ec), (ElemType::F64, ElemType::F32));
        assert_eq!(a, interp::fill_random(&b.hir, TensorId::new(0), 9).unwrap());
        for i in 0..2 {
            for j in 0..2 {
                let x: f64 = (0..3).map(|p| a.get(&[i, p]) * bb.get(&[p, j])).sum();
                assert!((c.get(&[i, j]) - x).abs() <= 1e-6 * x.abs().max(1e-3));
            }
        }
        let x: f64 = a.data.iter().map(|v| v * v).sum();
        assert!((e.data[0] - x).abs() < 1e-14);
        // The printed checksum is that of the f32 values in the file.
        let s = Summary::of(&c.data);
        assert!(text.contains(&format!("checksum = {}\n", fmt_num(s.checksum))), "{text}");
    }

    #[test]
    fn supplied_input_is_used_and_random_ones_fill_the_rest() {
        let b = two_programs();
        let dir = tempfile::tempdir().unwrap();
        let a = write(dir.path(), "a.npy", &[2, 3], &[1., 0., 0., 0., 1., 0.]);
        let out_dir = dir.path().join("o");
        let opts = RunOptions {
            seed: 1,
            inputs: vec![("A".into(), a)],
            output_dir: Some(out_dir.clone()),
            program: Some("matmul".into()),
            ..Default::default()
        };
        run_to_string(&b.hir, &opts).unwrap();
        let (c, _) = npy::read_file(&out_dir.join("C.npy")).unwrap();
        let bb = interp::fill_random(&b.hir, TensorId::new(1), 1).unwrap();
        // A selects rows 0 and 1 of B.
        assert_eq!(c.data, bb.data[..4].to_vec());
        assert!(!out_dir.join("A.npy").exists());
    }

    #[test]
    fn symmetric_output_checks() {
        let mut b = B::default();
        let r = b.range("N", 3);
        b.indices("ijk", r);
        b.tensor("A", Role::Input, "ik");
        let sym = vec![SymGroup { kind: SymKind::Symmetric, positions: vec![0, 1] }];
        b.tensor_sym("S", Role::Output, "ij", sym);
        // S[i,j] = A[i,k] * A[j,k] is symmetric; no warning (stderr not captured,
        // but the check itself is exercised).
        let f = vec![b.t("A", "ik"), b.t("A", "jk")];
        b.stmt("S", "ij", false, vec![term(1.0, f)]);
        let text = run_to_string(&b.hir, &RunOptions::default()).unwrap();
        assert!(text.starts_with("program test (1 statement)\n  S  f64[3, 3]"), "{text}");
        let inputs = interp::random_inputs(&b.hir, UnitId::new(0), 0).unwrap();
        let out = interp::run_unit(&b.hir, UnitId::new(0), &inputs).unwrap();
        assert_eq!(
            interp::symmetry_violation(
                &out[&TensorId::new(1)],
                &b.hir.tensors[TensorId::new(1)].symmetry,
                SYMMETRY_RTOL
            ),
            None
        );
    }

    #[test]
    fn unit_without_outputs_and_model_header() {
        let mut b = B::default();
        let r = b.range("N", 2);
        b.indices("i", r);
        b.tensor("A", Role::Param, "i");
        b.tensor("T", Role::Temporary, "i");
        b.unit("mlp", UnitKind::Model(ModelId::new(0)));
        let f = vec![b.t("A", "i")];
        b.stmt("T", "i", false, vec![term(1.0, f.clone()), term(2.0, f)]);
        let text = run_to_string(&b.hir, &RunOptions::default()).unwrap();
        assert_eq!(text, "model mlp (1 statement)\n  (no outputs)\n");
    }
}
