#!/usr/bin/env python3
"""Large-network path benchmark: tcc's hyper-optimizer vs opt_einsum greedy and
cotengra's HyperOptimizer, with the same wall-clock budget per network.

Networks (closed, scalar result, seeded), 20-400 tensors:
* random 3-regular graphs of 20-300 tensors, bond 2-8 (networkx);
* PEPS norms <psi|psi>, L x L for L = 4, 5, 6, 8, bond D = 2, 3, physical 2, in both
  forms: bra and ket as separate tensors (2 L^2 tensors) and merged into one
  double-layer tensor per site with bonds D^2 (L^2 tensors, `_merged`);
* MPS norms, N = 20, 50 sites, bond 8 or 16, physical 2 (2 N tensors);
* MPO sweeps <psi|H|psi>: MPS bond D, MPO bond W, N = 10, 40 sites (3 N tensors;
  100 sites made slicing to the common target take minutes);
* THC-like chemistry terms: rings of k = 4, 8 tensor-hypercontracted two-electron
  integrals X[i,P] X[a,P] Z[P,Q] X[j,Q] X[b,Q] (5 k tensors);
* random-circuit amplitudes <0|U|0> on R x C grids (3x3, 4x4, 5x5 with 8 cycles, 4x4
  with 12, 5x5 with 10; a random non-diagonal one-qubit gate per qubit and cycle,
  then CZ gates on one of four nearest-neighbour patterns): a CZ is diagonal, so it
  is a 2x2 tensor on the two wires it joins and adds no index — each wire index
  between one-qubit gates is a summed hyperedge held by every CZ on it (cotengra's
  and quimb's hyperedge form).

Every path (tcc greedy, tcc hyper, opt_einsum greedy, cotengra) is costed by
opt_einsum's `contract_path` with the path given explicitly, so flops (2 x prod of
the sizes of a step that sums, 1 x otherwise) and the largest intermediate are
counted the same way for all.

Every case is also sliced by both tools to the same target size (equal slicing).
The `LONG` cases run again with a larger budget (`--long`, 5 s) for both tools.

Usage: python3 bench/paths/large.py [--time SECONDS] [--long SECONDS] [--cases ID,ID] [--features mpi] [--quick]
Needs: pip install opt_einsum numpy networkx; cotengra optional (pip install cotengra).
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

import networkx as nx
import opt_einsum as oe

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

try:
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import cotengra as ctg
    CTG_WARN = "; ".join(str(w.message) for w in caught)
    if not CTG_WARN and __import__("importlib").util.find_spec("kahypar") is None:
        CTG_WARN = "kahypar not installed"
except ImportError:  # pragma: no cover
    ctg = None
    CTG_WARN = "cotengra not installed"


def regular3(n, bond, seed):
    g = nx.random_regular_graph(3, n, seed=seed)
    inputs = [[] for _ in range(n)]
    for k, (a, b) in enumerate(g.edges()):
        inputs[a].append(k)
        inputs[b].append(k)
    return inputs, [], [bond] * g.number_of_edges()


def peps_norm(L, D, p=2):
    sizes, inputs = [], []

    def new(size):
        sizes.append(size)
        return len(sizes) - 1

    phys = {(r, c): new(p) for r in range(L) for c in range(L)}
    for layer in range(2):
        bonds = {}
        for r in range(L):
            for c in range(L):
                if c + 1 < L:
                    bonds[((r, c), (r, c + 1))] = new(D)
                if r + 1 < L:
                    bonds[((r, c), (r + 1, c))] = new(D)
        for r in range(L):
            for c in range(L):
                ix = [phys[(r, c)]] + [i for (a, b), i in bonds.items() if (r, c) in (a, b)]
                inputs.append(ix)
    return inputs, [], sizes


def mps_norm(N, D, p=2):
    sizes, inputs = [], []

    def new(size):
        sizes.append(size)
        return len(sizes) - 1

    phys = [new(p) for _ in range(N)]
    for layer in range(2):
        bonds = [new(D) for _ in range(N - 1)]
        for k in range(N):
            ix = [phys[k]] + ([bonds[k - 1]] if k > 0 else []) + ([bonds[k]] if k < N - 1 else [])
            inputs.append(ix)
    return inputs, [], sizes


def circuit(rows, cols, cycles, seed):
    rng = random.Random(seed)
    sizes, inputs = [], []

    def new():
        sizes.append(2)
        return len(sizes) - 1

    q = lambda r, c: r * cols + c
    wire = [new() for _ in range(rows * cols)]
    inputs += [[w] for w in wire]  # |0> on every qubit
    # The four nearest-neighbour patterns: horizontal even/odd, vertical even/odd.
    patterns = [
        [(q(r, c), q(r, c + 1)) for r in range(rows) for c in range(s0, cols - 1, 2)] for s0 in (0, 1)
    ] + [[(q(r, c), q(r + 1, c)) for r in range(s0, rows - 1, 2) for c in range(cols)] for s0 in (0, 1)]
    order = list(range(4))
    for cyc in range(cycles):
        for k in range(rows * cols):
            w = new()
            inputs.append([wire[k], w])  # a one-qubit gate: a new wire index
            wire[k] = w
        if cyc % 4 == 0:
            rng.shuffle(order)
        for a, b in patterns[order[cyc % 4]]:
            inputs.append([wire[a], wire[b]])  # CZ: diagonal, on the wires it joins
    inputs += [[w] for w in wire]  # <0|
    return inputs, [], sizes


def peps_merged(L, D, p=2):
    """The PEPS norm in its double-layer form: bra and ket of a site merged into one
    tensor with bonds D^2 (L^2 tensors, the physical index summed inside)."""
    inputs, output, sizes = peps_norm(L, D * D, p)
    return [ix[1:] for ix in inputs[: L * L]], output, sizes


def mpo_sweep(N, D, W, p=2):
    """<psi|H|psi> with H an MPO of bond W: 3 N tensors (bra, MPO, ket), the
    network of an energy evaluation in a DMRG sweep."""
    sizes, inputs = [], []

    def new(size):
        sizes.append(size)
        return len(sizes) - 1

    up = [new(p) for _ in range(N)]
    down = [new(p) for _ in range(N)]
    for layer, (bond, phys) in enumerate([(D, [up]), (W, [up, down]), (D, [down])]):
        bonds = [new(bond) for _ in range(N - 1)]
        for k in range(N):
            ix = [ph[k] for ph in phys] + ([bonds[k - 1]] if k > 0 else []) + ([bonds[k]] if k < N - 1 else [])
            inputs.append(ix)
    return inputs, [], sizes


def thc_ring(k, o, v, rank):
    """A ring of k tensor-hypercontracted two-electron integrals (a ring-diagram
    energy term): integral m is X[i_m,P] X[a_m,P] Z[P,Q] X[i_m+1,Q] X[a_m+1,Q],
    occupied i (o), virtual a (v), THC rank P, Q; 5 k tensors."""
    sizes = [o] * k + [v] * k
    inputs = []
    for m in range(k):
        P, Q = len(sizes), len(sizes) + 1
        sizes += [rank, rank]
        n = (m + 1) % k
        inputs += [[m, P], [k + m, P], [P, Q], [n, Q], [k + n, Q]]
    return inputs, [], sizes


# The cases of the larger budget (`--long`): the hardest of each family.
LONG = ["reg3_n100_b3", "reg3_n300_b3", "peps6x6_D3", "peps8x8_D2", "circuit5x5_d10", "thc_ring8"]


def cases(quick):
    out = []
    reg = [(20, 4), (20, 8), (30, 3), (30, 6), (40, 2), (40, 4), (40, 8), (50, 3), (60, 2), (60, 4), (80, 3), (100, 2), (100, 3)]
    reg += [(200, 2), (300, 2), (300, 3)]
    for k, (n, bond) in enumerate(reg[:4] if quick else reg):
        out.append((f"reg3_n{n}_b{bond}", *regular3(n, bond, 1000 + k)))
    for L in [4, 5] if quick else [4, 5, 6, 8]:
        for D in [2, 3]:
            out.append((f"peps{L}x{L}_D{D}", *peps_norm(L, D)))
    for L, D in [(5, 2)] if quick else [(5, 2), (6, 2), (8, 2), (8, 3)]:
        out.append((f"peps{L}x{L}_D{D}_merged", *peps_merged(L, D)))
    for N, D in [(20, 8)] if quick else [(20, 8), (50, 16)]:
        out.append((f"mps{N}_D{D}", *mps_norm(N, D)))
    for N, D, W in [(10, 8, 5)] if quick else [(10, 8, 5), (40, 16, 5)]:
        out.append((f"mpo{N}_D{D}_W{W}", *mpo_sweep(N, D, W)))
    for k in [4] if quick else [4, 8]:
        out.append((f"thc_ring{k}", *thc_ring(k, 20, 80, 160)))
    circ = [(3, 3, 8), (4, 4, 8), (5, 5, 8), (4, 4, 12), (5, 5, 10)]
    for k, (r, c, d) in enumerate(circ[:1] if quick else circ):
        out.append((f"circuit{r}x{c}_d{d}", *circuit(r, c, d, 2000 + k)))
    return out


def ssa_to_linear(n, ssa):
    alive = list(range(n))
    path, nxt = [], n
    for a, b in ssa:
        i, j = alive.index(a), alive.index(b)
        path.append((i, j))
        for k in sorted((i, j), reverse=True):
            alive.pop(k)
        alive.append(nxt)
        nxt += 1
    return path


def cost(inputs, output, sizes, path):
    eq = ",".join("".join(oe.get_symbol(i) for i in ix) for ix in inputs) + "->" + "".join(oe.get_symbol(i) for i in output)
    shapes = [tuple(sizes[i] for i in ix) for ix in inputs]
    _, info = oe.contract_path(eq, *shapes, shapes=True, optimize=path)
    return float(info.opt_cost), float(info.largest_intermediate)


def oe_greedy(inputs, output, sizes):
    eq = ",".join("".join(oe.get_symbol(i) for i in ix) for ix in inputs) + "->" + "".join(oe.get_symbol(i) for i in output)
    shapes = [tuple(sizes[i] for i in ix) for ix in inputs]
    t = time.perf_counter()
    path, _ = oe.contract_path(eq, *shapes, shapes=True, optimize="greedy")
    return path, time.perf_counter() - t


def cotengra(inputs, output, sizes, budget):
    ins = [[str(i) for i in ix] for ix in inputs]
    size_dict = {str(i): s for i, s in enumerate(sizes)}
    opt = ctg.HyperOptimizer(
        max_time=budget, max_repeats=10**9, minimize="flops", parallel=False, progbar=False, reconf_opts={}
    )
    t = time.perf_counter()
    tree = opt.search(ins, [str(i) for i in output], size_dict)
    return tree.get_path(), time.perf_counter() - t, len(getattr(opt, "scores", [])), tree


def sliced_cost(inputs, output, sizes, sliced, path):
    """(total flops over all slices, largest intermediate of a slice, slices)."""
    one = list(sizes)
    slices = 1
    for i in sliced:
        slices *= sizes[i]
        one[i] = 1
    f, s = cost(inputs, output, one, path)
    return f * slices, s, slices


def slice_target(row):
    """The size both tools slice to: a power of two at most 1/32 of the smaller
    unsliced largest intermediate, but not under 64 elements (or half of it, for
    smaller ones: MPS norms, small circuits)."""
    small = min(row["tcc_hyper"][1], row["ctg"][1])

    def pow2(limit):
        t = 1
        while t * 2 <= limit:
            t *= 2
        return t

    return max(pow2(small / 32), min(64, pow2(small / 2)))


def run_case(exe, cid, inputs, output, sizes, budget, equal_count=True):
    """One row: tcc greedy and hyper, opt_einsum greedy, cotengra, all with `budget`
    seconds, then both sliced to the same target."""
    line = json.dumps({"id": cid, "inputs": inputs, "output": output, "sizes": sizes, "search_time": budget})
    r = json.loads(subprocess.run([exe], input=line + "\n", capture_output=True, text=True, check=True).stdout)
    n = len(inputs)
    row = {"id": cid, "n": n}
    for name in ["greedy", "hyper"]:
        f, s = cost(inputs, output, sizes, ssa_to_linear(n, r[name]["ssa"]))
        assert abs(f - r[name]["flops"]) <= 1e-9 * f, (cid, name, f, r[name]["flops"])
        row[f"tcc_{name}"] = (f, s, r[name]["seconds"])
    path, t = oe_greedy(inputs, output, sizes)
    row["oe_greedy"] = (*cost(inputs, output, sizes, path), t)
    if ctg is None:
        return row
    path, t, trials, tree = cotengra(inputs, output, sizes, budget)
    row["ctg"] = (*cost(inputs, output, sizes, path), t)
    row["ctg_trials"] = trials
    # Equal slicing: both slice their own order to the same target size.
    target = slice_target(row)
    row["target"] = target
    if max(row["tcc_hyper"][1], row["ctg"][1]) <= target:
        return row
    more = [t for t in (target / 2, target / 4, target / 8) if t >= 1] if equal_count else []
    one = dict(json.loads(line), max_intermediate=target, more_targets=more)
    r = json.loads(subprocess.run([exe], input=json.dumps(one) + "\n", capture_output=True, text=True, check=True).stdout)
    sl = r["sliced"]
    assert sl["largest"] <= target, (cid, sl["largest"], target)
    row["tcc_sliced"] = (*sliced_cost(inputs, output, sizes, sl["sliced"], ssa_to_linear(n, sl["ssa"])), sl["seconds"])
    t = time.perf_counter()
    st = tree.slice_and_reconfigure(target_size=target)
    secs = time.perf_counter() - t
    ids = [int(i) for i in st.sliced_inds]
    row["ctg_sliced"] = (*sliced_cost(inputs, output, sizes, ids, st.get_path()), secs)
    if equal_count:
        equal_slice_count(row, r.get("more", []), tree, inputs, output, sizes, more)
    return row


def equal_slice_count(row, tcc_more, tree, inputs, output, sizes, more):
    """Equal slicing as a slice count: the tool with fewer slices at the common
    target is sliced again to halved targets (1/2, 1/4, 1/8 of it) until it has at
    least as many slices as the other; the first such slicing is compared with the
    other's (`row["eq_count"]`: both (flops, largest, slices), and which was
    re-sliced). Left out when neither halving gets there."""
    n = len(inputs)
    a, b = row["tcc_sliced"], row["ctg_sliced"]
    if a[2] == b[2]:
        row["eq_count"] = (a[:3], b[:3], "none")
    elif a[2] < b[2]:
        for m in tcc_more:
            c = sliced_cost(inputs, output, sizes, m["sliced"], ssa_to_linear(n, m["ssa"]))
            if c[2] >= b[2]:
                row["eq_count"] = (c, b[:3], "tcc")
                return
    else:
        for t in more:
            st = tree.slice_and_reconfigure(target_size=t)
            c = sliced_cost(inputs, output, sizes, [int(i) for i in st.sliced_inds], st.get_path())
            if c[2] >= a[2]:
                row["eq_count"] = (a[:3], c, "cotengra")
                return


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--time", type=float, default=1.0, help="search budget per network, seconds (both tools)")
    ap.add_argument("--long", type=float, default=5.0, help="the larger budget for the LONG cases (0: none)")
    ap.add_argument("--cases", default="", help="comma-separated case ids (default: all)")
    ap.add_argument("--features", default="", help="cargo features for the build (e.g. mpi)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    build = ["cargo", "build", "--release", "--example", "paths_large"] + (["--features", args.features] if args.features else [])
    subprocess.run(build, cwd=ROOT, check=True)
    exe = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "examples", "paths_large")
    wanted = [c for c in args.cases.split(",") if c]
    all_cases = [c for c in cases(args.quick) if not wanted or c[0] in wanted]
    started = time.perf_counter()
    rows = []
    for cid, inputs, output, sizes in all_cases:
        rows.append(run_case(exe, cid, inputs, output, sizes, args.time))
        print(cid, {k: v for k, v in rows[-1].items() if k != "id"}, file=sys.stderr, flush=True)
    long_rows = []
    if args.long > 0 and ctg is not None:
        for cid, inputs, output, sizes in (c for c in all_cases if c[0] in LONG):
            long_rows.append(run_case(exe, cid, inputs, output, sizes, args.long, equal_count=False))
            print("long", cid, {k: v for k, v in long_rows[-1].items() if k != "id"}, file=sys.stderr, flush=True)
    write(rows, long_rows, args, time.perf_counter() - started)


def summary(rows, have_ctg):
    """The summary table of `rows`: median, worst (max, with its case) and best."""
    lines = ["| comparison | cases | median | worst (max) | worst case | best (min) |", "|---|---|---|---|---|---|"]

    def add(label, num, den, k):
        vals = [(r[num][k] / r[den][k], r["id"]) for r in rows if num in r and den in r]
        if vals:
            v = [x for x, _ in vals]
            worst = max(vals)
            lines.append(
                f"| {label} | {len(v)} | {statistics.median(v):.3f} | {worst[0]:.3f} | {worst[1]} | {min(v):.3f} |"
            )

    add("flops tcc hyper / opt_einsum greedy", "tcc_hyper", "oe_greedy", 0)
    add("flops tcc hyper / tcc greedy", "tcc_hyper", "tcc_greedy", 0)
    add("largest intermediate tcc hyper / opt_einsum greedy", "tcc_hyper", "oe_greedy", 1)
    if have_ctg:
        add("unsliced: flops tcc hyper / cotengra", "tcc_hyper", "ctg", 0)
        add("unsliced: largest intermediate tcc hyper / cotengra", "tcc_hyper", "ctg", 1)
        add("search seconds tcc hyper / cotengra", "tcc_hyper", "ctg", 2)
        add("sliced to the same target: total flops tcc / cotengra", "tcc_sliced", "ctg_sliced", 0)
        add("sliced to the same target: largest intermediate tcc / cotengra", "tcc_sliced", "ctg_sliced", 1)
        add("sliced to the same target: slices tcc / cotengra", "tcc_sliced", "ctg_sliced", 2)
        add("sliced to the same target: slicing seconds tcc / cotengra", "tcc_sliced", "ctg_sliced", 3)
        eq = [r for r in rows if "eq_count" in r]
        if eq:
            for k, what in [(1, "largest intermediate"), (0, "total flops"), (2, "slices")]:
                vals = [(r["eq_count"][0][k] / r["eq_count"][1][k], r["id"]) for r in eq]
                med = statistics.median(v for v, _ in vals)
                worst = max(vals)
                best = min(v for v, _ in vals)
                lines.append(
                    f"| equal slice count: {what} tcc / cotengra | {len(vals)} | {med:.3f} | {worst[0]:.3f} | {worst[1]} | {best:.3f} |"
                )
    return lines


def case_table(rows, have_ctg):
    head = "| id | n | tcc hyper flops | tcc greedy | oe greedy | " + ("cotengra | " if have_ctg else "")
    head += "hyper/oe greedy | " + ("hyper/cotengra | " if have_ctg else "")
    head += "largest: hyper | oe greedy | " + ("cotengra | hyper/cotengra | " if have_ctg else "") + "tcc s | "
    head += "cotengra s | cotengra trials |" if have_ctg else ""
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        c = [r["id"], str(r["n"]), f"{r['tcc_hyper'][0]:.3e}", f"{r['tcc_greedy'][0]:.3e}", f"{r['oe_greedy'][0]:.3e}"]
        if have_ctg:
            c.append(f"{r['ctg'][0]:.3e}")
        c.append(f"{r['tcc_hyper'][0] / r['oe_greedy'][0]:.3f}")
        if have_ctg:
            c.append(f"{r['tcc_hyper'][0] / r['ctg'][0]:.3f}")
        c += [f"{r['tcc_hyper'][1]:.3g}", f"{r['oe_greedy'][1]:.3g}"]
        if have_ctg:
            c += [f"{r['ctg'][1]:.3g}", f"{r['tcc_hyper'][1] / r['ctg'][1]:.3f}"]
        c.append(f"{r['tcc_hyper'][2]:.2f}")
        if have_ctg:
            c += [f"{r['ctg'][2]:.2f}", str(r.get("ctg_trials", ""))]
        lines.append("| " + " | ".join(c) + " |")
    return lines


def sliced_table(rows):
    head = (
        "| id | target | tcc slices | tcc flops | tcc largest | cotengra slices | cotengra flops | cotengra largest "
        "| flops tcc/cotengra | largest tcc/cotengra | tcc s | cotengra s |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if "tcc_sliced" not in r:
            lines.append(f"| {r['id']} | {r['target']:g} | both unsliced orders fit | | | | | | | | | |")
            continue
        a, b = r["tcc_sliced"], r["ctg_sliced"]
        c = [r["id"], f"{r['target']:g}", f"{a[2]:g}", f"{a[0]:.3e}", f"{a[1]:.3g}", f"{b[2]:g}", f"{b[0]:.3e}"]
        c += [f"{b[1]:.3g}", f"{a[0] / b[0]:.3f}", f"{a[1] / b[1]:.3f}", f"{a[3]:.2f}", f"{b[3]:.2f}"]
        lines.append("| " + " | ".join(c) + " |")
    return lines


def write(rows, long_rows, args, seconds):
    have_ctg = all("ctg" in r for r in rows)
    lines = ["# Large networks: tcc hyper-optimizer vs opt_einsum greedy and cotengra", ""]
    cmd = "python3 bench/paths/large.py" + (f" --time {args.time:g}" if args.time != 1.0 else "")
    cmd += (f" --long {args.long:g}" if args.long != 5.0 else "") + (" --quick" if args.quick else "")
    cmd += (f" --cases {args.cases}" if args.cases else "") + (f" --features {args.features}" if args.features else "")
    lines.append(
        f"{len(rows)} closed networks of {min(r['n'] for r in rows)}–{max(r['n'] for r in rows)} tensors, generated "
        f"by `{cmd}` ({seconds / 60:.1f} min) on the 2-core dev machine, shared with other sessions' builds and "
        f"tests, opt_einsum {oe.__version__}"
        + (f", cotengra {ctg.__version__}" if ctg else "")
        + f". Search budget {args.time:g} s per network for tcc (`--search-time`) and for cotengra (`max_time`), "
        + (f"and {args.long:g} s for both on {len(long_rows)} of the hardest ([Larger budget](#larger-budget))." if long_rows else "")
    )
    lines.append("")
    if ctg:
        lines.append(
            "cotengra runs `HyperOptimizer(max_time=T, minimize='flops', parallel=False, reconf_opts={})` (subtree "
            "reconfiguration of every trial, as its default `reconf_opts` does) with its defaults otherwise; "
            + (
                "**kahypar is not installed here**, so cotengra uses its `greedy` and `labels` methods "
                "and its own hyper-parameter search — weaker than the kahypar configuration the issue was "
                "measured against. "
                if CTG_WARN
                else "kahypar is installed, so cotengra uses its `greedy` and `kahypar` methods (the configuration the "
                "issue was measured against) with its own hyper-parameter search"
                + ("" if __import__("importlib").util.find_spec("optuna") else " (no optuna)")
                + ". "
            )
            + "Within the budget cotengra completed "
            + f"{min(r.get('ctg_trials', 0) for r in rows)}–{max(r.get('ctg_trials', 0) for r in rows)} trials per "
            "network here (median "
            + f"{statistics.median(r.get('ctg_trials', 0) for r in rows):g}); the larger budget below is the "
            "comparison with a less starved cotengra. tcc stops early once its trials bring nothing for a while, so "
            + f"it used less than the budget on {sum(r['tcc_hyper'][2] < args.time for r in rows)} of {len(rows)} "
            "networks. The circuit networks hold summed hyperedges (a wire index shared by two one-qubit gates and "
            "a CZ), which all three tools take as they are."
        )
        lines.append("")
        lines.append(
            "kahypar: " + ("installed" if not CTG_WARN else "not installed (cotengra's warning: " + CTG_WARN.strip() + ")")
        )
        lines.append("")
    lines.append(
        "All paths are costed by opt_einsum's `contract_path` with the path given (flops: 2 × ∏ sizes for a step that "
        "sums an index, else 1 ×; largest intermediate in elements). Ratios < 1 favour tcc. *Unsliced* compares the "
        "orders as found; *sliced to the same target* slices both orders until no intermediate exceeds the same "
        "size (a power of two at most 1/32 of the smaller unsliced largest intermediate, but at least 64 "
        "elements or half of it): tcc with `tir::slice` (what `tcc opt/run --max-intermediate` do), cotengra with "
        "`ContractionTree.slice_and_reconfigure(target_size=...)`; total flops are one slice's cost (sliced "
        "indices of size 1) times the slices — the comparison at equal slicing the issue asks for. Slicing "
        "seconds are the slicing's alone for both (tcc slices the order its search just found, cotengra the tree "
        "it found; neither search is counted). *Equal slice count* (main budget only) takes equal slicing "
        "literally: the tool with fewer slices at the common target is sliced again to 1/2, 1/4, 1/8 of the "
        "target until it has at least as many slices as the other, and the first such slicing is compared "
        "(slices ratio ≥ 1 where tcc was re-sliced, ≤ 1 where cotengra was); cases where no halving gets there "
        "are left out of those rows."
    )
    lines.append("")
    lines.append(f"### Summary ({args.time:g} s)")
    lines.append("")
    lines += summary(rows, have_ctg)
    if long_rows:
        lines.append("")
        lines.append(f"### Summary, larger budget ({args.long:g} s, both tools)")
        lines.append("")
        lines += summary(long_rows, have_ctg)
    lines.append("")
    lines.append("### Cases")
    lines.append("")
    lines += case_table(rows, have_ctg)
    if have_ctg:
        lines.append("")
        lines.append("### Sliced to the same target")
        lines.append("")
        lines += sliced_table(rows)
    if long_rows:
        lines.append("")
        lines.append("### Larger budget")
        lines.append("")
        lines.append(f"The cases of `LONG` in `large.py`, {args.long:g} s for tcc and for cotengra.")
        lines.append("")
        lines += case_table(long_rows, have_ctg)
        lines.append("")
        lines += sliced_table(long_rows)
    with open(os.path.join(HERE, "results_large.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    # The summary also goes into results.md, between markers (run.py writes the rest).
    summary_lines = lines[: lines.index("### Cases")]
    summary_lines[0] = "## Large networks (`large.py`; every case in `results_large.md`)"
    block = "<!-- large.py -->\n" + "\n".join(summary_lines).rstrip() + "\n<!-- /large.py -->\n"
    path = os.path.join(HERE, "results.md")
    text = open(path).read() if os.path.exists(path) else ""
    if "<!-- large.py -->" in text:
        head, rest = text.split("<!-- large.py -->", 1)
        tail = rest.split("<!-- /large.py -->\n", 1)[1] if "<!-- /large.py -->\n" in rest else ""
        text = head + block + tail
    else:
        marker = "\n## Cases"
        at = text.find(marker)
        text = text + "\n" + block if at < 0 else text[:at] + "\n" + block + text[at:]
    with open(path, "w") as f:
        f.write(text)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
