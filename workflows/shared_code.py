"""One copy of each workflow module's code objects for every sandboxed workflow run.

Temporal's sandbox imports each workflow module afresh for every workflow run (fresh globals, fresh
classes: one run cannot leak state into another, and its restrictions apply to what the module
imports). The standard loader also unmarshals the module's bytecode afresh each time, so every
open allocation held its own copy of `workflows/allocation.py`'s code objects: about 60 KB of the
worker's memory per open allocation (bench (d) with GPUPROV_BENCH_HEAP_DIR; `python -m bench.heap`).

Code objects are immutable: sharing them changes nothing a run can see. `install()` puts a finder
in front of the import system for this project's own modules (never site-packages) whose loader
keeps each file's code object, keyed by path and modification time (an edited file compiles
anew). The module is still executed per run, in the sandbox, exactly as before.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import CodeType, ModuleType

ROOT = Path(__file__).resolve().parent.parent  # the project: workflows/, messages/, ...
_lock = threading.Lock()
_codes: dict[tuple[str, int], CodeType] = {}


class SharedCodeLoader(importlib.machinery.SourceFileLoader):
    """A source loader that compiles (or unmarshals) a file once per modification."""

    def get_code(self, fullname: str) -> CodeType:
        path = str(self.path)
        key = (path, os.stat(path).st_mtime_ns)
        with _lock:
            code = _codes.get(key)
        if code is None:
            code = super().get_code(fullname)
            if code is None:  # a loader's contract allows it; a .py file never gives it
                raise ImportError(f"no code for {fullname}", name=fullname)
            with _lock:
                code = _codes.setdefault(key, code)
        return code


class SharedCodeFinder(importlib.abc.MetaPathFinder):
    """Finds what the path finder finds; this project's .py modules get the SharedCodeLoader."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or type(spec.loader) is not importlib.machinery.SourceFileLoader:
            return None  # not a plain source module: the rest of sys.meta_path decides, as before
        origin = Path(spec.origin or "")
        if ROOT not in origin.parents or ".venv" in origin.parts or "site-packages" in origin.parts:
            return None
        spec.loader = SharedCodeLoader(fullname, str(origin))
        return spec


def install() -> None:
    """Idempotent: one finder, first on sys.meta_path."""
    if not any(isinstance(f, SharedCodeFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, SharedCodeFinder())


def shared_files() -> int:
    """How many code objects are kept (for tests)."""
    with _lock:
        return len(_codes)
