"""Affine subscripts (issue 21, deliverable 4) through the Python package: the
convolution example and strided, run-time-sized and shifted windows against a
direct numpy convolution (sliding_window_view + einsum)."""

import os

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import tcc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def conv2d(I, F, stride=1):
    """O[n,k,y,x] = sum_{c,r,s} I[n,c,stride*y+r,stride*x+s] F[k,c,r,s]."""
    R, S = F.shape[2:]
    win = sliding_window_view(I, (R, S), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("ncyxrs,kcrs->nkyx", win, F)


def test_conv2d_example_matches_numpy():
    lib = tcc.compile(os.path.join(ROOT, "examples", "conv2d.tc"))
    r = np.random.default_rng(4)
    I, F = r.standard_normal((2, 3, 8, 8)), r.standard_normal((4, 3, 3, 3))
    np.testing.assert_allclose(lib.main(I=I, F=F), conv2d(I, F), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fuse", ["auto", "none", "max"])
def test_strided_conv2d_with_relu_in_f32(fuse):
    src = """range N = 3; range C = 5; range K = 6; range Y = 4; range X = 7; range R = 3; range S = 2;
range H = 9; range W = 14;
index n : N; index c : C; index k : K; index y : Y; index x : X; index r : R; index s : S;
index h : H; index w : W;
input tensor I[n,c,h,w] : f32; input tensor F[k,c,r,s] : f32; output tensor O[n,k,y,x] : f32;
O[n,k,y,x] = relu(I[n,c,2*y+r,2*x+s] * F[k,c,r,s]);
"""
    lib = tcc.compile(src, fuse=fuse)
    r = np.random.default_rng(5)
    I = r.standard_normal((3, 5, 9, 14)).astype(np.float32)
    F = r.standard_normal((6, 5, 3, 2)).astype(np.float32)
    want = np.maximum(conv2d(I.astype(np.float64), F.astype(np.float64), stride=2), 0)
    np.testing.assert_allclose(lib.main(I=I, F=F), want, rtol=1e-4, atol=1e-4)


def test_sliding_window_sum_with_run_time_sizes():
    src = """range T; range R = 4; range L;
index t : T; index r : R; index l : L;
input tensor I[l]; output tensor S[t];
S[t] = I[t+r];
"""
    x = np.random.default_rng(6).standard_normal(30)
    lib = tcc.compile(src, sizes={"T": 27, "L": 30})
    np.testing.assert_allclose(lib.main(I=x), sliding_window_view(x, 4).sum(axis=1), rtol=1e-12)
    with pytest.raises(tcc.TccError, match="E0749"):
        tcc.compile(src, sizes={"T": 28, "L": 30})


def test_shift_by_minus_one_and_bounds_errors():
    lib = tcc.compile(
        "range B = 1; range X = 9; range H = B + X; index x : X; index h : H;\n"
        "input tensor I[h]; output tensor D[x];\nD[x] = I[x] - I[x-1];\n"
    )
    x = np.random.default_rng(7).standard_normal(10)
    np.testing.assert_allclose(lib.main(I=x), np.diff(x), rtol=1e-12)
    with pytest.raises(tcc.CompileError) as e:
        tcc.compile(
            "range X = 9; range H = 9; index x : X; index h : H;\n"
            "input tensor I[h]; output tensor D[x];\nD[x] = I[x+1];\n"
        )
    assert any(d.code == "E0314" for d in e.value.diagnostics)
