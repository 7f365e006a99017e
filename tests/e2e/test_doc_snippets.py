"""The documentation runs: every ```python block of README.md, docs/*.md and the examples'
READMEs is executed, so a snippet cannot rot unnoticed.

The blocks of one file run in order in one namespace (a page reads top to bottom, and a later
block may use what an earlier one defined), in a process of their own whose working directory is
a scratch copy of the checkout's ``examples/`` and ``tests/data/`` (the docs are written to be
run from the repository root) with no store yet: the default store,
``./.loopwright/loopwright.db``, is a fresh file there. That process (and ``loopwright demo``'s
before a page that needs it) is forked from one that imported loopwright once
(tests/forkserver.py, ``run_child``: a fresh interpreter's start and imports cost about 0.3 s
of CPU a page); what a page runs, its exit code, output and files are as a ``python``
subprocess's. ``OPENAI_BASE_URL`` points at a ``loopwright.testing.FakeOpenAI`` on
loopback, so nothing a snippet does can reach a real model.

Markers, written as an HTML comment on the line before a block (rare on purpose — each one is
listed in ``NO_RUN`` below, so adding one means changing this test):

* ``<!-- snippet: no-run (why) -->`` — not executed; the block is counted and listed.
* ``<!-- snippet: after-demo -->`` — the file's blocks run after ``loopwright demo`` filled the
  default store, as in the README's quick start.

Also checked: every ```python block that parses passes ``mypy --strict``; a page reads no
submodule (``lw.store``) it does not import, which the forked process has bound and a fresh one
not; every ```toml block parses; every ``loopwright …`` command in a console or bash
block, or inline in prose, names subcommands that exist (``--help`` exits 0) and options they take; the tables of docs/concepts.md list
exactly the package's stop reasons, metrics and feedback signals.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from forkserver import run_child

import loopwright as lw
from loopwright.testing import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "examples").glob("*/README.md")),
]
# A bound only a hang reaches, however loaded the machine, for one page's blocks together (and
# the demo before them): they are CPU work, fit-stop's cross-validation the most of it. 300 s,
# the suite's per-test limit, was reached by docs/fit-stop.md beside other CPU-bound jobs.
TIMEOUT_S = 1800

#: Every block that is deliberately not executed: (page, reason in its marker).
NO_RUN = {
    ("docs/models.md", "a signature, not code"),
    ("docs/scale.md", "needs a Ray cluster and PostgreSQL"),
}

_FENCE = re.compile(r"^```(\w[\w-]*)?(.*)$")
_MARKER = re.compile(r"^<!--\s*snippet:\s*([\w-]+)\s*(?:\((.*)\))?\s*-->$")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int  # of the first code line, 1-based
    lang: str
    code: str
    marker: str | None
    reason: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(path: Path) -> Iterator[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    page = str(path.relative_to(ROOT))
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None or not m.group(1):
            i += 1
            continue
        lang, info = m.group(1), m.group(2).strip()
        prev = next((x.strip() for x in reversed(lines[:i]) if x.strip()), "")
        mk = _MARKER.match(prev)
        marker, reason = (mk.group(1), mk.group(2) or "") if mk else (None, "")
        if "no-run" in info.split():
            marker = "no-run"
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        yield Block(page, i + 2, lang, "\n".join(lines[i + 1 : end]) + "\n", marker, reason)
        i = end + 1


ALL = [b for p in PAGES for b in blocks(p)]
PYTHON = [b for b in ALL if b.lang == "python"]
RUNNABLE_PAGES = sorted({b.page for b in PYTHON if b.marker != "no-run"})

# (run as ``python RUNNER BLOCKS``: ``sys.path[0]`` is the working folder, as ``python -c`` has it)
_RUNNER = r"""
import json, sys, traceback
sys.path[0] = ""
ns = {"__name__": "__main__"}
for b in json.load(open(sys.argv[1], encoding="utf-8")):
    try:
        # padded so that a traceback names the line of the markdown file
        exec(compile("\n" * (b["line"] - 1) + b["code"], b["page"], "exec"), ns)
    except BaseException:
        traceback.print_exc()
        print(f"SNIPPET FAILED: {b['page']}:{b['line']}", flush=True)
        sys.exit(1)
    print(f"SNIPPET OK: {b['page']}:{b['line']}", flush=True)
"""


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def _env(fake: FakeOpenAI) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPWRIGHT_", "OPENAI_"))}
    env.update(OPENAI_BASE_URL=fake.base_url, OPENAI_API_KEY="sk-fake", MPLBACKEND="Agg")
    return env


def _checkout(tmp: Path) -> Path:
    """A scratch directory shaped like the repository root, for paths the docs use."""
    work = tmp / "work"
    skip = shutil.ignore_patterns("__pycache__", ".loopwright")
    shutil.copytree(ROOT / "examples", work / "examples", ignore=skip)
    shutil.copytree(ROOT / "tests" / "data", work / "tests" / "data", ignore=skip)
    return work


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.mark.timeout(2 * TIMEOUT_S)  # the demo and the blocks, each bounded by TIMEOUT_S
@pytest.mark.parametrize("page", RUNNABLE_PAGES)
def test_python_snippets_run(page: str, tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    todo = [b for b in PYTHON if b.page == page and b.marker != "no-run"]
    work = _checkout(tmp_path)
    env = _env(fake_openai)
    exe = Path(sys.executable).with_name("loopwright")
    if any(b.marker == "after-demo" for b in todo):  # the console script, as `python SCRIPT`
        demo = run_child([sys.executable, exe, "demo"], env, TIMEOUT_S, cwd=work)
        assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    before = _files(work)
    spec = tmp_path / "blocks.json"
    spec.write_text(json.dumps([{"page": b.page, "line": b.line, "code": b.code} for b in todo]))
    runner = tmp_path / "runner.py"
    runner.write_text(_RUNNER, encoding="utf-8")
    r = run_child([sys.executable, runner, spec], env, TIMEOUT_S, cwd=work)
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    ran = re.findall(r"^SNIPPET OK: (\S+)$", r.stdout, re.M)
    assert ran == [b.where for b in todo]
    # documented outputs go under .loopwright/ (or a temp dir), never beside the sources
    strays = sorted(f for f in _files(work) - before if not f.startswith(".loopwright/"))
    assert not strays, f"snippets of {page} wrote into the tree: {strays}"


def test_no_run_snippets_are_marked_and_few() -> None:
    skipped = [b for b in PYTHON if b.marker == "no-run"]
    listed = {(b.page, b.reason) for b in skipped}
    print("python snippets not executed:", *(f"{b.where} ({b.reason})" for b in skipped))
    assert listed == NO_RUN, [b.where for b in skipped]
    assert all(b.reason for b in skipped), "say why a snippet does not run"
    assert len(PYTHON) - len(skipped) >= 8  # the pages' examples really are executed
    unknown = {b.marker for b in ALL} - {None, "no-run", "after-demo"}
    assert not unknown, f"unknown snippet markers {unknown}"


#: A page's later block may use an earlier one's names: those are not checked alone (running
#: the page is). The first line of each snippet's module, so a module line L is block line L-1.
NAMES_FROM_EARLIER = "# mypy: disable-error-code=name-defined"


@pytest.mark.timeout(TIMEOUT_S)  # mypy reads the whole package in a cold cache
def test_python_snippets_pass_mypy_strict(tmp_path: Path) -> None:
    """Readers type-check what they paste (`mypy --strict`, as the package is): every python
    block that parses, each as its own module. A bare ``headers: dict`` and an
    untyped helper had been written in blocks that ran."""
    pytest.importorskip("mypy")
    import ast

    files: list[Path] = []
    blocks_of: dict[str, Block] = {}
    for n, b in enumerate(PYTHON):
        try:
            ast.parse(b.code)
        except SyntaxError:
            assert b.marker == "no-run", f"{b.where}: does not parse"
            continue  # a signature shown as such
        f = tmp_path / f"snippet_{n:03d}.py"
        f.write_text(f"{NAMES_FROM_EARLIER}\n{b.code}", encoding="utf-8")
        files.append(f)
        blocks_of[f.name] = b
    assert len(files) >= 10
    # The package's own settings (pyproject.toml) and cache: `make test` has just type-checked
    # the package with them, so only the snippets are read here.
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
         "--no-error-summary", "--hide-error-context", *map(str, files)],
        check=False,
        cwd=ROOT,
        env={**os.environ, "MYPYPATH": str(ROOT / "src")},  # this checkout's package
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )  # fmt: skip

    def at(m: re.Match[str]) -> str:  # the markdown file's line (the module's first is a comment)
        page, line = blocks_of[m[1]].page, blocks_of[m[1]].line
        return f"{page}:{line + int(m[2]) - 2}"

    errors = re.sub(r"\S*(snippet_\d+\.py):(\d+)", at, r.stdout)
    assert r.returncode == 0, errors + r.stderr[-2000:]


def test_toml_snippets_parse() -> None:
    toml = [b for b in ALL if b.lang == "toml"]
    assert toml
    for b in toml:
        try:
            tomllib.loads(b.code)
        except tomllib.TOMLDecodeError as exc:
            pytest.fail(f"{b.where}: {exc}")


def _command_lines() -> Iterator[tuple[str, list[str]]]:
    """Each ``loopwright`` command of a console/bash block or inline in prose and tables (the
    README's command table): where it is, and its words after ``loopwright``."""
    for b in ALL:
        if b.lang not in ("console", "bash", "sh", "shell"):
            continue
        text = re.sub(r"\\\n", " ", b.code)
        for n, raw in enumerate(text.splitlines()):
            line = raw.strip().removeprefix("$ ")
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                continue
            if "loopwright" not in words or any(w in ("|", "&&", ";") for w in words):
                continue
            yield f"{b.page}:{b.line + n}", words[words.index("loopwright") + 1 :]
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r"`loopwright ([^`]+)`", text):
            where = f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
            yield where, m.group(1).split()


def _commands() -> dict[tuple[str, ...], str]:
    """``loopwright`` commands: the words before the first option, with where each was first
    seen."""
    found: dict[tuple[str, ...], str] = {}
    for where, words in _command_lines():
        found.setdefault(_head(words), where)
    return found


def _options() -> dict[tuple[tuple[str, ...], str], str]:
    """``(command, --option)`` as the pages write them, with where each was first seen; for
    ``export eval-cases\\|preference-pairs [--out F]`` the command is its first alternative."""
    found: dict[tuple[tuple[str, ...], str], str] = {}
    for where, words in _command_lines():
        head = _head(words)
        rest = words[len(head) :]
        if rest and not rest[0].startswith(("-", "[", "<", "…")) and "|" in rest[0]:
            head = (*head, rest[0].split("\\|")[0].split("|")[0])
        for w in rest:
            for opt in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", w):
                found.setdefault((head, opt), where)
    return found


def _head(words: list[str]) -> tuple[str, ...]:
    """The words before the first option, placeholder list or alternative (``a\\|b``)."""
    stop = ("-", "[", "<", "…")
    end = next(
        (i for i, w in enumerate(words) if w.startswith(stop) or "|" in w or "\\" in w), len(words)
    )
    return tuple(words[:end])


def test_documented_commands_exist(capsys: pytest.CaptureFixture[str]) -> None:
    from loopwright.cli import main

    commands = _commands()
    assert len(commands) >= 30
    bad = []
    for head, where in sorted(commands.items()):
        code = main([*head, "--help"])  # --help is eager: placeholders such as RUN are fine
        out = capsys.readouterr()
        if code != 0:
            bad.append(f"{where}: loopwright {' '.join(head)} --help -> {code}: {out.err[-300:]}")
    assert not bad, "\n".join(bad)


def test_documented_options_exist(capsys: pytest.CaptureFixture[str]) -> None:
    """Every ``--option`` a page writes after a command is one that command takes (its
    ``--help`` names it): a renamed or removed option otherwise stays in the docs, and a
    reader's copied command fails with "No such option"."""
    from loopwright.cli import main

    options = _options()
    assert len(options) >= 60
    helps: dict[tuple[str, ...], str] = {}
    bad = []
    for (head, opt), where in sorted(options.items()):
        if head not in helps:
            main([*head, "--help"])
            helps[head] = capsys.readouterr().out
        if not re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", helps[head]):
            bad.append(f"{where}: loopwright {' '.join(head)} has no option {opt}")
    assert not bad, "\n".join(bad)


def _table(page: str, heading: str) -> list[list[str]]:
    """The rows (cells stripped of backticks) of the first table after ``heading``."""
    text = (ROOT / page).read_text(encoding="utf-8")
    rest = text[text.index(heading) :].splitlines()
    start = next(i for i, x in enumerate(rest) if x.startswith("|"))
    rows = []
    for x in rest[start + 2 :]:
        if not x.startswith("|"):
            break
        rows.append([c.strip().strip("`") for c in x.strip("|").split("|")])
    return rows


def test_concepts_match_the_package() -> None:
    from loopwright._contract import status_for

    stops = _table("docs/concepts.md", "### The stop reasons")
    assert [r[0] for r in stops] == list(lw.STOP_REASONS)
    assert all(r[1] == status_for(r[0]) for r in stops), stops
    metrics = _table("docs/concepts.md", "## The outcome metrics")
    assert [r[0] for r in metrics] == list(lw.METRIC_NAMES)
    signals = _table("docs/concepts.md", "## The feedback hierarchy")
    assert {r[0]: float(r[1]) for r in signals} == dict(lw.DEFAULT_STRENGTH)


def test_the_metrics_page_defines_every_metric() -> None:
    """docs/metrics.md has one definition per metric, in the package's order, and its JSON
    example shows each of them and each stop-reason group: concepts.md's table was checked,
    this page was not, and a renamed or added metric could leave it behind."""
    from loopwright._metrics import STOPPED_BY

    text = (ROOT / "docs/metrics.md").read_text(encoding="utf-8")
    defined = re.findall(r"^### `(\w+)`", text, re.M)
    assert defined == [*lw.METRIC_NAMES, "human_review_cost_per_accepted_usd"]
    [example] = [b for b in ALL if b.page == "docs/metrics.md" and b.lang == "json"]
    shown = json.loads(example.code)
    assert [k for k in shown if k in lw.METRIC_NAMES] == list(lw.METRIC_NAMES)
    assert list(shown["stopped_by"]) == list(STOPPED_BY)
    groups = _table("docs/metrics.md", "`stopped_by` groups")
    assert [r[0] for r in groups] == list(STOPPED_BY)


def _submodules_read(code: str) -> tuple[set[tuple[str, str, int]], set[str]]:
    """``(package, name, line)`` for each ``alias.name`` read where ``alias`` is a package bound
    by ``import package [as alias]``, and the dotted names the code imports itself."""
    import ast

    tree = ast.parse(code)
    bound: dict[str, str] = {}
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                imported.add(a.name)
                bound[a.asname or a.name.split(".")[0]] = (
                    a.name if a.asname else a.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            imported.update([node.module, *(f"{node.module}.{a.name}" for a in node.names)])
    read = {
        (bound[n.value.id], n.attr, n.lineno)
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in bound
    }
    return read, imported


def test_snippets_import_the_submodules_they_read(tmp_path: Path) -> None:
    """The pages' blocks run forked from a process that had imported loopwright's engine and
    stores (tests/forkserver.py), where ``lw.store`` is bound; in a reader's fresh interpreter
    ``import loopwright as lw`` leaves it unbound (``AttributeError``) until something imports
    ``loopwright.store``. So the submodules a page reads as ``alias.name`` it imports itself:
    each ``package.name`` that is a module, that a fresh ``import package`` leaves unbound, and
    that the page (or the block run on its own) does not import, is listed. One fresh
    interpreter answers for every such name."""
    units = [
        [b for b in PYTHON if b.page == page and b.marker != "no-run"] for page in RUNNABLE_PAGES
    ]
    units += [[b] for b in PYTHON if b.marker != "no-run"]  # a block pasted alone
    found: dict[tuple[str, str], list[str]] = {}
    for unit in units:
        imported: set[str] = set()
        reads = []
        for b in unit:
            read, imp = _submodules_read(b.code)
            imported |= imp
            reads += [(pkg, name, f"{b.page}:{b.line + line - 1}") for pkg, name, line in read]
        for pkg, name, where in reads:
            if f"{pkg}.{name}" not in imported:
                found.setdefault((pkg, name), []).append(where)
    assert found  # (the check reads something: `lw.Loop`, `asyncio.run`...)
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import importlib, importlib.util, json, sys\n"
        "pairs = json.loads(sys.argv[1])\n"
        "bound = {}\n"  # each package's names as its import alone leaves them, before any read
        "for pkg, _ in pairs:\n"
        "    try:\n"
        "        bound.setdefault(pkg, set(vars(importlib.import_module(pkg))))\n"
        "    except ImportError:\n"  # (a page's own module: running the page judges it)
        "        bound[pkg] = None\n"
        "bad = []\n"
        "for pkg, name in pairs:\n"
        "    mod = sys.modules.get(pkg)\n"
        "    if bound[pkg] is None or name in bound[pkg] or getattr(mod, '__path__', None) is None:\n"
        "        continue\n"
        "    if importlib.util.find_spec(f'{pkg}.{name}') is not None:\n"
        "        bad.append([pkg, name])\n"
        "print(json.dumps(bad))\n"
    )
    r = subprocess.run(
        [sys.executable, str(probe), json.dumps(sorted(found))],
        check=False, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    unbound = [
        f"{found[(pkg, name)][0]}: {pkg}.{name} read, not imported"
        for pkg, name in json.loads(r.stdout)
    ]
    assert not unbound, "\n".join(unbound)


def test_the_fake_openai_example_runs_on_its_own(tmp_path: Path) -> None:
    """docs/models.md's FakeOpenAI example reads as a whole script (it imports everything
    itself), so a reader pastes it alone: it used `spelling` from the page's first block."""
    [block] = [
        b
        for b in PYTHON
        if b.page == "docs/models.md"
        and "from loopwright.testing import FakeOpenAI, fail" in b.code
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPWRIGHT_", "OPENAI_"))}
    script = tmp_path / "pasted.py"  # as a reader saves it, run as `python pasted.py`
    script.write_text(block.code, encoding="utf-8")
    r = run_child([sys.executable, script], env, 120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]


def test_the_replay_table_is_what_the_command_prints(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/replay.md's table is the output of the command above it: it still showed the figures
    from before the no-progress rule measured from the last material improvement (140
    accepted, 272 cycles, $2.23) when the command printed 137, 257, $1.89."""
    from loopwright._money_text import usd
    from loopwright.cli import main

    [block] = [b for b in ALL if b.page == "docs/replay.md" and b.lang == "console"]
    words = shlex.split(re.sub(r"\\\n", " ", block.code).strip().removeprefix("$ "))
    monkeypatch.chdir(ROOT)
    assert main([*words[1:], "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    columns = [out["recorded"], *out["contracts"]]
    rows = {r[0]: r[1:] for r in _table("docs/replay.md", "# What-if replay")}
    base = out["recorded"]["cost_usd"]
    for shown, fig in zip(zip(*rows.values(), strict=True), columns, strict=True):
        doc = dict(zip(rows, shown, strict=True))
        lost = f" ({fig['accepted_lost']} lost)" if fig["accepted_lost"] else ""
        assert doc["accepted"] == f"{fig['accepted']}{lost}"
        assert doc["held-out passed"] == str(fig["held_out_passed"])
        assert doc["false successes"] == str(fig["false_successes"])
        assert doc["cycles (attempts)"] == str(fig["cycles"])
        saved = 1 - fig["cost_usd"] / base
        # (the figures as the command prints them: one form for dollars, polish54)
        spend = usd(fig["cost_usd"]) + (f" ({saved:.1%} saved)" if saved else "")
        assert doc["spend"].replace(" %", "%") == spend
        assert doc["cost_per_accepted_usd"] == usd(fig["cost_per_accepted_usd"])
        after = usd(fig["spend_after_last_improvement_usd"])
        frac = f"({fig['spend_after_last_improvement_frac']:.1%})"
        assert doc["spend_after_last_improvement"].replace(" %", "%") == f"{after} {frac}"
        reasons = dict(x.rsplit(" ", 1) for x in doc["stop reasons"].split(", "))
        assert {k: int(v) for k, v in reasons.items()} == fig["stop_reasons"]


def test_the_fixed_rules_of_the_fit_stop_example_are_what_replay_gives() -> None:
    """docs/fit-stop.md prints the main case's output; its fixed-rule rows ("stop after w cycles
    without fewer failing visible tests", all runs) are cheap to recompute, and they had gone
    stale (w=5 kept 295/297, now 294) when no-progress began to count from the last material
    improvement. The fit itself takes too long to rerun here."""
    from loopwright.replay import load_source, simulate

    [block] = [b for b in ALL if b.page == "docs/fit-stop.md" and "w=5 (best)" in b.code]
    row = re.compile(
        r"│ w=(\d)\D.*?│ all runs\s*│ ([\d.]+)% \((\d+)/(\d+)\) │\s*([\d.]+)% │\s*([\d.]+)%"
    )
    shown = {int(m[0]): m[1:] for m in row.findall(block.code)}
    assert sorted(shown) == [1, 2, 3, 4, 5]
    sources = re.findall(r"tests/data/ldb/\S+\.jsonl", block.code.splitlines()[0] + block.code)
    traces = [t for s in dict.fromkeys(sources) for t in load_source(str(ROOT / s))]
    assert len(traces) == 328
    cap = max(len(t.cycles) for t in traces)
    reference = [simulate(t, lw.Contract(success=lw.Success(min_score=1.0, required=("visible_tests",)), budget=lw.Budget(max_cycles=cap))) for t in traces]  # fmt: skip
    ref_held = sum(bool(o.held_out_passed) for o in reference)
    ref_cycles = sum(len(t.cycles) for t in traces)
    ref_cost = sum(o.cost_usd for o in reference)
    for w, (kept, held, of, saved, spend) in shown.items():
        contract = lw.Contract(
            success=lw.Success(min_score=1.0, required=("visible_tests",)),
            no_progress=lw.NoProgress(cycles=w, min_delta=0.0),
            budget=lw.Budget(max_cycles=cap),
        )
        outs = [simulate(t, contract) for t in traces]
        n = sum(bool(o.held_out_passed) for o in outs)
        assert (int(held), int(of)) == (n, ref_held), f"w={w}"
        assert kept == f"{n / ref_held:.1%}"[:-1]
        assert saved == f"{1 - sum(o.cycles for o in outs) / ref_cycles:.1%}"[:-1], f"w={w}"
        assert spend == f"{1 - sum(o.cost_usd for o in outs) / ref_cost:.1%}"[:-1], f"w={w}"


def test_the_metrics_json_example_is_the_demos(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/metrics.md says its JSON is "the demo workload right after `loopwright demo`": it
    still showed 25 runs and $2.089 after the demo grew to 26 invoices ($2.129). Every figure
    it shows is compared, rounded as it is written, but for the times (the machine's)."""
    from loopwright.cli import main

    store = str(tmp_path / "demo.db")
    assert main(["demo", "--store", store]) == 0
    capsys.readouterr()
    assert main(["metrics", "--store", store, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    [example] = [b for b in ALL if b.page == "docs/metrics.md" and b.lang == "json"]
    shown = json.loads(example.code)
    bad = []
    for key, value in shown.items():
        if key in ("selection", "time_to_accepted_s", "approval_wait_s", "undefined"):
            continue
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if k != "..."}
            mine = {k: got[key][k] for k in value}
            if key == "basis":
                mine = {k: list(v) for k, v in mine.items()}
        elif isinstance(value, float) and got[key] is not None:
            places = len(repr(value).split(".")[1])
            mine = round(got[key], places)
        else:
            mine = got[key]
        if mine != value:
            bad.append(f"{key}: the page shows {value!r}, the demo gives {mine!r}")
    assert got["selection"] == shown["selection"]
    assert set(got["undefined"]) == set(shown["undefined"])
    assert not bad, "\n".join(bad)
