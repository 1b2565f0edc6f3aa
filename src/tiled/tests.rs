//! Tiled execution against the dense interpreter: hand-picked coupled-cluster
//! shapes, and random programs over symmetric and spin-blocked tensors with random
//! tilings (partial tiles, one-element tiles, tiles split at spin boundaries).

use super::exec::{ExchangeMode, Program, TiledOptions};
use super::tensor::TiledTensor;
use crate::interp;
use crate::pipeline::PipelineOptions;
use crate::run::compare::check_outputs;
use crate::sema::hir::*;
use crate::symmetry::PermGroup;
use crate::tensor::Dense;
use crate::tir::testutil::Builder;
use proptest::prelude::*;
use std::collections::HashMap;
use tcc_runtime::task::Schedule;

/// Runs unit 0 of `hir` tiled and with the interpreter on the same inputs (the
/// tiled random fill, made dense); `Err` describes the first difference.
pub(crate) fn check_tiled(hir: &Hir, seed: u64, opts: &TiledOptions) -> Result<super::TiledStats, String> {
    let u = UnitId::new(0);
    let prepared = crate::pipeline::prepare(hir, &PipelineOptions::default());
    let program = Program::plan(&prepared, u, opts).map_err(|e| e.to_string())?;
    let (tiled, dense) = random_inputs(&program, &prepared, u, seed)?;
    let want = interp::run_unit(hir, u, &dense).map_err(|e| e.to_string())?;
    let (out, stats) = program.run(tiled, opts).map_err(|e| e.to_string())?;
    let got: HashMap<TensorId, Dense> = out.iter().map(|(&t, v)| (t, v.to_dense())).collect();
    check_outputs(hir, u, &got, &want, &dense)?;
    if (stats.executed_flops - stats.planned_flops).abs() > 0.5 {
        return Err(format!("executed {} flops, planned {}", stats.executed_flops, stats.planned_flops));
    }
    Ok(stats)
}

/// The inputs of unit `u` of `prepared` filled at random from `seed`, as tiles
/// of `program` and as the dense tensors the interpreter reads.
type Inputs = (HashMap<TensorId, TiledTensor>, HashMap<TensorId, Dense>);
fn random_inputs(program: &Program, prepared: &Hir, u: UnitId, seed: u64) -> Result<Inputs, String> {
    let (mut tiled, mut dense) = (HashMap::new(), HashMap::new());
    for t in prepared.unit_inputs(u) {
        let v =
            TiledTensor::fill_random(program.layouts[&t].clone(), &PermGroup::of(&prepared.tensors[t]), seed, |x| x)
                .map_err(|e| format!("{e:?}"))?;
        dense.insert(t, v.to_dense());
        tiled.insert(t, v);
    }
    Ok((tiled, dense))
}

fn anti(positions: &[usize]) -> SymGroup {
    SymGroup { kind: SymKind::Antisymmetric, positions: positions.to_vec() }
}

fn set_spin(b: &mut Builder, letters: &str, sizes: Vec<usize>, tile: Option<usize>) {
    let r = b.hir.indices[b.idx(letters)[0]].range;
    b.hir.ranges[r].tiling = Tiling { tile, subspaces: Some(Subspaces { kind: SubspaceKind::Spin, sizes }) };
}

/// The spin-orbital CCD ladder and ring terms with antisymmetric, spin-blocked
/// integrals and amplitudes.
fn ccd_terms(o: usize, v: usize) -> Hir {
    let mut b = Builder::new(&[('i', o), ('j', o), ('k', o), ('l', o), ('a', v), ('b', v), ('c', v), ('d', v)]);
    set_spin(&mut b, "i", vec![o / 2, o - o / 2], None);
    set_spin(&mut b, "a", vec![v / 2, v - v / 2], Some(3));
    let spin = |u: &[usize], l: &[usize]| BlockRule::Spin { upper: u.to_vec(), lower: l.to_vec() };
    let t2 = b.tensor("T2", Role::Input, "abij", &[]);
    let vv = b.tensor("Vvvvv", Role::Input, "abcd", &[]);
    let vo = b.tensor("Voovv", Role::Input, "klcd", &[]);
    let vovo = b.tensor("Vovvo", Role::Input, "kbcj", &[]);
    for (t, groups) in [(t2, [0, 1, 2, 3]), (vv, [0, 1, 2, 3]), (vo, [0, 1, 2, 3])] {
        b.hir.tensors[t].symmetry = vec![anti(&groups[..2]), anti(&groups[2..])];
        b.hir.tensors[t].blocks = vec![spin(&[0, 1], &[2, 3])];
    }
    b.hir.tensors[vovo].blocks = vec![spin(&[0, 1], &[2, 3])];
    let r = b.tensor("R", Role::Output, "abij", &[]);
    b.hir.tensors[r].symmetry = vec![anti(&[0, 1]), anti(&[2, 3])];
    b.hir.tensors[r].blocks = vec![spin(&[0, 1], &[2, 3])];
    let (t_cdij, v_abcd) = (b.r(t2, "cdij"), b.r(vv, "abcd"));
    let ladder = b.term(0.5, vec![v_abcd, t_cdij]);
    let copy = b.term(1.0, vec![b.r(t2, "abij")]);
    b.stmt(r, "abij", false, vec![ladder, copy]);
    // 0.25 <kl||cd> t_cd^ij t_ab^kl: a quadratic term through a temporary (opmin).
    let quad = b.term(0.25, vec![b.r(vo, "klcd"), b.r(t2, "cdij"), b.r(t2, "abkl")]);
    b.stmt(r, "abij", true, vec![quad]);
    // A ring term (no symmetry on the written side is declared by the term itself;
    // the antisymmetrizer makes it so).
    let ring = |b: &Builder, c: f64, x: &str, y: &str| b.term(c, vec![b.r(vovo, x), b.r(t2, y)]);
    let terms = vec![
        ring(&b, 1.0, "kbcj", "acik"),
        ring(&b, -1.0, "kacj", "bcik"),
        ring(&b, -1.0, "kbci", "acjk"),
        ring(&b, 1.0, "kaci", "bcjk"),
    ];
    b.stmt(r, "abij", true, terms);
    b.hir
}

#[test]
fn ccd_terms_match_the_interpreter_and_skip_symmetric_and_spin_zero_work() {
    for (tile, schedule) in [(2, Schedule::Dynamic), (40, Schedule::Static), (1, Schedule::Dynamic)] {
        let hir = ccd_terms(4, 7);
        let opts = TiledOptions { tile, threads: 2, schedule, ..Default::default() };
        let stats = check_tiled(&hir, 5, &opts).unwrap_or_else(|e| panic!("tile {tile}: {e}"));
        assert!(stats.executed_flops < stats.dense_flops, "tile {tile}: {stats:?}");
        // Stored: fewer elements than dense.
        let v = stats.storage.iter().find(|s| s.0 == "Vvvvv").unwrap();
        assert!(v.1 < 0.5 * v.2, "tile {tile}: {v:?}");
    }
}

#[test]
fn ordered_summation_weights_count_distinct_orderings() {
    use super::exec::ordered_weight;
    assert_eq!(ordered_weight(&[vec![0, 1]], &[3, 5]), 2.0);
    assert_eq!(ordered_weight(&[vec![0, 1]], &[5, 3]), 0.0);
    assert_eq!(ordered_weight(&[vec![0, 1]], &[4, 4]), 1.0);
    assert_eq!(ordered_weight(&[vec![0, 1, 2]], &[1, 1, 2]), 3.0);
    assert_eq!(ordered_weight(&[vec![0, 1, 2]], &[0, 1, 2]), 6.0);
    assert_eq!(ordered_weight(&[vec![0, 1], vec![2, 3]], &[0, 1, 2, 2]), 2.0);
}

#[test]
fn tiled_fill_equals_the_interpreters_fill() {
    let mut b = Builder::new(&[('a', 5), ('b', 5), ('c', 5), ('i', 3)]);
    let t = b.tensor("X", Role::Input, "abci", &[]);
    b.hir.tensors[t].symmetry = vec![anti(&[0, 1, 2])];
    let s = b.tensor("S", Role::Input, "abi", &[&[0, 1]]);
    let u = b.tensor("U", Role::Input, "abci", &[]);
    for tile in [1, 2, 3, 5] {
        let mut tilings = HashMap::new();
        for r in b.hir.ranges.ids() {
            tilings.insert(r, std::sync::Arc::new(super::space::TiledRange::new(&b.hir.ranges[r], tile)));
        }
        for x in [t, s, u] {
            let mut l = super::layout::Layout::new(&b.hir, x, &tilings);
            l.store(l.candidates(1e9).unwrap());
            let tiled = TiledTensor::fill_random(l, &PermGroup::of(&b.hir.tensors[x]), 3, |v| v).unwrap();
            let want = interp::fill_random(&b.hir, x, 3).unwrap();
            assert_eq!(tiled.to_dense(), want, "tile {tile}, tensor {}", b.hir.tensors[x].name);
            let back = TiledTensor::from_dense(tiled.layout.clone(), &want).unwrap();
            assert_eq!(back.data[..], tiled.data[..]);
        }
    }
}

/// A random program: statements over indices `i j k` (range O) and `a b c` (range
/// V), each term a product of one or two tensors that are fresh inputs (random
/// symmetry and, over spin ranges, spin rules) or tensors written before.
fn random_program(seed: u64) -> Hir {
    let mut state = seed;
    let mut rnd = move |n: usize| -> usize {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 33) % n as u64) as usize
    };
    let (o, v) = (2 + rnd(4), 2 + rnd(5));
    let mut b = Builder::new(&[('i', o), ('j', o), ('k', o), ('a', v), ('b', v), ('c', v)]);
    for letter in ["i", "a"] {
        let r = b.hir.indices[b.idx(letter)[0]].range;
        let n = b.hir.ranges[r].size;
        let tile = [None, Some(1), Some(2), Some(3)][rnd(4)];
        let split = 1 + rnd(n - 1);
        let subspaces = (rnd(2) == 0).then(|| Subspaces { kind: SubspaceKind::Spin, sizes: vec![split, n - split] });
        b.hir.ranges[r].tiling = Tiling { tile, subspaces };
    }
    let letters = ['i', 'j', 'k', 'a', 'b', 'c'];
    let spin_ok = |b: &Builder, s: &str| {
        s.chars().all(|c| b.hir.ranges[b.hir.indices[b.idx(&c.to_string())[0]].range].tiling.subspaces.is_some())
    };
    let mut written: Vec<(TensorId, String)> = Vec::new();
    let mut next = 0;
    for s in 0..1 + rnd(3) {
        // The written side: 0 to 3 distinct letters.
        let mut lhs = String::new();
        for _ in 0..rnd(4) {
            let c = letters[rnd(6)];
            if !lhs.contains(c) {
                lhs.push(c);
            }
        }
        let target = b.tensor(&format!("R{s}"), if rnd(3) == 0 { Role::Temporary } else { Role::Output }, &lhs, &[]);
        let mut terms = Vec::new();
        for _ in 0..1 + rnd(2) {
            let mut factors = Vec::new();
            for _ in 0..1 + rnd(2) {
                // A function of a tensor that may store only some tiles must be
                // zero at 0 (tiled runs refuse the others there).
                let zero_at_zero = [Func::Tanh, Func::Abs, Func::Relu, Func::Silu, Func::Gelu];
                let any = [Func::Exp, Func::Sigmoid, Func::Tanh, Func::Abs];
                if !written.is_empty() && rnd(3) == 0 {
                    let (t, d) = written[rnd(written.len())].clone();
                    let f = b.r(t, &d);
                    factors.push(if rnd(4) == 0 { b.call(zero_at_zero[rnd(5)], f) } else { f });
                    continue;
                }
                let mut d = String::new();
                for _ in 0..1 + rnd(4) {
                    let c = letters[rnd(6)];
                    if !d.contains(c) {
                        d.push(c);
                    }
                }
                // Sometimes a diagonal: the first letter again (`A[i,a,i]`).
                if d.len() <= 3 && rnd(5) == 0 {
                    let first = d.chars().next().unwrap();
                    d.push(first);
                }
                // Every written letter must appear in the term: add missing ones.
                let t = b.tensor(&format!("A{next}"), Role::Input, &d, &[]);
                next += 1;
                let ranges: Vec<RangeId> = b.hir.tensors[t].dims.clone();
                if d.len() >= 2 && ranges[0] == ranges[1] && rnd(2) == 0 {
                    let kind = if rnd(2) == 0 { SymKind::Antisymmetric } else { SymKind::Symmetric };
                    b.hir.tensors[t].symmetry.push(SymGroup { kind, positions: vec![0, 1] });
                }
                if d.len() == 4 && ranges[2] == ranges[3] && rnd(2) == 0 {
                    b.hir.tensors[t].symmetry.push(anti(&[2, 3]));
                }
                if d.len() >= 2 && d.len().is_multiple_of(2) && spin_ok(&b, &d) && rnd(2) == 0 {
                    let h = d.len() / 2;
                    b.hir.tensors[t]
                        .blocks
                        .push(BlockRule::Spin { upper: (0..h).collect(), lower: (h..d.len()).collect() });
                }
                let f = b.r(t, &d);
                factors.push(match rnd(5) {
                    0 if b.hir.tensors[t].blocks.is_empty() => b.call(any[rnd(4)], f),
                    0 => b.call(zero_at_zero[rnd(5)], f),
                    _ => f,
                });
            }
            let coef = [1.0, -0.5, 0.25, 2.0][rnd(4)];
            terms.push(b.term(coef, factors));
        }
        // Written letters no factor has are broadcast: give them a vector factor.
        for c in lhs.chars() {
            let present =
                terms.iter().all(|t| t.factors.iter().any(|f| f.indices().contains(&b.idx(&c.to_string())[0])));
            if !present {
                let t = b.tensor(&format!("A{next}"), Role::Input, &c.to_string(), &[]);
                next += 1;
                for term in &mut terms {
                    if !term.factors.iter().any(|f| f.indices().contains(&b.idx(&c.to_string())[0])) {
                        term.factors.push(b.r(t, &c.to_string()));
                    }
                }
            }
        }
        b.stmt(target, &lhs, false, terms);
        written.push((target, lhs));
    }
    // Sometimes `max`/`min` over some indices of a fresh input, and a `where` of
    // fresh inputs: no block rules, since these see the zeros of unstored tiles;
    // a symmetry sometimes (the images' signs).
    let fresh = |b: &mut Builder, rnd: &mut dyn FnMut(usize) -> usize, next: &mut usize, at_least: usize| {
        let mut d = String::new();
        for _ in 0..at_least + rnd(4 - at_least) {
            let c = letters[rnd(6)];
            if !d.contains(c) {
                d.push(c);
            }
        }
        let t = b.tensor(&format!("A{next}"), Role::Input, &d, &[]);
        *next += 1;
        let ranges: Vec<RangeId> = b.hir.tensors[t].dims.clone();
        if d.len() >= 2 && ranges[0] == ranges[1] && rnd(2) == 0 {
            let kind = if rnd(2) == 0 { SymKind::Antisymmetric } else { SymKind::Symmetric };
            b.hir.tensors[t].symmetry.push(SymGroup { kind, positions: vec![0, 1] });
        }
        (t, d)
    };
    if rnd(3) == 0 {
        let (t, d) = fresh(&mut b, &mut rnd, &mut next, 1);
        let keep: String = d.chars().filter(|_| rnd(2) == 0).collect();
        let target = b.tensor("Rmax", Role::Output, &keep, &[]);
        let arg = Expr { terms: vec![b.term(1.0, vec![b.r(t, &d)])], span: 0..0 };
        let op = if rnd(2) == 0 { Extremum::Max } else { Extremum::Min };
        let f = Factor::Reduce { op, arg: Box::new(arg), free: b.idx(&keep), span: 0..0 };
        let term = b.term(1.0, vec![f]);
        b.stmt(target, &keep, false, vec![term]);
    }
    if rnd(3) == 0 {
        // A window read at affine subscripts, `G[p,q] = W[s·p+q]` (s = 1 or 2):
        // W's range is exactly as long as the subscript reaches, cut in random tiles.
        let (p, q) = (letters[rnd(6)], letters[rnd(6)]);
        if p != q {
            let size = |c: char| b.hir.ranges[b.hir.indices[b.idx(&c.to_string())[0]].range].size;
            let stride = 1 + rnd(2) as i64;
            let len = stride as usize * (size(p) - 1) + size(q);
            let range = b.hir.ranges.push(Range {
                name: format!("L{next}"),
                size: len,
                span: 0..0,
                model: None,
                size_kind: SizeKind::Fixed,
                tiling: Tiling { tile: [None, Some(1), Some(2), Some(3)][rnd(4)], subspaces: None },
                parts: Vec::new(),
            });
            let w = b.tensor(&format!("A{next}"), Role::Input, "", &[]);
            next += 1;
            b.hir.tensors[w].dims = vec![range];
            let lhs = format!("{p}{q}");
            let target = b.tensor("Rwin", Role::Output, &lhs, &[]);
            let [ip, iq] = [b.idx(&p.to_string())[0], b.idx(&q.to_string())[0]];
            let sub = Subscript { terms: vec![(stride, ip), (1, iq)], constant: 0, span: 0..0 };
            let f = Factor::Affine(AffineRef { tensor: w, subs: vec![sub], free: vec![ip, iq], span: 0..0 });
            let term = b.term(1.0, vec![f]);
            b.stmt(target, &lhs, false, vec![term]);
        }
    }
    if rnd(3) == 0 {
        let (first, d) = fresh(&mut b, &mut rnd, &mut next, 1);
        let target = b.tensor("Rwhere", Role::Output, &d, &[]);
        let mut args = vec![b.r(first, &d)];
        for _ in 0..3 {
            // Each argument over some of the written letters, in their order.
            let sub: String = d.chars().filter(|_| rnd(2) == 0).collect();
            let t = b.tensor(&format!("A{next}"), Role::Input, &sub, &[]);
            next += 1;
            args.push(b.r(t, &sub));
        }
        let cmp = [CmpOp::Gt, CmpOp::Le, CmpOp::Ne][rnd(3)];
        let f = Factor::Select { cmp, args, free: b.idx(&d), span: 0..0 };
        let term = b.term(1.0, vec![f]);
        b.stmt(target, &d, false, vec![term]);
    }
    b.hir
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_programs_tiled_equal_the_interpreter(seed in any::<u64>()) {
        let hir = random_program(seed);
        let schedule = if seed % 2 == 0 { Schedule::Dynamic } else { Schedule::Static };
        let opts = TiledOptions { tile: 1 + (seed % 4) as usize, threads: 2, schedule, ..Default::default() };
        if let Err(e) = check_tiled(&hir, seed, &opts) {
            let stmts: Vec<String> = hir.units[UnitId::new(0)].stmts.iter().map(|s| crate::sema::display::stmt(&hir, s)).collect();
            panic!("seed {seed}: {e}\n{}", stmts.join("\n"));
        }
    }
}

/// Runs `f` on `ranks` in-process ranks (threads back end): rank 0's result, or
/// the first rank error.
fn on_thread_ranks<T: Send>(
    ranks: usize,
    f: impl Fn(&dyn tcc_runtime::comm::Communicator) -> Result<T, crate::error::CommandError> + Sync,
) -> Result<Option<T>, crate::error::CommandError> {
    on_ranks(ranks, tcc_runtime::comm::Backend::Threads, f)
}

/// In-process ranks on `backend` (`shm` has windows for one-sided gets, `threads`
/// none).
fn on_ranks<T: Send>(
    ranks: usize,
    backend: tcc_runtime::comm::Backend,
    f: impl Fn(&dyn tcc_runtime::comm::Communicator) -> Result<T, crate::error::CommandError> + Sync,
) -> Result<Option<T>, crate::error::CommandError> {
    crate::exec::launch::launch(ranks, false, |make| make(backend), |_| Ok(()), crate::exec::launch::OnError::Return, f)
}

/// Every rank's statistics of `program` run on `ranks` in-process ranks with
/// windows (the launcher returns rank 0's only), inputs from seed 3.
fn every_rank_stats(program: &Program, ranks: usize, opts: &TiledOptions) -> Vec<super::dist::RankStats> {
    tcc_runtime::comm::threads::run(ranks, |rank| {
        let comm = rank.comm(tcc_runtime::comm::Backend::Shm);
        let inputs = super::dist::Inputs { seed: 3, ..Default::default() };
        super::dist::run_rank(program, comm.as_ref(), &inputs, opts).map(|(_, s)| s).unwrap()
    })
    .unwrap()
}

/// Unit 0 of `hir` on `ranks` in-process ranks against the interpreter.
fn check_distributed(hir: &Hir, seed: u64, ranks: usize, opts: &TiledOptions) -> Result<(), String> {
    let u = UnitId::new(0);
    let prepared = crate::pipeline::prepare(hir, &PipelineOptions::default());
    let program = Program::plan(&prepared, u, opts).map_err(|e| e.to_string())?;
    let mut dense = HashMap::new();
    for t in prepared.unit_inputs(u) {
        let v =
            TiledTensor::fill_random(program.layouts[&t].clone(), &PermGroup::of(&prepared.tensors[t]), seed, |x| x)
                .map_err(|e| format!("{e:?}"))?;
        dense.insert(t, v.to_dense());
    }
    let want = interp::run_unit(hir, u, &dense).map_err(|e| e.to_string())?;
    // One-sided gets need windows: the shm back end has them, `threads` none (a
    // set planned one-sided then falls back to the collective exchange).
    let backend = match (opts.exchange, seed % 2) {
        (ExchangeMode::Collective, _) | (_, 1) => tcc_runtime::comm::Backend::Threads,
        _ => tcc_runtime::comm::Backend::Shm,
    };
    let (got, stats) = on_ranks(ranks, backend, |comm| {
        super::dist::run_rank(&program, comm, &super::dist::Inputs { seed, ..Default::default() }, opts)
    })
    .map_err(|e| e.to_string())?
    .ok_or("rank 0 returned nothing")?;
    let got = got.ok_or("rank 0 returned no outputs")?;
    if stats.words_sent != stats.planned_words {
        return Err(format!("rank 0 moved {} words, planned {}", stats.words_sent, stats.planned_words));
    }
    let want_one_sided = backend == tcc_runtime::comm::Backend::Shm && opts.exchange == ExchangeMode::OneSided;
    if want_one_sided && stats.one_sided_sets != stats.sets {
        return Err(format!("{} of {} sets one-sided with --exchange one-sided", stats.one_sided_sets, stats.sets));
    }
    let got: HashMap<TensorId, Dense> = got.iter().map(|(&t, v)| (t, v.to_dense())).collect();
    check_outputs(hir, u, &got, &want, &dense)?;
    check_reported(hir, &program, seed, ranks, backend, opts, &want, &dense)
}

/// The outputs as `tcc run` reports them from ranks, never made whole: the
/// `.npy` files every rank wrote its tiles into equal the interpreter's
/// outputs, and the summaries and symmetry checks agree with those of the
/// files' values.
#[allow(clippy::too_many_arguments)]
fn check_reported(
    hir: &Hir,
    program: &Program,
    seed: u64,
    ranks: usize,
    backend: tcc_runtime::comm::Backend,
    opts: &TiledOptions,
    want: &HashMap<TensorId, Dense>,
    inputs: &HashMap<TensorId, Dense>,
) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let (reports, _) = on_ranks(ranks, backend, |comm| {
        super::dist::run_rank_reported(
            program,
            comm,
            &super::dist::Inputs { seed, ..Default::default() },
            opts,
            Some(dir.path()),
        )
    })
    .map_err(|e| e.to_string())?
    .ok_or("rank 0 returned nothing")?;
    let mut files = HashMap::new();
    for r in &reports {
        let name = &hir.tensors[r.tensor].name;
        let (file, _) = crate::npy::read_file(&dir.path().join(format!("{name}.npy"))).map_err(|e| e.0)?;
        let exact = crate::run::Summary::of(&file.data);
        let scale = 1.0 + 7.0 * file.data.iter().map(|x| x.abs()).sum::<f64>();
        let (a, b) = (r.summary, exact);
        for (what, x, y) in [("norm2", a.norm2, b.norm2), ("sum", a.sum, b.sum), ("checksum", a.checksum, b.checksum)] {
            let agree = x == y || (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-12 * scale;
            if !agree {
                return Err(format!("reported {what} of `{name}` is {x:e}, its file's {y:e}"));
            }
        }
        // The ranks' check (inside self-image tiles) finds what the dense check
        // finds in the same values (every other image is a copy by construction).
        let dense = interp::tensor_symmetry_violation(&file, &hir.tensors[r.tensor], crate::run::SYMMETRY_RTOL);
        if r.symmetry.is_some() != dense.is_some() {
            return Err(format!("`{name}`: ranks report {:?}, the dense check {dense:?}", r.symmetry));
        }
        files.insert(r.tensor, file);
    }
    check_outputs(hir, program.unit, &files, want, inputs).map(|_| ())
}

/// An output declared antisymmetric but computed from a product that is not:
/// ranks report the violation (found inside diagonal tiles, the only tiles a
/// tiled output can break it in) as the dense check does.
#[test]
fn ranks_report_outputs_that_break_their_declared_symmetry() {
    let src = "range N = 6; index i, j, k : N; input tensor A[i,k] : f64; input tensor C[k,j] : f64;\n\
               output tensor B[i,j] : f64 antisymmetric(i j); B[i,j] = A[i,k] * C[k,j];";
    let (hir, _) = crate::compile(src, "asym");
    let hir = hir.expect("compiles");
    let prepared = crate::pipeline::prepare(&hir, &PipelineOptions::default());
    for ranks in 1..=3 {
        let opts = TiledOptions { tile: 3, threads: 1, ..Default::default() };
        let program = Program::plan(&prepared, UnitId::new(0), &opts).unwrap();
        let (reports, _) = on_ranks(ranks, tcc_runtime::comm::Backend::Shm, |comm| {
            super::dist::run_rank_reported(&program, comm, &Default::default(), &opts, None)
        })
        .unwrap()
        .unwrap();
        let v = reports[0].symmetry.as_deref().unwrap_or_else(|| panic!("{ranks} ranks: no violation reported"));
        assert!(v.contains("in a tile that is its own image"), "{v}");
    }
}

#[test]
fn ccd_terms_on_ranks_match_the_interpreter() {
    for exchange in [ExchangeMode::Collective, ExchangeMode::OneSided] {
        for ranks in 1..=4 {
            for threads in [1, 2] {
                let opts =
                    TiledOptions { tile: 2, threads, schedule: Schedule::Dynamic, exchange, ..Default::default() };
                check_distributed(&ccd_terms(4, 7), 2, ranks, &opts)
                    .unwrap_or_else(|e| panic!("{exchange:?}, {ranks} ranks × {threads} threads: {e}"));
            }
        }
    }
}

/// Ranks that run out of work take over other ranks' unstarted items (eager:
/// ranks other than 0 try first, rank 0 starts late): items are taken on every
/// run, the outputs equal the interpreter's, and the words the plan moves are
/// still what it planned (taken items' words are counted apart).
#[test]
fn ranks_take_over_unstarted_work_and_keep_the_numbers() {
    use super::steal::Steal;
    let hir = ccd_terms(4, 7);
    for ranks in 2..=4 {
        for threads in [1, 2] {
            let opts = TiledOptions {
                tile: 2,
                threads,
                exchange: ExchangeMode::OneSided,
                steal: Steal::Eager,
                ..Default::default()
            };
            check_distributed(&hir, 2, ranks, &opts).unwrap_or_else(|e| panic!("{ranks} ranks × {threads}: {e}"));
            let prepared = crate::pipeline::prepare(&hir, &PipelineOptions::default());
            let program = Program::plan(&prepared, UnitId::new(0), &opts).unwrap();
            let stats: Vec<_> = every_rank_stats(&program, ranks, &opts);
            let taken: usize = stats.iter().map(|s| s.taken_items).sum();
            assert!(taken > 0, "{ranks} ranks × {threads}: nothing taken over");
            assert!(stats.iter().all(|s| s.words_sent == s.planned_words));
            let flops: f64 = stats.iter().map(|s| s.flops).sum();
            assert!((flops - program.planned_flops()).abs() <= 1e-9 * flops, "{flops} vs {}", program.planned_flops());
        }
    }
}

/// Ranks that share an address space read each other's tiles in place: no
/// received-tiles buffer, the same numbers, the same words counted as moved
/// (read in place counts as read), with and without taking over work; with
/// reading in place off the tiles are copied into a buffer as before.
#[test]
fn ranks_read_remote_tiles_in_place_with_the_same_numbers_and_words() {
    use super::steal::Steal;
    let hir = ccd_terms(4, 7);
    let prepared = crate::pipeline::prepare(&hir, &PipelineOptions::default());
    for steal in [Steal::Off, Steal::Eager] {
        for ranks in 2..=4 {
            let fetched = |read_in_place: bool| -> (f64, Vec<f64>) {
                let opts = TiledOptions {
                    tile: 2,
                    threads: 2,
                    exchange: ExchangeMode::OneSided,
                    steal,
                    read_in_place,
                    ..Default::default()
                };
                check_distributed(&hir, 2, ranks, &opts)
                    .unwrap_or_else(|e| panic!("{ranks} ranks, {steal:?}, in place {read_in_place}: {e}"));
                let program = Program::plan(&prepared, UnitId::new(0), &opts).unwrap();
                let stats = every_rank_stats(&program, ranks, &opts);
                assert!(stats.iter().all(|s| s.one_sided_sets == s.sets && s.words_sent == s.planned_words));
                (stats.iter().map(|s| s.fetched_peak).sum(), stats.iter().map(|s| s.words_sent).collect())
            };
            let (copied, words_copied) = fetched(false);
            let (in_place, words_in_place) = fetched(true);
            assert!(copied > 0.0, "{ranks} ranks, {steal:?}: nothing fetched");
            // Only partial tiles of written tiles other ranks own remain.
            assert!(in_place < copied, "{ranks} ranks, {steal:?}: {in_place} words buffered in place, {copied} copied");
            assert_eq!(words_copied, words_in_place, "{ranks} ranks, {steal:?}");
        }
    }
}

/// Placement: with moving words free, pieces of tasks run away from the written
/// tile's owner (partial tiles summed there) and flops are spread at least as
/// evenly as under owner-computes (words dear); every piece is placed exactly once;
/// the numbers equal the interpreter's either way.
#[test]
fn pieces_placed_for_balance_add_up_on_owners() {
    let hir = ccd_terms(4, 7);
    let prepared = crate::pipeline::prepare(&hir, &PipelineOptions::default());
    let ranks = 3;
    let spread = |flops_per_word: f64| -> (f64, usize) {
        let opts = TiledOptions { tile: 2, threads: 1, flops_per_word, ..Default::default() };
        let program = Program::plan(&prepared, UnitId::new(0), &opts).unwrap();
        let own = super::dist::Ownership::new(&program, ranks);
        let layouts = &program.layouts;
        let owner = |t: TensorId, k: usize| own.owner(&layouts[&t].tiles()[k]);
        let tile_len = |t: TensorId, k: usize| layouts[&t].tile_len(&layouts[&t].tiles()[k]);
        let (mut worst, mut partials) = (0.0f64, 0);
        for set in program.task_sets() {
            let work = super::placement::SetWork::new(&program, set, &Default::default());
            let tasks = &work.tasks;
            let placed = super::placement::place(&work, &owner, &tile_len, ranks, flops_per_word);
            let total: f64 = tasks.iter().map(|t| t.2).sum();
            let placed_flops: f64 = placed.flops.iter().sum();
            assert!((placed_flops - total).abs() <= 1e-9 * total.max(1.0), "{placed_flops} of {total} flops placed");
            let listed: f64 = placed.work.iter().flatten().map(|w| w.flops).sum();
            assert!((listed - total).abs() <= 1e-9 * total.max(1.0));
            if total > 0.0 {
                worst = worst.max(placed.flops.iter().cloned().fold(0.0, f64::max) / (total / ranks as f64));
            }
            partials += placed.partials.iter().map(|p| p.len()).sum::<usize>();
        }
        let opts = TiledOptions { tile: 2, threads: 1, flops_per_word, ..Default::default() };
        check_distributed(&hir, 3, ranks, &opts).unwrap_or_else(|e| panic!("flops per word {flops_per_word}: {e}"));
        (worst, partials)
    };
    let (free_worst, free_partials) = spread(0.0);
    let (dear_worst, _) = spread(1e12);
    assert!(free_partials > 0, "free words should scatter pieces");
    assert!(free_worst <= dear_worst + 1e-9, "balance {free_worst} with free words, {dear_worst} with dear ones");
    spread(crate::tiled::placement::FLOPS_PER_WORD);
}

/// Items split into parts (slabs of rows of their written tile; `Split::Eager`
/// splits every item that can be, into up to 3 parts) add up to the unsplit
/// result on 1–5 ranks, with and without taking over, one-sided and collective,
/// on 1 and 2 threads per rank (parts of one item then run at once); and the
/// plan does split items, each part carrying its share of the flops.
#[test]
fn split_items_add_up_to_the_unsplit_result_on_ranks() {
    use super::placement::{split_tails, SetWork, Split};
    use super::steal::Steal;
    let hir = ccd_terms(4, 7);
    let prepared = crate::pipeline::prepare(&hir, &PipelineOptions::default());
    let opts = TiledOptions { tile: 3, threads: 1, ..Default::default() };
    let program = Program::plan(&prepared, UnitId::new(0), &opts).unwrap();
    let (mut split_items, mut parts) = (0, 0);
    for ranks in 1..=5 {
        let own = super::dist::Ownership::new(&program, ranks);
        let layouts = &program.layouts;
        let owner = |t: TensorId, k: usize| own.owner(&layouts[&t].tiles()[k]);
        let tile_len = |t: TensorId, k: usize| layouts[&t].tile_len(&layouts[&t].tiles()[k]);
        for set in program.task_sets() {
            let work = SetWork::new(&program, set, &Default::default());
            let placed = super::placement::place(&work, &owner, &tile_len, ranks, 512.0);
            for list in &placed.work {
                let before: f64 = list.iter().map(|w| w.flops).sum();
                let after = split_tails(list.clone(), Split::Eager);
                let sum: f64 = after.iter().map(|w| w.flops).sum();
                assert!((sum - before).abs() <= 1e-9 * before.max(1.0), "{sum} flops after splitting, {before} before");
                assert_eq!(split_tails(list.clone(), Split::Off).len(), list.len());
                split_items += list.iter().filter(|w| w.splits > 1).count();
                parts += after.iter().filter(|w| w.split.is_some()).count();
                // Parts follow each other, numbered 0..n.
                let mut k = 0;
                while k < after.len() {
                    if let Some((0, n)) = after[k].split {
                        for j in 0..n {
                            assert_eq!(after[k + j].split, Some((j, n)));
                            assert_eq!(after[k + j].task, after[k].task);
                        }
                        // The rows each part writes: the whole tile, or a partition of it.
                        let (s, c, _) = &work.tasks[after[k].task];
                        let len = program.split_span(*s, c, None).len();
                        let spans: Vec<_> = (0..n).map(|j| program.split_span(*s, c, Some((j, n)))).collect();
                        if spans[0].len() < len {
                            assert_eq!(spans[0].start, 0);
                            assert!(spans.windows(2).all(|w| w[0].end == w[1].start), "{spans:?}");
                            assert_eq!(spans[n - 1].end, len);
                        } else {
                            assert!(spans.iter().all(|r| *r == (0..len)), "{spans:?}");
                        }
                        k += n;
                    } else {
                        assert!(after[k].split.is_none(), "a part out of order");
                        k += 1;
                    }
                }
            }
        }
    }
    assert!(split_items > 0 && parts > split_items, "{split_items} items could split, into {parts} parts");
    for ranks in 1..=5 {
        for (exchange, steal, threads) in [
            (ExchangeMode::OneSided, Steal::Eager, 1),
            (ExchangeMode::OneSided, Steal::On, 2),
            (ExchangeMode::OneSided, Steal::Off, 2),
            (ExchangeMode::Collective, Steal::Off, 1),
        ] {
            for read_in_place in [false, true] {
                let opts = TiledOptions {
                    tile: 3,
                    threads,
                    exchange,
                    steal,
                    split: Split::Eager,
                    read_in_place,
                    ..Default::default()
                };
                check_distributed(&hir, 3, ranks, &opts).unwrap_or_else(|e| {
                    panic!("{ranks} ranks × {threads}, {exchange:?}, {steal:?}, in place {read_in_place}: {e}")
                });
            }
        }
    }
}

/// Near the end of a list items are cut finer: with every item of 0.1 s and a
/// fraction of 1/4, the last becomes 4 parts, those before it 2, and the front
/// of the list stays whole; never more parts than the item allows or parts
/// under the smallest size.
#[test]
fn the_tail_of_a_list_is_split_by_the_work_left() {
    use super::placement::{split_tails, Split, Work};
    let item = |task: usize, remote: bool, splits: usize, seconds: f64| Work {
        task,
        anchors: None,
        flops: 1e9,
        seconds,
        remote,
        remote_reads: Vec::new(),
        reads: Vec::new(),
        splits,
        split: None,
    };
    let list: Vec<Work> = (0..10).map(|t| item(t, t >= 6, 40, 0.1)).collect();
    let parts = |l: &[Work], task: usize| l.iter().filter(|w| w.task == task).count();
    let after = split_tails(list.clone(), Split::Tail(0.25));
    // Claim order: tasks 0–5 (local), then 6–9; 9 is last.
    assert_eq!(parts(&after, 9), 4);
    assert_eq!(parts(&after, 8), 2);
    assert_eq!(parts(&after, 7), 2);
    assert_eq!(parts(&after, 6), 1);
    assert_eq!(parts(&after, 0), 1);
    // Local items come first in claim order: the last local one is not the tail.
    assert_eq!(parts(&after, 5), 1);
    let total: f64 = after.iter().map(|w| w.seconds).sum();
    assert!((total - 1.0).abs() < 1e-12);
    // Bounded by the item's own limit and by the smallest part.
    let small: Vec<Work> = vec![item(0, false, 2, 0.1), item(1, false, 40, 0.003)];
    let after = split_tails(small, Split::Tail(0.01));
    assert_eq!(parts(&after, 0), 2);
    assert_eq!(parts(&after, 1), 1);
    assert_eq!(split_tails(vec![item(0, false, 1, 5.0)], Split::Tail(0.01)).len(), 1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 60, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_programs_on_ranks_equal_the_interpreter(seed in any::<u64>()) {
        let hir = random_program(seed);
        // Moving words free (pieces scattered for balance, partial tiles summed on
        // owners), dear (owner computes), or the default.
        let flops_per_word = [0.0, 1e12, crate::tiled::placement::FLOPS_PER_WORD][(seed >> 4) as usize % 3];
        let exchange = [ExchangeMode::Auto, ExchangeMode::Collective, ExchangeMode::OneSided][(seed >> 12) as usize % 3];
        use super::steal::Steal;
        let steal = [Steal::On, Steal::Off, Steal::Eager][(seed >> 20) as usize % 3];
        use super::placement::Split;
        let split = [Split::Eager, Split::Off, Split::default()][(seed >> 24) as usize % 3];
        let read_in_place = (seed >> 28) % 2 == 0;
        let opts = TiledOptions {
            tile: 1 + (seed % 3) as usize,
            threads: 1 + (seed >> 16) as usize % 2,
            schedule: Schedule::Dynamic,
            flops_per_word,
            exchange,
            steal,
            split,
            read_in_place,
            ..Default::default()
        };
        let ranks = 1 + (seed >> 8) as usize % 4;
        if let Err(e) = check_distributed(&hir, seed, ranks, &opts) {
            let stmts: Vec<String> = hir.units[UnitId::new(0)].stmts.iter().map(|s| crate::sema::display::stmt(&hir, s)).collect();
            panic!("seed {seed}, {ranks} ranks, {exchange:?}, {steal:?}, {split:?}, in place {read_in_place}: {e}\n{}", stmts.join("\n"));
        }
    }
}

/// The session a `tcc build --mpi` library opens, on 1–4 in-process ranks: each
/// rank fills the input tiles it owns from the interpreter's dense inputs (only
/// canonical, nonzero tiles exist), runs, and its output tiles equal the
/// interpreter's on their boxes.
#[test]
fn sessions_filled_by_the_caller_equal_the_interpreter_tile_by_tile() {
    use super::session::for_each_box;
    let source = include_str!("../../tests/tiled/ccd_small.tc");
    let (hir, _) = crate::compile(source, "ccd_small");
    let hir = hir.expect("compiles");
    let u = UnitId::new(0);
    let mut dense = HashMap::new();
    for t in hir.unit_inputs(u) {
        dense.insert(hir.tensors[t].name.clone(), interp::fill_random(&hir, t, 5).unwrap());
    }
    let by_id: HashMap<TensorId, Dense> =
        hir.unit_inputs(u).into_iter().map(|t| (t, dense[&hir.tensors[t].name].clone())).collect();
    let want = interp::run_unit(&hir, u, &by_id).unwrap();
    let want_r = want.values().next().unwrap().clone();
    let at = |d: &Dense, idx: &[usize]| d.data[idx.iter().zip(&d.shape).fold(0, |acc, (&x, &n)| acc * n + x)];
    for ranks in 1..=4 {
        let opts = TiledOptions { tile: 2, threads: 1, schedule: Schedule::Dynamic, ..Default::default() };
        on_thread_ranks(ranks, |comm| {
            let me = comm.rank();
            let comm = super::session::SessionComm::Lent(comm);
            let mut s = super::session::Session::open(source, None, Ok(&[]), comm, opts.clone()).unwrap();
            assert_eq!(s.rank_and_size(), (me, ranks));
            assert!(s.tensor("nope").is_none());
            for (x, (name, d)) in dense.iter().enumerate() {
                let t = s.tensor(name).unwrap();
                if x % 2 == 0 {
                    // Half the inputs through the dense conversion, half by tile.
                    s.pack_dense(t, &d.data).unwrap();
                    assert!(s.pack_dense(t, &d.data[1..]).is_err(), "a short array is refused");
                    continue;
                }
                let tiles = s.tiles(t).unwrap();
                let buf = s.data_mut(t).unwrap();
                for tile in &tiles {
                    let mut k = tile.offset;
                    for_each_box(&tile.start, &tile.extent, |idx| {
                        buf[k] = at(d, idx);
                        k += 1;
                    });
                }
            }
            s.run().unwrap();
            let r = s.tensor("R").unwrap();
            assert!(s.describe(r).unwrap().1, "R is an output");
            let tiles = s.tiles(r).unwrap();
            let buf = s.data_mut(r).unwrap().to_vec();
            for tile in &tiles {
                let mut k = tile.offset;
                for_each_box(&tile.start, &tile.extent, |idx| {
                    let (g, w) = (buf[k], at(&want_r, idx));
                    assert!((g - w).abs() <= 1e-10 * (1.0 + w.abs()), "rank {me} of {ranks} at {idx:?}: {g} vs {w}");
                    k += 1;
                });
            }
            // Unpacked: every element this rank's tiles reach, with its
            // images under R's antisymmetry, equals the interpreter's.
            let mut whole = vec![f64::NAN; want_r.data.len()];
            s.unpack_dense(r, &mut whole).unwrap();
            let reached = whole.iter().filter(|x| !x.is_nan()).count();
            if ranks == 1 {
                assert!(reached > buf.len(), "images were written too: {reached} vs {} stored", buf.len());
            }
            for (g, w) in whole.iter().zip(&want_r.data).filter(|(g, _)| !g.is_nan()) {
                assert!((g - w).abs() <= 1e-10 * (1.0 + w.abs()), "rank {me} of {ranks}: {g} vs {w}");
            }
            Ok(())
        })
        .unwrap();
    }
}

#[test]
fn sessions_refuse_arrays_and_tiles_that_break_the_declared_structure() {
    // Packing would keep one tile per orbit and only allowed blocks, dropping
    // the rest; a diagonal tile written by hand holds images of its own
    // elements that must agree. On 1 and 2 ranks: a refusal on one rank must
    // not leave the other waiting in the run's exchanges.
    let source = include_str!("../../tests/tiled/ccd_small.tc");
    for ranks in 1..=2 {
        let opts = TiledOptions { tile: 2, threads: 1, schedule: Schedule::Dynamic, ..Default::default() };
        on_thread_ranks(ranks, |comm| {
            let comm = super::session::SessionComm::Lent(comm);
            let mut s = super::session::Session::open(source, None, Ok(&[]), comm, opts.clone()).unwrap();
            let (hir, _) = crate::compile(source, "ccd_small");
            let hir = hir.unwrap();
            let v = s.tensor("Vvvvv").unwrap();
            let vid = hir.tensors.ids().find(|&t| hir.tensors[t].name == "Vvvvv").unwrap();
            let good = interp::fill_random(&hir, vid, 3).unwrap();
            s.pack_dense(v, &good.data).unwrap();
            // Not antisymmetric: refused.
            let ones = vec![1.0; good.data.len()];
            let e = s.pack_dense(v, &ones).unwrap_err();
            assert!(e.contains("antisymmetric"), "{e}");
            // Nonzero outside the spin blocks (a symmetric-consistent array):
            // refused when the tensor has block rules.
            if !hir.tensors[vid].blocks.is_empty() {
                let mut outside = good.clone();
                let d = &outside.shape.clone();
                let mut found = false;
                crate::tensor::for_each_index(d, |idx| {
                    if !found && good.get(idx) == 0.0 && idx[0] != idx[1] && idx[2] != idx[3] {
                        let ranges: Vec<_> = hir.tensors[vid].dims.iter().map(|&r| &hir.ranges[r]).collect();
                        if hir.tensors[vid].blocks.iter().any(|r| !crate::symmetry::rule_allows(r, &ranges, idx)) {
                            found = true;
                            let group = crate::symmetry::PermGroup::of(&hir.tensors[vid]);
                            for (perm, _) in group.elements() {
                                let img = crate::symmetry::PermGroup::apply(perm, idx);
                                let (_, s1) = group.canonical(idx);
                                let (_, s2) = group.canonical(&img);
                                let at = crate::tensor::linear(d, &img);
                                outside.data[at] = f64::from(s1 * s2);
                            }
                        }
                    }
                });
                assert!(found);
                let e = s.pack_dense(v, &outside.data).unwrap_err();
                assert!(e.contains("outside the blocks"), "{e}");
            }
            for tid in hir.unit_inputs(UnitId::new(0)) {
                if tid != vid {
                    let t = s.tensor(&hir.tensors[tid].name).unwrap();
                    s.pack_dense(t, &interp::fill_random(&hir, tid, 4).unwrap().data).unwrap();
                }
            }
            // The owner of V's first tile (on the diagonal of both pairs)
            // breaks it by hand: every rank's run fails (the owner with the
            // element, the others because it did).
            let tiles = s.tiles(v).unwrap();
            let first = tiles.iter().find(|t| t.start.iter().all(|&x| x == 0));
            if let Some(diag) = first {
                let len: usize = diag.extent.iter().product();
                let offset = diag.offset;
                let buf = s.data_mut(v).unwrap();
                for x in &mut buf[offset..offset + len] {
                    *x = 1.0;
                }
            }
            let e = s.run().unwrap_err();
            if first.is_some() {
                assert!(e.contains("packed `Vvvvv`"), "{e}");
            } else {
                assert!(e.contains("another rank"), "{e}");
            }
            Ok(())
        })
        .unwrap();
    }
}

/// `tcc plan --tiled` forecasts per rank what a run then measures: owned and
/// received elements at their peaks, flops and words sent, on 1–4 ranks and
/// with pieces scattered (words free) or kept with their owners.
#[test]
fn the_forecast_equals_what_ranks_measure() {
    let hir = ccd_terms(4, 7);
    let prepared = crate::pipeline::prepare(&hir, &PipelineOptions::default());
    let modes = [ExchangeMode::Collective, ExchangeMode::OneSided];
    for (flops_per_word, exchange) in [0.0, crate::tiled::placement::FLOPS_PER_WORD].into_iter().zip(modes) {
        // The plan, not taking over at run time (which moves flops between ranks).
        let steal = super::steal::Steal::Off;
        // Copying remote tiles, as across nodes: the forecast's received tiles are
        // that bound (reading in place, on one node, holds fewer: checked below).
        let opts = TiledOptions {
            tile: 2,
            threads: 1,
            flops_per_word,
            exchange,
            steal,
            read_in_place: false,
            ..Default::default()
        };
        let program = Program::plan(&prepared, UnitId::new(0), &opts).unwrap();
        for ranks in 1..=4 {
            let fc = super::dist::forecast(&program, ranks, &opts);
            // Every rank's own statistics (the launcher returns rank 0's only).
            let stats: Vec<_> = every_rank_stats(&program, ranks, &opts);
            assert_eq!(stats.len(), ranks);
            let in_place = every_rank_stats(&program, ranks, &TiledOptions { read_in_place: true, ..opts.clone() });
            for (f, s) in fc.ranks.iter().zip(&in_place) {
                assert!(s.fetched_peak <= f.fetched_peak && s.words_sent == f.words_sent);
            }
            assert!(fc.model_s > 0.0);
            for (r, (f, s)) in fc.ranks.iter().zip(&stats).enumerate() {
                let what = format!("{ranks} ranks, rank {r}, {flops_per_word} flops/word, {exchange:?}");
                assert_eq!(f.owned_peak, s.owned_peak, "owned: {what}");
                assert_eq!(f.fetched_peak, s.fetched_peak, "received: {what}");
                assert_eq!(f.words_sent, s.words_sent, "sent: {what}");
                assert!(
                    (f.flops - s.flops).abs() <= 1e-9 * s.flops.max(1.0),
                    "flops {} vs {}: {what}",
                    f.flops,
                    s.flops
                );
            }
            let total: f64 = fc.ranks.iter().map(|f| f.flops).sum();
            assert!((total - program.planned_flops()).abs() <= 1e-9 * total.max(1.0));
        }
    }
}

/// The time model prices the fresh memory a run first writes (`tcc tune`'s
/// `touch_per_byte`): in one process, every computed tensor's words spread over
/// the threads; on ranks, at least the busiest rank's share of them.
#[test]
fn the_model_prices_fresh_memory_first_written() {
    let hir = ccd_terms(4, 7);
    let prepared = crate::pipeline::prepare(&hir, &PipelineOptions::default());
    let opts = TiledOptions { tile: 2, threads: 2, ..Default::default() };
    let program = Program::plan(&prepared, UnitId::new(0), &opts).unwrap();
    let inputs = prepared.unit_inputs(UnitId::new(0));
    let fresh: f64 =
        program.storage_by_tensor().into_iter().filter(|(t, _)| !inputs.contains(t)).map(|(_, words)| words).sum();
    assert!(fresh > 0.0);
    let at = |touch_per_byte: f64| {
        // Private memory (one process) at half the rate of window memory (ranks).
        let model = crate::tiled::model::TimeModel {
            touch_per_byte,
            touch_alone_per_byte: touch_per_byte,
            private_touch_per_byte: touch_per_byte / 2.0,
            private_touch_alone_per_byte: touch_per_byte / 2.0,
            ..opts.model.clone()
        };
        let o = TiledOptions { model: model.clone(), ..opts.clone() };
        (program.predicted_seconds(&model, 2), super::dist::forecast(&program, 3, &o).model_s)
    };
    let (one0, ranks0) = at(0.0);
    let (one1, ranks1) = at(1e-6);
    let priced = 1e-6 * 8.0 * fresh;
    assert!(((one1 - one0) - priced / 4.0).abs() <= 1e-9 * priced, "{one0} {one1} {priced}");
    // Three ranks: each set waits for its busiest rank, which holds at least a third.
    assert!(ranks1 - ranks0 >= priced / 3.0 * (1.0 - 1e-9), "{ranks0} {ranks1} {priced}");
}

/// A session of a program with run-time ranges (`range N tile 3;`) at several
/// sizes on 1–3 in-process ranks equals the interpreter at the same sizes (the
/// tiles are planned at the sizes given); sizes missing, unknown, below 1, or
/// differing between ranks fail the open on every rank.
#[test]
fn sessions_with_run_time_sizes_equal_the_interpreter_and_refuse_bad_sizes_on_every_rank() {
    let source = include_str!("../../tests/tiled/mpi_mm_sized.tc");
    let (raw, _) = crate::compile(source, "sized");
    let raw = raw.expect("compiles");
    let opts = TiledOptions { threads: 1, schedule: Schedule::Dynamic, ..Default::default() };
    for (n, m) in [(1usize, 1usize), (5, 3), (10, 7), (13, 9)] {
        let sizes: HashMap<String, usize> = [("N".to_string(), n), ("M".to_string(), m)].into();
        let hir = crate::sema::sizes::bind_all_sizes(&raw, &sizes.clone().into_iter().collect()).unwrap();
        let u = UnitId::new(0);
        let inputs: HashMap<TensorId, Dense> =
            hir.unit_inputs(u).into_iter().map(|t| (t, interp::fill_random(&hir, t, 9).unwrap())).collect();
        let want = interp::run_unit(&hir, u, &inputs).unwrap();
        let given = vec![("N".to_string(), n as i64), ("M".to_string(), m as i64)];
        for ranks in 1..=3 {
            on_thread_ranks(ranks, |comm| {
                let comm = super::session::SessionComm::Lent(comm);
                let ctx = format!("N={n} M={m}, {ranks} ranks");
                let mut s = super::session::Session::open(source, None, Ok(&given), comm, opts.clone())
                    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
                for (t, d) in &inputs {
                    let k = s.tensor(&hir.tensors[*t].name).unwrap();
                    s.pack_dense(k, &d.data).unwrap_or_else(|e| panic!("{ctx}: {e}"));
                }
                s.run().unwrap_or_else(|e| panic!("{ctx}: {e}"));
                for (t, d) in &want {
                    let k = s.tensor(&hir.tensors[*t].name).unwrap();
                    assert_eq!(s.describe(k).unwrap().2, d.shape, "extents at N={n}, M={m}");
                    let mut whole = vec![f64::NAN; d.data.len()];
                    s.unpack_dense(k, &mut whole).unwrap();
                    for (g, w) in whole.iter().zip(&d.data).filter(|(g, _)| !g.is_nan()) {
                        assert!((g - w).abs() <= 1e-10 * (1.0 + w.abs()), "N={n} M={m}, {ranks} ranks: {g} vs {w}");
                    }
                }
                Ok(())
            })
            .unwrap_or_else(|e| panic!("N={n} M={m}, {ranks} ranks: {e}"));
        }
    }
    // Refusals: every rank's open fails, with its own reason or its peers'.
    type Case = fn(usize) -> Vec<(String, i64)>;
    let cases: [(Case, &str); 5] = [
        (|_| vec![("N".into(), 4)], "needs the size of the run-time range M"),
        (|_| vec![("N".into(), 4), ("M".into(), 3), ("Q".into(), 2)], "no range `Q`"),
        (|r| vec![("N".into(), if r == 1 { 0 } else { 4 }), ("M".into(), 3)], "at least 1"),
        (|r| vec![("N".into(), 4 + r as i64), ("M".into(), 3)], "different sizes for range `N`"),
        (|_| vec![("N".into(), 4), ("N".into(), 4), ("M".into(), 3)], "given twice"),
    ];
    for (make, want) in cases {
        let errors = std::sync::Mutex::new(Vec::new());
        on_thread_ranks(2, |comm| {
            let me = comm.rank();
            let given = make(me);
            let lent = super::session::SessionComm::Lent(comm);
            match super::session::Session::open(source, None, Ok(&given), lent, opts.clone()) {
                Ok(_) => panic!("{want}: rank {me} opened"),
                Err(e) => errors.lock().unwrap().push(e),
            }
            Ok(())
        })
        .unwrap();
        let errors = errors.into_inner().unwrap();
        assert_eq!(errors.len(), 2, "{want}: {errors:?}");
        assert!(errors.iter().any(|e| e.contains(want)), "{want}: {errors:?}");
    }
}

/// `--tile` absent: the tile size of undeclared ranges is the candidate with the
/// least predicted time — never predicted slower than the default — made alike
/// on every call, the program planned at it computes what the interpreter does,
/// and a unit whose ranges all declare tiles gets no choice.
#[test]
fn the_model_chooses_the_tile_size_and_the_choice_computes_right() {
    use super::autotile::{self, Executor};
    let mut hir = ccd_terms(4, 26);
    // Let the compiler tile the virtual range too.
    let a = hir.indices.ids().find(|&i| hir.indices[i].name == "a").unwrap();
    let va = hir.indices[a].range;
    hir.ranges[va].tiling.tile = None;
    let prepared = crate::pipeline::prepare(&hir, &PipelineOptions::default());
    let u = UnitId::new(0);
    let opts = TiledOptions { threads: 1, auto_tile: true, ..Default::default() };
    for exec in [Executor::OneProcess, Executor::Ranks(3), Executor::Ranks(64)] {
        let (_, choice) = autotile::plan(&prepared, u, &opts, exec).unwrap();
        let c = choice.expect("undeclared ranges: a choice is made");
        assert!(autotile::CANDIDATES.contains(&c.tile), "{exec:?}: {c:?}");
        let best = c.tried.iter().map(|t| t.1).fold(f64::INFINITY, f64::min);
        let default = c.tried.iter().find(|t| t.0 == super::space::DEFAULT_TILE).expect("the default is tried").1;
        assert!(c.model_s <= default && c.model_s <= best * 1.03 + 1e-12, "{exec:?}: {c:?}");
        assert!(c.describe().contains(&format!("tile {}", c.tile)));
        let (_, again) = autotile::plan(&prepared, u, &opts, exec).unwrap();
        assert_eq!(again.as_ref(), Some(&c), "{exec:?}: the choice depends on the plan alone");
        // The chosen tiling computes the interpreter's numbers.
        let at = TiledOptions { tile: c.tile, auto_tile: false, ..opts.clone() };
        match exec {
            Executor::Ranks(r) if r <= 4 => check_distributed(&hir, 3, r, &at).unwrap(),
            _ => {
                check_tiled(&hir, 3, &at).unwrap();
            }
        }
    }
    // Every range declares its tile: nothing to choose.
    hir.ranges[va].tiling.tile = Some(4);
    let i = hir.indices.ids().find(|&i| hir.indices[i].name == "i").unwrap();
    let ro = hir.indices[i].range;
    hir.ranges[ro].tiling.tile = Some(2);
    let prepared = crate::pipeline::prepare(&hir, &PipelineOptions::default());
    assert!(autotile::plan(&prepared, u, &opts, Executor::Ranks(4)).unwrap().1.is_none());
}

/// Ranks whose choices differ (another tuning table, another core count) all
/// run at the smallest tile any chose, planned alike.
#[test]
fn ranks_agree_on_one_tile_size() {
    use super::autotile::{self, TileChoice};
    let mut hir = ccd_terms(4, 12);
    let u = UnitId::new(0);
    let a = hir.indices.ids().find(|&i| hir.indices[i].name == "a").unwrap();
    let va = hir.indices[a].range;
    hir.ranges[va].tiling.tile = None;
    let prepared_free = crate::pipeline::prepare(&hir, &PipelineOptions::default());
    let tiles = std::sync::Mutex::new(Vec::new());
    on_thread_ranks(3, |comm| {
        let mine = if comm.rank() == 1 { 2 } else { 5 };
        let opts = TiledOptions { tile: mine, threads: 1, ..Default::default() };
        let program = Program::plan(&prepared_free, u, &opts)?;
        let choice = TileChoice { tile: mine, model_s: 1.0, tried: vec![(2, 1.5), (5, 1.0)], over_limit: Vec::new() };
        let (program, choice) = autotile::agree_on_tile(comm, &prepared_free, u, &opts, (program, Some(choice)))?;
        let r = program.hir.tensors.ids().find(|&t| program.hir.tensors[t].name == "R").unwrap();
        tiles.lock().unwrap().push((choice.unwrap().tile, program.layouts[&r].tiles().to_vec()));
        Ok(())
    })
    .unwrap();
    let tiles = tiles.into_inner().unwrap();
    assert_eq!(tiles.len(), 3);
    assert!(tiles.iter().all(|t| t == &tiles[0] && t.0 == 2), "{:?}", tiles.iter().map(|t| t.0).collect::<Vec<_>>());
}

/// A session of a complex program holds each complex tensor `X` as two real
/// tensors `X_re`, `X_im`: parts packed from the split inputs give, joined, the
/// complex interpreter's outputs (on the source program) on 1, 2 and 3 ranks,
/// for c128 and mixed c64 programs with `conj`, a real factor and `+=`; one
/// input's parts are read from a complex `.npy` file, a component each.
#[test]
fn sessions_of_complex_programs_equal_the_complex_interpreter() {
    use crate::interp_complex::{CDense, C};
    let opts = TiledOptions { tile: 2, threads: 1, schedule: Schedule::Dynamic, ..Default::default() };
    for (b, tol) in [("c128", 1e-12), ("c64", 1e-5)] {
        let source = format!(
            "range N = 5; range K = 3; index i, j : N; index k : K;\n\
             input tensor A[i,k] : c128; input tensor B[k,j] : {b}; input tensor R[i,j] : f64;\n\
             output tensor Cc[i,j] : c128; output tensor D[i] : {b};\n\
             Cc[i,j] = A[i,k] * conj(B[k,j]) - 0.5 * R[i,j];\nCc[i,j] += A[i,k] * B[k,j];\n\
             D[i] = conj(A[i,k]) * A[i,k] * R[i,i];\n"
        );
        let (hir, _) = crate::compile(&source, "main");
        let hir = hir.unwrap();
        let u = UnitId::new(0);
        let (low, map) = crate::tir::complex::lower(&hir);
        let mut inputs = HashMap::new();
        for t in hir.unit_inputs(u) {
            let part = hir.tensors[t].elem.real_part();
            let re = interp::fill_random(&hir, t, 7).unwrap();
            let data = re
                .data
                .iter()
                .enumerate()
                .map(|(k, &x)| {
                    let im = if hir.tensors[t].elem.is_complex() { (k as f64 * 0.37).sin() } else { 0.0 };
                    C::new(x, interp::round_to(part, im))
                })
                .collect();
            inputs.insert(t, CDense { shape: re.shape, data });
        }
        let want = crate::interp_complex::run_unit(&hir, u, &inputs).unwrap();
        let parts = map.split(&inputs);
        // `A` comes from a complex `.npy` file: each part reads its component.
        let a = hir.tensors.ids().find(|&t| hir.tensors[t].name == "A").unwrap();
        let file = std::env::temp_dir().join(format!("tcc-session-{}-{b}.npy", std::process::id()));
        let pairs = inputs[&a].data.iter().flat_map(|z| [z.re, z.im]).collect();
        let interleaved = Dense { shape: vec![5, 3, 2], data: pairs };
        crate::npy::write_file(&file, &interleaved, ElemType::C128).unwrap();
        for ranks in 1..=3 {
            let got = std::sync::Mutex::new(HashMap::new());
            on_thread_ranks(ranks, |comm| {
                let lent = super::session::SessionComm::Lent(comm);
                let mut s = super::session::Session::open(&source, None, Ok(&[]), lent, opts.clone()).unwrap();
                assert!(s.tensor("A").is_none(), "a complex tensor is its parts");
                for (&t, d) in &parts {
                    let x = s.tensor(&low.tensors[t].name).unwrap_or_else(|| panic!("{}", low.tensors[t].name));
                    if map.parts(a).is_some_and(|(re, im)| t == re || t == im) {
                        s.read_npy(x, &file).unwrap();
                    } else {
                        s.pack_dense(x, &d.data).unwrap();
                    }
                }
                s.run().unwrap();
                // Every rank's tiles together cover each output part.
                for t in hir.unit_outputs(u) {
                    for p in [Some(t), map.parts(t).map(|p| p.1)].into_iter().flatten() {
                        let x = s.tensor(&low.tensors[p].name).unwrap();
                        let n: usize = s.describe(x).unwrap().2.iter().product();
                        let mut whole = vec![f64::NAN; n];
                        s.unpack_dense(x, &mut whole).unwrap();
                        let mut got = got.lock().unwrap();
                        let e = got.entry(p).or_insert_with(|| vec![f64::NAN; n]);
                        for (g, w) in e.iter_mut().zip(&whole).filter(|(_, w)| !w.is_nan()) {
                            *g = *w;
                        }
                    }
                }
                Ok(())
            })
            .unwrap();
            let got: HashMap<TensorId, Dense> = got
                .into_inner()
                .unwrap()
                .into_iter()
                .map(|(t, v)| (t, Dense { shape: low.shape(t), data: v }))
                .collect();
            for t in hir.unit_outputs(u) {
                let g = map.join(t, &got).unwrap();
                let w = &want[&t];
                let scale = w.data.iter().map(|z| z.re.abs().max(z.im.abs())).fold(f64::MIN_POSITIVE, f64::max);
                for (a, z) in g.data.iter().zip(&w.data) {
                    let d = (a.re - z.re).abs().max((a.im - z.im).abs());
                    assert!(d <= tol * scale, "{b}, {ranks} ranks, {}: {a:?} vs {z:?}", hir.tensors[t].name);
                }
                if hir.tensors[t].name == "Cc" {
                    assert!(w.data.iter().any(|z| z.im.abs() > 1e-3 * scale), "{b}: the result is complex");
                }
            }
        }
        std::fs::remove_file(&file).ok();
    }
}

/// A session of a 16-bit program holds values of the 16-bit types: inputs packed
/// from wider values are rounded to their type when it runs, outputs after, and
/// the outputs are the interpreter's (which rounds each stored 16-bit result
/// once), on 1 and 2 ranks.
#[test]
fn sessions_of_16_bit_programs_round_as_the_interpreter() {
    use crate::half::{round_bf16, round_f16};
    let source = "range B = 6; range D = 9; range F = 4; index b : B; index d : D; index f : F;\n\
                  input tensor X[b,d] : bf16; input tensor W[d,f] : f32;\n\
                  output tensor Y[b,f] : f16; output tensor Z[b] : bf16;\n\
                  Y[b,f] = X[b,d] * W[d,f];\nZ[b] = 3 * X[b,d];\n";
    let (hir, _) = crate::compile(source, "main");
    let hir = hir.unwrap();
    let u = UnitId::new(0);
    let id = |n: &str| hir.tensors.ids().find(|&t| hir.tensors[t].name == n).unwrap();
    // Values with more bits than bf16 holds; the interpreter reads them rounded.
    let x: Vec<f64> = (0..54).map(|k| 1.0 + (k as f64 * 0.731).sin() / 3.0 + 1e-4).collect();
    let w = interp::fill_random(&hir, id("W"), 3).unwrap();
    let x_rounded = Dense { shape: vec![6, 9], data: x.iter().map(|&v| round_bf16(v)).collect() };
    assert!(x.iter().zip(&x_rounded.data).any(|(a, b)| a != b), "X has values bf16 does not hold");
    let want = interp::run_unit(&hir, u, &HashMap::from([(id("X"), x_rounded.clone()), (id("W"), w.clone())])).unwrap();
    let opts = TiledOptions { tile: 2, threads: 1, schedule: Schedule::Dynamic, ..Default::default() };
    for ranks in 1..=2 {
        on_thread_ranks(ranks, |comm| {
            let lent = super::session::SessionComm::Lent(comm);
            let mut s = super::session::Session::open(source, None, Ok(&[]), lent, opts.clone()).unwrap();
            let (xs, ws) = (s.tensor("X").unwrap(), s.tensor("W").unwrap());
            s.pack_dense(xs, &x).unwrap();
            s.pack_dense(ws, &w.data).unwrap();
            s.run().unwrap();
            let mut back = vec![f64::NAN; 54];
            s.unpack_dense(xs, &mut back).unwrap();
            for (g, r) in back.iter().zip(&x_rounded.data).filter(|(g, _)| !g.is_nan()) {
                assert_eq!(g, r, "X's tiles hold bf16 values after the run");
            }
            for (name, round) in [("Y", round_f16 as fn(f64) -> f64), ("Z", round_bf16)] {
                let t = s.tensor(name).unwrap();
                let wanted = &want[&id(name)];
                let mut whole = vec![f64::NAN; wanted.data.len()];
                s.unpack_dense(t, &mut whole).unwrap();
                let scale = wanted.data.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                for (g, v) in whole.iter().zip(&wanted.data).filter(|(g, _)| !g.is_nan()) {
                    assert_eq!(round(*g), *g, "{name}: {g} is a value of its type");
                    assert!((g - v).abs() <= 1e-3 * scale, "{name}, {ranks} ranks: {g} vs {v}");
                }
            }
            Ok(())
        })
        .unwrap();
    }
}

/// Sessions (the C API and `--mpi` libraries run on them) of the examples of
/// issue 21's real constructs — broadcast sums and constants in functions,
/// blocks of a union, affine subscripts, `max`/`min`/`where`/softmax — on 1 to 3
/// in-process ranks, every input packed dense: the ranks' output tiles together
/// are the interpreter's outputs.
#[test]
fn sessions_of_the_language_examples_equal_the_interpreter() {
    let opts = TiledOptions { tile: 2, threads: 1, schedule: Schedule::Dynamic, ..Default::default() };
    for name in ["denominator", "fock_blocks", "conv2d", "masked_softmax"] {
        let path = format!("{}/examples/{name}.tc", env!("CARGO_MANIFEST_DIR"));
        let source = std::fs::read_to_string(&path).unwrap();
        let (hir, _) = crate::compile(&source, "main");
        let hir = hir.unwrap();
        let u = UnitId::new(0);
        let inputs = interp::random_inputs(&hir, u, 4).unwrap();
        let want = interp::run_unit(&hir, u, &inputs).unwrap();
        for ranks in 1..=3 {
            let got = std::sync::Mutex::new(HashMap::<TensorId, Vec<f64>>::new());
            on_thread_ranks(ranks, |comm| {
                let lent = super::session::SessionComm::Lent(comm);
                let mut s = super::session::Session::open(&source, None, Ok(&[]), lent, opts.clone()).unwrap();
                for (&t, d) in &inputs {
                    s.pack_dense(s.tensor(&hir.tensors[t].name).unwrap(), &d.data).unwrap();
                }
                s.run().unwrap();
                for &t in want.keys() {
                    let x = s.tensor(&hir.tensors[t].name).unwrap();
                    let mut whole = vec![f64::NAN; want[&t].data.len()];
                    s.unpack_dense(x, &mut whole).unwrap();
                    let mut got = got.lock().unwrap();
                    let e = got.entry(t).or_insert_with(|| vec![f64::NAN; whole.len()]);
                    for (g, w) in e.iter_mut().zip(&whole).filter(|(_, w)| !w.is_nan()) {
                        *g = *w;
                    }
                }
                Ok(())
            })
            .unwrap();
            for (t, g) in got.into_inner().unwrap() {
                let w = &want[&t].data;
                let scale = w.iter().fold(f64::MIN_POSITIVE, |m, v| m.max(v.abs()));
                for (a, b) in g.iter().zip(w) {
                    assert!(
                        (a - b).abs() <= 1e-12 * scale,
                        "{name}, {ranks} ranks, {}: {a} vs {b}",
                        hir.tensors[t].name
                    );
                }
            }
        }
    }
}

/// A factor read with a diagonal through one of its symmetric dimensions
/// (`A[i,k,i]` of a tensor symmetric in its first two) is not symmetric in `i`
/// and `k`: summing only ordered tiles of `i, k` gave wrong numbers (found by
/// `random_programs_tiled_equal_the_interpreter`, seed 6858371688480213351).
#[test]
fn a_diagonal_through_a_symmetric_pair_breaks_its_summation_symmetry() {
    let src = "range N = 4; index i, k, a : N;\n\
               input tensor S[i,k,a] : f64 symmetric(i k);\n\
               input tensor A[i,k,a] : f64 symmetric(i k);\n\
               output tensor R[a];\n\
               R[a] = S[i,k,a] * A[i,k,i];";
    let (hir, diags) = crate::compile(src, "diag");
    let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
    for tile in 1..=4 {
        let opts = TiledOptions { tile, threads: 1, ..Default::default() };
        check_tiled(&hir, 11, &opts).unwrap_or_else(|e| panic!("tile {tile}: {e}"));
    }
    let seed = 6858371688480213351u64;
    let opts =
        TiledOptions { tile: 1 + (seed % 4) as usize, threads: 2, schedule: Schedule::Static, ..Default::default() };
    check_tiled(&random_program(seed), seed, &opts).unwrap();
}

/// A session's temporaries share one arena, planned by their lifetimes, and it
/// is kept across runs: each run must see every temporary zero where it is made
/// (an earlier temporary, or the last run's, wrote there), so three runs on
/// different inputs each equal the interpreter.
#[test]
fn temporaries_share_an_arena_that_runs_reuse_and_find_cleared() {
    let source = "range P = 5; range M = 4;\n\
                  index p, q, r, s : P; index a, b, c, d : M;\n\
                  input tensor A[p,q,r,s] : f64; input tensor C[p,a] : f64;\n\
                  tensor T1[a,q,r,s] : f64; tensor T2[a,b,r,s] : f64; tensor T3[a,b,c,s] : f64;\n\
                  output tensor B[a,b,c,d] : f64;\n\
                  T1[a,q,r,s] = C[p,a] * A[p,q,r,s];\n\
                  T2[a,b,r,s] = C[q,b] * T1[a,q,r,s];\n\
                  T3[a,b,c,s] = C[r,c] * T2[a,b,r,s];\n\
                  B[a,b,c,d] = C[s,d] * T3[a,b,c,s];";
    let (hir, diags) = crate::compile(source, "quarters");
    let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
    let u = UnitId::new(0);
    let b = hir.unit_outputs(u)[0];
    for ranks in 1..=3 {
        let opts = TiledOptions { tile: 2, threads: 1, schedule: Schedule::Dynamic, ..Default::default() };
        on_thread_ranks(ranks, |comm| {
            let lent = super::session::SessionComm::Lent(comm);
            let mut s = super::session::Session::open(source, None, Ok(&[]), lent, opts.clone()).unwrap();
            // T1 is dead when T3 is made: the arena holds less than the three.
            let (arena, temporaries) = s.arena_words();
            assert!(arena < temporaries, "rank {}: arena {arena} of {temporaries} words", comm.rank());
            for seed in [3, 4, 5] {
                let inputs = interp::random_inputs(&hir, u, seed).unwrap();
                let want = interp::run_unit(&hir, u, &inputs).unwrap();
                for (&t, d) in &inputs {
                    s.pack_dense(s.tensor(&hir.tensors[t].name).unwrap(), &d.data).unwrap();
                }
                s.run().unwrap();
                let mut got = vec![f64::NAN; want[&b].data.len()];
                s.unpack_dense(s.tensor("B").unwrap(), &mut got).unwrap();
                let scale = want[&b].data.iter().fold(f64::MIN_POSITIVE, |m, v| m.max(v.abs()));
                for (g, w) in got.iter().zip(&want[&b].data).filter(|(g, _)| !g.is_nan()) {
                    assert!((g - w).abs() <= 1e-12 * scale, "{ranks} ranks, seed {seed}: {g} vs {w}");
                }
            }
            Ok(())
        })
        .unwrap();
    }
}

/// The program of a `.tc` file of this repository (`path` from its root).
fn repository_program(path: &str) -> Hir {
    let source = std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let (hir, diags) = crate::compile(&source, "main");
    hir.unwrap_or_else(|| panic!("{path}: {diags:?}"))
}

/// Runs unit 0 of `hir` through [`super::device`] on `machine` and with the
/// interpreter on the same inputs.
pub(crate) fn check_device(
    hir: &Hir,
    seed: u64,
    opts: &TiledOptions,
    scratch: usize,
    machine: &mut dyn super::device::TileMachine,
) -> Result<super::device::DeviceStats, String> {
    let u = UnitId::new(0);
    let prepared = crate::pipeline::prepare(hir, &PipelineOptions::default());
    let program = Program::plan(&prepared, u, opts).map_err(|e| e.to_string())?;
    let plan = super::device::plan(&program, scratch).map_err(|e| e.to_string())?;
    if (plan.flops - program.planned_flops()).abs() > 0.5 {
        return Err(format!("device plan has {} flops, the tiled plan {}", plan.flops, program.planned_flops()));
    }
    let (tiled, dense) = random_inputs(&program, &prepared, u, seed)?;
    let want = interp::run_unit(hir, u, &dense).map_err(|e| e.to_string())?;
    let (out, stats) = super::device::run_on(&program, &plan, &tiled, machine, 2).map_err(|e| e.to_string())?;
    let got: HashMap<TensorId, Dense> = out.iter().map(|(&t, v)| (t, v.to_dense())).collect();
    check_outputs(hir, u, &got, &want, &dense)?;
    Ok(stats)
}

#[test]
fn ccd_terms_on_the_device_path_match_the_interpreter_with_any_scratch() {
    let hir = ccd_terms(6, 10);
    for (tile, scratch) in [(2, 1 << 20), (3, 64), (4, 1)] {
        let opts = TiledOptions { tile, threads: 1, ..Default::default() };
        let mut m = super::device::HostMachine::default();
        let stats = check_device(&hir, 7, &opts, scratch, &mut m).unwrap();
        assert!(stats.gemm_calls > 0 && stats.moves > 0);
        // A tiny scratch limit splits the sets into one round per contribution.
        if scratch == 1 {
            assert!(stats.rounds >= stats.gemm_calls, "{} rounds, {} GEMMs", stats.rounds, stats.gemm_calls);
        }
    }
}

/// Whether a factor of unit 0 of `hir` is one `is`.
fn has_factor(hir: &Hir, is: fn(&crate::sema::hir::Factor) -> bool) -> bool {
    hir.units[UnitId::new(0)].stmts.iter().flat_map(|s| &s.rhs.terms).flat_map(|t| &t.factors).any(is)
}

/// Whether unit 0 of `hir` has a `max`/`min` or a `where`.
fn has_max_or_where(hir: &Hir) -> bool {
    has_factor(hir, |f| matches!(f, crate::sema::hir::Factor::Reduce { .. } | crate::sema::hir::Factor::Select { .. }))
}

/// Whether unit 0 of `hir` reads a tensor at affine subscripts (a window).
fn has_window(hir: &Hir) -> bool {
    has_factor(hir, |f| matches!(f, crate::sema::hir::Factor::Affine(_)))
}

#[test]
fn random_programs_on_the_device_path_equal_the_interpreter() {
    let (mut ran, mut special, mut windows) = (0, 0, 0);
    let mut operands = super::device::OperandCounts::default();
    for seed in 0..300u64 {
        let hir = random_program(seed);
        let opts = TiledOptions { tile: 1 + (seed % 4) as usize, threads: 1, ..Default::default() };
        let scratch = [1usize, 50, 1 << 20][(seed % 3) as usize];
        let mut m = super::device::HostMachine::default();
        match check_device(&hir, seed, &opts, scratch, &mut m) {
            Ok(stats) => {
                let o = stats.operands;
                operands.in_place += o.in_place;
                operands.transposed += o.transposed;
                operands.packed += o.packed;
                operands.pointer_gemms += o.pointer_gemms;
                ran += 1;
                special += usize::from(has_max_or_where(&hir));
                windows += usize::from(has_window(&hir));
            }
            Err(e) => {
                let stmts: Vec<String> =
                    hir.units[UnitId::new(0)].stmts.iter().map(|s| crate::sema::display::stmt(&hir, s)).collect();
                panic!("seed {seed}: {e}\n{}", stmts.join("\n"));
            }
        }
    }
    // Every program runs; a third read a window (affine subscripts).
    assert_eq!(ran, 300, "only {ran} of 300 random programs ran on the device path");
    assert!(special >= 60, "only {special} programs with `max`/`min` or `where` ran on the device path");
    assert!(windows >= 60, "only {windows} programs with a window ran on the device path");
    // Operand tiles read in place, as they lie and transposed, through pointer
    // arrays and strided batches, next to packed ones.
    let o = operands;
    assert!(o.in_place > 10_000 && o.transposed > 200 && o.packed > 5_000 && o.pointer_gemms > 200, "{o:?}");
}

#[test]
fn the_generated_move_kernel_runs_the_device_path_as_the_interpreter() {
    let mut m = crate::codegen::nvptx::tile_moves::EmulatedMachine::new().unwrap();
    let hir = ccd_terms(4, 6);
    let opts = TiledOptions { tile: 2, threads: 1, ..Default::default() };
    check_device(&hir, 3, &opts, 200, &mut m).unwrap();
    let (mut ran, mut special, mut windows) = (0, 0, 0);
    for seed in 1000..1060u64 {
        let hir = random_program(seed);
        let opts = TiledOptions { tile: 1 + (seed % 4) as usize, threads: 1, ..Default::default() };
        match check_device(&hir, seed, &opts, [1usize, 1 << 20][(seed % 2) as usize], &mut m) {
            Ok(_) => {
                ran += 1;
                special += usize::from(has_max_or_where(&hir));
                windows += usize::from(has_window(&hir));
            }
            Err(e) => panic!("seed {seed}: {e}"),
        }
    }
    assert!(
        ran == 60 && special >= 12 && windows >= 12,
        "only {ran} of 60 random programs ran, {special} with `max` or `where`, {windows} with a window"
    );
}

/// The windows of `examples/conv2d.tc` and `bench/gpu/tiled_special/windows.tc`
/// (a strided convolution, a shifted read, an antisymmetric input at a window)
/// through the generated move kernel, at tiles that cut the windows unevenly.
#[test]
fn windows_run_on_the_device_path_as_the_interpreter() {
    let mut m = crate::codegen::nvptx::tile_moves::EmulatedMachine::new().unwrap();
    for path in ["examples/conv2d.tc", "bench/gpu/tiled_special/windows.tc"] {
        let hir = repository_program(path);
        assert!(has_window(&hir), "{path}");
        for tile in [2, 3, 5] {
            let opts = TiledOptions { tile, threads: 1, ..Default::default() };
            check_device(&hir, 5, &opts, 1 << 20, &mut m).unwrap_or_else(|e| panic!("{path}, tile {tile}: {e}"));
        }
    }
}

/// Moves longer than a block's piece ([`tile_moves::CHUNK`] points): a tile
/// of 100×100 is cut into three pieces, each block finding its move and its
/// first point through the launch's block table.
#[test]
fn the_move_kernel_cuts_long_moves_into_pieces() {
    use crate::codegen::nvptx::tile_moves;
    let src = "range N = 100; range M = 3; index i, j, k : N; index m : M;\n\
               input tensor A[i,k] : f64; input tensor B[k,j] : f64; input tensor S[m] : f64;\n\
               output tensor C[i,j] : f64; output tensor D[i,j] : f64; output tensor E[i,j] : f64;\n\
               C[i,j] = A[i,k] * B[k,j];\n\
               D[i,j] = A[i,j] * B[j,i] + 2.0 * A[i,j];\n\
               E[i,j] = max(S[m]) + A[i,j];";
    let (hir, diags) = crate::compile(src, "long");
    let hir = hir.unwrap_or_else(|| panic!("{diags:?}"));
    const { assert!(100 * 100 > 2 * tile_moves::CHUNK) };
    let mut m = tile_moves::EmulatedMachine::new().unwrap();
    let opts = TiledOptions { tile: 100, threads: 1, ..Default::default() };
    check_device(&hir, 9, &opts, 1 << 20, &mut m).unwrap();
}

#[test]
fn the_move_kernel_compiles_to_ptx_with_atomic_adds() {
    let ptx = crate::codegen::nvptx::tile_moves::ptx().unwrap();
    assert!(ptx.contains(".entry tcc_tile_moves") && ptx.contains(".entry tcc_tile_special"), "{ptx}");
    assert!(ptx.contains("atom.global.add.f64"), "no f64 atomic add in the PTX");
    // `max`/`min` as integer atomics on the bits (signed for v >= 0, unsigned below).
    for op in ["atom.global.max.s64", "atom.global.min.u64", "atom.global.min.s64", "atom.global.max.u64"] {
        assert!(ptx.contains(op), "no {op} in the PTX");
    }
}

/// Complex programs run on the device path as their lowering to (re, im)
/// parts (what `tcc-gpu --tiled` runs), equal to the interpreter on the parts.
#[test]
fn complex_programs_run_on_the_device_path_as_their_parts() {
    let mut emulated = crate::codegen::nvptx::tile_moves::EmulatedMachine::new().unwrap();
    for path in ["examples/complex_mps.tc", "examples/density_c64.tc"] {
        let hir = repository_program(path);
        assert!(crate::sema::complex::has_complex(&hir), "{path}");
        let low = crate::tir::complex::lower(&hir).0;
        for tile in [2, 3] {
            let opts = TiledOptions { tile, threads: 1, ..Default::default() };
            let mut host = super::device::HostMachine::default();
            for m in [&mut host as &mut dyn super::device::TileMachine, &mut emulated] {
                let stats =
                    check_device(&low, 11, &opts, 1 << 20, m).unwrap_or_else(|e| panic!("{path}, tile {tile}: {e}"));
                assert!(stats.gemm_calls > 0, "{path}: the parts' products run as GEMMs");
            }
        }
    }
}
