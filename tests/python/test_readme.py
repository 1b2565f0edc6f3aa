"""The README's Python examples run (every ```python block that imports tcc)."""

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def blocks(path):
    text = open(os.path.join(ROOT, path), encoding="utf-8").read()
    return [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "import tcc" in b]


@pytest.mark.parametrize("path", ["README.md", "python/README.md"])
def test_readme_python_blocks_run(path, monkeypatch):
    found = blocks(path)
    assert found, f"no python example in {path}"
    monkeypatch.chdir(ROOT)  # examples refer to examples/*.tc
    for code in found:
        exec(compile(code, path, "exec"), {"__name__": "__readme__"})
