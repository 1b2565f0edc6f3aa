//! Sizes of run-time ranges (`range O;`).
//!
//! A run-time range's size is a parameter of the program. In the HIR it is a range
//! with `SizeKind::Runtime` whose `size` holds an *assumed* size, so that every pass
//! (costs, contraction orders, fusion, plans, fast paths) works unchanged:
//!
//! * [`bind_sizes`] fixes ranges at the sizes a run is given (`tcc run --size`): they
//!   become `SizeKind::Fixed`, and the program is then an ordinary fixed-size one.
//!   [`bind_all_sizes`] also requires that no run-time range is left.
//! * [`assume_sizes`] only changes the assumption (`--assume`): the ranges stay
//!   run-time ranges.
//! * Without either, the assumed size is [`DEFAULT_ASSUMED_SIZE`];
//!   [`assumed_sizes_note`] says which sizes a report is based on.
//! * [`infer_sizes`] reads sizes off the shapes of supplied arrays (`--input`).
//!
//! Error codes (`book/src/diagnostics.md`): E0740 unknown range, E0741 a size for a
//! fixed range that differs from its declared size, E0742 size 0, E0743 a tensor
//! too large for its sizes, E0744 two different sizes for one range, E0745 a
//! run-time range without a size, E0746 a malformed `NAME=SIZE`, E0747 `tcc build`
//! with unbound run-time ranges, E0748 an array whose rank is not its tensor's.

use super::hir::{Assumed, Hir, RangeId, SizeKind};
use crate::error::CommandError;
use std::collections::BTreeMap;

/// The size assumed for a run-time range when nobody says (`--assume`): costs and
/// plans of `tcc opt` and `tcc plan` are then those of this size, and they say so.
pub const DEFAULT_ASSUMED_SIZE: usize = 32;

fn fail(code: &'static str, message: impl Into<String>, hint: Option<String>) -> CommandError {
    CommandError::new(code, message, hint)
}

/// The file-level range of this name (model `dims` are not sizes of the program).
fn file_range(hir: &Hir, name: &str) -> Option<RangeId> {
    hir.ranges.ids().find(|&r| hir.ranges[r].model.is_none() && hir.ranges[r].name == name)
}

fn names_of(hir: &Hir, ranges: &[RangeId]) -> String {
    if ranges.is_empty() {
        return "none".to_string();
    }
    ranges.iter().map(|&r| format!("`{}`", hir.ranges[r].name)).collect::<Vec<_>>().join(", ")
}

/// The range a `NAME=SIZE` names, or E0740.
fn lookup(hir: &Hir, name: &str, flag: &str) -> Result<RangeId, CommandError> {
    if let Some(r) = file_range(hir, name) {
        return Ok(r);
    }
    let runtime = hir.runtime_ranges();
    let hint = if hir.ranges.iter().any(|r| r.model.is_some() && r.name == name) {
        format!("`{name}` is a model dim; `tcc plan-model --dim {name}=N` sets those")
    } else if let Some(i) = hir.indices.iter().find(|i| i.name == name) {
        format!("`{name}` is an index of range `{}`; give the range's size", hir.ranges[i.range].name)
    } else {
        format!("the ranges whose size is given at run time are: {}", names_of(hir, &runtime))
    };
    Err(fail("E0740", format!("`{flag} {name}=...`: there is no range named `{name}`"), Some(hint)))
}

/// Checks a size against a range (E0741 for a fixed range of another size, E0742 for
/// size 0) and reports whether the range is a run-time range.
fn check_size(hir: &Hir, r: RangeId, size: usize, flag: &str) -> Result<bool, CommandError> {
    let range = &hir.ranges[r];
    if size == 0 {
        return Err(fail(
            "E0742",
            format!("`{flag} {}=0`: a range has at least one value", range.name),
            Some("sizes are ≥ 1; tcc does not run programs over empty ranges".into()),
        ));
    }
    if !range.is_runtime() && range.size != size {
        return Err(fail(
            "E0741",
            format!("`{flag} {}={size}`: range `{}` is declared with size {}", range.name, range.name, range.size),
            Some(format!(
                "only ranges declared without a size (`range {};`) take a size when the program runs",
                range.name
            )),
        ));
    }
    Ok(range.is_runtime())
}

/// E0743: a tensor whose element count overflows `usize` or whose bytes overflow
/// `isize` with the sizes now in `hir` (run-time ranges count with their size only
/// when `count_runtime`).
fn check_tensor_sizes(hir: &Hir, count_runtime: bool) -> Result<(), CommandError> {
    for t in &hir.tensors {
        let mut n: Option<usize> = Some(1);
        for &r in &t.dims {
            let range = &hir.ranges[r];
            let s = if range.is_runtime() && !count_runtime { 1 } else { range.size };
            n = n.and_then(|n| n.checked_mul(s));
        }
        let bytes = n.and_then(|n| n.checked_mul(t.elem.size_bytes())).filter(|&b| b <= isize::MAX as usize);
        if bytes.is_none() {
            let dims: Vec<String> =
                t.dims.iter().map(|&r| format!("{} = {}", hir.ranges[r].name, hir.ranges[r].size)).collect();
            return Err(fail(
                "E0743",
                format!("tensor `{}` is too large with these sizes ({})", t.name, dims.join(", ")),
                Some("its number of elements (or bytes) does not fit in a machine word; use smaller sizes".into()),
            ));
        }
    }
    Ok(())
}

/// The program with the ranges named in `sizes` fixed at those sizes: run-time
/// ranges become `SizeKind::Fixed`; a fixed range may be named with its own size.
/// Ranges not named are left as they are (see [`bind_all_sizes`]).
pub fn bind_sizes(hir: &Hir, sizes: &BTreeMap<String, usize>) -> Result<Hir, CommandError> {
    let mut out = hir.clone();
    for (name, &size) in sizes {
        let r = lookup(hir, name, "--size")?;
        if check_size(hir, r, size, "--size")? {
            out.ranges[r].size = size;
            out.ranges[r].size_kind = SizeKind::Fixed;
        }
    }
    check_tensor_sizes(&out, false)?;
    check_affine_bounds(&out)?;
    Ok(out)
}

/// E0749: with the sizes now bound, an affine subscript (`I[y+r]`) can leave its
/// dimension (`sema` proved the subscripts over fixed ranges; these waited for
/// the sizes).
fn check_affine_bounds(hir: &Hir) -> Result<(), CommandError> {
    let Some((a, k, lo, hi)) = hir.affine_out_of_bounds() else { return Ok(()) };
    let t = &hir.tensors[a.tensor];
    let dim = &hir.ranges[t.dims[k]];
    let sizes: Vec<String> = a.subs[k]
        .terms
        .iter()
        .map(|&(_, i)| format!("{} = {}", hir.ranges[hir.indices[i].range].name, hir.index_size(i)))
        .collect();
    Err(fail(
        "E0749",
        format!(
            "with these sizes subscript `{}` of `{}` ranges over {lo}..={hi}, outside dimension {} (`{}` = {}, 0..{})",
            a.subs[k].display(hir),
            t.name,
            k + 1,
            dim.name,
            dim.size,
            dim.size.saturating_sub(1)
        ),
        Some(format!(
            "the subscript's largest value must be below the dimension's size ({}): give `{}` a size of at least {} or smaller sizes to its indices",
            sizes.join(", "),
            dim.name,
            hi + 1
        )),
    ))
}

/// [`bind_sizes`], then E0745 if a run-time range is left without a size: what a
/// command that computes values needs.
pub fn bind_all_sizes(hir: &Hir, sizes: &BTreeMap<String, usize>) -> Result<Hir, CommandError> {
    let out = bind_sizes(hir, sizes)?;
    require_no_runtime_ranges(&out)?;
    Ok(out)
}

/// E0745 when a run-time range has no size.
pub fn require_no_runtime_ranges(hir: &Hir) -> Result<(), CommandError> {
    let missing = hir.runtime_ranges();
    let Some(&first) = missing.first() else { return Ok(()) };
    let plural = if missing.len() == 1 { "range" } else { "ranges" };
    let example: Vec<String> = missing.iter().map(|&r| format!("{}=...", hir.ranges[r].name)).collect();
    Err(fail(
        "E0745",
        format!("no size for the run-time {plural} {}", names_of(hir, &missing)),
        Some(format!(
            "give it with `--size {}`, or supply an input with a dimension over `{}` (`--input NAME=FILE.npy`)",
            example.join(","),
            hir.ranges[first].name
        )),
    ))
}

/// The program with the sizes *assumed* for the named run-time ranges (`--assume`):
/// they stay run-time ranges; costs, plans and fast paths use these sizes. Naming a
/// fixed range is allowed only with its own size.
pub fn assume_sizes(hir: &Hir, sizes: &BTreeMap<String, usize>) -> Result<Hir, CommandError> {
    let mut out = hir.clone();
    for (name, &size) in sizes {
        let r = lookup(hir, name, "--assume")?;
        if check_size(hir, r, size, "--assume")? {
            out.ranges[r].size = size;
            out.ranges[r].size_kind = SizeKind::Runtime(Assumed::Given);
        }
    }
    check_tensor_sizes(&out, true)?;
    Ok(out)
}

/// A line saying which sizes a report assumes for run-time ranges, or `None` when
/// the program has none: `sizes assumed for run-time ranges: O = 32 (default), V =
/// 400 (--assume)`.
pub fn assumed_sizes_note(hir: &Hir) -> Option<String> {
    let runtime = hir.runtime_ranges();
    if runtime.is_empty() {
        return None;
    }
    let parts: Vec<String> = runtime
        .iter()
        .map(|&r| {
            let range = &hir.ranges[r];
            let why = match range.size_kind {
                SizeKind::Runtime(Assumed::Given) => "--assume",
                _ => "default",
            };
            format!("{} = {} ({why})", range.name, range.size)
        })
        .collect();
    Some(format!("sizes assumed for run-time ranges: {}", parts.join(", ")))
}

/// Parses `NAME=SIZE` entries (`--size O=40 --size V=400`, or `O=40,V=400` split at
/// commas); the same name twice with different sizes is E0744, a malformed entry
/// E0746.
pub fn parse_sizes(flag: &str, specs: &[String]) -> Result<BTreeMap<String, usize>, CommandError> {
    let mut out = BTreeMap::new();
    for spec in specs.iter().flat_map(|s| s.split(',')) {
        let spec = spec.trim();
        if spec.is_empty() {
            continue;
        }
        let parsed = spec
            .split_once('=')
            .map(|(n, s)| (n.trim(), s.trim()))
            .filter(|(n, _)| !n.is_empty())
            .and_then(|(n, s)| s.parse::<usize>().ok().map(|s| (n, s)));
        let Some((name, size)) = parsed else {
            return Err(fail(
                "E0746",
                format!("`{flag} {spec}` is not of the form NAME=SIZE"),
                Some(format!("for example `{flag} O=40,V=400`; sizes are whole numbers ≥ 1")),
            ));
        };
        match out.insert(name.to_string(), size) {
            Some(prev) if prev != size => {
                return Err(fail(
                    "E0744",
                    format!("range `{name}` is given two sizes: `{flag} {name}={prev}` and `{flag} {name}={size}`"),
                    None,
                ))
            }
            _ => {}
        }
    }
    Ok(out)
}

/// The shape of an array supplied for a tensor, and where it comes from (for
/// messages, e.g. "`--input A=a.npy`").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuppliedShape {
    pub tensor: String,
    pub shape: Vec<usize>,
    pub origin: String,
}

/// The sizes of run-time ranges: those `given` (with `flag`, for messages) and those
/// read off the shapes of supplied arrays, for run-time ranges not given. A range
/// given two different sizes (by two arrays, or by `flag` and an array) is E0744,
/// naming both; an array whose rank is not its tensor's is E0748. Arrays for names
/// that are not read-only tensors are left for the caller to report.
pub fn infer_sizes(
    hir: &Hir,
    flag: &str,
    given: &BTreeMap<String, usize>,
    supplied: &[SuppliedShape],
) -> Result<BTreeMap<String, usize>, CommandError> {
    let mut known: BTreeMap<String, (usize, String)> =
        given.iter().map(|(n, &s)| (n.clone(), (s, format!("`{flag} {n}={s}`")))).collect();
    for s in supplied {
        for t in &hir.tensors {
            if t.name != s.tensor || !t.role.is_read_only() || !t.dims.iter().any(|&r| hir.ranges[r].is_runtime()) {
                continue;
            }
            if t.dims.len() != s.shape.len() {
                return Err(fail(
                    "E0748",
                    format!(
                        "{}: `{}` has {} dimensions but the array has shape {:?}",
                        s.origin,
                        t.name,
                        t.dims.len(),
                        s.shape
                    ),
                    None,
                ));
            }
            for (k, (&r, &n)) in t.dims.iter().zip(&s.shape).enumerate() {
                let range = &hir.ranges[r];
                if !range.is_runtime() {
                    continue;
                }
                let origin = format!("dimension {k} of {}", s.origin);
                match known.get(&range.name) {
                    Some((m, prev)) if *m != n => {
                        return Err(fail(
                            "E0744",
                            format!("range `{}` is given two sizes: {m} by {prev} and {n} by {origin}", range.name),
                            Some(format!(
                                "a run-time range has one size: every dimension over `{}`, in every input and in `{flag}`, has it",
                                range.name
                            )),
                        ))
                    }
                    Some(_) => {}
                    None => {
                        known.insert(range.name.clone(), (n, origin));
                    }
                }
            }
        }
    }
    Ok(known.into_iter().map(|(n, (s, _))| (n, s)).collect())
}

/// `tcc opt`, `tcc plan`, `tcc build`: the ranges named by `--size` (`size_specs`)
/// bound, then the sizes of `--assume` (`assume_specs`) assumed.
pub fn bind_and_assume(hir: &Hir, size_specs: &[String], assume_specs: &[String]) -> Result<Hir, CommandError> {
    let bound = bind_sizes(hir, &parse_sizes("--size", size_specs)?)?;
    assume_sizes(&bound, &parse_sizes("--assume", assume_specs)?)
}

/// E0747: the GPU build (`tcc build --target cuda`) writes a host shim for fixed
/// sizes; CPU libraries take run-time sizes as arguments.
pub fn require_fixed_for_build(hir: &Hir) -> Result<(), CommandError> {
    let runtime = hir.runtime_ranges();
    if runtime.is_empty() {
        return Ok(());
    }
    let example: Vec<String> = runtime.iter().map(|&r| format!("{}=N", hir.ranges[r].name)).collect();
    Err(fail(
        "E0747",
        format!(
            "cannot build a GPU library for the run-time {} {}: the CUDA host shim is generated for fixed sizes",
            if runtime.len() == 1 { "range" } else { "ranges" },
            names_of(hir, &runtime)
        ),
        Some(format!(
            "pass --size to build a GPU library for fixed sizes, e.g. `--size {}` (CPU libraries take the sizes as arguments)",
            example.join(",")
        )),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hir(src: &str) -> Hir {
        let (h, d) = crate::compile(src, "t");
        h.unwrap_or_else(|| panic!("{d:?}"))
    }

    fn sizes(list: &[(&str, usize)]) -> BTreeMap<String, usize> {
        list.iter().map(|&(n, s)| (n.to_string(), s)).collect()
    }

    const SRC: &str = "range O;\nrange V = 5;\nindex i, j : O;\nindex a : V;\n\
        input tensor A[i,a];\noutput tensor C[i,j];\nC[i,j] = A[i,a] * A[j,a];\n";

    #[test]
    fn runtime_range_is_parsed_with_the_default_assumption() {
        let h = hir(SRC);
        assert_eq!(h.runtime_ranges(), vec![RangeId::new(0)]);
        assert_eq!(h.ranges[RangeId::new(0)].size, DEFAULT_ASSUMED_SIZE);
        assert_eq!(h.ranges[RangeId::new(0)].size_kind, SizeKind::Runtime(Assumed::Default));
        assert_eq!(h.ranges[RangeId::new(1)].size_kind, SizeKind::Fixed);
        assert_eq!(assumed_sizes_note(&h).unwrap(), "sizes assumed for run-time ranges: O = 32 (default)");
    }

    #[test]
    fn bind_fixes_the_size() {
        let h = bind_all_sizes(&hir(SRC), &sizes(&[("O", 7)])).unwrap();
        assert!(h.runtime_ranges().is_empty());
        assert_eq!(h.shape(crate::sema::hir::TensorId::new(1)), vec![7, 7]);
        assert_eq!(assumed_sizes_note(&h), None);
        // A fixed range may be named with its own size.
        assert!(bind_sizes(&hir(SRC), &sizes(&[("O", 1), ("V", 5)])).is_ok());
    }

    #[test]
    fn bind_errors() {
        let h = hir(SRC);
        let code = |s: &[(&str, usize)]| bind_all_sizes(&h, &sizes(s)).unwrap_err().code;
        assert_eq!(code(&[("X", 3)]), "E0740");
        assert_eq!(code(&[("O", 3), ("V", 6)]), "E0741");
        assert_eq!(code(&[("O", 0)]), "E0742");
        assert_eq!(code(&[("O", usize::MAX / 2)]), "E0743");
        assert_eq!(code(&[]), "E0745");
        // A partial binding is fine for bind_sizes.
        assert!(bind_sizes(&h, &sizes(&[])).unwrap().ranges[RangeId::new(0)].is_runtime());
        let e = bind_all_sizes(&h, &sizes(&[])).unwrap_err();
        assert!(e.hint.unwrap().contains("--size O=..."));
        // An index name gets a hint about its range.
        let e = bind_sizes(&h, &sizes(&[("i", 3)])).unwrap_err();
        assert!(e.hint.unwrap().contains("index of range `O`"));
    }

    #[test]
    fn bytes_overflow_isize() {
        // 2^60 f64 elements fit in usize but not their bytes in isize.
        let h = hir("range O;\nindex i : O;\ninput tensor A[i];\noutput tensor s;\ns = A[i];\n");
        assert_eq!(bind_all_sizes(&h, &sizes(&[("O", 1 << 60)])).unwrap_err().code, "E0743");
        assert!(bind_all_sizes(&h, &sizes(&[("O", 1 << 59)])).is_ok());
    }

    #[test]
    fn assume_keeps_the_range_runtime() {
        let h = assume_sizes(&hir(SRC), &sizes(&[("O", 400)])).unwrap();
        assert_eq!(h.ranges[RangeId::new(0)].size, 400);
        assert_eq!(h.ranges[RangeId::new(0)].size_kind, SizeKind::Runtime(Assumed::Given));
        assert_eq!(assumed_sizes_note(&h).unwrap(), "sizes assumed for run-time ranges: O = 400 (--assume)");
        assert_eq!(assume_sizes(&hir(SRC), &sizes(&[("V", 4)])).unwrap_err().code, "E0741");
        assert_eq!(assume_sizes(&hir(SRC), &sizes(&[("O", 0)])).unwrap_err().code, "E0742");
        assert_eq!(require_fixed_for_build(&h).unwrap_err().code, "E0747");
    }

    #[test]
    fn parse() {
        let p = parse_sizes("--size", &["O=40,V=400".into(), "W=1".into()]).unwrap();
        assert_eq!(p, sizes(&[("O", 40), ("V", 400), ("W", 1)]));
        assert_eq!(parse_sizes("--size", &["O=4".into(), "O=4".into()]).unwrap(), sizes(&[("O", 4)]));
        assert_eq!(parse_sizes("--size", &["O=4".into(), "O=5".into()]).unwrap_err().code, "E0744");
        for bad in ["O", "O=", "=4", "O=-1", "O=x"] {
            assert_eq!(parse_sizes("--size", &[bad.into()]).unwrap_err().code, "E0746", "{bad}");
        }
    }

    #[test]
    fn infer_from_shapes() {
        let h = hir(SRC);
        let shape = |t: &str, s: &[usize], o: &str| SuppliedShape {
            tensor: t.into(),
            shape: s.to_vec(),
            origin: format!("`--input {t}={o}`"),
        };
        let got = infer_sizes(&h, "--size", &sizes(&[]), &[shape("A", &[6, 5], "a.npy")]).unwrap();
        assert_eq!(got, sizes(&[("O", 6)]));
        // Agreement with --size is fine; a conflict names both.
        assert!(infer_sizes(&h, "--size", &sizes(&[("O", 6)]), &[shape("A", &[6, 5], "a.npy")]).is_ok());
        let e = infer_sizes(&h, "--size", &sizes(&[("O", 4)]), &[shape("A", &[6, 5], "a.npy")]).unwrap_err();
        assert_eq!(e.code, "E0744");
        assert!(e.message.contains("`--size O=4`") && e.message.contains("`--input A=a.npy`"), "{}", e.message);
        let e = infer_sizes(&h, "--size", &sizes(&[]), &[shape("A", &[6], "a.npy")]).unwrap_err();
        assert_eq!(e.code, "E0748");
        // Not an input: left to the caller.
        assert!(infer_sizes(&h, "--size", &sizes(&[]), &[shape("C", &[6], "c.npy")]).unwrap().is_empty());
    }

    #[test]
    fn infer_conflict_within_one_array() {
        let h = hir("range O;\nindex i, j : O;\ninput tensor A[i,j];\noutput tensor s;\ns = A[i,i];\n");
        let s = SuppliedShape { tensor: "A".into(), shape: vec![3, 4], origin: "`--input A=a.npy`".into() };
        let e = infer_sizes(&h, "--size", &sizes(&[]), &[s]).unwrap_err();
        assert_eq!(e.code, "E0744");
        assert!(e.message.contains("dimension 0") && e.message.contains("dimension 1"), "{}", e.message);
    }
}
