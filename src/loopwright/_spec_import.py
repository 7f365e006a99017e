"""How a spec's references are imported (``resolve_ref``): ``file.py:attr`` relative to the
spec, loaded by its path under a lock of its own (one thread imports it, another waits), or
``package.module:attr``; the spec's folder put first on ``sys.path`` and read by a finder that
never lets one of its modules stand in for a standard one (``_SpecFolderFinder``); a sibling
module of another spec's folder, imported already under the same bare name, refused. The rest
of a spec's loading is ``_spec``'s."""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from ._errors import SpecError
from ._spec_children import note_folder, note_module

__all__ = ["resolve_ref"]


def resolve_ref(ref: str, base: Path, where: str) -> Any:
    """Import ``file.py:attr`` (relative to ``base``) or ``package.module:attr``."""
    if not isinstance(ref, str) or ":" not in ref:
        raise SpecError(
            f"{ref!r} must look like 'file.py:name' or 'package.module:name'", field=where
        )
    target, _, attr = ref.rpartition(":")
    if str(base) not in sys.path:
        _put_on_path(str(base))  # lets spec-local modules import their siblings
    try:
        if target.endswith(".py"):
            path = (base / target).resolve()
            if not path.is_file():
                raise SpecError(f"no file {path}", field=where)
            digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
            name = f"loopwright_spec_{path.stem}_{digest}"
            # one thread imports it, another waits (the dashboard builds loops in its request
            # and resume threads): the module is in sys.modules before its code has run, and
            # a second thread read it there half made ("has no attribute": review53c)
            with _import_lock(name):
                module = sys.modules.get(name)
                if module is None:
                    module = _import_file(name, path, where)
        elif target.startswith(".") or "/" in target or "\\" in target:
            # (importlib's own words here are about a relative import's 'package' argument)
            raise SpecError(
                f"{target!r} is neither a .py file nor a module name: write 'file.py:name' "
                "(a path relative to the spec, ending in .py) or 'package.module:name'",
                field=where,
            )
        else:
            module = importlib.import_module(target)
    except SpecError:
        raise
    except SystemExit as exc:  # would end the command silently, with the module's exit code
        raise SpecError(
            f"importing {target!r} called sys.exit({exc.code!r})", field=where
        ) from None
    except Exception as exc:
        raise SpecError(
            f"cannot import {target!r}: {type(exc).__name__}: {exc}", field=where
        ) from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SpecError(f"{target!r} has no attribute {attr!r}", field=where)
        obj = getattr(obj, part)
    return obj


_IMPORT_LOCKS: dict[str, threading.RLock] = {}
_IMPORT_LOCKS_LOCK = threading.Lock()


def _import_lock(name: str) -> threading.RLock:
    """The lock one spec ``file.py`` module is imported under (re-entrant: its code may load a
    spec too)."""
    with _IMPORT_LOCKS_LOCK:
        return _IMPORT_LOCKS.setdefault(name, threading.RLock())


def _import_file(name: str, path: Path, where: str) -> ModuleType:
    """Import the spec module ``path`` as ``name`` (its lock held)."""
    _refuse_shadowed_siblings(path.parent, where)
    _SPEC_DIRS.add(path.parent)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SpecError(f"cannot import {path}", field=where)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    note_module(name, str(path))  # a function of it may be sent to a child
    return module


# The spec folders put on sys.path by this process, each read by a _SpecFolderFinder.
_SPEC_PATHS: set[str] = set()


class _SpecFolderFinder(importlib.machinery.FileFinder):
    """A spec folder's finder: its modules by their bare names, except a name of the standard
    library's (``random.py``, ``json.py``, ``code.py`` beside a spec), which would otherwise
    stand in for the standard module in the whole process (every later ``import random``,
    loopwright's own included, would have run it)."""

    def find_spec(
        self, fullname: str, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname in sys.stdlib_module_names:
            return None
        return super().find_spec(fullname, target)


def _spec_folder_hook(path: str) -> importlib.machinery.FileFinder:
    if path not in _SPEC_PATHS:
        raise ImportError("not a spec folder")  # (the next hook's: a plain FileFinder)
    m = importlib.machinery
    return _SpecFolderFinder(
        path,
        (m.ExtensionFileLoader, m.EXTENSION_SUFFIXES),
        (m.SourceFileLoader, m.SOURCE_SUFFIXES),
        (m.SourcelessFileLoader, m.BYTECODE_SUFFIXES),
    )


def _put_on_path(folder: str) -> None:
    """``folder`` first on ``sys.path``: a sibling ``helpers.py`` is the one its spec imports,
    not one in the script's folder, the working directory or $PYTHONPATH (all ahead of the
    standard library's entries, where the folder went before); read by a
    ``_SpecFolderFinder``, so that it never shadows a standard module. The spec's own modules
    are loaded by their path, whatever their names."""
    _SPEC_PATHS.add(folder)
    note_folder(folder)  # and in the children multiprocessing starts afresh
    if _spec_folder_hook not in sys.path_hooks:
        sys.path_hooks.insert(0, _spec_folder_hook)
    sys.path_importer_cache.pop(folder, None)
    sys.path.insert(0, folder)


# The folders spec modules were loaded from in this process (a worker, the dashboard).
_SPEC_DIRS: set[Path] = set()


def _refuse_shadowed_siblings(folder: Path, where: str) -> None:
    """Sibling modules are imported by their bare names, which a process shares: a
    ``helpers.py`` beside this spec, when another spec's folder's ``helpers`` is imported
    already, would silently be that other one (a worker serving both ran the wrong code)."""
    for sibling in folder.glob("*.py"):
        file = getattr(sys.modules.get(sibling.stem), "__file__", None)
        if file is None:
            continue
        origin = Path(file).resolve().parent
        if origin != folder and origin in _SPEC_DIRS and not _same_bytes(sibling, Path(file)):
            raise SpecError(
                f"module {sibling.stem!r} of another spec's folder ({origin}) is imported in "
                f"this process already, so {sibling} would not be: rename one of them",
                field=where,
            )


def _same_bytes(a: Path, b: Path) -> bool:
    """A copy of the same file (specs made from one template) is the same module: let it be."""
    try:
        return a.read_bytes() == b.read_bytes()
    except OSError:
        return False
