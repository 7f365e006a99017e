"""A model-backed repair loop: a chat model fixes service configs against stated requirements.

The loop spec (``loop.toml``) names these objects:

* ``actor`` — a ``ChatActor`` on any OpenAI-compatible server. It sees the goal, the current
  config, the findings of the visible checks with their evidence and the budget left, and
  proposes edits to named parts of the ``config`` artifact.
* ``requirements`` — deterministic and visible: every requirement the task states (port, TLS,
  replica range, log levels, timeout range), one located finding per part that misses, with the
  expected and actual values as evidence.
* ``reviewer`` — a ``ChatReviewer``: a second model judges the config against a rubric (does it
  suit the environment the goal describes?). Visible: its findings go back to the actor.
* ``disables_tls`` — a risk rule: a proposal that turns TLS off parks the run until a person
  approves it (``loopwright approve RUN --by NAME --resume``).
* ``policy_audit`` — deterministic and held out: the organisation's unstated policy (the task's
  ``held_out`` key). Recorded beside every verdict, never shown to the actor or the reviewer;
  a run accepted on the visible checks that fails it is a false success in the metrics.

Configuration, all from the environment (defaults for a local Ollama):

==============================  ===============================================================
``LOOPWRIGHT_LLM_BASE_URL``     the actor's endpoint (``http://localhost:11434/v1``)
``LOOPWRIGHT_LLM_MODEL``        the actor's model (``qwen2.5:7b-instruct``)
``LOOPWRIGHT_LLM_API_KEY``      its key (``OPENAI_API_KEY``, else none needed)
``LOOPWRIGHT_LLM_PRICE``        ``"input,output"`` dollars per million tokens (none: genai-prices
                                for a hosted model it knows, else 0)
``LOOPWRIGHT_LLM_TIMEOUT_S``    per-request timeout (120)
``LOOPWRIGHT_LLM_FORMAT``       ``json_schema`` (default), ``tool``, ``json_object`` or ``text``
``LOOPWRIGHT_REVIEWER_*``       the same for the reviewer (``BASE_URL``, ``MODEL`` — default
                                ``llama3.1:8b`` —, ``API_KEY``, ``PRICE``, ``FORMAT``); unset
                                ones fall back to the actor's, except the model
``LOOPWRIGHT_ALLOW_SELF_REVIEW`` ``1`` lets the reviewer be the actor's own model
``LOOPWRIGHT_OFFLINE``          ``1``: no model server needed (below)
==============================  ===============================================================

**Offline mode** (``LOOPWRIGHT_OFFLINE=1``): the factories start ``loopwright.testing``'s
OpenAI-compatible server on loopback (once per process) and point both adapters at it. Two small
rule-based "models" answer there — ``offline_actor`` reads the requirements, the config and the
open findings from the prompt it was sent and proposes edits (a first guess of 30 s for a
timeout); ``offline_reviewer`` applies the rubric (production needs TLS, no debug logging and
more than one replica; long batch jobs need timeouts of minutes). Everything else is real: the
``openai`` SDK, HTTP, JSON-schema validation, usage and price (``OFFLINE_PRICE`` unless
``LOOPWRIGHT_LLM_PRICE`` is set), retries, the engine and the store.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import loopwright as lw
from loopwright.adapters import ChatActor, ChatReviewer

if TYPE_CHECKING:
    from loopwright.testing import FakeOpenAI, Reply, Request

DEFAULT_BASE_URL = "http://localhost:11434/v1"
DEFAULT_ACTOR_MODEL = "qwen2.5:7b-instruct"
DEFAULT_REVIEWER_MODEL = "llama3.1:8b"

RUBRIC = """\
The config must suit the environment and workload the goal describes, not only its letter:
- production services use TLS, never log at debug level, and run more than one replica;
- timeouts suit the workload: seconds for interactive requests, minutes for long batch jobs;
- every value has the right JSON type: integers for port, replicas and timeout_s, a boolean
  for tls, one of debug/info/warning/error for log_level;
- nothing is over-provisioned without a reason in the goal.
Flag each value that is wrong, or that meets the goal's numbers but not its intent, on its own
part of the "config" artifact."""


def _env(name: str, default: str | None = None, *, fallback: str | None = None) -> str | None:
    value = os.environ.get(name)
    if value is None and fallback is not None:
        value = os.environ.get(fallback)
    return value if value not in (None, "") else default


def _flag(name: str) -> bool:
    """A yes/no variable; anything else is refused, naming it ("maybe" read as no)."""
    value = (_env(name, "0") or "0").strip().lower()
    if value not in ("0", "1", "true", "false", "yes", "no"):
        raise lw.ConfigError(f"must be 1 or 0 (true/false, yes/no), got {value!r}", field=name)
    return value in ("1", "true", "yes")


def _seconds(name: str, fallback: str | None) -> float:
    """A timeout variable, refused naming it unless a number ("could not convert string to
    float: 'abc'" named none)."""
    value = _env(name, "120", fallback=fallback) or "120"
    try:
        return float(value)
    except ValueError:
        raise lw.ConfigError(f"must be a number of seconds, got {value!r}", field=name) from None


def offline() -> bool:
    """``LOOPWRIGHT_OFFLINE=1``: answer from rule-based models on a loopback server."""
    return _flag("LOOPWRIGHT_OFFLINE")


def _settings(prefix: str, model_default: str) -> dict[str, Any]:
    actor = "LOOPWRIGHT_LLM_"
    fb = None if prefix == actor else actor
    s = {
        "base_url": _env(f"{prefix}BASE_URL", DEFAULT_BASE_URL, fallback=fb and f"{fb}BASE_URL"),
        "model": _env(f"{prefix}MODEL", model_default),
        "api_key": _env(f"{prefix}API_KEY", fallback=fb and f"{fb}API_KEY"),
        "price": _env(f"{prefix}PRICE", fallback=fb and f"{fb}PRICE"),
        "timeout_s": _seconds(f"{prefix}TIMEOUT_S", fb and f"{fb}TIMEOUT_S"),
        "response_format": _env(f"{prefix}FORMAT", "json_schema", fallback=fb and f"{fb}FORMAT"),
    }
    if offline():
        s["base_url"] = offline_server().base_url
        s["model"] = OFFLINE_ACTOR if prefix == actor else OFFLINE_REVIEWER
        s["api_key"] = "offline"
        s["price"] = s["price"] or OFFLINE_PRICE
    return s


def actor(**options: Any) -> ChatActor:
    """The actor, configured from ``LOOPWRIGHT_LLM_*``; ``options`` (from the spec) win."""
    s = _settings("LOOPWRIGHT_LLM_", DEFAULT_ACTOR_MODEL)
    model = s.pop("model")
    return ChatActor(model, **{**s, **options})


def reviewer(**options: Any) -> ChatReviewer:
    """The reviewer, configured from ``LOOPWRIGHT_REVIEWER_*`` (falling back to the actor's
    endpoint, key, price and format, never its model)."""
    s = _settings("LOOPWRIGHT_REVIEWER_", DEFAULT_REVIEWER_MODEL)
    model = s.pop("model")
    allow = _flag("LOOPWRIGHT_ALLOW_SELF_REVIEW")
    return ChatReviewer(model, rubric=RUBRIC, allow_self_review=allow, **{**s, **options})


# --- deterministic checks ---------------------------------------------------------------------

LOG_LEVELS = ("debug", "info", "warning", "error")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _range_problem(name: str, value: Any, lo: Any, hi: Any) -> str | None:
    if not _is_int(value):
        return f"{name} must be an integer, got {value!r}"
    if lo is not None and value < lo:
        return f"{name} must be at least {lo}, got {value}"
    if hi is not None and value > hi:
        return f"{name} must be at most {hi}, got {value}"
    return None


def _problems(config: Mapping[str, Any], req: Mapping[str, Any]) -> dict[str, tuple[str, Any]]:
    """``{part: (message, expected)}`` for every requirement the config misses."""
    out: dict[str, tuple[str, Any]] = {}
    if "port" in req and (not _is_int(config.get("port")) or config.get("port") != req["port"]):
        out["port"] = (f"port must be the integer {req['port']}", req["port"])
    if "tls" in req and config.get("tls") is not req["tls"]:
        out["tls"] = (f"tls must be the boolean {str(req['tls']).lower()}", req["tls"])
    lo, hi = req.get("min_replicas"), req.get("max_replicas")
    why = _range_problem("replicas", config.get("replicas"), lo, hi)
    if why:
        out["replicas"] = (why, {"min": lo, "max": hi})
    levels = req.get("log_levels")
    if levels is not None and config.get("log_level") not in levels:
        out["log_level"] = (f"log_level must be one of {list(levels)}", list(levels))
    lo, hi = req.get("min_timeout_s"), req.get("max_timeout_s")
    why = _range_problem("timeout_s", config.get("timeout_s"), lo if lo is not None else 1, hi)
    if why:
        out["timeout_s"] = (why, {"min": lo if lo is not None else 1, "max": hi})
    return out


def _verdict(
    config: Mapping[str, Any], problems: Mapping[str, tuple[str, Any]], dimension: str
) -> lw.Verdict:
    findings = tuple(
        lw.Finding(
            msg,
            "config",
            part,
            dimension,
            evidence={"expected": expected, "actual": config.get(part)},
        )
        for part, (msg, expected) in problems.items()
    )
    parts = max(len(config), 1)
    return lw.Verdict(
        passed=not findings,
        score=max(0.0, 1 - len(findings) / parts),
        findings=findings,
    )


def requirements(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    """Visible: the requirements the task states, one located finding per part that misses."""
    config = state.artifacts["config"].values()
    problems = _problems(config, state.task.get("requirements") or {})
    unknown = sorted(set(config) - {"port", "tls", "replicas", "log_level", "timeout_s"})
    for part in unknown:
        problems[part] = (f"{part} is not a known setting; remove it", None)
    if config.get("log_level") not in LOG_LEVELS and "log_level" not in problems:
        problems["log_level"] = (f"log_level must be one of {list(LOG_LEVELS)}", list(LOG_LEVELS))
    return _verdict(config, problems, "requirement")


def policy_audit(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    """Held out: the organisation's policy in the task's ``held_out`` key (a replica cap, a
    timeout floor), which neither the actor nor the reviewer is shown."""
    config = state.artifacts["config"].values()
    policy = state.task.get("held_out") or {}
    problems: dict[str, tuple[str, Any]] = {}
    cap = policy.get("max_replicas")
    replicas = config.get("replicas")
    if cap is not None and _is_int(replicas) and replicas > cap:
        problems["replicas"] = (f"policy caps replicas at {cap}", cap)
    floor = policy.get("min_timeout_s")
    timeout = config.get("timeout_s")
    if floor is not None and isinstance(timeout, int | float) and timeout < floor:
        problems["timeout_s"] = (f"policy needs timeouts of at least {floor} s", floor)
    return _verdict(config, problems, "policy")


def disables_tls(state: lw.TaskState, proposal: lw.Proposal, verdicts: Any) -> str | None:
    """Risk: turning TLS off is a person's decision, whatever the checks say."""
    for edit in proposal.changes():
        if edit.artifact == "config" and edit.part == "tls" and edit.value is False:
            return "the proposal turns TLS off"
    return None


# --- offline mode: rule-based models behind an OpenAI-compatible server on loopback ------------

OFFLINE_ACTOR = "offline-actor"
OFFLINE_REVIEWER = "offline-reviewer"
OFFLINE_PRICE = "2.5,10"  # $ per million tokens in,out: a mid-size hosted model's price
FIRST_GUESS_TIMEOUT_S = 30  # what a model tends to pick; too short for long batch jobs
BATCH_TIMEOUT_FLOOR_S = 60

_servers: dict[str, FakeOpenAI] = {}  # the one offline server of this process
_server_lock = threading.Lock()


def offline_server() -> FakeOpenAI:
    """The loopback server both adapters talk to offline, started once per process."""
    from loopwright.testing import FakeOpenAI

    with _server_lock:
        if "offline" not in _servers:
            server = FakeOpenAI().start()  # daemon threads: it ends with the process
            server.script(offline_actor, model=OFFLINE_ACTOR)
            server.script(offline_reviewer, model=OFFLINE_REVIEWER)
            _servers["offline"] = server
        return _servers["offline"]


def _sections(request: Request) -> dict[str, str]:
    """The prompt's sections by heading (``## Goal``, ``## Task input`` …), from the user
    message the adapter rendered."""
    text = next((m["content"] for m in reversed(request.messages) if m["role"] == "user"), "")
    out: dict[str, str] = {}
    for block in ("\n" + str(text)).split("\n## ")[1:]:
        title, _, body = block.partition("\n")
        out[title.split(" (")[0].strip()] = body.strip()
    return out


def _section_json(sections: Mapping[str, str], title: str) -> dict[str, Any]:
    try:
        value = json.loads(sections.get(title, "{}"))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _clamp(value: Any, lo: Any, hi: Any, default: int) -> int:
    v = value if _is_int(value) else default
    if lo is not None:
        v = max(v, lo)
    if hi is not None:
        v = min(v, hi)
    return int(v)


_REVIEW_FINDING = re.compile(r"^- \[\w+\] config/(\w+) \(\w+ by review\): (.*)$", re.M)


def _reply(request: Request, content: dict[str, Any]) -> Reply:
    """``content`` as a completion, with usage estimated at ~4 characters a token (the fake's
    fixed defaults would make every prompt look the same size)."""
    from loopwright.testing import ok

    shown = sum(len(str(m.get("content") or "")) for m in request.messages)
    return ok(content, prompt_tokens=shown // 4, completion_tokens=len(json.dumps(content)) // 4)


def offline_actor(request: Request) -> Reply:
    """A rule-based actor: meets every stated requirement, with a first guess of 30 s for a
    timeout out of range, and follows the reviewer's located findings."""
    sections = _sections(request)
    req = _section_json(sections, "Task input").get("requirements") or {}
    config = _section_json(sections, "Current artifacts").get("config") or {}
    want: dict[str, Any] = {}
    if "port" in req:
        want["port"] = req["port"]
    if "tls" in req:
        want["tls"] = req["tls"]
    if "min_replicas" in req or "max_replicas" in req:
        lo, hi = req.get("min_replicas"), req.get("max_replicas")
        want["replicas"] = _clamp(config.get("replicas"), lo, hi, lo or 1)
    levels = req.get("log_levels") or LOG_LEVELS
    if config.get("log_level") not in levels:
        want["log_level"] = levels[0]
    lo, hi = req.get("min_timeout_s"), req.get("max_timeout_s")
    timeout = config.get("timeout_s")
    if (
        not _is_int(timeout)
        or (lo is not None and timeout < lo)
        or (hi is not None and timeout > hi)
    ):
        want["timeout_s"] = _clamp(FIRST_GUESS_TIMEOUT_S, lo, hi, FIRST_GUESS_TIMEOUT_S)
    for part, message in _REVIEW_FINDING.findall(
        sections.get("Open findings from the checks on the last attempt", "")
    ):
        if part == "timeout_s" and "too short" in message:
            want["timeout_s"] = hi if hi is not None else 600
    edits = [
        {"artifact": "config", "part": k, "value": v} for k, v in want.items() if config.get(k) != v
    ]
    note = f"set {', '.join(e['part'] for e in edits) or 'nothing'}"
    return _reply(request, {"edits": edits, "note": note})


def offline_reviewer(request: Request) -> Reply:
    """A rule-based reviewer applying ``RUBRIC`` to the candidate config."""
    sections = _sections(request)
    goal = sections.get("Goal", "").lower()
    config = _section_json(sections, "Candidate artifacts").get("config") or {}
    problems: dict[str, str] = {}
    if "production" in goal:
        if config.get("tls") is not True:
            problems["tls"] = "production services must use TLS"
        if config.get("log_level") == "debug":
            problems["log_level"] = "production services never log at debug level"
        if not _is_int(config.get("replicas")) or config["replicas"] < 2:
            problems["replicas"] = "production services run more than one replica"
    timeout = config.get("timeout_s")
    long_jobs = "batch" in goal or "long" in goal
    if long_jobs and isinstance(timeout, int) and timeout < BATCH_TIMEOUT_FLOOR_S:
        problems["timeout_s"] = f"{timeout} s is too short for long batch jobs: allow minutes"
    for part in ("port", "replicas", "timeout_s"):
        if part in config and not _is_int(config[part]) and part not in problems:
            problems[part] = f"{part} must be an integer"
    findings = [
        {
            "artifact": "config",
            "part": part,
            "dimension": "workload",
            "message": msg,
            "severity": "error",
        }
        for part, msg in problems.items()
    ]
    score = max(0.0, 1.0 - 0.25 * len(findings))
    summary = "suits the workload" if not findings else "; ".join(problems.values())
    return _reply(
        request, {"score": score, "passed": not findings, "summary": summary, "findings": findings}
    )
