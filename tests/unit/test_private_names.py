"""No engine module imports a name another loopwright module marks as its own.

The style: a private module (``_x.py``) exports public names to the others; a leading
underscore on a name means "used only in this module". An import of ``_name`` from another
loopwright module breaks that promise silently (a rename or a patch of it in its home then
misses the importer), so this test reads every ``from ... import`` in ``src/loopwright``
(functions' bodies too) and fails on one. Not counted: ``__future__``, dunder names, and a
private submodule imported as a module (``from . import _decide``).

``NOT_YET`` lists the pairs (defining module, name) still imported across modules: the
subpackages' own internals, not renamed yet (stop 55 renamed the engine core's). The list
only shrinks: a pair no longer imported must leave it.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "loopwright"

NOT_YET: frozenset[tuple[str, str]] = frozenset()  # (stop 56: every subpackage renamed)


def _module_of(parts: list[str]) -> Path | None:
    base = SRC.parent.joinpath(*parts)
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return base / "__init__.py" if (base / "__init__.py").is_file() else None


def _dotted(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _private_imports(path: Path, text: str | None = None) -> list[tuple[str, str, int]]:
    """(defining module, name, line) of each underscore name ``path`` (or ``text``, read as if
    it were ``path``) imports from another loopwright module."""
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    package = parts[:-1]  # (a package's __init__ imports relative to itself, as its siblings do)
    found = []
    for node in ast.walk(ast.parse(text or path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
            continue
        if node.level == 0:
            if node.module is None or node.module.split(".")[0] != "loopwright":
                continue
            target = node.module.split(".")
        else:
            up = package[: len(package) - (node.level - 1)]
            target = up + (node.module.split(".") if node.module else [])
        home = _module_of(target)
        assert home is not None, f"{path}:{node.lineno}: cannot find {'.'.join(target)}"
        for alias in node.names:
            name = alias.name
            if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
                continue
            if _module_of([*target, name]) is not None:
                continue  # a submodule, imported as one
            found.append((_dotted(home), name, node.lineno))
    return found


def _all_private_imports() -> dict[tuple[str, str], list[str]]:
    seen: dict[tuple[str, str], list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        for home, name, line in _private_imports(path):
            seen.setdefault((home, name), []).append(f"{path.relative_to(SRC)}:{line}")
    return seen


def test_no_module_imports_another_modules_underscore_name() -> None:
    seen = _all_private_imports()
    assert ("_gates", "effect_for") not in seen  # (public names are not counted)
    new = {
        f"{home}.{name}": where
        for (home, name), where in seen.items()
        if (home, name) not in NOT_YET
    }
    assert not new, (
        "a name imported from another module is a public name of it (drop its underscore "
        f"there and in every user): {new}"
    )


def test_the_list_of_those_not_renamed_yet_only_shrinks() -> None:
    gone = sorted(NOT_YET - set(_all_private_imports()))
    assert not gone, f"no longer imported across modules: remove them from NOT_YET: {gone}"


def test_the_check_sees_an_underscore_name_imported_from_a_sibling() -> None:
    """The reader itself: a relative, an absolute and a function-local import of an underscore
    name are each found; a public name, a submodule, a dunder name and ``__future__`` not."""
    text = """from __future__ import annotations
from . import _decide
from ._gates import Gates, _x
from loopwright._gates import __all__, _y
def f():
    from ._gates import _z
"""
    got = sorted((h, n) for h, n, _ in _private_imports(SRC / "_cycle.py", text))
    assert got == [("_gates", "_x"), ("_gates", "_y"), ("_gates", "_z")]
    got = [
        (h, n) for h, n, _ in _private_imports(SRC / "web" / "_app.py", "from .._people import _q")
    ]
    assert got == [("_people", "_q")]
