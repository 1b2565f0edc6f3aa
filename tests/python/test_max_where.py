"""max/min reductions, where and the stable softmax (issue 21) through the Python
package, against numpy on the repository's example."""

import os

import numpy as np

import tcc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def numpy_reference(Q, K, V, Mask):
    S = 0.5 * np.einsum("hse,hte->hst", Q, K)
    L = np.where(Mask[None] > 0, S, -1e9)
    E = np.exp(L - L.max(axis=2, keepdims=True))
    P = E / E.sum(axis=2, keepdims=True)
    O = np.einsum("hst,htf->hsf", P, V)
    M = S.max(axis=2)
    N = (S - Mask[None]).min(axis=2)
    R = np.where(S > 0, S, 0.01 * S)
    C = np.maximum(S, 0) + np.minimum(Mask, 0.5)[None]
    return O, M, N, R, C


def test_masked_softmax_example_matches_numpy():
    lib = tcc.compile(os.path.join(ROOT, "examples", "masked_softmax.tc"))
    r = np.random.default_rng(21)
    Q, K, V = (r.standard_normal((2, 6, 4)) for _ in range(3))
    Mask = r.standard_normal((6, 6))
    Mask[:, 0] = 1.0  # every query sees at least one key
    got = lib.main(Q=Q, K=K, V=V, Mask=Mask)
    for name, g, w in zip("OMNRC", got, numpy_reference(Q, K, V, Mask)):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=name)


def test_softmax_of_large_logits_is_finite():
    lib = tcc.compile(
        "range B = 3; range V = 7; index b : B; index v : V;\n"
        "input tensor L[b,v]; output tensor P[b,v];\n"
        "P[b,v] = softmax(L[b,v], v);\n"
    )
    L = np.random.default_rng(1).standard_normal((3, 7)) * 1000
    P = lib.main(L=L)
    E = np.exp(L - L.max(axis=1, keepdims=True))
    np.testing.assert_allclose(P, E / E.sum(axis=1, keepdims=True), rtol=1e-12, atol=1e-300)
    assert np.isfinite(P).all()


def test_fock_blocks_example_matches_numpy():
    """Sub-ranges: blocks of a tensor over P = O + V (issue 21, deliverable 3)."""
    lib = tcc.compile(os.path.join(ROOT, "examples", "fock_blocks.tc"))
    r = np.random.default_rng(3)
    o, v = 3, 4
    H, T = r.standard_normal((o + v, o + v)), r.standard_normal((v, o))
    F = H.copy()
    F[:o, :o] += H[:o, :o] @ H[:o, :o]
    F[o:, :o] = 2 * T
    R = F[o:, o:] @ T - T @ F[:o, :o] + F[o:, :o] * np.diag(F[:o, :o])[None, :]
    D = np.concatenate([np.diag(F[:o, :o]), np.diag(F[o:, o:]) - 1])
    W = np.einsum("pq,qp->", F, F)
    got = lib.main(H=H, T=T)
    for name, g, w in zip("FRDW", got, (F, R, D, W)):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=name)
