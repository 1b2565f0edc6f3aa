"""tcc.compile and calls of the compiled programs (the `tcc` Python package)."""

import array
import os

import numpy as np
import pytest

import tcc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

MATMUL = """
range I = 5; range K = 7; range J = 4;
index i : I; index k : K; index j : J;
input  tensor A[i,k] : {t};
input  tensor B[k,j] : {t};
output tensor C[i,j] : {t};
C[i,j] = A[i,k] * B[k,j];
"""

TWO_OUT = """
range I = 3; range J = 4;
index i : I; index j : J;
input tensor A[i,j];
input tensor v[j];
output tensor S;          // declared first: returned first
output tensor Av[i];
Av[i] = A[i,j] * v[j];
S = A[i,j] * A[i,j];
program scaled { Av[i] = 2 * A[i,j] * v[j]; }
"""


def rng():
    return np.random.default_rng(7)


@pytest.fixture(scope="module")
def mm64():
    return tcc.compile(MATMUL.format(t="f64"))


def test_compile_from_string_matches_numpy(mm64):
    r = rng()
    A, B = r.standard_normal((5, 7)), r.standard_normal((7, 4))
    C = mm64.main(A=A, B=B)
    assert isinstance(C, np.ndarray) and C.dtype == np.float64 and C.shape == (5, 4)
    np.testing.assert_allclose(C, np.einsum("ik,kj->ij", A, B), rtol=1e-12, atol=1e-12)
    # keyword order does not matter; a second call gives a new array
    C2 = mm64.main(B=B, A=A)
    assert C2 is not C
    np.testing.assert_array_equal(C, C2)


def test_f32(tmp_path):
    lib = tcc.compile(MATMUL.format(t="f32"))
    r = rng()
    A = r.standard_normal((5, 7)).astype(np.float32)
    B = r.standard_normal((7, 4)).astype(np.float32)
    C = lib.main(A=A, B=B)
    assert C.dtype == np.float32
    np.testing.assert_allclose(C, np.einsum("ik,kj->ij", A, B), rtol=1e-5, atol=1e-5)
    with pytest.raises(tcc.ArgumentError, match="float32"):
        lib.main(A=A.astype(np.float64), B=B)


def test_compile_from_path(tmp_path):
    p = tmp_path / "matmul.tc"
    p.write_text(MATMUL.format(t="f64"))
    for arg in (p, str(p)):
        lib = tcc.compile(arg)
        assert lib.programs == ["main"]  # the top-level statements, as in `tcc build` libraries
        A, B = np.ones((5, 7)), np.ones((7, 4))
        np.testing.assert_array_equal(lib.main(A=A, B=B), np.full((5, 4), 7.0))
    assert tcc.compile(p, name="mm").programs == ["mm"]
    with pytest.raises(FileNotFoundError):
        tcc.compile(str(tmp_path / "missing.tc"))


def test_repository_example_runs():
    lib = tcc.compile(os.path.join(ROOT, "examples", "four_index.tc"))
    assert len(lib) >= 1
    prog = next(iter(lib))
    r = rng()
    kwargs = {a["name"]: r.standard_normal(a["shape"]).astype(a["dtype"].replace("f", "float")) for a in prog.inputs}
    out = prog(**kwargs)
    assert out is not None


def test_multiple_outputs_in_declaration_order():
    lib = tcc.compile(TWO_OUT)
    assert lib.programs == ["main", "scaled"]
    r = rng()
    A, v = r.standard_normal((3, 4)), r.standard_normal(4)
    S, Av = lib.main(A=A, v=v)
    assert S.shape == () and Av.shape == (3,)
    np.testing.assert_allclose(S, np.einsum("ij,ij->", A, A), rtol=1e-12)
    np.testing.assert_allclose(Av, np.einsum("ij,j->i", A, v), rtol=1e-12)
    assert [o["name"] for o in lib.main.outputs] == ["S", "Av"]
    # the second program writes one output: an array, not a tuple
    Av2 = lib.scaled(A=A, v=v)
    np.testing.assert_allclose(Av2, 2 * Av, rtol=1e-12)
    assert "A" in repr(lib.main) and "scaled" in repr(lib)


def test_out_arrays_are_written_and_returned(mm64):
    """`out=`: results go into the caller's arrays (no new output each call),
    which are returned as given; one array, a tuple in declaration order or a
    dict by name."""
    r = rng()
    A, B = r.standard_normal((5, 7)), r.standard_normal((7, 4))
    C = np.full((5, 4), np.nan)
    got = mm64.main(A=A, B=B, out=C)
    assert got is C
    np.testing.assert_allclose(C, A @ B, rtol=1e-12, atol=1e-12)
    C[...] = np.nan
    assert mm64.main(A=A, B=B, out=(C,)) is C
    np.testing.assert_allclose(C, A @ B, rtol=1e-12, atol=1e-12)
    lib = tcc.compile(TWO_OUT)
    A2, v = r.standard_normal((3, 4)), r.standard_normal(4)
    S, Av = np.full((), np.nan), np.full(3, np.nan)
    got = lib.main(A=A2, v=v, out=(S, Av))
    assert got[0] is S and got[1] is Av
    np.testing.assert_allclose(Av, A2 @ v, rtol=1e-12)
    np.testing.assert_allclose(S, (A2 * A2).sum(), rtol=1e-12)
    S[...], Av[...] = np.nan, np.nan
    got = lib.main(A=A2, v=v, out={"Av": Av, "S": S})
    assert got[0] is S and got[1] is Av
    np.testing.assert_allclose(Av, A2 @ v, rtol=1e-12)


def test_bad_out_arrays_are_refused(mm64):
    A, B = np.ones((5, 7)), np.ones((7, 4))
    u = Untouched(A, B)
    bad = [
        (np.zeros((4, 5)), r"out `C` must have shape \[5, 4\]"),
        (np.zeros((5, 4), dtype=np.float32), r"out `C` must have dtype float64.*float32.*never converted"),
        (np.zeros((4, 5)).T, r"out `C` is not C-contiguous"),
        ("C", r"out `C` must be a writable array .* got str"),
        ((np.zeros((5, 4)), np.zeros((5, 4))), r"out has 2 arrays, but main has 1 output \(C\)"),
        ({"D": np.zeros((5, 4))}, r"out has `D`, which is not an output"),
        ({}, r"out lacks C"),
    ]
    ro = np.zeros((5, 4))
    ro.flags.writeable = False
    bad.append((ro, r"out `C` must be a writable array.*read-only"))
    for out, msg in bad:
        with pytest.raises(tcc.ArgumentError, match=msg):
            mm64.main(A=A, B=B, out=out)
    u.check()
    # An output over an input's memory: the generated code assumes no overlap.
    square = tcc.compile(
        "range N = 6; index i, j, k : N; input tensor X[i,k]; input tensor Y[k,j]; output tensor Z[i,j];\n"
        "Z[i,j] = X[i,k] * Y[k,j];\n"
    )
    X, Y = np.ones((6, 6)), np.ones((6, 6))
    with pytest.raises(tcc.ArgumentError, match=r"out `Z` shares memory with input `X`"):
        square.main(X=X, Y=Y, out=X)
    with pytest.raises(tcc.ArgumentError, match=r"out `Z` shares memory with input `Y`"):
        square.main(X=X, Y=Y, out=Y)
    big = np.zeros(72)
    with pytest.raises(tcc.ArgumentError, match=r"out `Z` shares memory with input `X`"):
        square.main(X=big[:36].reshape(6, 6), Y=Y, out=big[30:66].reshape(6, 6))
    np.testing.assert_array_equal(X, np.ones((6, 6)))
    lib = tcc.compile(TWO_OUT)
    shared = np.zeros(4)
    with pytest.raises(tcc.ArgumentError, match=r"out `Av` shares memory with out `S`|out `S` shares memory with out `Av`"):
        lib.main(A=np.ones((3, 4)), v=np.ones(4), out=(shared[0:1].reshape(()), shared[0:3]))
    with pytest.raises(tcc.ArgumentError, match=r"out must be a tuple or list of arrays in declaration order, or a dict"):
        lib.main(A=np.ones((3, 4)), v=np.ones(4), out=np.zeros(3))


def test_inputs_named_like_the_call_options():
    """An input named `out` or `copy` is passed by that keyword (the option keeps
    its default there); elsewhere `copy` must be a bool."""
    lib = tcc.compile(
        "range N = 3; index i : N; input tensor out[i]; input tensor copy[i]; output tensor R[i];\n"
        "R[i] = out[i] + 2 * copy[i];\n"
    )
    R = lib.main(out=np.ones(3), copy=np.full(3, 5.0))
    np.testing.assert_array_equal(R, np.full(3, 11.0))
    mm = tcc.compile(MATMUL.format(t="f64"))
    with pytest.raises(tcc.ArgumentError, match=r"copy must be True or False, got ndarray"):
        mm.main(A=np.ones((5, 7)), B=np.ones((7, 4)), copy=np.ones(2))


class Untouched:
    """Checks that a failing call left every input as it was."""

    def __init__(self, *arrays):
        self.arrays = arrays
        self.copies = [np.array(a, copy=True) for a in arrays]

    def check(self):
        for a, c in zip(self.arrays, self.copies):
            np.testing.assert_array_equal(a, c)


def test_wrong_dtype(mm64):
    A, B = np.ones((5, 7), dtype=np.float32), np.ones((7, 4))
    u = Untouched(A, B)
    with pytest.raises(tcc.ArgumentError, match=r"`A`.*float64.*float32") as e:
        mm64.main(A=A, B=B)
    assert isinstance(e.value, TypeError) and isinstance(e.value, tcc.TccError)
    with pytest.raises(tcc.ArgumentError, match=r"`B`.*int64"):
        mm64.main(A=np.ones((5, 7)), B=np.ones((7, 4), dtype=np.int64))
    u.check()
    # copy=True converts
    np.testing.assert_array_equal(mm64.main(A=A, B=B, copy=True), np.full((5, 4), 7.0))


def test_wrong_shape(mm64):
    A, B = np.ones((7, 5)), np.ones((7, 4))
    u = Untouched(A, B)
    with pytest.raises(tcc.ArgumentError, match=r"`A` must have shape \[5, 7\].*\[7, 5\]") as e:
        mm64.main(A=A, B=B)
    assert isinstance(e.value, ValueError)
    with pytest.raises(tcc.ArgumentError, match="shape"):
        mm64.main(A=np.ones(35), B=B, copy=True)  # copy never reshapes
    u.check()


def test_non_contiguous_input(mm64):
    r = rng()
    At = r.standard_normal((7, 5))
    A = At.T  # a transposed view: shape (5, 7), not C-contiguous
    B = r.standard_normal((7, 4))
    u = Untouched(A, B)
    with pytest.raises(tcc.ArgumentError, match="contiguous"):
        mm64.main(A=A, B=B)
    u.check()
    C = mm64.main(A=A, B=B, copy=True)
    np.testing.assert_allclose(C, np.einsum("ik,kj->ij", A, B), rtol=1e-12, atol=1e-12)
    # a sliced view is refused too
    with pytest.raises(tcc.ArgumentError, match="contiguous"):
        mm64.main(A=np.ones((5, 14))[:, ::2], B=B)


def test_unknown_and_missing_keywords(mm64):
    A, B = np.ones((5, 7)), np.ones((7, 4))
    with pytest.raises(tcc.ArgumentError, match="unexpected keyword argument `D`") as e:
        mm64.main(A=A, B=B, D=A)
    assert isinstance(e.value, TypeError)
    with pytest.raises(tcc.ArgumentError, match="`C`: it is an output"):
        mm64.main(A=A, B=B, C=np.zeros((5, 4)))
    with pytest.raises(tcc.ArgumentError, match=r"missing keyword argument `B` \(f64\[7, 4\]\)"):
        mm64.main(A=A)
    with pytest.raises(TypeError):
        mm64.main(A, B)  # positional arguments are not accepted
    with pytest.raises(tcc.ArgumentError, match="buffer protocol or __dlpack__"):
        mm64.main(A=[[1.0] * 7] * 5, B=B)
    np.testing.assert_array_equal(mm64.main(A=[[1.0] * 7] * 5, B=B, copy=True), np.full((5, 4), 7.0))
    with pytest.raises(AttributeError, match="no program `nope`"):
        mm64.nope


def test_buffer_protocol_objects():
    lib = tcc.compile(
        "range N = 4; index n : N; input tensor x[n]; input tensor y[n]; output tensor d; d = x[n] * y[n];"
    )
    x = array.array("d", [1, 2, 3, 4])
    y = memoryview(array.array("d", [1, 1, 2, 2]))
    assert float(lib.main(x=x, y=y)) == 1 + 2 + 6 + 8
    # a float32 buffer for an f64 tensor
    with pytest.raises(tcc.ArgumentError, match="float64"):
        lib.main(x=array.array("f", [1, 2, 3, 4]), y=y)
    # bytes are not floats
    with pytest.raises(tcc.ArgumentError):
        lib.main(x=bytes(32), y=y)


class DLPackOnly:
    """An object that exposes only __dlpack__ / __dlpack_device__."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def test_dlpack_only_object(mm64):
    r = rng()
    A, B = r.standard_normal((5, 7)), r.standard_normal((7, 4))
    C = mm64.main(A=DLPackOnly(A), B=DLPackOnly(B))
    np.testing.assert_allclose(C, A @ B, rtol=1e-12, atol=1e-12)


def test_torch_cpu_tensor(mm64):
    torch = pytest.importorskip("torch")
    A = torch.randn(5, 7, dtype=torch.float64)
    B = torch.randn(7, 4, dtype=torch.float64)
    C = mm64.main(A=A, B=B)
    np.testing.assert_allclose(C, (A @ B).numpy(), rtol=1e-12, atol=1e-12)
    with pytest.raises(tcc.ArgumentError, match="contiguous"):
        mm64.main(A=torch.randn(7, 5, dtype=torch.float64).T, B=B)


def test_compile_error_carries_diagnostics():
    src = "range N = 4;\nindex n : N;\ninput tensor x[n];\noutput tensor y[n];\ny[n] = x[n] * z[n];\n"
    with pytest.raises(tcc.CompileError) as e:
        tcc.compile(src)
    err = e.value
    assert isinstance(err, tcc.TccError)
    assert err.diagnostics, "no diagnostics"
    d = err.errors[0]
    assert d.code.startswith("E0")
    assert d.severity == "error"
    assert (d.line, d.column) == (5, 15)  # the `z`
    assert "z" in d.message
    assert "E0" in str(err)  # the rendered report


def test_syntax_error_position():
    with pytest.raises(tcc.CompileError) as e:
        tcc.compile("range N = 4;\nindex n : N\ninput tensor x[n];")
    d = e.value.errors[0]
    assert d.code.startswith("E00") and d.line >= 2


def test_sizes_keyword_fixed_range():
    src = "range N = 4; index n : N; input tensor x[n]; output tensor s; s = x[n];"
    lib = tcc.compile(src, sizes={"N": 4})  # equal to the declared size: accepted
    assert float(lib.main(x=np.arange(4.0))) == 6.0
    with pytest.raises(tcc.TccError, match="no range named `M`") as e:
        tcc.compile(src, sizes={"M": 3})
    assert e.value.code == "E0740"
    with pytest.raises(tcc.TccError, match="declared with size 4") as e:
        tcc.compile(src, sizes={"N": 5})
    assert e.value.code == "E0741"


RUNTIME = """
range O; range V = 3;
index i, j : O; index a : V;
input tensor T[a,i]; input tensor S[a,j]; output tensor R[i,j];
R[i,j] = T[a,i] * S[a,j];
"""


@pytest.mark.parametrize("o", [1, 5, 13])
def test_runtime_ranges_bound_by_sizes(o):
    lib = tcc.compile(RUNTIME, sizes={"O": o})
    r = rng()
    T, S = r.standard_normal((3, o)), r.standard_normal((3, o))
    np.testing.assert_allclose(lib.main(T=T, S=S), np.einsum("ai,aj->ij", T, S), rtol=1e-12, atol=1e-12)
    assert lib.main.inputs[0]["shape"] in [(3, o)]
    with pytest.raises(tcc.ArgumentError, match="shape"):
        lib.main(T=np.ones((3, o + 1)), S=S)


def test_runtime_range_without_size():
    with pytest.raises(tcc.TccError, match="sizes=") as e:
        tcc.compile(RUNTIME)
    assert e.value.code == "E0745"
    with pytest.raises(tcc.TccError) as e:
        tcc.compile(RUNTIME, sizes={"O": 0})
    assert e.value.code == "E0742"


def test_gil_released_threads():
    import threading

    lib = tcc.compile(MATMUL.format(t="f64"))
    r = rng()
    A, B = r.standard_normal((5, 7)), r.standard_normal((7, 4))
    want = A @ B
    errors = []

    def work():
        for _ in range(200):
            if not np.allclose(lib.main(A=A, B=B), want):
                errors.append("wrong")

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def test_program_and_model_units_of_the_readme_program():
    import re

    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    start = readme.find("## The language in 30 lines")
    src = re.search(r"```\n(.*?)```", readme[start:], re.S).group(1)
    lib = tcc.compile(src, name="t")
    assert lib.programs == ["t", "fock", "mlp"]
    assert lib.mlp.kind == "model" and lib.fock.kind == "program"
    r = rng()
    F = r.standard_normal((6, 6))
    np.testing.assert_allclose(lib.fock(F=F), 0.5 * np.einsum("ac,ac->", F, F), rtol=1e-12)
    kw = {a["name"]: r.standard_normal(a["shape"]).astype(np.float32) for a in lib.mlp.inputs}
    assert sorted(kw) == ["W1", "W2", "Xin"]  # model parameters are keyword arguments too
    assert [a["param"] for a in lib.mlp.inputs if a["name"] == "W1"] == [True]
    Y = lib.mlp(**kw)
    ref = np.maximum(kw["Xin"] @ kw["W1"], 0) @ kw["W2"]
    np.testing.assert_allclose(Y, ref, rtol=1e-4, atol=1e-4)
    # several outputs: a tuple in declaration order (R is declared before E)
    ins = {a["name"]: r.standard_normal(a["shape"]) for a in lib.t.inputs}
    R, E = lib.t(**ins)
    assert R.shape == (6, 6, 4, 4) and E.shape == ()


CHAIN = """
range N = 40;
index i, j, k, l : N;
input tensor A[i,j] : f64;
input tensor B[j,k] : f64;
input tensor C[k,l] : f64;
output tensor D[i,l] : f64;
tensor T[i,k] : f64;
T[i,k] = A[i,j] * B[j,k];
D[i,l] = T[i,k] * C[k,l];
"""


def test_fusion_modes_and_memory_limit():
    rng = np.random.default_rng(1)
    A, B, C = (rng.standard_normal((40, 40)) for _ in range(3))
    want = A @ B @ C
    for fuse in ("auto", "none", "max"):
        got = tcc.compile(CHAIN, fuse=fuse).main(A=A, B=B, C=C)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-10)
    # T needs 12.8 kB unfused; 1 kB forces fusion (one row of T); the most fused
    # nest still keeps one element (8 bytes), so 4 bytes cannot fit.
    got = tcc.compile(CHAIN, mem_limit=1000).main(A=A, B=B, C=C)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-10)
    with pytest.raises(tcc.TccError, match="memory limit"):
        tcc.compile(CHAIN, mem_limit=4)
    with pytest.raises(tcc.TccError, match="memory limit"):
        tcc.compile(CHAIN, fuse="none", mem_limit=1000)
    with pytest.raises(ValueError, match="fuse"):
        tcc.compile(CHAIN, fuse="some")
    with pytest.raises(ValueError, match="mem_limit"):
        tcc.compile(CHAIN, mem_limit=-1)



PRODUCT = """
range N = 40;
index i, j, k, l : N;
input tensor A[i,j] : f64;
input tensor B[j,k] : f64;
input tensor C[k,l] : f64;
output tensor D[i,l] : f64;
D[i,l] = A[i,j] * B[j,k] * C[k,l];
"""


def test_sliced_products():
    # The product's intermediate (40 x 40, 12.8 kB) sliced to 40 elements, asked
    # for or forced by a memory limit no unfused nest fits.
    rng = np.random.default_rng(2)
    A, B, C = (rng.standard_normal((40, 40)) for _ in range(3))
    want = A @ B @ C
    for lib in (tcc.compile(PRODUCT, max_intermediate=320), tcc.compile(PRODUCT, fuse="none", mem_limit=1000)):
        np.testing.assert_allclose(lib.main(A=A, B=B, C=C), want, rtol=1e-12, atol=1e-10)
    with pytest.raises(ValueError, match="max_intermediate"):
        tcc.compile(PRODUCT, max_intermediate=4)
    with pytest.raises(tcc.TccError, match="memory limit"):
        tcc.compile(PRODUCT, mem_limit=4)


DENOMINATOR = """
range O = 3; range V = 5;
index i, j : O; index a, b : V;
input tensor eo[i]; input tensor ev[a]; input tensor T[a,b,i,j];
output tensor D[a,b,i,j];
output tensor R[a,b,i,j];
D[a,b,i,j] = eo[i] + eo[j] - ev[a] - ev[b];
R[a,b,i,j] = T[a,b,i,j] * recip(D[a,b,i,j]) + sqrt(T[a,b,i,j] * T[a,b,i,j] + 1e-5) - 1;
"""


def test_broadcast_sums_match_numpy_broadcasting():
    lib = tcc.compile(DENOMINATOR)
    r = rng()
    eo = -1.0 - r.random(3)
    ev = 1.0 + r.random(5)
    T = r.standard_normal((5, 5, 3, 3))
    D, R = lib.main(eo=eo, ev=ev, T=T)
    want = eo[None, None, :, None] + eo[None, None, None, :] - ev[:, None, None, None] - ev[None, :, None, None]
    np.testing.assert_allclose(D, want, rtol=1e-13, atol=0)
    np.testing.assert_allclose(R, T / want + np.sqrt(T * T + 1e-5) - 1, rtol=1e-12, atol=1e-13)


BIG_CHAIN = """
range N = 800; range M = 3;
index i, j, k : N; index l : M;
input tensor A[i,j]; input tensor B[j,k]; input tensor D[k,l];
tensor T[i,k];
output tensor C[i,l];
T[i,k] = A[i,j] * B[j,k];
C[i,l] = T[i,k] * D[k,l];
"""


def test_large_temporaries_are_kept_and_released():
    lib = tcc.compile(BIG_CHAIN)
    rng = np.random.default_rng(3)
    a, b, d = rng.standard_normal((800, 800)), rng.standard_normal((800, 800)), rng.standard_normal((800, 3))
    want = (a @ b) @ d
    np.testing.assert_allclose(lib.main(A=a, B=b, D=d), want, rtol=1e-10, atol=1e-9)
    info = tcc.memory_cache_info()
    if info["limit"] == 0:
        pytest.skip("TCC_TEMP_CACHE=0: nothing is kept")
    # T (800 x 800 f64, 5.1 MB) stays mapped for the next call ...
    assert info["bytes"] >= 800 * 800 * 8, info
    released = tcc.release_memory()
    assert released == info["bytes"]
    assert tcc.memory_cache_info()["bytes"] == 0
    # ... and a call after the release maps a fresh one.
    np.testing.assert_allclose(lib.main(A=a, B=b, D=d), want, rtol=1e-10, atol=1e-9)
    assert tcc.memory_cache_info()["bytes"] >= 800 * 800 * 8
