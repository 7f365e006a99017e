"""What the dashboard's run page reads: the window it draws, not the whole run (counted, not
timed; bench/read_paths.py measures time and memory at 2,000 and 20,000 cycles)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

import loopwright as lw
from loopwright.store import Store

pytest.importorskip("fastapi")

from support.dashboard import dashboard

from loopwright.web import _run_page, _waterfall

TOKEN = "t" * 32
LOCAL = "http://127.0.0.1"
SHORT, LONG = 300, 1200
WINDOW = 200  # checkpoints the page reads (CHECKPOINTS_READ, made small for quick runs)


PARTS = (("doc", "p0"), ("doc", "p1"), ("doc", "p2"), ("ops", "gate"))
ASKED = 60  # a run asked to approve an edit at cycles 2 and 50 (one before the waterfall's)


def _loop(cycles: int) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle in (2, 50):
            return lw.Proposal.edit("ops", {"gate": ctx.cycle})
        return lw.Proposal.edit("doc", {f"p{ctx.cycle % 3}": f"draft {ctx.cycle}"})

    # every part open (a part with no finding is accepted, and then not to be changed)
    open_parts = tuple(lw.Finding("open", *ref) for ref in PARTS)

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=open_parts)

    return lw.Loop(
        name="long",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=cycles),
            risk=(lw.RiskRule(name="gate", touches=("ops/gate",)),),
        ),
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[int, str]]:
    db = str(tmp_path_factory.mktemp("page") / "page.db")
    out: dict[int, str] = {}
    with lw.Runtime(db) as rt:
        for n in (40, ASKED, SHORT, LONG):
            task = {
                "goal": f"g{n}",
                "artifacts": {"doc": {"p0": "", "p1": "", "p2": ""}, "ops": {"gate": 0}},
            }
            result = rt.run_sync(_loop(n), task, task_key=f"k{n}")
            while result.status == "awaiting_approval":  # (a run of 40 stops before cycle 50)
                rt.approve(result.run_id, by="bob")
                result = rt.resume_sync(result.run_id, _loop(n))
            assert result.cycles == n
            out[n] = result.run_id
    return db, out


class Reads:
    """Counts the events, checkpoint rows and version rows a store hands out, however asked."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = {"events": 0, "checkpoints": 0, "versions": 0}
        lists = {
            "events": "events",
            "events_tail": "events",
            "events_of_kinds": "events",
            "_checkpoint_rows": "checkpoints",
            "_version_rows": "versions",
            "versions_page": "versions",
        }
        for name, what in lists.items():
            real = getattr(store, name, None)
            if real is None:  # (a tree before the store had it)
                continue

            def counted(*a: Any, _real: Any = real, _what: str = what, **k: Any) -> Any:
                out = _real(*a, **k)
                self.n[_what] += len(out)
                return out

            monkeypatch.setattr(store, name, counted)
        real_iter = store.iter_events

        def iter_counted(*a: Any, **k: Any) -> Iterator[Any]:
            for e in real_iter(*a, **k):
                self.n["events"] += 1
                yield e

        monkeypatch.setattr(store, "iter_events", iter_counted)


def _reads(db: str, rid: str, monkeypatch: pytest.MonkeyPatch, query: str = "") -> dict[str, int]:
    client = dashboard(db, token=TOKEN)
    with pytest.MonkeyPatch.context() as mp:
        reads = Reads(client.app.state.store, mp)  # type: ignore[attr-defined]
        got = client.get(f"/runs/{rid}{query}")
    assert got.status_code == 200
    return reads.n


@pytest.mark.parametrize("query", ["", "?kind=verdict"])
def test_the_run_page_reads_as_much_at_four_times_the_length(
    runs: tuple[str, dict[int, str]], monkeypatch: pytest.MonkeyPatch, query: str
) -> None:
    """It read every checkpoint (and version) and every event, and built every cycle's spans to
    draw 30: ~4x the rows at 4x the cycles. Now the newest checkpoints, the log's end and
    counts: the same at both lengths. Versions too: the newest state's parts loaded every
    version (versions 310 -> 1,210) to list the newest VERSIONS_SHOWN of each."""
    db, rid = runs
    monkeypatch.setattr(_run_page, "CHECKPOINTS_READ", WINDOW, raising=False)
    monkeypatch.setattr(_run_page, "EVENTS_SHOWN", 100)  # fewer than the short run's verdicts
    short = _reads(db, rid[SHORT], monkeypatch, query)
    long = _reads(db, rid[LONG], monkeypatch, query)
    for what in ("events", "checkpoints", "versions"):
        assert long[what] <= short[what] + 20, (what, short, long)  # was ~4x
    assert long["checkpoints"] <= 3 * WINDOW  # the window and two snapshot chains
    # each part's newest VERSIONS_SHOWN and the one before (its diff), and those the state holds
    assert long["versions"] <= len(PARTS) * (_run_page.VERSIONS_SHOWN + 1) + 3 * len(PARTS)


def _section(page: str, start: str, end: str) -> str:
    return page.split(start, 1)[1].split(end, 1)[0]


def _whole_log(monkeypatch: pytest.MonkeyPatch, store: Store) -> None:
    """The page drawn as before: every checkpoint, the whole log read and counted in Python."""
    from loopwright.web._waterfall import LogWindow

    monkeypatch.setattr(_run_page, "CHECKPOINTS_READ", 10**9, raising=False)
    monkeypatch.setattr(
        _run_page, "log_window", lambda s, run_id, cycles, total: LogWindow(s.events(run_id))
    )
    for name in ("event_counts", "events_of_kinds", "events_tail"):
        generic = getattr(Store, name)
        monkeypatch.setattr(store, name, lambda *a, _g=generic, **k: _g(store, *a, **k))


def _page(db: str, rid: str, query: str = "", *, whole: bool = False) -> str:
    client = dashboard(db, token=TOKEN)
    with pytest.MonkeyPatch.context() as mp:
        if whole:
            _whole_log(mp, client.app.state.store)  # type: ignore[attr-defined]
        got = client.get(f"/runs/{rid}{query}")
    assert got.status_code == 200
    # the session's form token differs between clients
    return re.sub(r'name="csrf" value="[^"]*"', "", got.text)


@pytest.mark.parametrize("query", ["", "?kind=verdict", "?kind=decision"])
@pytest.mark.parametrize("n", [40, ASKED])
def test_a_short_runs_page_is_what_the_whole_log_draws(
    runs: tuple[str, dict[int, str]], query: str, n: int
) -> None:
    """A run within the page's window (more cycles than the waterfall draws; one with a
    request approved before the waterfall's cycles and one within) is drawn exactly as from
    every checkpoint and event."""
    db, rid = runs
    page = _page(db, rid[n], query)
    assert page == _page(db, rid[n], query, whole=True)
    if n == ASKED:
        assert page.count('data-kind="approval"') == 1  # the one of cycle 50, in its cycle


def test_a_long_runs_windowed_page_draws_the_newest_cycles_as_the_whole_log_does(
    runs: tuple[str, dict[int, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the window: the waterfall's cycles, the events and the newest timeline rows are
    the whole log's; the page says what is windowed and links to the full record."""
    db, rid = runs
    monkeypatch.setattr(_run_page, "CHECKPOINTS_READ", WINDOW, raising=False)
    windowed = _page(db, rid[SHORT])
    whole = _page(db, rid[SHORT], whole=True)
    svg = ('<figure class="waterfall">', "</svg>")
    assert _section(windowed, *svg) == _section(whole, *svg)
    assert f"The last {_waterfall.MAX_CYCLES} of {SHORT} cycles" in windowed
    events = ('<table class="events" id="event-log">', "</table>")
    assert _section(windowed, *events) == _section(whole, *events)
    timeline = ('<table class="timeline">', "</table>")
    rows_w = _section(windowed, *timeline).split("<tr")
    rows_a = _section(whole, *timeline).split("<tr")
    assert len(rows_w) > 50 and rows_w[-50:] == rows_a[-50:]
    assert "A long run: its last" in windowed and f'href="/api/runs/{rid[SHORT]}"' in windowed
    assert "A long run: its last" not in whole


def _parts(page: str) -> str:
    return _section(page, "<h2>Artifacts</h2>", "<h2")


def test_a_parts_newest_versions_are_read_alone_and_every_one_is_paged(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page lists each part's newest VERSIONS_SHOWN: it read them alone (and the one
    before, for the diff), not the part's every version, and draws them as from every one;
    the API pages through every version, whole, on both stores."""
    with lw.Runtime(url) as rt:
        task = {
            "goal": "g",
            "artifacts": {"doc": {"p0": "", "p1": "", "p2": ""}, "ops": {"gate": 0}},
        }
        result = rt.run_sync(_loop(40), task, task_key="versions")
        while result.status == "awaiting_approval":
            rt.approve(result.run_id, by="bob")
            result = rt.resume_sync(result.run_id, _loop(40))
        rid = result.run_id
        held = rt.store.latest_checkpoint(rid).task_state()
        every = {ref: [v.to_dict() for v in p.versions] for ref, p in held.iter_parts()}
    assert len(every["doc/p0"]) > 10
    monkeypatch.setattr(_run_page, "VERSIONS_SHOWN", 5)
    client = dashboard(url, token=TOKEN)
    store = client.app.state.store  # type: ignore[attr-defined]
    with pytest.MonkeyPatch.context() as mp:
        reads = Reads(store, mp)
        page = client.get(f"/runs/{rid}")
    assert page.status_code == 200
    # 5 and the one before of the three long parts, the gate's 1, and the versions held
    assert reads.n["versions"] <= 3 * 6 + 1 + 3 * len(PARTS), reads.n
    real = _run_page.artifacts_view
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            _run_page,
            "artifacts_view",
            lambda state, newest=None, read=None: real(state, newest=newest),
        )
        whole = client.get(f"/runs/{rid}")
    assert _parts(page.text) == _parts(whole.text)
    assert "The newest 5 of" in page.text
    assert f'href="/api/runs/{rid}/parts/doc/p0/versions"' in page.text
    for ref, versions in every.items():
        got: list[dict[str, Any]] = []
        link = f"/api/runs/{rid}/parts/{ref}/versions?limit=4"
        while True:
            r = client.get(link)
            assert r.status_code == 200, r.text
            assert r.headers["X-Total-Count"] == str(len(versions))
            got += r.json()
            if "X-Next-Cursor" not in r.headers:
                break
            link = r.headers["Link"].split(">", 1)[0].lstrip("<")
            assert f"after={r.headers['X-Next-Cursor']}" in link
        assert got == versions, ref
    for bad in ("after=-1", "limit=0", "after=x"):
        r = client.get(f"/api/runs/{rid}/parts/doc/p0/versions?{bad}")
        assert r.status_code in (400, 422), (bad, r.status_code)
    assert client.get(f"/api/runs/{rid}/parts/doc/nope/versions").status_code == 404
    assert client.get("/api/runs/nope/parts/doc/p0/versions").status_code == 404
