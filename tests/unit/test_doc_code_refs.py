"""Every citation of code in the docs names code that is there (docs56): docs/requirements.md
cited ``_decide.py:385`` for the success rule after the module had moved on, and dozens more
line numbers had gone stale, so a reader following one landed on the wrong code.

Read with ``ast``, nothing imported. In each backticked span of docs/*.md, the README, the
examples' and bench's READMEs (code fences left out):

- a name the doc gives as a former one (``was `cli/_damage.py```, ```X` moved to `Y```) is
  left alone; everything else must be there:
- no line-number citation: ``path.py:123``, nor the ``:123`` that continues one;
- each ``path.py`` (or glob) exists, where the doc means it: beside the doc, from the repo root,
  under ``src/loopwright/``, ``bench/``, ``tests/`` (and its unit, integration, e2e, support
  folders) or an example;
- ``path.py: name`` and ``path.py:name`` (a spec's reference) name something ``path.py``
  defines, ``Class.method`` included; ``tests/…py::test_x`` names a test there;
- a bare ``_name`` (``_engine``, ``verifiers/_run_tests``, ``_lift_check``) is a module or a
  name the code of the repo defines (src, tests, bench, examples);
- ``_module.name``, ``sub._module.name``, ``loopwright.module.name`` and ``lw.NAME`` name
  something that module (for ``lw``, the package) defines or imports.

``Class.name`` of a class the package defines (``Runtime.edit``) names something that class or
one of its bases defines (a method, a field, what a method sets on ``self``).

And ``_engine``'s docstring, and ``_host``'s, name the module of every mixin ``Runtime`` is built
from (``_engine``'s had left out ``_fork``, ``_cancel_rollback``, ``_pause`` and ``_settle``)."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "loopwright"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "examples").glob("*/README.md")), ROOT / "bench" / "README.md"]  # fmt: skip
FOLDERS = [ROOT, SRC, ROOT / "bench", ROOT / "tests",
           *(ROOT / "tests" / d for d in ("unit", "integration", "e2e", "support")),
           *sorted(p for p in (ROOT / "examples").iterdir() if p.is_dir())]  # fmt: skip
# names that read as our files but are not: the standard library's, a placeholder, a file the
# reader writes (the README's, scale.md's spec folder) or a benchmark writes (bench's work.py)
NOT_OURS = {"file.py", "random.py", "json.py", "code.py", "helpers.py", "fix_invoice.py", "work.py"}
# names the docs mention to say the package has none (decisions.md's "not a `Runtime.runs`"),
# or that are no name (`_frac`: a metric's name's other ending; `_pt_`: a redaction needle)
NOT_THERE = {"Runtime.runs", "_frac", "_pt_"}

SPAN = re.compile(r"`([^`\n]+)`")
FORMER_BEFORE = re.compile(r"\b(?:was|were|formerly)\s+$")
FORMER_AFTER = re.compile(r"\s*(?:\([^)]*\)\s*)?(?:moved|was moved|was renamed|became) to\b")
LINE_CITE = re.compile(r"(?:\.py|^):\d")  # `_decide.py:385`, and `:240` after one
PATH = re.compile(r"(?<![\w./*-])([\w./*-]*\w\.py)(?:(?:::|:\s*)([A-Za-z_][\w.]*(?:::[\w]+)?))?")
BARE = re.compile(r"(?:\w+/)*_[a-z]\w*")  # `_engine`, `verifiers/_run_tests`, `_lift_check`
CLASS_DOT = re.compile(r"^([A-Z]\w*)\.([A-Za-z_]\w*)(?:\(\))?$")
DOTTED = re.compile(r"^((?:loopwright|lw)(?:\.\w+)+|(?:\w+\.)*_\w+\.[A-Za-z_]\w*(?:\.\w+)?)\b")


def _spans(text: str) -> list[tuple[int, str]]:
    """Each backticked span with its line, code fences left out, and those a doc gives as a
    former name (``was `cli/_damage.py```, ```cli/_hint_store` (…) moved to `_hints```)."""
    out: list[tuple[int, str]] = []
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out += [
                (n, m.group(1))
                for m in SPAN.finditer(line)
                if not FORMER_BEFORE.search(line, 0, m.start())
                and not FORMER_AFTER.match(line, m.end())
            ]
    return out


def _where(page: Path, path: str) -> list[Path]:
    """The files ``path`` names as ``page`` means it (a glob: all it matches)."""
    for folder in [page.parent, *FOLDERS]:
        hits = sorted(folder.glob(path)) if "*" in path else [folder / path]
        hits = [h for h in hits if h.is_file()]
        if hits:
            return hits
    return []


@functools.cache
def _defined(path: Path) -> dict[str, set[str]]:
    """Top-level names of a module (``""``) and each class's own names (by class name)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: dict[str, set[str]] = {"": set()}

    def into(body: list[ast.stmt], key: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names[key].add(node.name)
                if key and not isinstance(node, ast.ClassDef):  # what a method sets on self
                    names[key] |= {
                        t.attr
                        for n in ast.walk(node)
                        if isinstance(n, (ast.Assign, ast.AnnAssign))
                        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                        if isinstance(t, ast.Attribute) and ast.unparse(t.value) == "self"
                    }
                if isinstance(node, ast.ClassDef) and not key:
                    names[node.name] = set()
                    into(node.body, node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names[key] |= {t.id for t in targets if isinstance(t, ast.Name)}
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names[key] |= {(a.asname or a.name).split(".")[0] for a in node.names}
            elif isinstance(node, (ast.If, ast.Try)):
                into(node.body, key)

    into(tree.body, "")
    return names


def _defines(path: Path, symbol: str) -> bool:
    """Whether ``path`` defines ``symbol``: a top-level name, ``Class.name``, a method's name
    alone (``_pause._stop_asked``), anything where the module has a ``__getattr__``."""
    head, _, rest = symbol.partition(".")
    names = _defined(path)
    if "__getattr__" in names[""] or head == "X":  # a name made on demand; a placeholder
        return True
    if head not in names[""]:
        return not rest and any(head in own for cls, own in names.items() if cls)
    return not rest or rest.split(".")[0] in names.get(head, set())


def _module(dotted: str) -> tuple[Path | None, list[str]]:
    """The module a dotted name starts with, and the names after it."""
    parts = dotted.split(".")
    if parts[-1] == "py":  # a file name, checked as one
        return None, parts
    if parts[0] == "lw":  # the package's own names
        return SRC / "__init__.py", parts[1:]
    if parts[0] == "loopwright":  # a module's name; otherwise a span's or a table's
        parts = parts[1:]
        if not ((SRC / parts[0]).is_dir() or (SRC / f"{parts[0]}.py").is_file()):
            return None, parts
    base, i = SRC, 0
    while i < len(parts) and (base / parts[i]).is_dir():
        base, i = base / parts[i], i + 1
    if i < len(parts) and (base / f"{parts[i]}.py").is_file():
        return base / f"{parts[i]}.py", parts[i + 1 :]
    if (base / "__init__.py").is_file() and not (i == 0 and parts and parts[0].startswith("_")):
        return base / "__init__.py", parts[i:]
    return None, parts


@functools.cache
def _classes() -> dict[str, list[tuple[Path, list[str]]]]:
    """Each class of the package by name: the modules defining one, with its bases' names."""
    out: dict[str, list[tuple[Path, list[str]]]] = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b).split("[")[0].split(".")[-1] for b in node.bases]
                out.setdefault(node.name, []).append((path, bases))
    return out


def _has(cls: str, name: str, seen: frozenset[str] = frozenset()) -> bool:
    """Whether a class of the package (one of that name) or a base of it defines ``name``."""
    return any(
        name in _defined(path).get(cls, set())
        or any(_has(b, name, seen | {cls}) for b in bases if b in _classes() and b not in seen)
        for path, bases in _classes().get(cls, [])
    )


@functools.cache
def _all_names() -> frozenset[str]:
    """Every module (its stem, and its path under the package) and every name the code of the
    repo defines: a def, a class, a name assigned (not an attribute: ``self._compiled`` kept
    decisions.md's ``_compiled`` looking alive after the function became ``compiled_pattern``)."""
    out: set[str] = set()
    for folder in (SRC, ROOT / "tests", ROOT / "bench", ROOT / "examples"):
        for path in folder.rglob("*.py"):
            out |= {path.stem, path.relative_to(folder).with_suffix("").as_posix()}
            for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    out.add(n.name)
                elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                    out.add(n.id)
    return frozenset(out)


def _problems(page: Path, text: str | None = None) -> list[str]:
    """What is wrong with the citations of ``page`` (of ``text``, read as if it were there)."""
    out: list[str] = []
    for n, span in _spans(page.read_text(encoding="utf-8") if text is None else text):
        where = f"{page.relative_to(ROOT)}:{n}: `{span}`"
        if LINE_CITE.search(span):
            out.append(f"{where}: a line number goes stale; cite the symbol")
            continue
        for m in PATH.finditer(span):
            path, symbol = m.groups()
            if path in NOT_OURS:
                continue
            files = _where(page, path)
            if not files:
                out.append(f"{where}: no file {path}")
            elif symbol and not any(_defines(f, symbol.replace("::", ".")) for f in files):
                out.append(f"{where}: {path} defines no {symbol.replace('::', '.')}")
        if BARE.fullmatch(span) and span not in NOT_THERE and span not in _all_names():
            out.append(f"{where}: no module or name {span} in the code")
        c = CLASS_DOT.match(span)
        if c and c.group(1) in _classes() and span not in NOT_THERE and not _has(*c.groups()):
            out.append(f"{where}: no class {c.group(1)} of the package defines {c.group(2)}")
        d = DOTTED.match(span)
        if d and not span.startswith(("loopwright.trace/", "loopwright.run-trace/")):
            module, names = _module(d.group(1))
            if module is not None and names and not _defines(module, ".".join(names[:2])):
                out.append(f"{where}: {module.relative_to(ROOT)} defines no {'.'.join(names)}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_citation_names_code_that_is_there(page: Path) -> None:
    problems = _problems(page)
    assert not problems, f"{len(problems)} stale citation(s):\n" + "\n".join(problems)


def test_the_check_catches_what_goes_stale() -> None:
    text = (
        "`_decide.py:385` `success`; `:240`; `_no_such.py`; `_decide.py: no_such_rule`;"
        " `_decide.no_such`; `tests/unit/test_doc_code_refs.py::test_gone`; `_engine.py: Runtime`;"
        " `_engine.Runtime.run`; `lw.STOP_REASONS`; `store/_sql*.py`; `Runtime.edit`; `Runtime.no_such`;"
        " `verifiers/_run_tests`; `_lift_check`; `_compiled`; (was `_gone.py`); `_gone` (a) moved to"
    )
    problems = _problems(ROOT / "docs" / "probe.md", text)
    assert [p.rsplit("`: ", 1)[1] for p in problems] == [
        "a line number goes stale; cite the symbol",
        "a line number goes stale; cite the symbol",
        "no file _no_such.py",
        "_decide.py defines no no_such_rule",
        "src/loopwright/_decide.py defines no no_such",
        "tests/unit/test_doc_code_refs.py defines no test_gone",
        "no class Runtime of the package defines no_such",
        "no module or name _compiled in the code",
    ]


@pytest.mark.parametrize("module", ["_engine.py", "_host.py"])
def test_the_docstrings_name_every_mixin_runtime_is_built_from(module: str) -> None:
    tree = ast.parse((SRC / "_engine.py").read_text(encoding="utf-8"))
    doc = ast.get_docstring(ast.parse((SRC / module).read_text(encoding="utf-8"))) or ""
    source = {
        a.asname or a.name: node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for a in node.names
    }
    runtime = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Runtime")
    bases = [b.id for b in runtime.bases if isinstance(b, ast.Name)]
    assert len(bases) > 10
    missing = [f"{b} ({source[b]})" for b in bases if f"``{source[b]}``" not in doc]
    assert not missing, f"{module}'s docstring leaves out the mixins {missing}"
