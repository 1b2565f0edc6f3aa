"""tcc.einsum against numpy.einsum; tcc.contract_path against opt_einsum's format."""

import math

import numpy as np
import pytest

import tcc

CASES = [
    ("ab,bc->ac", [(3, 4), (4, 5)]),
    ("ab,bc", [(3, 4), (4, 5)]),  # implicit output
    ("ba,cb", [(4, 3), (5, 4)]),  # implicit output: alphabetical (ac)
    ("abcd,cdij->abij", [(3, 4, 5, 2), (5, 2, 3, 3)]),  # CCSD ladder shape
    ("acik,kbcj->abij", [(3, 4, 2, 5), (5, 3, 4, 2)]),  # CCSD ring
    ("ap,bq,cr,ds,pqrs->abcd", [(3, 4), (3, 4), (3, 4), (3, 4), (4, 4, 4, 4)]),  # 4-index transform
    ("ij,jk,kl->il", [(6, 5), (5, 7), (7, 3)]),  # chain
    ("ijk,ijk->", [(3, 4, 5), (3, 4, 5)]),  # full contraction: a scalar
    ("i,j->ij", [(3,), (4,)]),  # outer product
    ("ij->ji", [(3, 4)]),  # transpose
    ("ij->", [(3, 4)]),  # sum
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),  # attention scores
    ("Ab,bC->AC", [(3, 4), (4, 2)]),  # upper-case subscripts
    ("ij,jk,j->ik", [(3, 4), (4, 5), (4,)]),  # summed hyperedge: a diagonal gate on a bond
    ("ij,jk,j", [(3, 4), (4, 5), (4,)]),  # the same, implicit output
    ("pi,pj,pk,ijk->", [(4, 3), (4, 5), (4, 2), (3, 5, 2)]),  # p summed over four operands
]


@pytest.mark.parametrize("expr,shapes", CASES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_einsum_matches_numpy(expr, shapes, dtype):
    r = np.random.default_rng(1)
    ops = [r.standard_normal(s).astype(dtype) for s in shapes]
    got = tcc.einsum(expr, *ops)
    want = np.einsum(expr, *ops)
    assert got.dtype == dtype
    assert np.shape(got) == np.shape(want)
    tol = 1e-4 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "expr,shapes",
    [("ii->", [(4, 4)]), ("ii->i", [(4, 4)]), ("ii", [(4, 4)]), ("iij,jk->ik", [(3, 3, 4), (4, 2)])],
)
def test_traces_and_diagonals(expr, shapes):
    r = np.random.default_rng(2)
    ops = [r.standard_normal(s) for s in shapes]
    np.testing.assert_allclose(tcc.einsum(expr, *ops), np.einsum(expr, *ops), rtol=1e-12, atol=1e-12)


def test_einsum_non_contiguous_and_mixed_operands():
    r = np.random.default_rng(3)
    a = r.standard_normal((5, 4)).T  # a view
    b = r.standard_normal((5, 6)).astype(np.float32)
    got = tcc.einsum("ab,bc->ac", a, b)
    assert got.dtype == np.float64  # mixed: float64, like numpy
    np.testing.assert_allclose(got, np.einsum("ab,bc->ac", a, b), rtol=1e-6)


def test_einsum_errors():
    a = np.ones((3, 4))
    with pytest.raises(tcc.ArgumentError, match="size"):
        tcc.einsum("ab,bc->ac", a, np.ones((5, 2)))
    with pytest.raises(tcc.ArgumentError, match="operands"):
        tcc.einsum("ab,bc->ac", a)
    with pytest.raises(tcc.ArgumentError, match="dtype"):
        tcc.einsum("ab->ba", np.ones((2, 2), dtype=np.int64))
    with pytest.raises(tcc.ArgumentError, match="ellipsis"):
        tcc.einsum("...a->a", a)
    with pytest.raises(tcc.ArgumentError, match="dimensions"):
        tcc.einsum("abc->a", a)


def test_einsum_cache_does_not_recompile():
    r = np.random.default_rng(4)
    a, b = r.standard_normal((7, 3)), r.standard_normal((3, 9))
    expr = "xy,yz->xz"
    before = tcc.einsum_cache_info()
    tcc.einsum(expr, a, b)
    mid = tcc.einsum_cache_info()
    assert mid["compilations"] == before["compilations"] + 1
    for _ in range(3):
        np.testing.assert_allclose(tcc.einsum(expr, a + 1, b), np.einsum(expr, a + 1, b), rtol=1e-12)
    after = tcc.einsum_cache_info()
    assert after["compilations"] == mid["compilations"]  # same expression, shapes, dtypes
    assert after["hits"] >= mid["hits"] + 3
    # another shape or dtype compiles again
    tcc.einsum(expr, r.standard_normal((2, 3)), b)
    tcc.einsum(expr, a.astype(np.float32), b.astype(np.float32))
    assert tcc.einsum_cache_info()["compilations"] == after["compilations"] + 2


def check_path(path, n):
    """A valid opt_einsum-style path: each step names distinct positions of the
    current list; the list ends with one operand."""
    live = n
    assert isinstance(path, list)
    for step in path:
        assert isinstance(step, tuple) and all(isinstance(p, int) for p in step)
        assert len(set(step)) == len(step) and all(0 <= p < live for p in step)
        live = live - len(step) + 1
    assert live == 1


PATH_CASES = [
    ("ij,jk,kl->il", [(2, 50), (50, 50), (50, 3)]),
    ("ap,bq,cr,ds,pqrs->abcd", [(8, 8)] * 4 + [(8, 8, 8, 8)]),
    ("abcd,cdij->abij", [(10, 10, 10, 10), (10, 10, 5, 5)]),
    ("xsa,xy,ysb->ab", [(30, 4, 30), (30, 30), (30, 4, 30)]),
    ("ea,fb,abcd,gc,hd->efgh", [(10, 10)] * 2 + [(10, 10, 10, 10)] + [(10, 10)] * 2),
    ("ij->i", [(3, 4)]),
]


@pytest.mark.parametrize("expr,shapes", PATH_CASES)
def test_contract_path_valid(expr, shapes):
    path, info = tcc.contract_path(expr, *shapes)
    check_path(path, len(shapes))
    if len(shapes) > 1:  # (opt_einsum counts a one-operand sum at 2 flops per point, its naive cost at 1)
        assert info.opt_cost <= info.naive_cost
    assert info.largest_intermediate >= 1
    text = str(info)
    assert "Naive FLOP count" in text and "Optimized FLOP count" in text and "Largest intermediate" in text
    # arrays work as well as shapes
    ops = [np.zeros(s) for s in shapes]
    assert tcc.contract_path(expr, *ops)[0] == path


def test_contract_path_matmul_chain_order():
    # (A B) C is far cheaper than A (B C) when A has 2 rows.
    path, info = tcc.contract_path("ij,jk,kl->il", (2, 50), (50, 50), (50, 3))
    assert path == [(0, 1), (0, 1)]
    assert info.opt_cost == 2 * 2 * 50 * 50 + 2 * 2 * 50 * 3


@pytest.mark.parametrize("expr,shapes", PATH_CASES)
def test_contract_path_agrees_with_opt_einsum(expr, shapes):
    oe = pytest.importorskip("opt_einsum")
    path, info = tcc.contract_path(expr, *shapes)
    opath, oinfo = oe.contract_path(expr, *shapes, shapes=True, optimize="optimal")
    # same format: a list of tuples of ints, replayable by opt_einsum
    assert type(path) is type(opath) and all(type(s) is tuple for s in path)
    _, replay = oe.contract_path(expr, *shapes, shapes=True, optimize=path)
    # the costs opt_einsum computes for tcc's path are tcc's own counts
    assert math.isclose(float(replay.opt_cost), info.opt_cost, rel_tol=1e-9)
    assert math.isclose(float(oinfo.naive_cost), info.naive_cost, rel_tol=1e-9)
    assert math.isclose(float(replay.largest_intermediate), info.largest_intermediate, rel_tol=1e-9)
    # tcc's search is exact here: no worse than opt_einsum's optimal (same order of magnitude)
    assert info.opt_cost <= float(oinfo.opt_cost) * (1 + 1e-9)
    assert info.opt_cost >= float(oinfo.opt_cost) / 10
    # and the path computes the right thing
    ops = [np.random.default_rng(5).standard_normal(s) for s in shapes]
    np.testing.assert_allclose(
        oe.contract(expr, *ops, optimize=path), np.einsum(expr, *ops), rtol=1e-10, atol=1e-10
    )
