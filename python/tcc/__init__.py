"""tcc from Python: compile tensor-contraction programs and call them on arrays.

>>> import numpy as np, tcc
>>> lib = tcc.compile('''
...     range I = 2; range K = 3; range J = 4;
...     index i : I; index k : K; index j : J;
...     input tensor A[i,k]; input tensor B[k,j]; output tensor C[i,j];
...     C[i,j] = A[i,k] * B[k,j];
... ''')
>>> C = lib.main(A=np.ones((2, 3)), B=np.ones((3, 4)))

* :func:`compile` returns a :class:`Library` with one method per program (and
  model) of the file; a method takes the inputs as keyword arrays (numpy arrays,
  any object with the buffer protocol, or ``__dlpack__`` such as torch CPU
  tensors), checks dtype, exact shape and C-contiguity (``copy=True`` converts
  instead of refusing), runs the JIT-compiled code without the GIL, and returns
  the outputs as new numpy arrays: the array for one output, a tuple in
  declaration order for several. Element types and their arrays: ``f64``
  float64, ``f32`` float32, ``c128`` complex128, ``c64`` complex64, ``f16``
  float16, ``bf16`` ``ml_dtypes.bfloat16`` or uint16 bit patterns (bf16 outputs
  come back as the call's first bf16 input came: uint16 bits for bits,
  otherwise ``ml_dtypes.bfloat16``, which needs ml_dtypes; see
  :class:`Library`).
* :func:`tiled` opens a program in tiled storage (symmetry-packed, block-sparse:
  what ``tcc run --tiled`` runs): pack dense arrays into tiles, or write the
  tiles directly, run, and read outputs back dense or as tiles.
* :func:`einsum` runs an einsum expression through tcc (compiled once per
  expression, shapes and dtypes; real, complex and 16-bit arrays).
* :func:`contract_path` gives tcc's contraction order in opt_einsum's format.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as _np

from . import _native
from .errors import ArgumentError, CompileError, Diagnostic, TccError

__all__ = [
    "compile",
    "Library",
    "tiled",
    "TiledProgram",
    "TiledTensor",
    "Tile",
    "einsum",
    "contract_path",
    "PathInfo",
    "einsum_cache_info",
    "einsum_cache_clear",
    "memory_cache_info",
    "release_memory",
    "TccError",
    "CompileError",
    "ArgumentError",
    "Diagnostic",
]

__version__ = _native.__version__


# ---------------------------------------------------------------------------------
# compile
# ---------------------------------------------------------------------------------


class Library:
    """A compiled tcc file: one callable attribute per program and model.

    ``lib.NAME(**arrays, copy=False)`` runs unit ``NAME``; ``lib["NAME"]`` does the
    same for names that are not Python identifiers. The unit formed by the file's
    top-level statements is ``main`` (as in ``tcc build`` libraries).
    Each callable has ``inputs`` and ``outputs`` (lists of dicts with ``name``,
    ``dtype`` (tcc's element type: ``f64``, ``f32``, ``c128``, ``c64``, ``f16``,
    ``bf16``), ``shape``) and ``flops`` (per call; real flops after lowering for
    a complex program).

    Arrays per element type: ``f64`` float64, ``f32`` float32, ``c128``
    complex128, ``c64`` complex64 (interleaved, as numpy stores them), ``f16``
    float16, ``bf16`` either ``ml_dtypes.bfloat16`` or uint16 holding the bit
    patterns (the ``.npy`` convention of ``tcc run``). Anything else is an
    :class:`ArgumentError` naming the argument, unless ``copy=True``, which
    converts numbers by value (numpy's ``ascontiguousarray``; to bf16 through
    ml_dtypes) but never drops an imaginary part nor reads numbers as bf16
    bits. A bf16 output is returned as uint16 bits when the call's first bf16
    input (in declaration order) was given as uint16 bits, and as an
    ``ml_dtypes.bfloat16`` array otherwise (no bf16 input, a bfloat16 one, or
    one converted with ``copy=True``); without ml_dtypes, always as uint16
    bits. 16-bit tensors are computed in float32 and rounded once when stored
    (the book's "16-bit storage types"); complex ones as real pairs.
    """

    def __init__(self, native, names: List[str], warnings: List[Diagnostic]):
        self._native = native
        self._programs = {}
        for k, name in enumerate(names):
            self._programs[name] = native.program(k)
        self.warnings = warnings

    @property
    def programs(self) -> List[str]:
        """The names of the units, in source order."""
        return list(self._programs)

    def __getitem__(self, name: str):
        try:
            return self._programs[name]
        except KeyError:
            raise KeyError(f"no program `{name}` (the library has {', '.join(self._programs)})") from None

    def __getattr__(self, name: str):
        programs = self.__dict__.get("_programs", {})
        if name in programs:
            return programs[name]
        raise AttributeError(f"no program `{name}` (the library has {', '.join(programs)})")

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._programs))

    def __iter__(self):
        return iter(self._programs.values())

    def __len__(self) -> int:
        return len(self._programs)

    def __repr__(self) -> str:
        return "<tcc.Library " + ", ".join(repr(p) for p in self._programs.values()) + ">"


def _looks_like_path(s: str) -> bool:
    # Every statement and declaration ends with ';': a string without one (and on
    # one line) is a file name.
    return ";" not in s and "\n" not in s


def compile(
    source_or_path,
    sizes: Optional[Dict[str, int]] = None,
    *,
    name: Optional[str] = None,
    fuse: str = "auto",
    mem_limit: Optional[int] = None,
    max_intermediate: Optional[int] = None,
) -> Library:
    """Checks and JIT-compiles a tcc program.

    ``source_or_path``: the program's text, or a path (``str`` without ``;`` or a
    newline, or any ``os.PathLike``) of a ``.tc`` file. ``sizes``: sizes of the
    program's ranges by name (``{"O": 8}``): every run-time range (``range O;``)
    needs one; a fixed range may be named with its declared size. ``name``: the
    name of the unit formed by the top-level statements (default ``main``, as in
    libraries built by ``tcc build``). ``fuse`` (``"auto"``, ``"none"``, ``"max"``)
    and ``mem_limit`` (bytes of temporaries live at once; default 2 GiB) are
    ``tcc build``'s ``--fuse`` and ``--mem-limit``: a limit that no fusion fits
    slices products until it fits, and one that cannot be met raises
    :class:`TccError`. ``max_intermediate`` (bytes, at least 8) is
    ``--max-intermediate``: products with a larger intermediate are sliced.

    Raises :class:`CompileError` (with ``.diagnostics``) when the program has
    errors, :class:`TccError` for other failures.
    """
    if isinstance(source_or_path, os.PathLike) or (
        isinstance(source_or_path, str) and _looks_like_path(source_or_path)
    ):
        path = os.fspath(source_or_path)
        with open(path, encoding="utf-8") as f:
            source = f.read()
        file_name = path
    elif isinstance(source_or_path, str):
        source, file_name = source_or_path, "<string>"
    else:
        raise TypeError(f"tcc.compile: expected a source string or a path, got {type(source_or_path).__name__}")
    if sizes is not None:
        sizes = {str(k): int(v) for k, v in dict(sizes).items()}
    if mem_limit is not None:
        mem_limit = int(mem_limit)
        if mem_limit < 0:
            raise ValueError("tcc.compile: mem_limit must be a number of bytes >= 0")
    if max_intermediate is not None:
        max_intermediate = int(max_intermediate)
        if max_intermediate < 8:
            raise ValueError("tcc.compile: max_intermediate must be at least 8 bytes (one element)")
    native = _native.compile(source, name or "main", sizes, file_name, fuse, mem_limit, max_intermediate)
    names = [native.program(k).name for k in range(len(native))]
    warnings = [Diagnostic(**d) for d in native.warnings]
    return Library(native, names, warnings)


# ---------------------------------------------------------------------------------
# tiled
# ---------------------------------------------------------------------------------


class Tile(NamedTuple):
    """One stored tile: it starts at ``offset`` in the tensor's packed array and
    holds the index box ``start + [0, extent)``, row-major (last index fastest)."""

    offset: int
    start: Tuple[int, ...]
    extent: Tuple[int, ...]


class TiledTensor(NamedTuple):
    """An input or output of a tiled program: ``stored`` elements (its tiles)
    against ``dense`` (every element), in ``tiles`` tiles."""

    name: str
    role: str
    shape: Tuple[int, ...]
    stored: int
    dense: int
    tiles: int


class TiledProgram:
    """A program held open in tiled storage: each tensor keeps only the tiles its
    declarations need (one per symmetry orbit, only the allowed blocks).

    ``pack(A=array, ...)`` fills inputs from dense float64 arrays (an array
    without the declared symmetry, or nonzero outside the declared blocks, is an
    :class:`ArgumentError`: the tiles would silently drop values);
    ``set_data(name, packed)`` writes the packed storage directly (layout in
    ``tiles(name)``); ``run()`` runs the task sets (every input must have been
    given); ``unpack(name)`` returns a dense array, ``data(name)`` the packed one.
    Calling the program, ``prog(A=..., B=...)``, packs, runs and returns the
    outputs dense (one array, or a tuple in declaration order).

    Tiles hold float64 values. A complex tensor ``X`` (``c128``, ``c64``) is
    stored as two real tensors ``X_re`` and ``X_im`` (the entries of
    ``tensors``, ``tiles`` and ``data``), but ``pack``, ``unpack`` and calls take
    and return it as a numpy complex array under its own name: ``complex128``
    for ``c128``, ``complex64`` for ``c64`` (another complex dtype only with
    ``copy=True``; a real array is an :class:`ArgumentError`, as is a complex
    array for a real tensor). ``inputs`` and ``outputs`` name what calls take and
    return; ``complex`` maps each complex tensor to ``(dtype, re part, im
    part)``. A bf16/f16 tensor holds its type's values (inputs are rounded to it
    when the program runs, outputs after).
    """

    _COMPLEX_DTYPES = {"c128": "complex128", "c64": "complex64"}

    def __init__(self, native):
        self._native = native
        self.tensors: Dict[str, TiledTensor] = {
            t[0]: TiledTensor(t[0], t[1], tuple(t[2]), t[3], t[4], t[5]) for t in native.tensors()
        }
        self.flops, self.dense_flops = native.flops()
        parts: Dict[str, Dict[int, str]] = {}
        elems: Dict[str, str] = {}
        for part, source, elem, component in native.complex_parts():
            parts.setdefault(source, {})[component] = part
            elems[source] = elem
        self.complex: Dict[str, Tuple[str, str, str]] = {n: (elems[n], p[0], p[1]) for n, p in parts.items()}
        self._part_of = {p: n for n, (_, re, im) in self.complex.items() for p in (re, im)}

    def _names(self, role: str) -> List[str]:
        names: List[str] = []
        for n, t in self.tensors.items():
            n = self._part_of.get(n, n)
            if t.role == role and n not in names:
                names.append(n)
        return names

    @property
    def inputs(self) -> List[str]:
        """The inputs as calls and ``pack`` take them (complex ones by their own name)."""
        return self._names("input")

    @property
    def outputs(self) -> List[str]:
        """The outputs as calls and ``unpack`` return them (complex ones by their own name)."""
        return self._names("output")

    def tiles(self, name: str) -> List[Tile]:
        return [Tile(o, tuple(s), tuple(e)) for o, s, e in self._native.tiles(name)]

    def _pack_complex(self, name: str, array, copy: bool) -> None:
        elem, re, im = self.complex[name]
        want = self._COMPLEX_DTYPES[elem]
        if not isinstance(array, _np.ndarray):
            array = _np.asarray(array)
        if array.dtype.kind != "c":
            raise ArgumentError(
                f"tiled: `{name}` is complex ({elem}) but the array has dtype {array.dtype}: "
                f"pass a numpy {want} array (parts alone go to `{re}` and `{im}`)"
            )
        if array.dtype != _np.dtype(want) and not copy:
            raise ArgumentError(
                f"tiled: `{name}` is {elem}: expected dtype {want}, got {array.dtype} (pass copy=True to convert)"
            )
        shape = self.tensors[re].shape
        if tuple(array.shape) != shape:
            raise ArgumentError(f"tiled: `{name}` has shape {tuple(array.shape)}, expected {shape}")
        # The parts are strided views of the complex array: always copied.
        self._native.pack(re, _np.ascontiguousarray(array.real, dtype=_np.float64), False)
        self._native.pack(im, _np.ascontiguousarray(array.imag, dtype=_np.float64), False)

    def pack(self, copy: bool = False, **arrays) -> None:
        for name, array in arrays.items():
            if name in self.complex:
                self._pack_complex(name, array, copy)
            elif name in self.tensors and _np.iscomplexobj(array):
                raise ArgumentError(
                    f"tiled: `{name}` is real but the array has complex values ({_np.asarray(array).dtype}): "
                    "no silent real part (pass `.real` if that is what is meant)"
                )
            else:
                self._native.pack(name, array, copy)

    def set_data(self, name: str, packed, copy: bool = False) -> None:
        self._native.set_data(name, packed, copy)

    def data(self, name: str):
        return self._native.data(name)

    def unpack(self, name: str):
        if name in self.complex:
            elem, re, im = self.complex[name]
            out = _np.empty(self.tensors[re].shape, dtype=self._COMPLEX_DTYPES[elem])
            out.real = self._native.unpack(re)
            out.imag = self._native.unpack(im)
            return out
        return self._native.unpack(name)

    def run(self) -> None:
        self._native.run()

    def __call__(self, copy: bool = False, **arrays):
        inputs = self.inputs
        unknown = [n for n in arrays if n not in inputs]
        if unknown:
            raise ArgumentError(f"tiled: {', '.join(unknown)} not among the inputs ({', '.join(inputs)})")
        self.pack(copy=copy, **arrays)
        self.run()
        outs = tuple(self.unpack(n) for n in self.outputs)
        return outs[0] if len(outs) == 1 else outs

    def __repr__(self) -> str:
        parts = [f"{t.name}: {t.stored}/{t.dense} stored" for t in self.tensors.values()]
        return f"<tcc.TiledProgram {', '.join(parts)}; {self.flops:.3e} flops (dense {self.dense_flops:.3e})>"


def tiled(
    source_or_path,
    program: Optional[str] = None,
    *,
    tile: Optional[int] = None,
    threads: Optional[int] = None,
    sizes: Optional[Dict[str, int]] = None,
) -> TiledProgram:
    """Opens a program in tiled storage (``tcc run --tiled``'s data model).

    ``source_or_path``: the program's text or a ``.tc`` path (as for
    :func:`compile`). ``program``: which program of the file (needed when it has
    several). ``tile``: tile size of ranges that declare none (default: the one
    the time model predicts fastest, as ``tcc run --tiled``). ``threads``: worker
    threads (default ``TCC_NUM_THREADS`` or every core). ``sizes``: the size of
    every run-time range the program uses (``range O;``), e.g. ``{"O": 10}``.
    """
    if isinstance(source_or_path, os.PathLike) or (
        isinstance(source_or_path, str) and _looks_like_path(source_or_path)
    ):
        with open(os.fspath(source_or_path), encoding="utf-8") as f:
            source = f.read()
    elif isinstance(source_or_path, str):
        source = source_or_path
    else:
        raise TypeError(f"tcc.tiled: expected a source string or a path, got {type(source_or_path).__name__}")
    return TiledProgram(_native.TiledSession(source, program, tile, threads, sizes))


# ---------------------------------------------------------------------------------
# einsum
# ---------------------------------------------------------------------------------

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _parse(expr: str, n_operands: Optional[int]) -> Tuple[List[str], str]:
    """Splits an einsum expression into operand subscripts and the output (numpy's
    implicit output: the letters that appear once, in alphabetical order)."""
    e = expr.replace(" ", "")
    if "." in e:
        raise ArgumentError(f"tcc.einsum: ellipsis ('...') is not supported: {expr!r}")
    if "->" in e:
        lhs, out = e.split("->", 1)
        if "->" in out:
            raise ArgumentError(f"tcc.einsum: more than one '->' in {expr!r}")
    else:
        lhs, out = e, None
    ins = lhs.split(",")
    for s in ins + ([out] if out is not None else []):
        for c in s:
            if c not in _LETTERS:
                raise ArgumentError(f"tcc.einsum: invalid subscript {c!r} in {expr!r} (letters a-z, A-Z)")
    if out is None:
        counts: Dict[str, int] = {}
        for s in ins:
            for c in s:
                counts[c] = counts.get(c, 0) + 1
        # numpy's implicit output: the subscripts that occur once, in ASCII order
        # (upper case before lower case).
        out = "".join(sorted(c for c, k in counts.items() if k == 1))
    if len(set(out)) != len(out):
        raise ArgumentError(f"tcc.einsum: an output subscript repeats in {expr!r}")
    used = set("".join(ins))
    for c in out:
        if c not in used:
            raise ArgumentError(f"tcc.einsum: output subscript {c!r} is in no operand of {expr!r}")
    if n_operands is not None and len(ins) != n_operands:
        raise ArgumentError(f"tcc.einsum: {expr!r} has {len(ins)} operands, got {n_operands} arrays")
    return ins, out


def _einsum_source(ins: Sequence[str], out: str, sizes: Dict[str, int], elem: str) -> str:
    """The tcc program of an einsum: one range and index per letter (and an alias
    index per repeat within one operand, for the declaration)."""
    mult: Dict[str, int] = {}
    for s in ins:
        for c in set(s):
            mult[c] = max(mult.get(c, 1), s.count(c))
    lines = []
    for c in sorted(sizes, key=_LETTERS.index):
        names = [c] + [f"{c}_{k}" for k in range(1, mult.get(c, 1))]
        lines.append(f"range R_{c} = {sizes[c]}; index {', '.join(names)} : R_{c};")
    for k, s in enumerate(ins):
        seen: Dict[str, int] = {}
        decl = []
        for c in s:
            j = seen.get(c, 0)
            seen[c] = j + 1
            decl.append(c if j == 0 else f"{c}_{j}")
        idx = f"[{','.join(decl)}]" if s else ""
        lines.append(f"input tensor X{k}{idx} : {elem};")
    oidx = f"[{','.join(out)}]" if out else ""
    lines.append(f"output tensor Out{oidx} : {elem};")
    rhs = " * ".join(f"X{k}[{','.join(s)}]" if s else f"X{k}" for k, s in enumerate(ins))
    lines.append(f"Out{oidx} = {rhs};")
    return "\n".join(lines) + "\n"


class _EinsumCache:
    def __init__(self):
        self.entries: Dict[Any, Any] = {}
        self.compilations = 0
        self.hits = 0
        self.lock = threading.Lock()


_cache = _EinsumCache()


def einsum_cache_info() -> Dict[str, int]:
    """``{"compilations": ..., "hits": ..., "size": ...}`` of :func:`einsum`'s cache
    (a compilation happens once per expression, shapes and dtypes)."""
    return {"compilations": _cache.compilations, "hits": _cache.hits, "size": len(_cache.entries)}


def einsum_cache_clear() -> None:
    """Empties :func:`einsum`'s cache (the counters stay)."""
    with _cache.lock:
        _cache.entries.clear()


def memory_cache_info() -> Dict[str, int]:
    """Large temporaries (4 MiB and more) that compiled programs keep mapped
    between calls, so that the next call neither maps nor clears them again:
    ``{"bytes": held now, "limit": the most kept}`` (limit: the environment
    variable ``TCC_TEMP_CACHE`` in bytes when the process started, else 1 GiB;
    0 keeps none)."""
    held, limit = _native.temp_cache_info()
    return {"bytes": held, "limit": limit}


def release_memory() -> int:
    """Gives the temporaries of :func:`memory_cache_info` back to the system;
    returns how many bytes that was. Later calls map fresh ones."""
    return _native.release_temp_cache()


def _bfloat16():
    """``ml_dtypes.bfloat16``, or None without ml_dtypes."""
    try:
        import ml_dtypes
    except ImportError:
        return None
    return _np.dtype(ml_dtypes.bfloat16)


def _elem_of(dtype) -> Optional[str]:
    """tcc's element type of a numpy dtype (None: tcc has none)."""
    names = {"float64": "f64", "float32": "f32", "float16": "f16", "complex128": "c128", "complex64": "c64"}
    if dtype.name in names and dtype.kind in "fc":
        return names[dtype.name]
    bf = _bfloat16()
    if bf is not None and dtype == bf:
        return "bf16"
    return None


def _as_array(x, k: int):
    a = x if isinstance(x, _np.ndarray) else (_np.from_dlpack(x) if hasattr(x, "__dlpack__") and not hasattr(x, "__array__") else _np.asarray(x))
    if _elem_of(a.dtype) is None:
        raise ArgumentError(
            f"tcc.einsum: operand {k} has dtype {a.dtype}; tcc computes float16, ml_dtypes.bfloat16, float32, "
            "float64, complex64 and complex128 arrays"
        )
    return a


def einsum(expr: str, *operands):
    """``numpy.einsum(expr, *operands)`` computed by tcc.

    Explicit (``"ab,bc->ac"``) and implicit (``"ab,bc"``) output, repeated
    subscripts (traces, diagonals); float16, ``ml_dtypes.bfloat16``, float32,
    float64, complex64 and complex128 operands. The result has numpy's promoted
    dtype (``numpy.result_type`` of the operands: float32 with complex64 gives
    complex64, float32 with float64 gives float64), and every operand is
    converted to it first, as numpy does; 16-bit results are computed in float32
    and rounded once (the tolerances of the book's "16-bit storage types"). The
    program is generated and compiled once per (expression, shapes, dtype) and
    cached; operands need not be contiguous. Returns a new array (0-d for a
    scalar result).
    """
    arrays = [_as_array(x, k) for k, x in enumerate(operands)]
    dtype = _np.result_type(*arrays) if arrays else _np.dtype(_np.float64)
    elem = _elem_of(dtype)
    if elem is None:
        raise ArgumentError(f"tcc.einsum: the operands promote to {dtype}, which tcc does not compute")
    key = (expr, tuple(a.shape for a in arrays), elem)
    prog = _cache.entries.get(key)
    if prog is None:
        prog = _einsum_compile(expr, arrays, elem, key)
    else:
        _cache.hits += 1
    kwargs = {}
    for k, a in enumerate(arrays):
        if a.dtype != dtype or not a.flags.c_contiguous:
            a = _np.ascontiguousarray(a, dtype=dtype)
        kwargs[f"X{k}"] = a
    return prog(**kwargs)


def _einsum_compile(expr, arrays, elem, key):
    ins, out = _parse(expr, len(arrays))
    sizes: Dict[str, int] = {}
    for k, (s, a) in enumerate(zip(ins, arrays)):
        if len(s) != a.ndim:
            raise ArgumentError(
                f"tcc.einsum: operand {k} has {a.ndim} dimensions but {len(s)} subscripts ({s!r}) in {expr!r}"
            )
        for c, n in zip(s, a.shape):
            if sizes.setdefault(c, n) != n:
                raise ArgumentError(
                    f"tcc.einsum: subscript {c!r} has size {sizes[c]} and {n} in {expr!r} (no broadcasting)"
                )
    for c, n in sizes.items():
        if n == 0:
            raise ArgumentError(f"tcc.einsum: subscript {c!r} has size 0")
    src = _einsum_source(ins, out, sizes, elem)
    try:
        lib = compile(src, name="einsum")
    except CompileError as e:
        raise ArgumentError(f"tcc.einsum: tcc cannot compute {expr!r}: {e.errors[0].message if e.errors else e}") from e
    prog = lib["einsum"]
    with _cache.lock:
        _cache.compilations += 1
        _cache.entries[key] = prog
    return prog


# ---------------------------------------------------------------------------------
# contract_path
# ---------------------------------------------------------------------------------


class PathInfo:
    """What :func:`contract_path` found: ``path`` (opt_einsum's convention),
    ``naive_cost`` and ``opt_cost`` (flops, counted like opt_einsum: 2 per
    multiply-add of a step that sums an index, 1 per element of a pure product),
    ``speedup``, ``largest_intermediate`` (elements, the result included, like
    opt_einsum), ``peak`` (tcc's peak of live intermediates), ``method``
    (``exact``/``greedy``/``hyper``/``trivial``), ``steps`` (one ``(positions, result
    subscripts, flops)`` per step), ``eq``, ``size_dict``."""

    def __init__(self, eq, ins, out, size_dict, path, steps, naive_cost, opt_cost, largest, peak, method):
        self.eq = eq
        self.input_subscripts = ",".join(ins)
        self.output_subscript = out
        self.size_dict = size_dict
        self.path = path
        self.steps = steps
        self.naive_cost = naive_cost
        self.opt_cost = opt_cost
        self.speedup = naive_cost / max(opt_cost, 1)
        self.largest_intermediate = largest
        self.peak = peak
        self.method = method

    def __repr__(self) -> str:
        lines = [
            f"  Complete contraction:  {self.eq}",
            f"         Naive scaling:  {len(self.size_dict)}",
            f"     Naive FLOP count:  {self.naive_cost:.3e}",
            f" Optimized FLOP count:  {self.opt_cost:.3e}",
            f"  Theoretical speedup:  {self.speedup:.3e}",
            f" Largest intermediate:  {self.largest_intermediate:.3e} elements",
            f"        Search method:  tcc {self.method}",
            "-" * 60,
            f"{'step':>4}  {'positions':<12} {'result':<16} {'flops':>12}",
        ]
        for k, (pos, res, fl) in enumerate(self.steps):
            lines.append(f"{k:>4}  {str(pos):<12} {res or '(scalar)':<16} {fl:>12.3e}")
        return "\n".join(lines)

    __str__ = __repr__


def _shape_of(x) -> Tuple[int, ...]:
    if hasattr(x, "shape"):
        return tuple(int(n) for n in x.shape)
    return tuple(int(n) for n in x)


def contract_path(expr: str, *shapes_or_arrays) -> Tuple[List[Tuple[int, ...]], PathInfo]:
    """tcc's contraction order of an einsum expression, in opt_einsum's format.

    ``shapes_or_arrays``: one shape (a tuple of ints) or array per operand.
    Returns ``(path, info)``: ``path`` is a list of tuples of positions in the
    current operand list (the contracted operands are removed and the result is
    appended, as in ``opt_einsum.contract_path``); ``info`` a :class:`PathInfo`.
    The order comes from tcc's own search (exact dynamic programming up to 16
    operands, greedy then the hyper-optimizer within one second beyond).
    """
    shapes = [_shape_of(x) for x in shapes_or_arrays]
    ins, out = _parse(expr, len(shapes))
    letters: List[str] = []
    sizes: Dict[str, int] = {}
    for k, (s, shp) in enumerate(zip(ins, shapes)):
        if len(s) != len(shp):
            raise ArgumentError(f"contract_path: operand {k} has {len(shp)} dimensions but subscripts {s!r}")
        for c, n in zip(s, shp):
            if c not in sizes:
                letters.append(c)
            if sizes.setdefault(c, n) != n:
                raise ArgumentError(f"contract_path: subscript {c!r} has size {sizes[c]} and {n}")
    ident = {c: k for k, c in enumerate(letters)}
    steps, flops, peak, method = _native.optimize_path(
        [[ident[c] for c in s] for s in ins], [ident[c] for c in out], [sizes[c] for c in letters]
    )
    n = len(ins)
    # SSA ids → opt_einsum positions.
    live = list(range(n))
    path: List[Tuple[int, ...]] = []
    info_steps = []
    largest = 0.0
    for k, (a, b, indices, fl, size) in enumerate(steps):
        pa, pb = live.index(a), live.index(b)
        pos = tuple(sorted((pa, pb)))
        path.append(pos)
        for p in sorted(pos, reverse=True):
            live.pop(p)
        live.append(n + k)
        info_steps.append((pos, "".join(letters[i] for i in indices), fl))
        largest = max(largest, size)
    if n == 1:
        path = [(0,)]
        largest = float(_np.prod([sizes[c] for c in out])) if out else 1.0
    elif not steps:
        path = [tuple(range(n))]
    # opt_einsum's naive cost: every index once, (operands - 1, + 1 when a subscript
    # occurs twice) flops per point.
    total = 1.0
    for c in letters:
        total *= sizes[c]
    inner = sum(len(s) for s in ins) > len(letters)
    naive = total * (max(1, n - 1) + (1 if inner else 0))
    if n == 1:
        # opt_einsum's one step over the single operand: 2 flops per point if it sums.
        flops = total * (2 if any(c not in out for c in letters) else 1)
    eq = ",".join(ins) + "->" + out
    info = PathInfo(eq, ins, out, sizes, path, info_steps, naive, flops, largest, peak, method)
    return path, info
