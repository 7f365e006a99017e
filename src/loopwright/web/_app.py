"""The FastAPI application: ``create_app`` makes it and registers each module's routes (pages,
``/api``, signing in, the live stream, actions); the Host names it answers to."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

import jinja2
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from .._authority import check_person
from .._errors import ConfigError
from .._money_text import usd, usd_digits
from .._stored_run_words import OVER_BUDGET_LEGEND, over_budget_words
from .._verdict import held_out_words
from ..store import open_store
from ._actions import ActionDeps, register_actions
from ._api import Decision, register_api  # noqa: F401  (Decision re-exported)
from ._auth import Auth, check_token
from ._cards import register_card_routes, register_part_image_route
from ._compare_view import register_compare
from ._context import MAX_RESUMES, RESUMING, WebContext, check_max_resumes  # noqa: F401
from ._guard import (  # noqa: F401  (re-exported: their home before the split)
    CSP,
    FORM_TYPES,
    JSON_TYPE,
    OPEN_PATHS,
    PROBE_PATHS,
    WRITES,
    install_guard,
)
from ._http import BodyLimit, Flash, HeadAsGet, HostCheck, check_body_limit
from ._live import MAX_STREAMS, MAX_STREAMS_PER_PERSON, install_live
from ._notify import NotifyConfig
from ._pages import register_pages
from ._people_views import register_people_routes
from ._pictures import register_picture_routes
from ._queries import MAX_PAGE, PAGE_SIZE, page_size  # noqa: F401  (re-exported)
from ._refusals import install_refusals
from ._run_page import (  # noqa: F401  (re-exported; patch them in _run_page, which reads them)
    CHECKPOINTS_READ,
    CYCLES_SHOWN,
    EVENTS_SHOWN,
    VERSIONS_SHOWN,
)
from ._settle_routes import register_settle_routes
from ._sign_in import register_sign_in
from ._values import exact, reveal
from ._waterfall import duration, install_waterfall

__all__ = ["LOOPBACK_HOSTS", "allowed_host_names", "create_app"]

HERE = Path(__file__).parent
# The largest request body read (``loopwright ui --max-body-mib``): a larger one is answered 413
# before anything reads it. A request, a note, an edited part fit many times over; a picture
# part edited by hand may not: raise it for that.
MAX_BODY = 1024 * 1024
# The Host names a loopback dashboard answers to. A DNS-rebinding page reaches 127.0.0.1 under
# its own name (evil.example), so its requests carry that name and are refused before any read.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1")


def allowed_host_names(extra: Iterable[str] = (), *, field: str = "allowed_hosts") -> list[str]:
    """The loopback names plus ``extra`` (the ``--host`` given, ``--allow-host`` names), in
    the form a ``Host`` header carries them: lower case, IPv6 addresses also in brackets, and
    ``*.example.com`` for a domain's subdomains."""
    names = list(LOOPBACK_HOSTS)
    for raw in extra:
        name = raw.strip().lower()
        if name.startswith("[") and name.endswith("]"):
            name = name[1:-1]
        wildcard = name.startswith("*.") and "*" not in name[2:] and len(name) > 2
        if not name or ("*" in name and not wildcard) or any(c in name for c in "/ @?#"):
            raise ConfigError(
                f"{raw!r} is not a host name (give a name, an address or *.domain)",
                field=field,
            )
        if wildcard and "." not in name[2:].strip(".") and name != "*.localhost":
            # every site under a top-level domain: any page there could rebind its name to
            # this address and read the runs (on loopback, reads need no token)
            raise ConfigError(
                f"{raw!r} covers a whole top-level domain, every site under it: name a domain "
                "of your own (*.example.com)",
                field=field,
            )
        names.extend([name, f"[{name}]"] if ":" in name else [name])
    return list(dict.fromkeys(names))


def _isotime(ts: float | None) -> str:
    """A stored time (UTC seconds) as ``2026-12-01 06:44:03Z``."""
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ts))


def create_app(
    store_url: str | os.PathLike[str] | None,
    *,
    token: str,
    identity: str = "operator",
    require_token_for_reads: bool = False,
    allowed_hosts: Iterable[str] = (),
    notify: NotifyConfig | None = None,
    max_body: int = MAX_BODY,
    max_streams: int = MAX_STREAMS,
    max_resumes: int = MAX_RESUMES,
    max_streams_per_person: int = MAX_STREAMS_PER_PERSON,
) -> FastAPI:
    """The dashboard over the store at ``store_url``; ``token`` authorises every mutation (and
    every read when ``require_token_for_reads``); decisions are recorded as ``identity``.
    Requests whose ``Host`` is neither a loopback name nor one of ``allowed_hosts`` get 400.
    ``notify``: webhooks to post when a request appears (``_notify``). A request body over
    ``max_body`` bytes is answered 413 without being read. At most ``max_streams``
    ``/api/events`` streams are open at once, ``max_streams_per_person`` of one person's (a store with users);
    one more is 503 with ``Retry-After``. At most
    ``max_resumes`` runs resume in this server's threads at once: a resume, rollback, edit or
    rerun asking to start one more is 503 with ``Retry-After``."""
    check_token(token)  # before anything is opened: a bad token is one line
    # the name every action is recorded under where the store has no users: loopwright's own
    # (``loopwright``, ``policy:…``) or one that prints as another refused, as a typed --by is
    # (a dashboard started --as loopwright cancelled and rolled back under it)
    check_person(identity, field="identity")
    check_body_limit(max_body)
    for n, name in ((max_streams, "max_streams"),
                    (max_streams_per_person, "max_streams_per_person")):  # fmt: skip
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError(f"{n!r} is not a number of streams (1 or more)", field=name)
    check_max_resumes(max_resumes)
    hosts = allowed_host_names(allowed_hosts)
    store = open_store(store_url)
    auth = Auth(token, identity, require_token_for_reads=require_token_for_reads, store=store)
    # Swagger UI and ReDoc load their assets from a CDN: /docs is rendered here instead, from
    # the same OpenAPI document (served at /openapi.json), so nothing comes from the internet.
    app = FastAPI(
        title="loopwright",
        version="0.1.0",
        description="Runs, approvals, metrics.",
        docs_url=None,
        redoc_url=None,
    )
    app.state.auth = auth
    app.state.store = store
    app.state.resumes = []
    app.state.resuming = {}  # run id -> [asked again], its resume thread alive (_context)
    app.state.max_resumes = max_resumes
    # Every value a page writes has the characters that reorder text written out (``reveal``);
    # a form's own value is marked ``|exact`` and written as it is.
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")), autoescape=True, finalize=reveal
    )
    env.filters["exact"] = exact
    env.filters["isotime"] = _isotime
    env.filters["duration"] = duration
    env.filters["usd"] = usd
    env.filters["usd_digits"] = usd_digits
    # a run's held-out verdict in words, the same on every page (``_verdict.held_out_words``)
    env.globals["held_words"] = held_out_words
    # a spend past its budget in words, else None (``_stored_run_words``; fenced56b)
    env.globals["over_words"] = over_budget_words
    env.globals["over_legend"] = OVER_BUDGET_LEGEND
    templates = Jinja2Templates(env=env)
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    install_guard(app, auth)

    # A body over ``max_body``: 413, declared or found as it streams, the rest never read.
    app.add_middleware(BodyLimit, max_body=max_body)
    # A foreign Host is refused before the guard or any route runs.
    app.add_middleware(HostCheck, allowed_hosts=hosts)
    # Outermost of all: HEAD is the GET of the same address, refused where a GET is, no body.
    app.add_middleware(HeadAsGet)
    # /api/events and the store poller behind it; webhooks when ``notify`` names URLs.
    install_live(app, store, notify=notify, max_streams=max_streams,
                 max_streams_per_person=max_streams_per_person)  # fmt: skip
    register_picture_routes(app, store)  # pictures kept as blobs (adapters.openai_images)

    url = os.fspath(store_url) if isinstance(store_url, os.PathLike) else store_url
    ctx = WebContext(app, store, url, auth, templates, Flash())
    install_refusals(app, ctx)  # a refusal's page for a browser, JSON for the API
    register_pages(app, ctx)
    register_sign_in(app, ctx)

    # Approval cards' images, run actions with confirmation, the comparison page (issue 19).
    register_card_routes(app, store)
    register_part_image_route(app, store)
    register_actions(
        app,
        ActionDeps(
            store,
            auth,
            ctx.page,
            ctx.require_form_write,
            ctx.require_api_write,
            ctx.resume_later,
            ctx.flash,
            ctx.room_to_resume,
        ),
    )
    register_compare(app, store, ctx.page)
    register_people_routes(app, store, auth, ctx.page)  # /audit, /authority, /api/me (issue 21)

    install_waterfall(app, store, ctx.page)  # a model call's page; /api/runs/{id}/calls, /spans

    register_settle_routes(app, ctx)  # the run page's settle form (settle54)
    register_api(app, ctx)  # --- JSON API

    return app
