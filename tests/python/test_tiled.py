"""tcc.tiled: programs in tiled storage (symmetry-packed, block-sparse) from Python,
checked against numpy on the same dense arrays."""

import os

import numpy as np
import pytest

import tcc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# A CCD-like ladder term with antisymmetry and spin blocks.
LADDER = """
range O = 6 tile 3 spin(3, 3);
range V = 8 tile 2 spin(4, 4);
index i, j : O;
index a, b, c, d : V;
input tensor W[a,b,c,d] : f64 antisymmetric(a b)(c d) symmetric((a b)(c d)) spin(a b | c d);
input tensor T[c,d,i,j] : f64 antisymmetric(c d)(i j) spin(c d | i j);
output tensor R[a,b,i,j] : f64 antisymmetric(a b)(i j) spin(a b | i j);
R[a,b,i,j] = 0.5 * W[a,b,c,d] * T[c,d,i,j];
"""


def structured(name, seed):
    """A random dense array with the tensor's declared structure, built from the
    declarations directly (not through tcc): averaged over the symmetry group
    with signs, zero outside the spin blocks (α = the first half of a range)."""
    rng = np.random.default_rng(seed)
    alpha_o = (np.arange(6) < 3).astype(int)
    alpha_v = (np.arange(8) < 4).astype(int)
    pair = [[(0, 1, 2, 3), +1], [(1, 0, 2, 3), -1], [(0, 1, 3, 2), -1], [(1, 0, 3, 2), +1]]
    if name == "W":
        shape, left, right = (8, 8, 8, 8), alpha_v, alpha_v
        # The pair exchange (ab)<->(cd) composed with each element above.
        group = pair + [[tuple((x + 2) % 4 for x in p), s] for p, s in pair]
    else:
        shape, left, right = (8, 8, 6, 6), alpha_v, alpha_o
        group = pair
    d = rng.standard_normal(shape)
    d = sum(sign * d.transpose(perm) for perm, sign in group) / len(group)
    spin_l = left[:, None, None, None] + left[None, :, None, None]
    spin_r = right[None, None, :, None] + right[None, None, None, :]
    return np.where(spin_l == spin_r, d, 0.0)


@pytest.fixture()
def ladder():
    return tcc.tiled(LADDER, threads=2)


def test_stored_sizes_and_flops_are_those_of_the_packed_layout(ladder):
    w = ladder.tensors["W"]
    assert w.role == "input" and w.shape == (8, 8, 8, 8) and w.dense == 8**4
    # Antisymmetry, pair symmetry and spin blocks: far fewer than dense.
    assert 0 < w.stored < w.dense / 4
    assert sum(np.prod(t.extent) for t in ladder.tiles("W")) == w.stored
    assert ladder.inputs == ["W", "T"] and ladder.outputs == ["R"]
    assert 0 < ladder.flops < ladder.dense_flops
    assert "TiledProgram" in repr(ladder)


def test_results_equal_numpy_on_the_same_dense_arrays(ladder):
    W = structured("W", 1)
    T = structured("T", 2)
    R = ladder(W=W, T=T)
    want = 0.5 * np.einsum("abcd,cdij->abij", W, T)
    assert np.abs(want).max() > 0.1
    np.testing.assert_allclose(R, want, rtol=1e-12, atol=1e-12)
    # Round trips: dense -> tiles -> dense is the identity on structured arrays.
    ladder.pack(W=W)
    np.testing.assert_allclose(ladder.unpack("W"), W, rtol=1e-14, atol=1e-15)
    packed = ladder.data("W")
    assert packed.shape == (ladder.tensors["W"].stored,)
    # Packed storage written directly gives the same run.
    other = tcc.tiled(LADDER, threads=1)
    other.set_data("W", packed)
    other.set_data("T", ladder.data("T"))
    other.run()
    np.testing.assert_allclose(other.unpack("R"), want, rtol=1e-12, atol=1e-12)
    # The output's tiles hold the canonical elements of R.
    for tile in other.tiles("R"):
        box = tuple(slice(s, s + e) for s, e in zip(tile.start, tile.extent))
        n = int(np.prod(tile.extent))
        np.testing.assert_allclose(
            other.data("R")[tile.offset : tile.offset + n].reshape(tile.extent), want[box], rtol=1e-12, atol=1e-12
        )


def test_misuse_is_an_error_not_a_silent_drop(ladder):
    W = structured("W", 3)
    with pytest.raises(tcc.ArgumentError, match="antisymmetric"):
        ladder.pack(W=np.ones((8, 8, 8, 8)))
    broken = W.copy()
    # Nonzero outside the spin blocks (αα|ββ), with its images so that the
    # symmetry still holds: only the block rule is broken.
    broken[0, 1, 4, 5] = broken[1, 0, 5, 4] = 1.0
    broken[1, 0, 4, 5] = broken[0, 1, 5, 4] = -1.0
    broken[4, 5, 0, 1] = broken[5, 4, 1, 0] = 1.0
    broken[4, 5, 1, 0] = broken[5, 4, 0, 1] = -1.0
    with pytest.raises(tcc.ArgumentError, match="outside the blocks"):
        ladder.pack(W=broken)
    with pytest.raises(tcc.ArgumentError, match="shape"):
        ladder.pack(T=np.zeros((8, 8, 6)))
    with pytest.raises(tcc.ArgumentError, match="dtype"):
        ladder.pack(W=W.astype(np.float32))
    with pytest.raises(tcc.ArgumentError, match="C-contiguous"):
        ladder.pack(W=np.asfortranarray(W))
    with pytest.raises(tcc.ArgumentError, match="no tensor"):
        ladder.unpack("Q")
    with pytest.raises(tcc.ArgumentError, match="never given"):
        tcc.tiled(LADDER).run()
    with pytest.raises(tcc.ArgumentError, match="shape"):
        ladder.set_data("W", np.zeros(3))
    # A diagonal tile written with values its symmetry forbids.
    bad = ladder.data("W")
    bad[:] = 1.0
    with pytest.raises(tcc.ArgumentError, match="symmetry makes it"):
        ladder.set_data("W", bad)
    with pytest.raises(tcc.ArgumentError, match="not among the inputs"):
        ladder(R=W)
    with pytest.raises(tcc.CompileError):
        tcc.tiled("range N = 3; index i : N; input tensor A[i]; output tensor B[i]; B[i] = A[j];")
    with pytest.raises(tcc.ArgumentError, match="tile"):
        tcc.tiled(LADDER, tile=0)


def test_the_shipped_ccd_example_runs_from_python():
    prog = tcc.tiled(os.path.join(ROOT, "examples", "tiled", "ccd_spin.tc"), threads=2)
    r = prog.tensors["R"]
    assert r.stored < r.dense
    # Every input from the random fill of another program's run is not needed
    # here: zeros in, zeros out, and the shapes are the declared ones.
    for name in prog.inputs:
        prog.set_data(name, np.zeros(prog.tensors[name].stored))
    prog.run()
    out = prog.unpack("R")
    assert out.shape == r.shape and not out.any()


def test_run_time_sizes_are_given_at_open_and_checked():
    # Sizes given at open (ranges without a size): the numbers of numpy at those
    # sizes; sizes missing or below 1 are errors naming the range.
    src = """
range O tile 3;
range V tile 2;
index i, j : O;
index a, b, c, d : V;
input tensor W[a,b,c,d] : f64 antisymmetric(a b)(c d);
input tensor T[c,d,i,j] : f64 antisymmetric(c d)(i j);
output tensor R[a,b,i,j] : f64 antisymmetric(a b)(i j);
R[a,b,i,j] = 0.5 * W[a,b,c,d] * T[c,d,i,j];
"""
    rng = np.random.default_rng(7)

    def anti(x):
        x = x - x.transpose(1, 0, 2, 3)
        return x - x.transpose(0, 1, 3, 2)

    for o, v in [(4, 5), (6, 7)]:
        p = tcc.tiled(src, threads=1, sizes={"O": o, "V": v})
        assert p.tensors["W"].shape == (v, v, v, v)
        W, T = anti(rng.standard_normal((v, v, v, v))), anti(rng.standard_normal((v, v, o, o)))
        np.testing.assert_allclose(p(W=W, T=T), 0.5 * np.einsum("abcd,cdij->abij", W, T), rtol=1e-12, atol=1e-12)
    with pytest.raises(tcc.CompileError, match="run-time range V"):
        tcc.tiled(src, sizes={"O": 6})
    with pytest.raises(tcc.CompileError, match="at least 1"):
        tcc.tiled(src, sizes={"O": 0, "V": 8})
