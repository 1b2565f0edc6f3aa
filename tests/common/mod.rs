//! Helpers shared by the integration tests that compare compiled results with
//! loops written in the test (each test file is its own crate: `mod common;`).
#![allow(dead_code)]

use tcc::sema::hir::Hir;

/// Every element of `got` within `tol` of `want`, relative to the largest
/// magnitude of `want` (at least `floor`, so an all-zero result is judged in
/// absolute terms); the lengths must agree.
pub fn assert_close_scaled(what: &str, got: &[f64], want: &[f64], tol: f64, floor: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(floor, |m, w| m.max(w.abs()));
    for (e, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * scale, "{what}: element {e}: {g} vs {w}");
    }
}

/// [`assert_close_scaled`] relative to the largest magnitude alone.
pub fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_close_scaled(what, got, want, tol, 1e-300);
}

/// The program `src` (named `name`), which must compile without errors.
pub fn compiled(src: &str, name: &str) -> Hir {
    let (hir, diags) = tcc::compile(src, name);
    let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
    assert!(diags.iter().all(|d| !d.is_error()), "{diags:?}");
    hir
}

/// A tiny deterministic generator (splitmix64).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = tcc::interp::splitmix64(self.0);
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in [-1, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
}

/// The repository root.
pub fn root() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs the `tcc` binary with `args` in `dir`.
pub fn tcc_in(args: &[&str], dir: &std::path::Path) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tcc")).args(args).current_dir(dir).output().expect("run tcc")
}

/// Whether python3 can import `modules` (e.g. `"numpy, ml_dtypes"`): a skip
/// outside CI, a failure under it.
pub fn python_with(modules: &str) -> bool {
    let ok = std::process::Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "python3 with {modules} is required under CI");
        eprintln!("skipping: python3 with {modules} is not available");
    }
    ok
}

/// Runs a python3 script in `dir`; it must succeed.
pub fn python(script: &str, dir: &std::path::Path) {
    let py = std::process::Command::new("python3").args(["-c", script]).current_dir(dir).output().expect("run python3");
    assert!(py.status.success(), "{}{}", String::from_utf8_lossy(&py.stdout), String::from_utf8_lossy(&py.stderr));
}

/// Whether `program` is on the PATH (`mpirun`, `gfortran`, …).
pub fn which(program: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether gcc is here; under CI it must be (a test that would skip fails instead).
pub fn gcc_available() -> bool {
    let gcc = std::process::Command::new("gcc").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(gcc || std::env::var_os("CI").is_none(), "gcc is required under CI");
    gcc
}

/// Compiles `source` as `dir/drv.c` against the library `lib{lib}.so` in `dir`
/// (strict warnings), runs it there and asserts it exits 0; its output.
pub fn run_c_driver(dir: &std::path::Path, lib: &str, source: &str) -> std::process::Output {
    std::fs::write(dir.join("drv.c"), source).unwrap();
    let cc = std::process::Command::new("gcc")
        .current_dir(dir)
        .args(["-O1", "-Wall", "-Werror", "-o", "drv", "drv.c", "-I.", "-L.", &format!("-l{lib}"), "-lm"])
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .output()
        .unwrap();
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    let run = std::process::Command::new(dir.join("drv")).current_dir(dir).output().unwrap();
    assert!(run.status.success(), "{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    run
}

/// The `.tc` programs directly under `examples/`, sorted.
pub fn examples() -> Vec<std::path::PathBuf> {
    let mut v: Vec<std::path::PathBuf> = std::fs::read_dir(root().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "tc"))
        .collect();
    v.sort();
    v
}

/// DeepSpeed-MoE's expert block as a `model`: dispatch D and combine E carry no
/// tensor-parallel dim (the ffn is split), so a tensor group duplicates them.
pub fn moe_model(hidden: usize, ffn: usize, experts: usize, groups: usize, tokens: usize, capacity: usize) -> String {
    format!(
        "model moe {{ dims groups = {groups}, tokens = {tokens}, hidden = {hidden}, experts = {experts}, capacity = {capacity}, ffn = {ffn};
  index g : groups; index t : tokens; index m, n : hidden; index x : experts; index c : capacity; index f : ffn;
  input tensor H[g,t,m] : f32; input tensor dispatch[g,t,x,c] : f32; input tensor combine[g,t,x,c] : f32;
  param tensor W1[x,m,f] : f32; param tensor W2[x,f,n] : f32; output tensor Y[g,t,n] : f32;
  layer experts {{
    D[g,x,c,m] = dispatch[g,t,x,c] * H[g,t,m]; F[g,x,c,f] = relu(D[g,x,c,m] * W1[x,m,f]);
    E[g,x,c,n] = F[g,x,c,f] * W2[x,f,n]; Y[g,t,n] = combine[g,t,x,c] * E[g,x,c,n];
  }} }}"
    )
}

/// A random program (`tests/half.rs` on the JIT, `tests/gpu_half.rs` on GPU
/// plans): 16-bit, f32 and f64 tensors mixed; GEMM-shaped, chained
/// (through a 16-bit intermediate), with `exp`, `+=` and an outer sum.
pub fn half_program(rng: &mut Rng) -> String {
    let types = ["bf16", "f16", "bf16", "f16", "f32", "f64"];
    let mut ty = || types[rng.below(types.len() as u64) as usize];
    let (ta, tb, tw, tt, tc, te) = (ty(), ty(), ty(), ty(), ty(), ty());
    let mut s = format!(
        "range N = {}; range M = {}; range K = {}; range L = {};\n\
         index i : N; index j : M; index k : K; index l : L;\n\
         input tensor A[i,k] : {ta}; input tensor B[k,j] : {tb}; input tensor W[k,l] : {tw};\n\
         input tensor E[i,j] : {te}; input tensor V[j] : bf16;\n\
         tensor T[i,l] : {tt};\n\
         output tensor C[i,j] : {tc};\n",
        2 + rng.below(7),
        1 + rng.below(9),
        2 + rng.below(40),
        1 + rng.below(6),
    );
    let bases = ["A[i,k] * B[k,j]", "E[i,j]", "T[i,l] * W[k,l] * B[k,j]", "A[i,k] * B[k,j] * V[j]", "exp(E[i,j])"];
    let rhs = |rng: &mut Rng| {
        let n = 1 + rng.below(3);
        (0..n)
            .map(|t| {
                let base = bases[rng.below(bases.len() as u64) as usize];
                let coef = ["", "2 * ", "0.5 * "][rng.below(3) as usize];
                let sign = if t == 0 { "" } else { [" + ", " - "][rng.below(2) as usize] };
                format!("{sign}{coef}{base}")
            })
            .collect::<String>()
    };
    s += "T[i,l] = A[i,k] * W[k,l];\n";
    s += &format!("C[i,j] = {};\n", rhs(rng));
    if rng.below(2) == 0 {
        s += &format!("C[i,j] += {};\n", rhs(rng));
    }
    if rng.below(3) == 0 {
        s += "C[i,j] = C[i,j] * E[i,j] + V[j];\n";
    }
    s
}

/// Inputs of unit `u`, tensor by tensor in `unit_inputs` order, each element
/// `value(its tensor's element type)`.
pub fn inputs_with(
    hir: &Hir,
    u: tcc::sema::hir::UnitId,
    mut value: impl FnMut(tcc::sema::hir::ElemType) -> f64,
) -> std::collections::HashMap<tcc::sema::hir::TensorId, tcc::tensor::Dense> {
    hir.unit_inputs(u)
        .into_iter()
        .map(|t| {
            let shape = hir.shape(t);
            let n: usize = shape.iter().product();
            let data = (0..n).map(|_| value(hir.tensors[t].elem)).collect();
            (t, tcc::tensor::Dense { shape, data })
        })
        .collect()
}
