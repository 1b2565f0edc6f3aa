"""Complex (c64, c128) and 16-bit (f16, bf16) element types through the Python
package: results against numpy, the interface's dtype/shape/order checks, the bf16
conventions (ml_dtypes.bfloat16 arrays or uint16 bit patterns), tcc.einsum on
complex and 16-bit arrays, and tiled sessions of complex and 16-bit programs."""
import numpy as np
import pytest

import tcc

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is installed where the tests run
    ml_dtypes = None
    BF16 = None

needs_ml_dtypes = pytest.mark.skipif(ml_dtypes is None, reason="ml_dtypes is not installed")

# Relative tolerances (to the largest magnitude of the result): f64/c128 parts,
# f32/c64 parts, and the book's 16-bit ones ("16-bit storage types": 2e-2 bf16,
# 3e-3 f16).
TOL = {"c128": 1e-12, "f64": 1e-12, "c64": 2e-5, "f32": 2e-5, "bf16": 2e-2, "f16": 3e-3}
NP = {"c128": np.complex128, "c64": np.complex64, "f64": np.float64, "f32": np.float32, "f16": np.float16}


def close(got, want, tol, what=""):
    got = np.asarray(got).astype(np.complex128)
    want = np.asarray(want).astype(np.complex128)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    scale = max(np.abs(want).max(initial=0.0), 1e-300)
    err = np.abs(got - want).max(initial=0.0) / scale
    assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.0e}"


def crandom(rng, shape, dtype):
    a = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


# ---------------------------------------------------------------------------------
# Complex programs
# ---------------------------------------------------------------------------------

GEMM = """
range N = 5; range K = 4; range M = 3; index i : N; index k : K; index j : M;
input tensor A[i,k] : {ta}; input tensor B[k,j] : {tb}; input tensor R[i,j] : f64;
output tensor C[i,j] : {tc}; output tensor D[i] : {tc};
C[i,j] = A[i,k] * conj(B[k,j]) - 0.5 * R[i,j];
C[i,j] += conj(A[i,k] * B[k,j]);
D[i] = conj(A[i,k]) * A[i,k];
"""


@pytest.mark.parametrize("ta, tb, tc", [("c128", "c128", "c128"), ("c64", "c64", "c64"), ("c128", "c64", "c128"), ("c64", "c128", "c64")])
def test_complex_gemm_conj_accumulate_against_numpy(ta, tb, tc):
    lib = tcc.compile(GEMM.format(ta=ta, tb=tb, tc=tc))
    rng = np.random.default_rng(1)
    a, b = crandom(rng, (5, 4), NP[ta]), crandom(rng, (4, 3), NP[tb])
    r = rng.standard_normal((5, 3))
    c, d = lib.main(A=a, B=b, R=r)
    assert c.dtype == NP[tc] and d.dtype == NP[tc] and c.shape == (5, 3) and d.shape == (5,)
    a128, b128 = a.astype(np.complex128), b.astype(np.complex128)
    want_c = a128 @ np.conj(b128) - 0.5 * r + np.conj(a128 @ b128)
    want_d = np.einsum("ik,ik->i", np.conj(a128), a128)
    tol = TOL["c64"] if "c64" in (ta, tb, tc) else TOL["c128"]
    close(c, want_c, tol, "C")
    close(d, want_d, tol, "D")
    # |a|^2 summed: real, the imaginary part cancels exactly in the lowered code.
    assert np.abs(d.imag).max() <= tol * np.abs(d).max()


def test_complex_program_signature_and_repr():
    lib = tcc.compile(GEMM.format(ta="c128", tb="c64", tc="c128"))
    assert [(x["name"], x["dtype"], tuple(x["shape"])) for x in lib.main.inputs] == [
        ("A", "c128", (5, 4)),
        ("B", "c64", (4, 3)),
        ("R", "f64", (5, 3)),
    ]
    assert [(x["name"], x["dtype"]) for x in lib.main.outputs] == [("C", "c128"), ("D", "c128")]
    assert "A: c128[5, 4]" in repr(lib.main)


# A random complex program: a sum of terms drawn from `TERMS`, each with the numpy
# expression it stands for (A, B: complex; W: complex; R, S: real).
TERMS = [
    ("A[i,k] * B[k,j]", lambda v: v["A"] @ v["B"]),
    ("conj(A[i,k]) * B[k,j]", lambda v: np.conj(v["A"]) @ v["B"]),
    ("A[i,k] * conj(B[k,j])", lambda v: v["A"] @ np.conj(v["B"])),
    ("conj(A[i,k] * B[k,j])", lambda v: np.conj(v["A"] @ v["B"])),
    ("R[i,j]", lambda v: v["R"]),
    ("E[i,j]", lambda v: v["E"]),
    ("conj(E[i,j])", lambda v: np.conj(v["E"])),
    ("A[i,k] * S[k] * B[k,j]", lambda v: np.einsum("ik,k,kj->ij", v["A"], v["S"], v["B"])),
    ("A[i,k] * W[k,l] * X[l,j]", lambda v: v["A"] @ v["W"] @ v["X"]),
    ("(A[i,k] * B[k,j] + E[i,j])", lambda v: v["A"] @ v["B"] + v["E"]),
    ("A[i,k] * R2[k,j]", lambda v: v["A"] @ v["R2"]),
]


@pytest.mark.parametrize("seed", range(12))
def test_random_complex_programs_against_numpy(seed):
    rng = np.random.default_rng(100 + seed)
    ty = lambda: str(rng.choice(["c64", "c128", "c128"]))  # noqa: E731
    types = {n: ty() for n in "ABWXEC"}
    n, m, k, l = (int(x) for x in rng.integers(1, 6, 4))
    decl = (
        f"range N = {n}; range M = {m}; range K = {k}; range L = {l};\n"
        "index i : N; index j : M; index k : K; index l : L;\n"
        f"input tensor A[i,k] : {types['A']}; input tensor B[k,j] : {types['B']};\n"
        f"input tensor W[k,l] : {types['W']}; input tensor X[l,j] : {types['X']}; input tensor E[i,j] : {types['E']};\n"
        "input tensor R[i,j] : f64; input tensor S[k] : f32; input tensor R2[k,j] : f64;\n"
        f"output tensor C[i,j] : {types['C']};\n"
    )

    def rhs():
        picks = rng.choice(len(TERMS), size=int(rng.integers(1, 4)))
        coefs = rng.choice([1.0, -1.0, 2.0, 0.5], size=len(picks))
        text = ""
        for t, (p, c) in enumerate(zip(picks, coefs)):
            sign = ("- " if t == 0 else " - ") if c < 0 else ("" if t == 0 else " + ")
            text += f"{sign}{abs(c)} * {TERMS[p][0]}"
        return text, lambda v: sum(c * TERMS[p][1](v) for p, c in zip(picks, coefs))

    first, f1 = rhs()
    second, f2 = rhs()
    acc = bool(rng.integers(0, 2))
    src = decl + f"C[i,j] = {first};\n" + (f"C[i,j] += {second};\n" if acc else "")
    shapes = {"A": (n, k), "B": (k, m), "W": (k, l), "X": (l, m), "E": (n, m)}
    vals = {name: crandom(rng, shp, NP[types[name]]) for name, shp in shapes.items()}
    vals["R"] = rng.standard_normal((n, m))
    vals["S"] = rng.standard_normal(k).astype(np.float32)
    vals["R2"] = rng.standard_normal((k, m))
    lib = tcc.compile(src)
    used = {x["name"] for x in lib.main.inputs}
    got = lib.main(**{name: v for name, v in vals.items() if name in used})
    wide = {name: v.astype(np.complex128) for name, v in vals.items()}
    want = f1(wide) + (f2(wide) if acc else 0)
    assert got.dtype == NP[types["C"]]
    tol = TOL["c64"] if any(types[x] == "c64" for x in used | {"C"} if x in types) else TOL["c128"]
    close(got, want, tol, src)


def test_complex_arguments_are_checked():
    lib = tcc.compile(GEMM.format(ta="c128", tb="c64", tc="c128"))
    rng = np.random.default_rng(2)
    a, b, r = crandom(rng, (5, 4), np.complex128), crandom(rng, (4, 3), np.complex64), rng.standard_normal((5, 3))
    want = lib.main(A=a, B=b, R=r)[0]
    for kwargs, pattern in [
        (dict(A=a.real.copy(), B=b, R=r), r"`A` must have dtype complex128 .*got float64"),
        (dict(A=a.astype(np.complex64), B=b, R=r), r"`A` must have dtype complex128 .*got complex64"),
        (dict(A=a, B=b.astype(np.complex128), R=r), r"`B` must have dtype complex64 .*got complex128"),
        (dict(A=a, B=b, R=r.astype(np.complex128)), r"`R` must have dtype float64 .*got complex128"),
        (dict(A=a[:, :3].copy(), B=b, R=r), r"`A` must have shape \[5, 4\]"),
        (dict(A=a.T.copy().T, B=b, R=r), r"`A` is not C-contiguous"),
        (dict(A=a.view(np.float64), B=b, R=r), r"`A` must have dtype complex128"),
    ]:
        with pytest.raises(tcc.ArgumentError, match=pattern):
            lib.main(**kwargs)
    # copy=True converts dtype and layout by value (real → complex included) ...
    c = lib.main(A=np.asfortranarray(a), B=b.astype(np.complex128), R=r, copy=True)[0]
    close(c, want, 1e-12, "copy=True")
    c = lib.main(A=a.real, B=b, R=r, copy=True)[0]
    close(c, lib.main(A=a.real.astype(np.complex128), B=b, R=r)[0], 0, "real given for complex")
    # ... but never drops an imaginary part.
    with pytest.raises(tcc.ArgumentError, match=r"`R` has complex values"):
        lib.main(A=a, B=b, R=r + 1j, copy=True)


def test_complex_fortran_order_with_copy_and_big_endian():
    lib = tcc.compile("range N = 4; index i, j : N; input tensor A[i,j] : c128; output tensor T[j,i] : c128; T[j,i] = conj(A[i,j]);")
    a = crandom(np.random.default_rng(3), (4, 4), np.complex128)
    f = np.asfortranarray(a)
    with pytest.raises(tcc.ArgumentError, match="not C-contiguous"):
        lib.main(A=f)
    np.testing.assert_array_equal(lib.main(A=f, copy=True), np.conj(a).T)
    be = a.astype(">c16")
    with pytest.raises(tcc.ArgumentError, match="`A` must have dtype complex128"):
        lib.main(A=be)
    np.testing.assert_array_equal(lib.main(A=be, copy=True), np.conj(a).T)


# ---------------------------------------------------------------------------------
# 16-bit programs
# ---------------------------------------------------------------------------------

MLP = """
range B = 6; range D = 40; range F = 5; index b : B; index d : D; index f : F;
input tensor X[b,d] : {tx}; input tensor W[d,f] : {tw}; input tensor Bias[f] : f32;
output tensor Y[b,f] : {ty}; output tensor Z[b] : {tz};
Y[b,f] = X[b,d] * W[d,f] + Bias[f];
Z[b] = 2 * X[b,d];
Z[b] += exp(Bias[f]) * X[b,d] * W[d,f];
"""


def half_array(rng, shape, elem, bits=False):
    x = rng.standard_normal(shape)
    if elem == "bf16":
        a = x.astype(BF16)
        return a.view(np.uint16) if bits else a
    return x.astype(NP[elem])


def widen(a, elem):
    if elem == "bf16" and a.dtype == np.uint16:
        a = a.view(BF16)
    return a.astype(np.float64)


@needs_ml_dtypes
@pytest.mark.parametrize(
    "tx, tw, ty, tz", [("f16", "f16", "f16", "f16"), ("bf16", "bf16", "bf16", "bf16"), ("bf16", "f16", "f32", "bf16"), ("f32", "bf16", "f16", "f64")]
)
def test_half_programs_against_numpy(tx, tw, ty, tz):
    lib = tcc.compile(MLP.format(tx=tx, tw=tw, ty=ty, tz=tz))
    assert [x["dtype"] for x in lib.main.inputs] == [tx, tw, "f32"]
    rng = np.random.default_rng(4)
    x, w = half_array(rng, (6, 40), tx), half_array(rng, (40, 5), tw)
    bias = rng.standard_normal(5).astype(np.float32)
    y, z = lib.main(X=x, W=w, Bias=bias)
    xw, ww = widen(x, tx), widen(w, tw)
    want_y = xw @ ww + bias
    want_z = 2 * xw.sum(axis=1) + (xw @ ww) @ np.exp(bias.astype(np.float64))
    for got, want, elem in [(y, want_y, ty), (z, want_z, tz)]:
        assert got.dtype == (BF16 if elem == "bf16" else NP[elem])
        tol = TOL[elem] if elem in ("bf16", "f16") else TOL["f32"] * 10
        close(widen(got, elem), want, tol, elem)


@needs_ml_dtypes
@pytest.mark.parametrize("elem", ["bf16", "f16"])
def test_half_outputs_are_rounded_once_to_nearest_even(elem):
    """A copy of f32 values into a 16-bit tensor gives numpy's / ml_dtypes' own
    rounding, bit for bit (ties, subnormals, overflow to inf)."""
    lib = tcc.compile(f"range N = 4096; index i : N; input tensor X[i] : f32; output tensor Y[i] : {elem}; Y[i] = X[i];")
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(4096) * 10.0 ** rng.integers(-9, 7, 4096)).astype(np.float32)
    x[:6] = [0.0, -0.0, 65520.0, 1e-10, 3.0e38, -1.0]
    y = lib.main(X=x)
    with np.errstate(over="ignore"):
        want = x.astype(BF16 if elem == "bf16" else np.float16)
    assert y.dtype == want.dtype
    np.testing.assert_array_equal(y.view(np.uint16), want.view(np.uint16))


@needs_ml_dtypes
def test_bf16_conventions():
    """bf16 inputs as ml_dtypes.bfloat16 or as uint16 bits (the .npy convention of
    `tcc run`); outputs come back as the call's first bf16 input came."""
    lib = tcc.compile(MLP.format(tx="bf16", tw="bf16", ty="bf16", tz="f32"))
    rng = np.random.default_rng(6)
    x, w = half_array(rng, (6, 40), "bf16"), half_array(rng, (40, 5), "bf16")
    bias = rng.standard_normal(5).astype(np.float32)
    y_ml, z_ml = lib.main(X=x, W=w, Bias=bias)
    y_bits, z_bits = lib.main(X=x.view(np.uint16), W=w.view(np.uint16), Bias=bias)
    assert y_ml.dtype == BF16 and y_bits.dtype == np.uint16
    np.testing.assert_array_equal(y_ml.view(np.uint16), y_bits)
    np.testing.assert_array_equal(z_ml, z_bits)
    # Mixed: the first bf16 input (X) decides.
    assert lib.main(X=x.view(np.uint16), W=w, Bias=bias)[0].dtype == np.uint16
    assert lib.main(X=x, W=w.view(np.uint16), Bias=bias)[0].dtype == BF16
    # copy=True converts values (never reads numbers as bits): ml_dtypes' rounding.
    y_conv = lib.main(X=widen(x, "bf16"), W=widen(w, "bf16").tolist(), Bias=bias, copy=True)[0]
    assert y_conv.dtype == BF16
    np.testing.assert_array_equal(y_conv.view(np.uint16), y_bits)
    # A bf16 output without any bf16 input: ml_dtypes.bfloat16.
    only_out = tcc.compile("range N = 3; index i : N; input tensor A[i] : f32; output tensor B[i] : bf16; B[i] = A[i];")
    assert only_out.main(A=np.ones(3, np.float32)).dtype == BF16
    # out=: a bf16 output into an ml_dtypes.bfloat16 array or into uint16 bits,
    # each returned as given; a float16 array is refused.
    y_out, z_out = np.zeros(y_ml.shape, BF16), np.zeros(z_ml.shape, np.float32)
    got = lib.main(X=x, W=w, Bias=bias, out=(y_out, z_out))
    assert got[0] is y_out and got[1] is z_out
    np.testing.assert_array_equal(y_out.view(np.uint16), y_bits)
    y_out_bits = np.zeros(y_ml.shape, np.uint16)
    lib.main(X=x, W=w, Bias=bias, out={"Y": y_out_bits, "Z": z_out})
    np.testing.assert_array_equal(y_out_bits, y_bits)
    with pytest.raises(tcc.ArgumentError, match=r"out `Y` must have dtype ml_dtypes.bfloat16 or uint16 .*float16"):
        lib.main(X=x, W=w, Bias=bias, out=(np.zeros(y_ml.shape, np.float16), z_out))


@needs_ml_dtypes
def test_half_arguments_are_checked():
    lib = tcc.compile(MLP.format(tx="bf16", tw="f16", ty="bf16", tz="f16"))
    rng = np.random.default_rng(7)
    x, w = half_array(rng, (6, 40), "bf16"), half_array(rng, (40, 5), "f16")
    bias = rng.standard_normal(5).astype(np.float32)
    for kwargs, pattern in [
        (dict(X=x.astype(np.float32), W=w, Bias=bias), r"`X` must have dtype ml_dtypes.bfloat16 or uint16 .*got float32"),
        (dict(X=x.astype(np.float16), W=w, Bias=bias), r"`X` must have dtype ml_dtypes.bfloat16 or uint16 .*got float16"),
        (dict(X=x, W=w.view(np.uint16), Bias=bias), r"`W` must have dtype float16 .*got uint16"),
        (dict(X=x, W=w.astype(BF16), Bias=bias), r"`W` must have dtype float16 .*got bfloat16"),
        (dict(X=x, W=w, Bias=bias.astype(BF16)), r"`Bias` must have dtype float32 .*got bfloat16"),
        (dict(X=x, W=w, Bias=bias.astype(np.float16)), r"`Bias` must have dtype float32 .*got float16"),
        (dict(X=x[:, :20].copy(), W=w, Bias=bias), r"`X` must have shape \[6, 40\]"),
        (dict(X=x.view(np.uint16)[:, ::2], W=w, Bias=bias), r"`X` must have shape"),
        (dict(X=np.asfortranarray(x), W=w, Bias=bias), r"`X` is not C-contiguous"),
    ]:
        with pytest.raises(tcc.ArgumentError, match=pattern):
            lib.main(**kwargs)
    y, z = lib.main(X=x, W=w, Bias=bias)
    # copy=True: layout and dtype converted by value.
    y2, z2 = lib.main(X=np.asfortranarray(x), W=w.astype(np.float64), Bias=bias.astype(np.float64), copy=True)
    np.testing.assert_array_equal(z2.view(np.uint16), z.view(np.uint16))


# ---------------------------------------------------------------------------------
# einsum
# ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr, dtypes",
    [
        ("ij,jk->ik", (np.complex128, np.complex128)),
        ("ij,jk", (np.complex64, np.complex64)),
        ("ij,jk->ki", (np.complex64, np.float32)),
        ("ij,jk->ik", (np.complex64, np.float64)),
        ("ii->i", (np.complex128,)),
        ("abc,cd,bd->a", (np.complex128, np.float64, np.complex64)),
        ("ij,ij->", (np.complex64, np.complex64)),
    ],
)
def test_einsum_complex_against_numpy(expr, dtypes):
    rng = np.random.default_rng(8)
    dims = {"a": 3, "b": 4, "c": 5, "d": 2, "i": 4, "j": 3, "k": 5}
    subs = expr.split("->")[0].split(",")
    ops = []
    for s, dt in zip(subs, dtypes):
        shape = tuple(dims[c] for c in s)
        ops.append(crandom(rng, shape, dt) if np.dtype(dt).kind == "c" else rng.standard_normal(shape).astype(dt))
    got = tcc.einsum(expr, *ops)
    want = np.einsum(expr, *ops)
    assert got.dtype == want.dtype and got.shape == want.shape
    close(got, want, TOL["c64"] if want.dtype == np.complex64 else TOL["c128"], expr)
    # Non-contiguous operands are fine (converted).
    if len(ops[0].shape) == 2 and ops[0].shape[0] == ops[0].shape[1]:
        t = np.ascontiguousarray(ops[0].T).T
        close(tcc.einsum(expr, t, *ops[1:]), np.einsum(expr, t, *ops[1:]), 1e-5, "transposed")


@needs_ml_dtypes
@pytest.mark.parametrize("dt, elem", [(np.float16, "f16"), (None, "bf16")])
def test_einsum_half(dt, elem):
    dt = dt or BF16
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((4, 30)).astype(dt), rng.standard_normal((30, 3)).astype(dt)
    got = tcc.einsum("ik,kj->ij", a, b)
    assert got.dtype == dt
    close(got.astype(np.float64), a.astype(np.float64) @ b.astype(np.float64), TOL[elem], elem)


def test_einsum_refuses_other_dtypes():
    with pytest.raises(tcc.ArgumentError, match="operand 0 has dtype int64"):
        tcc.einsum("ij,jk", np.ones((2, 2), np.int64), np.ones((2, 2)))


# ---------------------------------------------------------------------------------
# Tiled sessions
# ---------------------------------------------------------------------------------


def test_tiled_sessions_run_complex_programs_as_their_parts():
    """A complex tensor X of a session is stored as two real tensors X_re and X_im;
    packed as parts, they give, joined, what the compiled program returns (c128
    and c64 tensors mixed)."""
    src = GEMM.format(ta="c128", tb="c64", tc="c128")
    lib, prog = tcc.compile(src), tcc.tiled(src, tile=2)
    assert "A" not in prog.tensors and {"A_re", "A_im", "B_re", "B_im", "R"} <= set(prog.tensors)
    assert prog.complex == {
        "A": ("c128", "A_re", "A_im"),
        "B": ("c64", "B_re", "B_im"),
        "C": ("c128", "C_re", "C_im"),
        "D": ("c128", "D_re", "D_im"),
    }
    assert prog.inputs == ["A", "B", "R"] and prog.outputs == ["C", "D"]
    rng = np.random.default_rng(8)
    a, b, r = crandom(rng, (5, 4), np.complex128), crandom(rng, (4, 3), np.complex64), rng.standard_normal((5, 3))
    want = lib.main(A=a, B=b, R=r)
    b64 = b.astype(np.complex128)
    prog.pack(A_re=a.real.copy(), A_im=a.imag.copy(), B_re=b64.real.copy(), B_im=b64.imag.copy(), R=r)
    prog.run()
    for name, w in zip("CD", want):
        got = prog.unpack(f"{name}_re") + 1j * prog.unpack(f"{name}_im")
        close(got, w, TOL["c64"], name)
    assert np.abs(want[0].imag).max() > 0.1 * np.abs(want[0]).max(), "C is complex (D = |A|^2 sums is real)"


@pytest.mark.parametrize("ta, tb, tc", [("c128", "c64", "c128"), ("c64", "c64", "c64"), ("c128", "c128", "c64")])
def test_tiled_sessions_take_and_return_complex_arrays(ta, tb, tc):
    """prog(A=complex array, ...) and pack/unpack by the complex tensor's own
    name: the outputs are numpy arrays of the tensor's complex dtype, equal to
    tcc.compile's and to numpy's."""
    src = GEMM.format(ta=ta, tb=tb, tc=tc)
    lib, prog = tcc.compile(src), tcc.tiled(src, tile=2)
    rng = np.random.default_rng(11)
    a, b, r = crandom(rng, (5, 4), NP[ta]), crandom(rng, (4, 3), NP[tb]), rng.standard_normal((5, 3))
    want = lib.main(A=a, B=b, R=r)
    got = prog(A=a, B=b, R=r)
    tol = max(TOL[ta], TOL[tb], TOL[tc])
    a128, b128 = a.astype(np.complex128), b.astype(np.complex128)
    numpy_c = a128 @ np.conj(b128) - 0.5 * r + np.conj(a128 @ b128)
    numpy_d = (np.conj(a128) * a128).sum(axis=1)
    for name, g, w, n in zip("CD", got, want, [numpy_c, numpy_d]):
        assert g.dtype == NP[tc], (name, g.dtype)
        close(g, w, tol, name)
        close(g, n, tol, name + " (numpy)")
    assert np.abs(got[0].imag).max() > 0.1 * np.abs(got[0]).max()
    # pack/unpack by name: an input comes back as given (rounded to its type).
    prog.pack(A=a)
    back = prog.unpack("A")
    assert back.dtype == NP[ta]
    np.testing.assert_array_equal(back, a)
    np.testing.assert_array_equal(prog.unpack("C"), got[0])


def test_tiled_sessions_refuse_the_wrong_kind_of_array():
    """A real array for a complex tensor, a complex one for a real tensor, another
    complex dtype without copy=True and a wrong shape are ArgumentErrors."""
    src = GEMM.format(ta="c128", tb="c64", tc="c128")
    prog = tcc.tiled(src, tile=2)
    rng = np.random.default_rng(12)
    a, b, r = crandom(rng, (5, 4), np.complex128), crandom(rng, (4, 3), np.complex64), rng.standard_normal((5, 3))
    with pytest.raises(tcc.ArgumentError, match=r"`A` is complex \(c128\) but the array has dtype float64"):
        prog(A=a.real.copy(), B=b, R=r)
    for copy in [False, True]:
        with pytest.raises(tcc.ArgumentError, match=r"`R` is real but the array has complex values \(complex128\)"):
            prog(copy=copy, A=a, B=b, R=r + 0j)
        with pytest.raises(tcc.ArgumentError, match="`A_re` is real"):
            prog.pack(copy=copy, A_re=a)
    with pytest.raises(tcc.ArgumentError, match="`B` is c64: expected dtype complex64, got complex128"):
        prog(A=a, B=b.astype(np.complex128), R=r)
    with pytest.raises(tcc.ArgumentError, match=r"`A` has shape \(4, 5\), expected \(5, 4\)"):
        prog(A=a.T.copy(), B=b, R=r)
    with pytest.raises(tcc.ArgumentError, match="not among the inputs"):
        prog(A_re=a.real.copy(), B=b, R=r)
    # copy=True converts another complex dtype (values rounded to c64 parts).
    got = prog(copy=True, A=a, B=b.astype(np.complex128), R=r)
    want = tcc.compile(src).main(A=a, B=b, R=r)
    close(got[0], want[0], TOL["c64"], "C")


@needs_ml_dtypes
def test_tiled_sessions_hold_16_bit_values():
    """Inputs are rounded to their 16-bit type when the session runs, outputs
    after: the tiles hold what a 16-bit tensor can, as tcc.compile returns."""
    src = (
        "range B = 6; range D = 9; range F = 4; index b : B; index d : D; index f : F;\n"
        "input tensor X[b,d] : bf16; input tensor W[d,f] : f32; output tensor Y[b,f] : f16;\n"
        "Y[b,f] = X[b,d] * W[d,f];\n"
    )
    lib, prog = tcc.compile(src), tcc.tiled(src, tile=2)
    rng = np.random.default_rng(9)
    x, w = 1 + rng.random((6, 9)) / 3 + 1e-4, rng.standard_normal((9, 4)).astype(np.float32)
    want = lib.main(X=x.astype(BF16), W=w)
    got = prog(X=x, W=w.astype(np.float64))
    np.testing.assert_array_equal(prog.unpack("X"), x.astype(BF16).astype(np.float64))
    np.testing.assert_array_equal(got.astype(np.float16).astype(np.float64), got)
    close(got, want.astype(np.float64), TOL["f16"], "Y")


def test_f32_still_compiles_and_runs():
    lib = tcc.compile("range N = 3; index i, j : N; input tensor A[i,j] : f32; output tensor B[i] : f32; B[i] = A[i,j];")
    a = np.arange(9, dtype=np.float32).reshape(3, 3)
    np.testing.assert_allclose(lib.main(A=a), a.sum(axis=1))
