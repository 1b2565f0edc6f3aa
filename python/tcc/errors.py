"""Exceptions raised by tcc (also raised from the extension module)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

__all__ = ["TccError", "CompileError", "ArgumentError", "Diagnostic"]


class TccError(Exception):
    """Base class of every error tcc raises."""


@dataclass(frozen=True)
class Diagnostic:
    """One diagnostic of the checker: ``code`` (e.g. ``"E0201"``), ``severity``
    (``"error"`` or ``"warning"``), ``message``, 1-based ``line``/``column`` of the
    primary span (and ``end_line``/``end_column``), the ``label`` under it, and an
    optional ``hint``."""

    code: str
    severity: str
    message: str
    line: int
    column: int
    end_line: int = 0
    end_column: int = 0
    label: str = ""
    hint: Optional[str] = None

    def __str__(self) -> str:
        s = f"{self.line}:{self.column}: {self.severity}[{self.code}]: {self.message}"
        if self.hint:
            s += f" (hint: {self.hint})"
        return s


class CompileError(TccError):
    """The program has errors. ``diagnostics`` lists them (:class:`Diagnostic`);
    ``str(err)`` is the rendered report."""

    def __init__(self, message: str, diagnostics=()):
        super().__init__(message)
        self.diagnostics: List[Diagnostic] = [
            d if isinstance(d, Diagnostic) else Diagnostic(**d) for d in diagnostics
        ]

    @property
    def errors(self) -> List[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]


class ArgumentError(TccError, TypeError, ValueError):
    """A bad argument of a call: an unknown or missing keyword, a wrong dtype, a
    wrong shape, a non-contiguous array (without ``copy=True``), or an object that
    is not an array. It is both a ``TypeError`` and a ``ValueError``, so either
    ``except`` clause catches it. Nothing is computed or written when it is
    raised."""
