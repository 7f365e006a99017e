"""A fitted stop contract written out: the TOML a person can check in (with the figures that
justify it as comments) and the frontier's plot.
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from pathlib import Path
from typing import Any

from .._errors import ConfigError
from .._money_text import usd as money
from ._fit_result import FIT_FORMAT, FitResult

# --- TOML -------------------------------------------------------------------------------------
# What ``json.dumps(ensure_ascii=False)`` leaves raw in a string that TOML refuses (DEL) or that
# a terminal acts on when ``fit-stop`` prints the contract (C1 controls, 0x9b is CSI on its
# own; bidirectional controls and marks, as the CLI's terminal text writes them out; line and
# paragraph separators): written as ``\uXXXX``, which TOML reads back as the same character. A
# check name read from recorded runs holding DEL made a contract no TOML reader would load.
# Other text (é, 漢字) stays as it is.
_RAW = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(v)
        return repr(v)
    if isinstance(v, str):
        return _RAW.sub(_escaped, json.dumps(v, ensure_ascii=False))
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {v!r}")


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def usd(x: float | None) -> str:
    """A dollar amount as every view prints it (``$0.0094``, as fit-stop's table beside it;
    the header read ``$0.009355``: polish54), ``n/a`` for none."""
    return "n/a" if x is None else money(x)


def to_toml(r: FitResult) -> str:
    c = r.contract
    a = r.all_data
    v = r.mean("validation")
    pooled = r.validation_pooled
    ref = "the runs as recorded" if r.reference == "recorded" else "the base contract"
    o, kb = r.optimise, r.keep_by
    what = "passed held-out verdicts" if kb == "held-out" else "accepted outcomes"
    fx = r.fixed
    lines = [
        f"# Fitted by `loopwright fit-stop` ({FIT_FORMAT}) on {r.runs} run(s) of {r.tasks} "
        f"task(s): the most {o} saved",
        f"# keeping >= {r.keep:g} of the {what} of {ref} (choice: {r.choose}).",
        f"# Chosen: {r.params.describe()}"
        + ("" if r.feasible else "  (NO candidate kept enough; the best kept share is shown)"),
        f"# All runs: kept {pct(a.kept(kb))}, {o} saved {pct(a.saved_share(o))}, "
        # (spend is said once when it is what was optimised: "spend saved 70.6%, spend saved
        # 70.6%" read as two figures)
        + ("" if o == "spend" else f"spend saved {pct(a.spend_saved_share)}, ")
        + f"cost per accepted {usd(a.cost_per_accepted_usd)} "
        f"(reference {usd(a.reference_cost_per_accepted_usd)}).",
        f"# Validation ({len(r.folds)} folds by task, seed {r.seed}), pooled: kept "
        f"{pct(pooled.kept(kb))}, {o} saved {pct(pooled.saved_share(o))}; mean over folds: "
        f"spend saved {pct(v['spend_saved_share'])}.",
    ]
    if fx is not None:
        lines += ["# " + line for line in textwrap.wrap(fx.verdict, 96)]
    lines += [
        "# Risk rules are not fitted (replay does not replay a person's decisions).",
        "",
        "[contract.success]",
        f"min_score = {_toml_value(float(c.success.min_score))}",
    ]
    if c.success.required is not None:
        lines.append(f"required = {_toml_value(list(c.success.required))}")
    lines.append(f"accept_parts = {_toml_value(c.success.accept_parts)}")
    if c.no_progress is not None:
        lines += [
            "",
            "[contract.no_progress]",
            f"cycles = {c.no_progress.cycles}",
            f"min_delta = {_toml_value(float(c.no_progress.min_delta))}",
        ]
    budget = [
        (name, getattr(c.budget, name))
        for name in ("max_cycles", "max_cost_usd", "max_tokens", "max_seconds")
        if getattr(c.budget, name) is not None
        # the default ceiling is left out: the contract read back is given it again, marked
        # (max_cycles_default is the engine's, refused in a file)
        and not (name == "max_cycles" and c.budget.max_cycles_default)
    ]
    if c.budget.max_cycles_key is not None:  # the runs' own caps still apply under the fit's
        budget.append(("max_cycles_key", c.budget.max_cycles_key))
    if budget:
        lines += ["", "[contract.budget]"]
        lines += [f"{name} = {_toml_value(value)}" for name, value in budget]
    mr = c.marginal_return
    if mr is not None:
        lines += [
            "",
            "[contract.marginal_return]",
            f"value_per_success_usd = {_toml_value(float(mr.value_per_success_usd))}",
            f"prior_successes = {_toml_value(float(mr.prior_successes))}",
            f"prior_failures = {_toml_value(float(mr.prior_failures))}",
            "# hazard[k-1][stall] = [successes, trials] at cycle k (the last row: later cycles)",
            "# after `stall` cycles without a material improvement (the last column: more).",
            "hazard = [",
        ]
        lines += ["  [" + ", ".join(f"[{s}, {t}]" for s, t in row) + "]," for row in mr.hazard]
        lines.append("]")
    esc = [
        (name, getattr(c.escalation, name))
        for name in ("owner", "route", "recommended_action")
        if getattr(c.escalation, name) is not None
    ]
    if esc:
        lines += ["", "[contract.escalation]"]
        lines += [f"{name} = {_toml_value(value)}" for name, value in esc]
    return "\n".join(lines) + "\n"


# --- plot -------------------------------------------------------------------------------------
PLOT_NEEDS = "the plot needs matplotlib: pip install 'loopwright[plot]'"


def check_plot() -> None:
    """Refuse ``--plot`` where matplotlib is not installed, before any fitting: the fit takes
    a minute, and it was refused only at its end, its contract and report already written."""
    from importlib.util import find_spec

    if find_spec("matplotlib") is None:
        raise ConfigError(f"{PLOT_NEEDS} (or leave out --plot)", field="--plot")


def plot_frontier(result: FitResult, path: str | Path) -> Path:
    """A PNG of accepted outcomes against spend (all runs) for every candidate contract: the
    frontier (most accepted for the spend) highlighted, the chosen contract and the reference
    marked, the ``keep`` line drawn. Needs matplotlib (``pip install 'loopwright[plot]'``)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ConfigError(PLOT_NEEDS, field="--plot") from None
    out = Path(path)
    fig = Figure(figsize=(8, 5.5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    cands = result.candidates
    others = [c for c in cands if not c.frontier]
    front = sorted((c for c in cands if c.frontier), key=lambda c: c.figures.cost_usd)
    ax.scatter(
        [c.figures.cost_usd for c in others],
        [c.figures.accepted for c in others],
        s=12,
        color="#9aa5b1",
        alpha=0.6,
        label=f"candidates ({len(cands)})",
    )
    ax.plot(
        [c.figures.cost_usd for c in front],
        [c.figures.accepted for c in front],
        "-o",
        color="#1f6feb",
        markersize=4,
        label="frontier",
    )
    a = result.all_data
    ax.scatter(
        [a.reference_cost_usd],
        [a.reference_accepted],
        marker="X",
        s=90,
        color="#444444",
        label="reference (as recorded)" if result.reference == "recorded" else "reference (base)",
        zorder=3,
    )
    ax.scatter(
        [a.cost_usd],
        [a.accepted],
        marker="*",
        s=260,
        color="#d73a49",
        label=f"chosen: {result.params.describe()}",
        zorder=4,
    )
    ax.axhline(
        result.keep * a.reference_accepted,
        linestyle="--",
        color="#d73a49",
        linewidth=0.8,
        label=f"keep {result.keep:g}",
    )
    ax.set_xlabel("spend (USD, all runs)")
    ax.set_ylabel("accepted outcomes")
    ax.set_title(f"fit-stop: {result.runs} run(s), accepted outcomes against spend")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, format="png")
    return out
