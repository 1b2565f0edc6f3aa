"""Element types the Python package does not take yet are refused with their code,
never computed as if they were f64 (complex: E0324; bf16/f16: E0327)."""
import pytest

import tcc

SOURCE = "range N = 3; index i, j : N; input tensor A[i,j] : {t}; output tensor B[i] : {t}; B[i] = A[i,j];"


@pytest.mark.parametrize("elem, code", [("c128", "E0324"), ("c64", "E0324"), ("bf16", "E0327"), ("f16", "E0327")])
def test_unsupported_element_types_are_refused(elem, code):
    with pytest.raises(tcc.TccError, match=code):
        tcc.compile(SOURCE.format(t=elem))


def test_f32_still_compiles_and_runs():
    import numpy as np

    lib = tcc.compile(SOURCE.format(t="f32"))
    a = np.arange(9, dtype=np.float32).reshape(3, 3)
    np.testing.assert_allclose(lib.main(A=a), a.sum(axis=1))
