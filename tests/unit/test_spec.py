"""Loop specs: every problem is a SpecError naming the field; refs resolve beside the spec."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

import loopwright as lw

CODE = """
import loopwright as lw

def propose(ctx):
    return lw.Proposal()

def check(state, proposal):
    return lw.Verdict(passed=True)

def risky(state, proposal, verdicts):
    return None

def make(scale=1):
    def actor(ctx):
        return lw.Proposal(note=str(scale))
    return actor

NOT_CALLABLE = 3
"""

GOOD = """
name = "demo"
project = "p"

[actor]
ref = "code.py:propose"
timeout_s = 5

[[verifiers]]
ref = "code.py:check"

[[verifiers]]
name = "audit"
ref = "code.py:check"
held_out = true

[contract.budget]
max_cycles = 3

[[contract.risk]]
name = "r"
check = "code.py:risky"
"""


def _spec(tmp_path: Path, text: str, *, code: str = CODE) -> Path:
    d = tmp_path / "spec"
    d.mkdir(exist_ok=True)
    (d / "code.py").write_text(code)
    p = d / "loop.toml"
    p.write_text(textwrap.dedent(text))
    return p


def _err(path: Path) -> lw.SpecError:
    with pytest.raises(lw.SpecError) as info:
        lw.load_spec(path)
    return info.value


def test_good_spec_resolves_refs_relative_to_the_spec_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    spec = _spec(tmp_path, GOOD)
    monkeypatch.chdir(elsewhere)  # refs must not depend on the working directory
    loop = lw.load_spec(spec)
    assert loop.name == "demo"
    assert loop.project == "p"
    assert loop.actor_timeout_s == 5
    assert [c.name for c in loop.verifiers] == ["check", "audit"]
    assert [c.held_out for c in loop.verifiers] == [False, True]
    assert loop.contract.budget.max_cycles == 3
    assert callable(loop.contract.risk[0].check)
    assert loop.spec_ref == str(spec.resolve())
    assert loop.version


def test_factory_with_options(tmp_path: Path) -> None:
    spec = _spec(
        tmp_path,
        GOOD.replace("timeout_s = 5", "options = { scale = 7 }").replace(
            "code.py:propose", "code.py:make"
        ),
    )
    loop = lw.load_spec(spec)
    assert loop.actor(None).note == "7"  # type: ignore[arg-type, union-attr]


def test_missing_file(tmp_path: Path) -> None:
    assert _err(tmp_path / "nope.toml").field == "spec"


def test_a_directory_is_not_a_spec_file(tmp_path: Path) -> None:
    # Outside probe (stop 42): `loopwright run examples/invoice_exceptions` said "no spec file
    # at examples/invoice_exceptions", of a folder that is there
    with pytest.raises(lw.SpecError, match=r"is a directory, not a spec file$"):
        lw.load_spec(tmp_path)
    (tmp_path / "loop.toml").write_text("")
    with pytest.raises(lw.SpecError, match=r"directory, not a spec file: name .* \(loop.toml\)"):
        lw.load_spec(tmp_path)


def test_bad_toml(tmp_path: Path) -> None:
    err = _err(_spec(tmp_path, "name = \n[actor"))
    assert err.field == "spec"
    assert "not valid TOML" in str(err)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("colour = 'red'\n" + GOOD, "colour"),
        (GOOD.replace("timeout_s = 5", "timeout = 5"), "actor.timeout"),
        (GOOD.replace("held_out = true", "heldout = true"), "verifiers[1].heldout"),
        (GOOD.replace("max_cycles = 3", "max_cycle = 3"), "contract.budget.max_cycle"),
        (GOOD.replace("max_cycles = 3", "max_cycles = -3"), "contract.budget.max_cycles"),
        # a verifier's ``kind`` was accepted and never read: a spec meaning something by it
        # (or a misplaced effect key) ran as if it were not there
        (GOOD.replace("held_out = true", "held_out = true\nkind = 'llm'"), "verifiers[1].kind"),
    ],
)
def test_unknown_or_bad_key_names_the_field(tmp_path: Path, text: str, field: str) -> None:
    err = _err(_spec(tmp_path, text))
    assert err.field == field, str(err)
    assert field in str(err)


def test_missing_actor(tmp_path: Path) -> None:
    text = GOOD.replace('[actor]\nref = "code.py:propose"\ntimeout_s = 5\n', "")
    assert _err(_spec(tmp_path, text)).field == "actor.ref"


def test_missing_name_and_contract(tmp_path: Path) -> None:
    assert _err(_spec(tmp_path, GOOD.replace('name = "demo"', ""))).field == "name"
    no_contract = GOOD.split("[contract.budget]", maxsplit=1)[0]
    assert _err(_spec(tmp_path, no_contract)).field == "contract"


@pytest.mark.parametrize(
    ("ref", "text"),
    [
        ("propose", "must look like"),
        ("missing.py:propose", "no file"),
        ("code.py:nothing", "no attribute"),
        ("code.py:NOT_CALLABLE", "not callable"),
        ("no_such_module_xyz:fn", "cannot import"),
        # a path that is not a .py file is not a module name either (outside50b: it said
        # "the 'package' argument is required to perform a relative import")
        ("../../etc/passwd:check", "neither a .py file nor a module name"),
        ("lib/code:propose", "neither a .py file nor a module name"),
        (".code:propose", "neither a .py file nor a module name"),
    ],
)
def test_bad_actor_ref(tmp_path: Path, ref: str, text: str) -> None:
    err = _err(_spec(tmp_path, GOOD.replace("code.py:propose", ref)))
    assert err.field == "actor.ref"
    assert text in str(err)


def test_bad_verifier_and_risk_refs(tmp_path: Path) -> None:
    err = _err(
        _spec(tmp_path, GOOD.replace('ref = "code.py:check"\n\n', 'ref = "code.py:nope"\n\n', 1))
    )
    assert err.field == "verifiers[0].ref"
    err = _err(_spec(tmp_path, GOOD.replace("code.py:risky", "code.py:gone")))
    assert err.field == "contract.risk[0].check"


def test_module_that_raises_on_import(tmp_path: Path) -> None:
    err = _err(_spec(tmp_path, GOOD, code="raise RuntimeError('boom at import')\n"))
    assert err.field == "actor.ref"
    assert "boom at import" in str(err)


def test_verifier_not_a_table_and_bad_timeout(tmp_path: Path) -> None:
    text = (
        'verifiers = ["code.py:check"]\n'
        + GOOD.split("[[verifiers]]", maxsplit=1)[0]
        + "[contract.budget]\nmax_cycles = 3\n"
    )
    assert _err(_spec(tmp_path, text)).field == "verifiers[0]"
    text = GOOD.replace('ref = "code.py:check"\n\n', 'ref = "code.py:check"\ntimeout_s = -1\n\n', 1)
    assert "timeout_s" in str(_err(_spec(tmp_path, text)))


def test_secret_fields_are_registered_and_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/security.md said "declare task fields that hold secrets by name", but a spec had no
    ``secret_fields`` (an unknown key) and ``register_secret_field`` was not public. A spec's
    names are registered when it is loaded (the run's task is masked by them)."""
    from loopwright import _redact

    _redact.reset()
    assert lw.register_secret_field is _redact.register_secret_field
    assert lw.register_secret is _redact.register_secret
    task = {"IBAN": "DE44500105175407324931", "pin": "4711-planted", "goal": "pay"}
    assert _redact.redact(task) == task
    lw.load_spec(_spec(tmp_path, 'secret_fields = ["iban", "PIN"]\n' + GOOD))
    assert _redact.redact(task) == {"IBAN": "***", "pin": "***", "goal": "pay"}
    for bad in ('"iban"', "[1]", '[""]'):
        err = _err(_spec(tmp_path, f"secret_fields = {bad}\n" + GOOD))
        assert err.field == "secret_fields", err


def test_visible_weights_whose_sum_overflows_are_refused(tmp_path: Path) -> None:
    """Each weight finite, their sum inf: every score was inf/inf = NaN, so a run whose checks
    all passed never reached min_score and spent its whole budget (from probe41c)."""
    text = GOOD.replace(
        'ref = "code.py:check"\n\n', 'ref = "code.py:check"\nweight = 1e308\n\n', 1
    ).replace(
        '[[verifiers]]\nname = "audit"',
        '[[verifiers]]\nname = "second"\nref = "code.py:check"\nweight = 1e308\n\n'
        '[[verifiers]]\nname = "audit"',
    )
    err = _err(_spec(tmp_path, text))
    assert err.field == "verifiers" and "add up to inf" in str(err), str(err)
    # one such weight alone is fine: its scores stay finite
    one = GOOD.replace('ref = "code.py:check"\n\n', 'ref = "code.py:check"\nweight = 1e308\n\n', 1)
    assert lw.load_spec(_spec(tmp_path, one)).verifiers[0].weight == 1e308


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ('name = "demo"', 'name = "de\\u0000mo"', "name"),  # PostgreSQL refused the run
        ('project = "p"', 'project = "p\\nq"', "project"),
    ],
)
def test_a_name_with_control_characters_is_refused(
    tmp_path: Path, old: str, new: str, field: str
) -> None:
    """A NUL in a loop's name reached the store: PostgreSQL refused the run with a DataError
    naming no field (SQLite kept it, and a newline broke every listing) (from probe41c)."""
    err = _err(_spec(tmp_path, GOOD.replace(old, new)))
    assert err.field == field and "must not hold a control character (U+" in str(err), str(err)
    assert lw.load_spec(_spec(tmp_path, GOOD.replace(old, old[:-1] + ' 🚀 läuft"'))).name


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (GOOD.replace('ref = "code.py:propose"', 'ref = "code.py:quit"\noptions = {}'), "actor"),
        (GOOD + '\n[[effects]]\nref = "code.py:quit"\noptions = {}\n', "effects[0]"),
    ],
)
def test_a_factory_that_calls_sys_exit_is_a_spec_error(
    tmp_path: Path, text: str, field: str
) -> None:
    """A factory's sys.exit() (an options table calls it) ended `loopwright check` and `run`
    silently with exit code 0, as a module's at import did before (from probe41c)."""
    code = CODE + "\ndef quit(**options):\n    import sys\n    sys.exit()\n"
    err = _err(_spec(tmp_path, text, code=code))
    assert err.field.startswith(field) and "sys.exit(None)" in str(err), str(err)


def test_a_sibling_module_another_specs_folder_imported_is_refused(tmp_path: Path) -> None:
    """Spec folders a and b each hold ``helpers_p41c.py``, imported by name from their
    actor: a process that loaded a's spec (a worker serving both loops) gave b's actor a's
    helpers, silently running the wrong code (from probe41c)."""
    actor = "import helpers_p41c\n\ndef propose(ctx):\n    return helpers_p41c.made(ctx)\n"
    for side in ("a", "b"):
        d = tmp_path / side
        d.mkdir()
        (d / "actor.py").write_text(actor)
        (d / "helpers_p41c.py").write_text(
            f"import loopwright as lw\n\ndef made(ctx):\n    return lw.Proposal(note={side!r})\n"
        )
        (d / "code.py").write_text(CODE)
        (d / "loop.toml").write_text(GOOD.replace("code.py:propose", "actor.py:propose"))
    try:
        a = lw.load_spec(tmp_path / "a" / "loop.toml")
        assert a.actor(None).note == "a"
        with pytest.raises(lw.SpecError, match="helpers_p41c") as info:
            lw.load_spec(tmp_path / "b" / "loop.toml")
        assert info.value.field == "actor.ref" and "rename one" in str(info.value)
        assert lw.load_spec(tmp_path / "a" / "loop.toml").actor(None).note == "a"
        # a copy of a's helpers (specs made from one template) is the same module: loaded
        (tmp_path / "b" / "helpers_p41c.py").write_bytes(
            (tmp_path / "a" / "helpers_p41c.py").read_bytes()
        )
        assert lw.load_spec(tmp_path / "b" / "loop.toml").actor(None).note == "a"
    finally:
        sys.modules.pop("helpers_p41c", None)


def _spec_importing(d: Path, module: str) -> Path:
    """A spec folder whose actor (``actor.py``) imports its sibling ``module``, which says
    ``NOTE = 'sibling'``; ``code.py`` beside them (a standard library name)."""
    d.mkdir()
    (d / f"{module}.py").write_text("NOTE = 'sibling'\n")
    (d / "actor.py").write_text(
        f"import loopwright as lw\nimport {module}\n\n"
        f"def propose(ctx):\n    return lw.Proposal(note={module}.NOTE)\n"
    )
    (d / "code.py").write_text(CODE)
    (d / "loop.toml").write_text(GOOD.replace("code.py:propose", "actor.py:propose"))
    return d


def test_a_spec_folder_never_shadows_the_standard_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The spec's folder went first on sys.path: a ``colorsys.py`` (``random.py``,
    ``json.py``...) beside a spec was, from then on, every ``import colorsys`` in the
    process, loopwright's and its libraries' included. Its finder now skips the standard
    library's names: a sibling module is still found."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    monkeypatch.delitem(sys.modules, "helpers_p42", raising=False)
    d = _spec_importing(tmp_path / "spec", "helpers_p42")
    (d / "colorsys.py").write_text("raise RuntimeError('the spec folder shadows colorsys')\n")
    spec = lw.load_spec(d / "loop.toml")
    assert spec.actor(None).note == "sibling"
    import colorsys

    assert colorsys.rgb_to_hsv(1, 0, 0) == (0, 1, 1)  # the standard module
    assert str(d) in sys.path


def test_a_sibling_module_wins_over_one_earlier_on_sys_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (stop 42): the spec's folder went after the standard library, so behind every
    entry ahead of it — the script's folder or the working directory (``python run.py``,
    ``python -m loopwright``) and $PYTHONPATH: a ``helpers.py`` there stood in for the one
    beside the spec, which its actor imports. The folder goes first again (its finder skips
    the standard library's names: the ``code.py`` beside it is no ``import code``)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "helpers_r42", raising=False)
    ahead = tmp_path / "project"
    ahead.mkdir()
    (ahead / "helpers_r42.py").write_text("NOTE = 'the project folder'\n")
    sys.path.insert(0, str(ahead))  # (the script's folder, the cwd, $PYTHONPATH)
    d = _spec_importing(tmp_path / "spec", "helpers_r42")
    monkeypatch.delitem(sys.modules, "code", raising=False)
    assert lw.load_spec(d / "loop.toml").actor(None).note == "sibling"
    import code  # (a code.py beside the spec: still the standard module)

    assert Path(code.__file__).parent != d
