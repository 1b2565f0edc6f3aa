"""Issue 21's constructs through the Python package: the examples written for the
constructs that had none (broadcast sums and constants inside functions, c64,
f16) against numpy computed here from the same arrays, the real constructs'
examples in tiled sessions, and the captured-sum warning. (`tests/examples_check.rs`
checks every example against the interpreter; this checks the language's
semantics against numpy's.)"""

import os

import numpy as np
import pytest

import tcc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def example(name):
    return tcc.compile(os.path.join(ROOT, "examples", name))


def rel_err(got, want):
    got, want = np.asarray(got, dtype=np.complex128), np.asarray(want, dtype=np.complex128)
    assert got.shape == want.shape, (got.shape, want.shape)
    return np.abs(got - want).max() / np.abs(want).max()


def test_denominator_example_broadcasts_as_numpy():
    r = np.random.default_rng(21)
    eo = -1.0 - r.random(4)  # occupied energies below the virtual ones
    ev = 0.5 + r.random(6)
    R2, T2 = r.standard_normal((6, 6, 4, 4)), r.standard_normal((6, 6, 4, 4))
    T2new, Scale = example("denominator.tc").main(eo=eo, ev=ev, R2=R2, T2=T2)
    D = eo[None, None, :, None] + eo[None, None, None, :] - ev[:, None, None, None] - ev[None, :, None, None]
    np.testing.assert_allclose(T2new, T2 + R2 / (D - 0.5), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(Scale, 1 / np.sqrt(R2 * R2 + 1e-3) - 1, rtol=1e-13, atol=1e-13)


def test_density_c64_example_matches_numpy_in_single_precision():
    r = np.random.default_rng(64)
    C = (r.standard_normal((6, 4)) + 1j * r.standard_normal((6, 4))).astype(np.complex64)
    occ = np.array([2.0, 2.0, 1.0, 0.5], dtype=np.float32)
    h = r.standard_normal((6, 6)) + 1j * r.standard_normal((6, 6))
    H = (h + h.conj().T).astype(np.complex64)  # Hermitian: the energy is real
    Rho, E = example("density_c64.tc").main(C=C, Occ=occ, H=H)
    assert Rho.dtype == np.complex64 and E.dtype == np.complex64 and E.shape == ()
    c, hh = C.astype(np.complex128), H.astype(np.complex128)
    want_rho = np.einsum("pk,k,qk->pq", c, occ.astype(np.float64), c.conj())
    want_e = np.einsum("pq,qp->", want_rho, hh)
    assert rel_err(Rho, want_rho) < 2e-6
    assert abs(complex(E) - want_e) / abs(want_e) < 2e-6
    # Hermitian by construction, and a real energy, to f32 rounding.
    assert rel_err(Rho, Rho.conj().T) < 1e-6
    assert abs(complex(E).imag) < 1e-5 * abs(want_e)


def test_rmsnorm_f16_example_matches_numpy_rounded_once():
    r = np.random.default_rng(16)
    X = (r.standard_normal((16, 64)) * 3).astype(np.float16)
    G = (1 + 0.1 * r.standard_normal(64)).astype(np.float16)
    Y = example("rmsnorm_f16.tc").main(X=X, G=G)
    assert Y.dtype == np.float16 and Y.shape == (16, 64)
    x, g = X.astype(np.float64), G.astype(np.float64)
    want = x * g / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-5)
    # Computed in f32 and rounded once to f16: within half an f16 ulp (2^-11
    # relative) of the exact value plus f32 rounding, elementwise.
    np.testing.assert_array_less(np.abs(Y.astype(np.float64) - want), 2.0**-11 * np.abs(want) + 1e-6)
    # Most elements are exactly numpy's f16 rounding of the f64 result.
    assert (Y == want.astype(np.float16)).mean() > 0.95


# Broadcast sums, sub-ranges, affine subscripts and max/min/where/softmax in tiled
# sessions (`tcc.tiled`): the same outputs as the compiled program, whose results
# the tests above and test_max_where.py / test_affine.py check against numpy.
@pytest.mark.parametrize("name", ["denominator.tc", "fock_blocks.tc", "conv2d.tc", "masked_softmax.tc"])
@pytest.mark.parametrize("tile", [2, 3])
def test_tiled_sessions_run_the_real_constructs_as_compiled(name, tile):
    path = os.path.join(ROOT, "examples", name)
    lib, prog = tcc.compile(path), tcc.tiled(path, tile=tile)
    r = np.random.default_rng(tile)
    inputs = {x["name"]: r.standard_normal(x["shape"]) for x in lib.main.inputs}
    want = lib.main(**inputs)
    got = prog(**inputs)
    want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    assert prog.outputs == [x["name"] for x in lib.main.outputs]
    for out, g, w in zip(prog.outputs, got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=f"{name} {out}")


def test_sum_captured_inside_a_function_warns_and_means_exp_of_the_sum():
    """W0303 (issue 21, deliverable 5) reaches Python as `Library.warnings`; the
    warned form takes exp of the sum, as the book says, and the two spellings the
    hint offers give exp of the sum (no warning) and the sum of exp."""
    decl = "range B = 2; range V = 3; index b : B; index v : V; input tensor L[b,v]; output tensor Z[b];\n"
    L = np.random.default_rng(3).standard_normal((2, 3))
    warned = tcc.compile(decl + "Z[b] = exp(L[b,v]);")
    assert [w.code for w in warned.warnings] == ["W0303"]
    assert "exp((" in warned.warnings[0].hint
    np.testing.assert_allclose(warned.main(L=L), np.exp(L.sum(axis=1)), rtol=1e-14)
    meant = tcc.compile(decl + "Z[b] = exp((L[b,v]));")
    assert meant.warnings == []
    np.testing.assert_allclose(meant.main(L=L), np.exp(L.sum(axis=1)), rtol=1e-14)
    summed = tcc.compile(decl + "tensor E[b,v];\nE[b,v] = exp(L[b,v]);\nZ[b] = E[b,v];")
    assert summed.warnings == []
    np.testing.assert_allclose(summed.main(L=L), np.exp(L).sum(axis=1), rtol=1e-14)
