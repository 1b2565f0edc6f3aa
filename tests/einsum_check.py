#!/usr/bin/env python3
"""Checks `tcc run --interp` against numpy on the examples.

For each example in TABLE this runs

    $TCC run --interp --seed 3 --output-dir TMP --save-inputs examples/NAME.tc

($TCC defaults to target/debug/tcc), loads the inputs and outputs it wrote, and
checks that

* every output in the report is in the table and every output in the table is in
  the report, with the element type and shape printed;
* each output equals the table's numpy (einsum) recomputation from the saved
  inputs: rtol 1e-10 for f64 outputs (2^-23 for f32 ones, which are rounded), with
  an absolute tolerance of the same size relative to the largest magnitude, for
  entries that cancel to about zero;
* the printed norm2, sum and checksum are those of the .npy file, where
  checksum = sum_k x[k] * (1 + k mod 7) over the row-major elements;
* declared input symmetries hold exactly in the random fill;
* a second run with the same seed prints the same report.

Usage: tests/einsum_check.py [EXAMPLE ...]   (default: all). Exit status 1 on any
failure, after reporting every one.
"""

import math
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TCC = os.environ.get("TCC", os.path.join(ROOT, "target", "debug", "tcc"))
SEED = 3


def es(spec, *operands):
    return np.einsum(spec, *operands, optimize=False)


def relu(x):
    return np.maximum(x, 0.0)


def swapped(a, p, q):
    """`a` with axes p and q exchanged."""
    return np.swapaxes(a, p, q)


def symmetric(name, *pairs):
    def check(x):
        a = x[name]
        return all(np.array_equal(a, swapped(a, p, q)) for p, q in pairs)

    check.__doc__ = f"{name} symmetric in {pairs}"
    return check


def antisymmetric(name, *pairs):
    def check(x):
        a = x[name]
        ok = all(np.array_equal(a, -swapped(a, p, q)) for p, q in pairs)
        # exact zeros where the two indices of a pair are equal
        for p, q in pairs:
            d = np.diagonal(a, axis1=p, axis2=q)
            ok = ok and np.all(d == 0.0)
        return ok

    check.__doc__ = f"{name} antisymmetric in {pairs}"
    return check


def attention(x):
    s = 0.5 * es("hse,hte->hst", x["Q"], x["K"])
    p = np.exp(s)
    z = p.sum(axis=2)
    return es("hs,hst,htf->hsf", 1.0 / z, p, x["V"])


# example -> {"outputs": {name: f(inputs as float64) -> expected}, "inputs": checks}
TABLE = {
    "matmul": {
        "outputs": {"C": lambda x: es("ik,kj->ij", x["A"], x["B"])},
    },
    "chain4": {
        "outputs": {"R": lambda x: es("ab,bc,cd,de->ae", x["A"], x["B"], x["C"], x["D"])},
    },
    "four_index": {
        "outputs": {
            "B": lambda x: es("ap,bq,cr,ds,pqrs->abcd", x["C"], x["C"], x["C"], x["C"], x["A"]),
        },
        "inputs": [symmetric("A", (0, 1), (2, 3))],
    },
    "ccsd_terms": {
        "outputs": {
            "R": lambda x: 0.5 * es("abkl,klij->abij", x["T2"], x["W"])
            + es("ac,cbij->abij", x["F"], x["T2"])
            - es("bc,caij->abij", x["F"], x["T2"]),
            "E": lambda x: 0.25 * es("klcd,cdkl->", x["G"], x["T2"]),
        },
        "inputs": [antisymmetric("T2", (0, 1), (2, 3)), antisymmetric("G", (0, 1), (2, 3))],
    },
    "mps": {
        "outputs": {
            "Psi": lambda x: es("sa,atb,buc,cv->stuv", x["A1"], x["A2"], x["A3"], x["A4"]),
            "Norm": lambda x: es(
                "sa,sx,atb,xty,buc,yuz,cv,zv->",
                x["A1"], x["A1"], x["A2"], x["A2"], x["A3"], x["A3"], x["A4"], x["A4"],
            ),
        },
    },
    "attention": {
        "outputs": {"O": attention},
    },
    "model_mlp": {
        "outputs": {"Y": lambda x: es("tf,fn->tn", relu(es("tm,mf->tf", x["X"], x["W1"])), x["W2"])},
        "dtypes": {"X": np.float32, "W1": np.float32, "W2": np.float32},
    },
}

UNIT_RE = re.compile(r"^(program|model) (\S+) \((\d+) statements?\)$")
ROW_RE = re.compile(
    r"^  (\S+) +(f32|f64)\[([0-9, ]*)\] +norm2 = (\S+)  sum = (\S+)  checksum = (\S+)$"
)


def parse_report(text):
    """[(unit, name, dtype, shape, norm2, sum, checksum)]; raises on a bad line."""
    rows, unit = [], None
    for line in text.splitlines():
        m = UNIT_RE.match(line)
        if m:
            unit = m.group(2)
            continue
        if line == "  (no outputs)" and unit is not None:
            continue
        m = ROW_RE.match(line)
        if not m or unit is None:
            raise ValueError(f"unexpected report line: {line!r}")
        shape = tuple(int(d) for d in m.group(3).split(",") if d.strip())
        rows.append((unit, m.group(1), m.group(2), shape, *(float(m.group(k)) for k in (4, 5, 6))))
    return rows


def summary(x):
    """(norm2, sum, checksum, scale) of an array, as `tcc run` defines them."""
    v = np.asarray(x, dtype=np.float64).ravel(order="C")
    w = 1.0 + (np.arange(v.size) % 7)
    prod = v * w
    return (
        math.sqrt(math.fsum(v * v)),
        math.fsum(v),
        math.fsum(prod),
        (math.fsum(v * v), math.fsum(np.abs(v)), math.fsum(np.abs(prod))),
    )


def close_printed(printed, exact, scale):
    # 12 significant digits printed: 5e-12 relative, plus rounding of sums whose
    # terms cancel (relative to the sum of magnitudes).
    return abs(printed - exact) <= 1e-11 * abs(exact) + 1e-14 * scale


def run_tcc(example, out_dir):
    cmd = [TCC, "run", "--interp", "--seed", str(SEED), "--output-dir", out_dir, "--save-inputs",
           os.path.join(ROOT, "examples", example + ".tc")]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` exited with {p.returncode}:\n{p.stdout}{p.stderr}")
    if p.stderr.strip():
        # warnings (e.g. a broken declared symmetry) are failures here
        raise RuntimeError(f"`{' '.join(cmd)}` printed to stderr:\n{p.stderr}")
    return p.stdout


def check_example(example, spec):
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        d1, d2 = os.path.join(tmp, "one"), os.path.join(tmp, "two")
        report = run_tcc(example, d1)
        if run_tcc(example, d2) != report:
            failures.append("a second run with the same seed printed a different report")
        rows = parse_report(report)

        outputs = spec["outputs"]
        reported = [r[1] for r in rows]
        for name in outputs:
            if name not in reported:
                failures.append(f"output `{name}` is not in the report")
        for name in reported:
            if name not in outputs:
                failures.append(f"the report has output `{name}`, which the table does not know")
        if len(set(reported)) != len(reported):
            failures.append(f"an output is reported twice: {reported}")

        arrays = {f[:-4]: np.load(os.path.join(d1, f)) for f in os.listdir(d1) if f.endswith(".npy")}
        inputs = {k: v for k, v in arrays.items() if k not in outputs}
        for name, dtype in spec.get("dtypes", {}).items():
            if arrays[name].dtype != dtype:
                failures.append(f"input `{name}` was saved as {arrays[name].dtype}, expected {np.dtype(dtype)}")
        for check in spec.get("inputs", []):
            if not check(inputs):
                failures.append(f"input check failed: {check.__doc__}")
        x64 = {k: v.astype(np.float64) for k, v in inputs.items()}

        for unit, name, dtype, shape, norm2, total, checksum in rows:
            if name not in outputs:
                continue
            got = arrays.get(name)
            if got is None:
                failures.append(f"`{name}.npy` was not written")
                continue
            want_dtype = np.float32 if dtype == "f32" else np.float64
            if got.dtype != want_dtype:
                failures.append(f"`{name}.npy` has dtype {got.dtype}, the report says {dtype}")
            if got.shape != shape:
                failures.append(f"`{name}.npy` has shape {got.shape}, the report says {list(shape)}")
            want = np.asarray(outputs[name](x64), dtype=np.float64)
            if want.shape != got.shape:
                failures.append(f"`{name}`: numpy gives shape {want.shape}, tcc {got.shape}")
                continue
            rtol = 2.0 ** -23 if dtype == "f32" else 1e-10
            atol = rtol * float(np.max(np.abs(want), initial=0.0))
            g = got.astype(np.float64)
            if not np.allclose(g, want, rtol=rtol, atol=atol):
                err = np.max(np.abs(g - want))
                failures.append(f"`{name}` (program `{unit}`) differs from numpy: max abs error {err:.3e}")
            n2, s, cs, (sq_scale, abs_scale, cs_scale) = summary(got)
            if not close_printed(norm2, n2, math.sqrt(sq_scale)):
                failures.append(f"`{name}`: printed norm2 {norm2!r}, the file gives {n2!r}")
            if not close_printed(total, s, abs_scale):
                failures.append(f"`{name}`: printed sum {total!r}, the file gives {s!r}")
            if not close_printed(checksum, cs, cs_scale):
                failures.append(f"`{name}`: printed checksum {checksum!r}, the file gives {cs!r}")
    return failures


def main(argv):
    names = argv[1:] or list(TABLE)
    unknown = [n for n in names if n not in TABLE]
    if unknown:
        print(f"unknown example(s): {', '.join(unknown)}; known: {', '.join(TABLE)}", file=sys.stderr)
        return 2
    if not os.path.exists(TCC):
        print(f"{TCC} does not exist: build it first (cargo build) or set TCC", file=sys.stderr)
        return 2
    failed = 0
    for name in names:
        try:
            failures = check_example(name, TABLE[name])
        except Exception as e:  # report and go on with the other examples
            failures = [f"{type(e).__name__}: {e}"]
        if failures:
            failed += 1
            print(f"FAIL {name}")
            for f in failures:
                print(f"     {f}")
        else:
            print(f"ok   {name}: {', '.join(TABLE[name]['outputs'])}")
    print(f"{len(names) - failed} of {len(names)} examples agree with numpy")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
