//! `tcc run --check` on random valid programs. The fuzz bytes drive a generator of
//! small programs that must be valid: 1–3 ranges of sizes 1–5, inputs, outputs and
//! temporaries of f64 (some f32, some inputs (anti)symmetric), 1–4 statements (`=`
//! or `+=`) of 1–3 terms of 1–3 factors with coefficients, contractions,
//! diagonals, batch indices, parenthesised sums, reads of earlier results and of the
//! target itself, and element-wise functions (on non-negative arguments: when a
//! program has functions every input is non-negative and no coefficient is
//! negative, so that nothing cancels). Asserts that the program compiles
//! (`tcc::compile`; a rejection is a bug of the generator or of the front end),
//! that the reference interpreter runs it, that the LLVM JIT runs it (a fusion
//! mode, memory limit, GETT and thread thresholds and run-time range sizes chosen by
//! the bytes), and that the outputs agree as `tcc run --check` requires
//! (`tcc::run::compare::check_outputs`: relative 1e-10 for f64, 1e-4 when f32 is
//! stored, cancellation forgiven only without functions).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use tcc::codegen::llvm::{jit_run_sized, Options};
use tcc::interp::{random_inputs, run_unit};
use tcc::lir::fusion::FuseMode;
use tcc::sema::hir::RangeId;

/// The fuzz bytes as a stream of choices (zeros once they run out).
struct Choices<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    /// A number in `0..n`.
    fn pick(&mut self, n: usize) -> usize {
        self.byte() as usize % n.max(1)
    }
    /// True with probability about `k / 8`.
    fn chance(&mut self, k: u8) -> bool {
        self.byte() % 8 < k
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Role {
    Input,
    Output,
    Temporary,
}

struct Tensor {
    name: String,
    role: Role,
    f32: bool,
    dims: Vec<usize>,
    written: bool,
}

/// Index variables per range: `i0..i4`, `a0..a4`, `p0..p4`.
const VARS_PER_RANGE: usize = 5;
const LETTERS: [char; 3] = ['i', 'a', 'p'];

fn var(r: usize, k: usize) -> String {
    format!("{}{k}", LETTERS[r])
}

struct Gen<'c, 'd> {
    c: &'c mut Choices<'d>,
    nranges: usize,
    tensors: Vec<Tensor>,
    /// Whether functions are used: every input non-negative, no negative coefficient.
    positive: bool,
    /// Symmetry suffixes of input declarations.
    sym: HashMap<usize, String>,
}

/// Uses of each variable `(range, k)` in the term being built.
type Counts = HashMap<(usize, usize), usize>;

impl Gen<'_, '_> {
    fn new_tensor(&mut self, prefix: &str, role: Role, dims: Vec<usize>) -> usize {
        let n = self.tensors.iter().filter(|t| t.role == role).count();
        let f32 = self.c.chance(2);
        self.tensors.push(Tensor { name: format!("{prefix}{n}"), role, f32, dims, written: false });
        let t = self.tensors.len() - 1;
        // An input with two dimensions of one range may be declared symmetric.
        if role == Role::Input && self.c.chance(2) {
            let d = self.tensors[t].dims.clone();
            for x in 0..d.len() {
                for y in x + 1..d.len() {
                    if d[x] == d[y] && !self.sym.contains_key(&t) {
                        let names = decl_names(&d);
                        let kind = if !self.positive && self.c.chance(4) { "antisymmetric" } else { "symmetric" };
                        self.sym.insert(t, format!(" {kind}({} {})", names[x], names[y]));
                    }
                }
            }
        }
        t
    }

    fn random_dims(&mut self, max: usize) -> Vec<usize> {
        let n = self.c.pick(max + 1);
        (0..n).map(|_| self.c.pick(self.nranges)).collect()
    }

    /// A variable of range `r` for one more use in the term, or `None` when every
    /// variable of `r` is used up (a summed one may appear at most twice).
    fn choose_var(&mut self, r: usize, lhs: &[(usize, usize)], counts: &Counts) -> Option<(usize, usize)> {
        let lhs_r: Vec<(usize, usize)> = lhs.iter().copied().filter(|v| v.0 == r).collect();
        if !lhs_r.is_empty() && self.c.chance(4) {
            return Some(lhs_r[self.c.pick(lhs_r.len())]);
        }
        let free: Vec<(usize, usize)> = (0..VARS_PER_RANGE)
            .map(|k| (r, k))
            .filter(|v| !lhs.contains(v) && counts.get(v).copied().unwrap_or(0) < 2)
            .collect();
        let once: Vec<(usize, usize)> = free.iter().copied().filter(|v| counts.get(v) == Some(&1)).collect();
        if !once.is_empty() && self.c.chance(5) {
            return Some(once[self.c.pick(once.len())]);
        }
        if !free.is_empty() {
            // the first unused one, or any
            if let Some(v) = free.iter().find(|v| !counts.contains_key(v)) {
                if self.c.chance(6) {
                    return Some(*v);
                }
            }
            return Some(free[self.c.pick(free.len())]);
        }
        (!lhs_r.is_empty()).then(|| lhs_r[self.c.pick(lhs_r.len())])
    }

    /// Variables for the dimensions `dims`, counted in `counts`; `None` (and
    /// `counts` unchanged) when they cannot be had.
    fn fill(&mut self, dims: &[usize], lhs: &[(usize, usize)], counts: &mut Counts) -> Option<Vec<(usize, usize)>> {
        let mut trial = counts.clone();
        let mut out = Vec::new();
        for &r in dims {
            let v = self.choose_var(r, lhs, &trial)?;
            *trial.entry(v).or_insert(0) += 1;
            out.push(v);
        }
        *counts = trial;
        Some(out)
    }

    /// A readable tensor (an input, or a result written by an earlier statement;
    /// the target itself only for `+=` after it was written), or a new input.
    fn operand(&mut self, target: usize, accumulate: bool) -> usize {
        let readable: Vec<usize> = (0..self.tensors.len())
            .filter(|&t| {
                let x = &self.tensors[t];
                x.role == Role::Input || (x.written && (t != target || accumulate))
            })
            .collect();
        if !readable.is_empty() && self.c.chance(3) {
            return readable[self.c.pick(readable.len())];
        }
        let dims = self.random_dims(3);
        self.new_tensor("A", Role::Input, dims)
    }

    fn reference(&self, t: usize, vars: &[(usize, usize)]) -> String {
        let x = &self.tensors[t];
        if x.dims.is_empty() {
            return x.name.clone();
        }
        let v: Vec<String> = vars.iter().map(|&(r, k)| var(r, k)).collect();
        format!("{}[{}]", x.name, v.join(","))
    }

    fn coefficient(&mut self) -> &'static str {
        ["2", "0.5", "3", "1.25", "0.1"][self.c.pick(5)]
    }

    /// One factor (its text) of a term, or `None` when no index is left for it.
    fn factor(
        &mut self,
        target: usize,
        accumulate: bool,
        lhs: &[(usize, usize)],
        counts: &mut Counts,
    ) -> Option<String> {
        match self.c.pick(8) {
            // f(product of 1-2 operands): counted as written (flat)
            0 | 1 if self.positive => {
                let n = 1 + self.c.pick(2);
                let mut parts = Vec::new();
                for _ in 0..n {
                    let t = self.operand(target, accumulate);
                    let dims = self.tensors[t].dims.clone();
                    if let Some(v) = self.fill(&dims, lhs, counts) {
                        parts.push(self.reference(t, &v));
                    }
                }
                if parts.is_empty() {
                    return None;
                }
                let p = parts.join(" * ");
                Some(match self.c.pick(10) {
                    0 => format!("exp(-0.5 * {p})"),
                    1 => format!("sqrt({p})"),
                    2 => format!("tanh({p})"),
                    3 => format!("sigmoid({p})"),
                    4 => format!("relu({p})"),
                    5 => format!("abs({p})"),
                    6 => format!("silu({p})"),
                    7 => format!("gelu({p})"),
                    8 => format!("recip(sigmoid({p}))"),
                    _ => format!("exp(-{p})"),
                })
            }
            // (X[v] ± c * Y[v']) with v' a permutation of v: one use of each variable
            2 => {
                let t = self.operand(target, accumulate);
                let dims = self.tensors[t].dims.clone();
                let v = self.fill(&dims, lhs, counts)?;
                // a permutation of v that keeps each position's range
                let mut w = v.clone();
                for x in 0..w.len() {
                    let y = self.c.pick(w.len());
                    if w[x].0 == w[y].0 {
                        w.swap(x, y);
                    }
                }
                let u = if self.c.chance(4) {
                    t
                } else {
                    let d: Vec<usize> = w.iter().map(|x| x.0).collect();
                    let existing: Vec<usize> = (0..self.tensors.len())
                        .filter(|&s| {
                            let x = &self.tensors[s];
                            x.dims == d && (x.role == Role::Input || (x.written && (s != target || accumulate)))
                        })
                        .collect();
                    if !existing.is_empty() && self.c.chance(4) {
                        existing[self.c.pick(existing.len())]
                    } else {
                        self.new_tensor("A", Role::Input, d)
                    }
                };
                let sign = if self.positive || self.c.chance(4) { "+" } else { "-" };
                let coef = if self.c.chance(3) { format!("{} * ", self.coefficient()) } else { String::new() };
                Some(format!("({} {sign} {coef}{})", self.reference(t, &v), self.reference(u, &w)))
            }
            _ => {
                let t = self.operand(target, accumulate);
                let dims = self.tensors[t].dims.clone();
                let v = self.fill(&dims, lhs, counts)?;
                Some(self.reference(t, &v))
            }
        }
    }

    fn statement(&mut self, out: &mut String, last: bool) {
        // the target: a new output or temporary, or one written before
        // (the last statement writes an output, so that every program has one)
        let written: Vec<usize> = (0..self.tensors.len())
            .filter(|&t| {
                let x = &self.tensors[t];
                x.written && (x.role == Role::Output || x.role == Role::Temporary && !last)
            })
            .collect();
        let target = if !written.is_empty() && self.c.chance(3) {
            written[self.c.pick(written.len())]
        } else {
            let role = if !last && self.c.chance(3) { Role::Temporary } else { Role::Output };
            let dims = self.random_dims(3);
            self.new_tensor(if role == Role::Output { "O" } else { "T" }, role, dims)
        };
        let accumulate = self.tensors[target].written && self.c.chance(5) || self.c.chance(1);
        // distinct variables on the left
        let mut lhs: Vec<(usize, usize)> = Vec::new();
        for &r in &self.tensors[target].dims.clone() {
            let free: Vec<usize> = (0..VARS_PER_RANGE).filter(|&k| !lhs.contains(&(r, k))).collect();
            lhs.push((r, free[self.c.pick(free.len())]));
        }
        let mut terms = Vec::new();
        for _ in 0..1 + self.c.pick(3) {
            let mut counts = Counts::new();
            let mut factors = Vec::new();
            if self.c.chance(3) {
                factors.push(self.coefficient().to_string());
            }
            for _ in 0..1 + self.c.pick(3) {
                if let Some(f) = self.factor(target, accumulate, &lhs, &mut counts) {
                    factors.push(f);
                }
            }
            // every variable of the left in every term
            let missing: Vec<(usize, usize)> = lhs.iter().copied().filter(|v| !counts.contains_key(v)).collect();
            if !missing.is_empty() || factors.iter().all(|f| f.parse::<f64>().is_ok()) {
                let t = self.new_tensor("A", Role::Input, missing.iter().map(|v| v.0).collect());
                factors.push(self.reference(t, &missing));
            }
            let mut term = factors.join(" * ");
            if self.c.chance(1) {
                term.push_str(" / 4");
            }
            terms.push(term);
        }
        let mut rhs = if !self.positive && self.c.chance(1) { format!("-{}", terms[0]) } else { terms[0].clone() };
        for t in &terms[1..] {
            let sign = if self.positive || self.c.chance(5) { "+" } else { "-" };
            write!(rhs, " {sign} {t}").unwrap();
        }
        let op = if accumulate { "+=" } else { "=" };
        writeln!(out, "{} {op} {rhs};", self.reference(target, &lhs)).unwrap();
        self.tensors[target].written = true;
    }
}

/// Declaration index names for `dims`: the first unused variables of each range.
fn decl_names(dims: &[usize]) -> Vec<String> {
    let mut used = [0usize; 3];
    dims.iter()
        .map(|&r| {
            used[r] += 1;
            var(r, used[r] - 1)
        })
        .collect()
}

/// The program text, the range sizes, and whether it is the non-negative kind.
fn generate(c: &mut Choices) -> (String, Vec<usize>, bool) {
    let nranges = 1 + c.pick(3);
    let sizes: Vec<usize> = (0..nranges).map(|_| 1 + c.pick(5)).collect();
    let positive = c.chance(3);
    let mut g = Gen { c, nranges, tensors: Vec::new(), positive, sym: HashMap::new() };
    let mut body = String::new();
    let n = 1 + g.c.pick(4);
    for s in 0..n {
        g.statement(&mut body, s + 1 == n);
    }
    let mut src = String::new();
    for (r, n) in sizes.iter().enumerate() {
        let vars: Vec<String> = (0..VARS_PER_RANGE).map(|k| var(r, k)).collect();
        writeln!(src, "range N{r} = {n};\nindex {} : N{r};", vars.join(", ")).unwrap();
    }
    for (t, x) in g.tensors.iter().enumerate() {
        let role = match x.role {
            Role::Input => "input",
            Role::Output => "output",
            Role::Temporary => "temporary",
        };
        let dims = if x.dims.is_empty() { String::new() } else { format!("[{}]", decl_names(&x.dims).join(",")) };
        let sym = g.sym.get(&t).map(String::as_str).unwrap_or("");
        writeln!(src, "{role} tensor {}{dims} : {}{sym};", x.name, if x.f32 { "f32" } else { "f64" }).unwrap();
    }
    src.push_str(&body);
    (src, sizes, positive)
}

fuzz_target!(|data: &[u8]| {
    let mut c = Choices { data, pos: 0 };
    let (src, _, positive) = generate(&mut c);
    if std::env::var_os("TCC_FUZZ_PRINT").is_some() {
        eprintln!("{src}");
    }
    let (hir, diags) = tcc::compile(&src, "fuzz");
    let Some(hir) = hir else {
        let msgs: Vec<String> = diags.iter().map(|d| format!("{d:?}")).collect();
        panic!("a generated program was rejected:\n{src}\n{}", msgs.join("\n"));
    };
    let u = hir.units.ids().next().expect("one program");
    let opts = Options {
        fuse: [FuseMode::Auto, FuseMode::None, FuseMode::Max][c.pick(3)],
        mem_limit: [None, None, Some(0), Some(64), Some(256), Some(4096)][c.pick(6)],
        gemm_min: if c.chance(4) { Some(1.0) } else { None },
        parallel_min: if c.chance(2) { Some(1.0) } else { None },
        ..Options::default()
    };
    // Some ranges compiled as run-time sizes and run at another size.
    let mut sizes = BTreeMap::new();
    if c.chance(2) {
        for r in hir.ranges.ids() {
            if c.chance(4) {
                sizes.insert(r, 1 + c.pick(6));
            }
        }
    }
    let mut actual = hir.clone();
    for (&r, &n) in &sizes {
        let r: RangeId = r;
        actual.ranges[r].size = n;
    }
    let seed = c.byte() as u64;
    let mut inputs = random_inputs(&actual, u, seed).expect("inputs");
    if positive {
        for x in inputs.values_mut() {
            for v in &mut x.data {
                *v = v.abs();
            }
        }
    }
    let want = run_unit(&actual, u, &inputs).unwrap_or_else(|e| panic!("interpreter: {e}\n{src}"));
    let got = jit_run_sized(&hir, u, &sizes, &inputs, &opts, 1)
        .unwrap_or_else(|e| panic!("JIT: {}\n{src}\nsizes {sizes:?} {opts:?}", e.0));
    if let Err(e) = tcc::run::compare::check_outputs(&actual, u, &got.outputs, &want, &inputs) {
        panic!("check failed: {e}\n{src}\nsizes {sizes:?} seed {seed} positive {positive} {opts:?}");
    }
});
