"""A file a command writes (``--out``, ``--report``, ``--plot``, ``--save-traces``) in a folder
that does not exist is refused, as a store path in one is (stop 50): the folders were made,
so a typo's output went, unseen, into a new folder. ``./.loopwright`` is still made."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.long_loops import rejecting_loop

import loopwright as lw
from loopwright.cli import main

LDB = Path(__file__).parents[1] / "data/ldb/humaneval/reflexion/gpt-4o-2024-05-13.jsonl"


@pytest.fixture
def store(tmp_path: Path) -> str:
    db = tmp_path / "s.db"
    with lw.Runtime(str(db)) as rt:
        rt.run_sync(rejecting_loop(2, lambda n: {"p": f"draft {n}"}), {"goal": "g"}, task_key="k")
    (tmp_path / "c.toml").write_text("[contract.budget]\nmax_cycles = 3\n")
    return str(db)


def _commands(store: str, tmp_path: Path, path: str) -> list[tuple[str, list[str]]]:
    with lw.Runtime(store) as rt:
        run_id = rt.store.get_run("k").run_id
    contract = str(tmp_path / "c.toml")
    return [
        ("--out", ["trace", run_id, "--store", store, "--out", path]),
        ("--out", ["export", "eval-cases", "--store", store, "--out", path]),
        ("--out", ["export", "preference-pairs", "--store", store, "--out", path]),
        ("--out", ["import", "ldb", str(LDB), "--out", path]),
        ("--out", ["fit-stop", "store", "--store", store, "--out", path]),
        ("--report", ["fit-stop", "store", "--store", store, "--report", path]),
        (
            "--save-traces",
            ["replay", "store", "--store", store, "--contract", contract, "--save-traces", path],
        ),
    ]


def test_every_out_in_a_missing_folder_is_refused_and_nothing_made(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    typo = tmp_path / "exprots" / "day" / "x.jsonl"
    for option, argv in _commands(store, tmp_path, str(typo)):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(
            f"loopwright: error: {option}: no folder {typo.parent} for {typo}: the folder "
            f"does not exist. Create it (mkdir -p {typo.parent})"
        ), (argv, err)
        assert len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "exprots").exists(), argv


def test_loopwrights_own_folder_is_made_and_an_existing_one_written(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for i, (_, argv) in enumerate(_commands(store, tmp_path, ".loopwright/o{}.txt")):
        if argv[0] == "fit-stop":  # (a fit needs more tasks than one; refused above first)
            continue
        argv = [a.replace("{}", str(i)) for a in argv]
        assert main(argv) == 0, (argv, capsys.readouterr().err)
        assert (work / ".loopwright" / f"o{i}.txt").is_file(), argv


def test_no_out_is_written_over_the_store(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside probe, stop 51: `export eval-cases --out` naming the store truncated it to 0
    bytes, every run lost; every command's output naming it is refused, the store unchanged."""
    monkeypatch.chdir(tmp_path)
    before = Path(store).read_bytes()
    for option, argv in _commands(store, tmp_path, store):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"{option}: {store} is an SQLite database" in err, (argv, err)
        assert Path(store).read_bytes() == before, argv


def test_no_out_is_written_over_an_input(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside probe, stop 51: `fit-stop runs.jsonl --report runs.jsonl` and `replay …
    --save-traces` naming the runs (or a contract) replaced what they read: refused."""
    monkeypatch.chdir(tmp_path)
    replay = ["replay", "runs.jsonl", "--contract", "c.toml", "--save-traces"]
    runs = tmp_path / "runs.jsonl"
    runs.write_bytes(LDB.read_bytes())
    contract = tmp_path / "c.toml"
    inputs = {p: p.read_bytes() for p in (runs, contract)}
    for option, argv, target in (
        ("--report", ["fit-stop", "runs.jsonl", "--report", "./runs.jsonl"], runs),
        ("--out", ["fit-stop", "runs.jsonl", "--base", "c.toml", "--out", "c.toml"], contract),
        ("--save-traces", [*replay, str(runs)], runs),
        ("--save-traces", [*replay, "c.toml"], contract),
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"{option}: " in err and "is an input of this command" in err, (argv, err)
        assert target.read_bytes() == inputs[target], argv


def test_no_out_is_written_over_a_live_stores_companion_files(
    store: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside probe, stop 51: the guard above knew the database's own header only; an
    ``--out`` naming ``s.db-wal`` of a live store (a worker has it open) wrote over its
    write-ahead log, corrupting it. A companion is refused by its name beside the database
    (an empty ``-wal``, one not there yet) and by its first bytes (a copy under another name)."""
    monkeypatch.chdir(tmp_path)
    with lw.Runtime(store) as rt:  # open: its -wal and -shm are there, the -wal not empty
        rt.run_sync(rejecting_loop(1, lambda n: {"p": f"more {n}"}), {"goal": "g"}, task_key="j")
        wal, shm = Path(store + "-wal"), Path(store + "-shm")
        assert wal.stat().st_size > 0 and shm.stat().st_size > 0
        copy = tmp_path / "wal-copy.bin"
        copy.write_bytes(wal.read_bytes())
        cases = [
            (wal, "write-ahead log of the SQLite database"),
            (shm, "shared-memory index of the SQLite database"),
            (Path(store + "-journal"), "rollback journal of the SQLite database"),  # not there
            (copy, "write-ahead log of an SQLite database"),
        ]
        status = rt.store.get_run("j").status
        for target, said in cases:
            before = _kept(target)
            for option, argv in _commands(store, tmp_path, str(target)):
                assert main(argv) == 2, argv
                err = capsys.readouterr().err
                assert f"{option}: {target} is the {said}" in err, (argv, err)
                assert _kept(target) == before, argv
        assert rt.store.get_run("j").status == status  # the store is intact
    with lw.Runtime(store) as rt:
        assert {r.task_key for r in rt.store.list_runs()} == {"k", "j"}


def test_a_file_named_like_a_companion_of_no_database_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The name alone refuses nothing: ``notes.db-wal`` beside no database is a file to write."""
    out = tmp_path / "notes.db-wal"
    assert main(["import", "ldb", str(LDB), "--out", str(out)]) == 0, capsys.readouterr().err
    assert out.stat().st_size > 0


def _kept(path: Path) -> bytes | None:
    """What of ``path`` a write over it would change: its bytes (a shared-memory index's size
    and version only: a reader of the store may move its read marks), None where it is not."""
    if not path.exists():
        return None
    data = path.read_bytes()
    return len(data).to_bytes(8, "big") + data[:4] if path.name.endswith("-shm") else data
