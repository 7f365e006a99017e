"""``loopwright ui``: the dashboard over the store (extra ``loopwright[ui]``)."""

from __future__ import annotations

import logging
import math
import os
import socket
from typing import TYPE_CHECKING, Annotated

import typer

from .._errors import ConfigError
from .._redact_logs import mask
from ._app import StoreOpt, app
from ._notify_opts import (
    NotifyEndsOpt,
    NotifyEveryOpt,
    NotifyOpt,
    NotifyRoundsOpt,
    NotifySecretOpt,
    notify_config,
    notify_line,
)
from ._stores import existing_store

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["ui"]


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound and listening here so that a busy port or an unknown host
    is one line (uvicorn would log a traceback and exit 3), and the address printed answers."""
    if not 0 <= port <= 65535:
        raise ConfigError(f"{port} is not a port (0-65535; 0 picks a free one)", field="--port")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigError(f"cannot listen on {host!r}: {exc}", field="--host") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        # Listening before the start line names the address: a client that connects on
        # reading it waits in the backlog (uvicorn's default size) until the server runs,
        # where a socket bound only refused it.
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        import errno

        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"port {port} on {host} is in use (another `loopwright ui`?); pick another "
                "with --port",
                field="--port",
            ) from None
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


@app.command()
def ui(
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8321,
    store: StoreOpt = None,  # (the shared option: `--store ""` started on the default store)
    identity: Annotated[
        str | None,
        typer.Option("--as", help="Name decisions are recorded under ($LOOPWRIGHT_UI_IDENTITY)."),
    ] = None,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            metavar="NAME",
            help="Another Host name the dashboard answers to (a proxy's or the machine's name; "
            "repeatable). Loopback names and --host are always allowed.",
        ),
    ] = None,
    notify: NotifyOpt = None,
    notify_secret: NotifySecretOpt = None,
    notify_run_ends: NotifyEndsOpt = False,
    notify_every: NotifyEveryOpt = 1.0,
    notify_rounds: NotifyRoundsOpt = 10,
    public_url: Annotated[
        str | None,
        typer.Option(
            "--public-url",
            metavar="URL",
            help="The dashboard's URL as people reach it (behind a proxy), for the links in "
            "notifications (default: http://HOST:PORT/).",
        ),
    ] = None,
    max_body_mib: Annotated[
        float,
        typer.Option(
            "--max-body-mib",
            metavar="MIB",
            help="The largest request body accepted, in MiB (default 1); a larger one is "
            "answered 413 without being read.",
        ),
    ] = 1.0,
    max_resumes: Annotated[
        int,
        typer.Option(
            "--max-resumes",
            metavar="N",
            help="Runs resumed in the server's threads at once (default 16); a resume, rerun, "
            "rollback or edit asking for one more is answered 503 with Retry-After.",
        ),
    ] = 16,
) -> None:
    """Serve the dashboard and HTTP API.

    Prints a sign-in token once unless $LOOPWRIGHT_UI_TOKEN is set; on a non-loopback --host
    every page needs the token. Requests naming another Host are refused (DNS rebinding).
    """
    import secrets

    try:
        import uvicorn  # noqa: F401 - the extra is installed

        from ..web import create_app
        from ..web._app import allowed_host_names
        from ..web._auth import check_token
    except ImportError as exc:
        raise ConfigError(
            f"the dashboard needs its extra: pip install 'loopwright[ui]' ({exc})", field="ui"
        ) from None
    token = os.environ.get("LOOPWRIGHT_UI_TOKEN") or secrets.token_urlsafe(24)
    check_token(token, "$LOOPWRIGHT_UI_TOKEN")
    name = identity or os.environ.get("LOOPWRIGHT_UI_IDENTITY") or "operator"
    from .._authority import check_person  # (not at the CLI's start-up)

    check_person(name, field="--as" if identity else "$LOOPWRIGHT_UI_IDENTITY")
    private = not _is_loopback(host)
    names = [host, *(allow_host or [])]
    if host in ("0.0.0.0", "::"):  # every interface: the machine's own names too
        names += [socket.gethostname(), socket.getfqdn()]
    hosts = allowed_host_names(names, field="--allow-host")
    max_body = int(max_body_mib * 1024 * 1024) if math.isfinite(max_body_mib) else 0
    if max_body < 1024:
        raise ConfigError(
            f"{max_body_mib} MiB is not a body limit (at least 0.001 MiB)", field="--max-body-mib"
        )
    if max_resumes < 1:
        raise ConfigError(f"{max_resumes} is not a number of runs (1 or more)",
                          field="--max-resumes")  # fmt: skip
    notify_cfg = notify_config(
        notify,
        notify_secret,
        notify_run_ends,
        public_url,
        every_s=notify_every,
        rounds=notify_rounds,
    )
    sock = _listen(host, port)  # before the store is opened: a refused start touches nothing
    try:
        url = existing_store(store)  # a mistyped --store is refused, not created empty
        if notify_cfg is not None and notify_cfg.link_base is None:
            from dataclasses import replace

            notify_cfg = replace(notify_cfg, link_base=_base_url(host, sock))
        application = create_app(
            url,
            token=token,
            identity=name,
            require_token_for_reads=private,
            allowed_hosts=hosts,
            notify=notify_cfg,
            max_body=max_body,
            max_resumes=max_resumes,
        )
        if notify_cfg is not None:
            typer.echo(notify_line(notify_cfg))
        _serve(application, sock, host, url, name, token, private, hosts)
    finally:
        sock.close()


def _base_url(host: str, sock: socket.socket) -> str:
    """The dashboard's URL for links: the machine's name when listening everywhere."""
    if host in ("0.0.0.0", "::"):
        host = socket.getfqdn()
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{sock.getsockname()[1]}"


def _serve(
    application: FastAPI,
    sock: socket.socket,
    host: str,
    url: str,
    name: str,
    token: str,
    private: bool,
    hosts: list[str],
) -> None:
    import uvicorn

    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    from .._redact import redact_text

    # The dashboard's Auth knows whether the store has users (read once, at start).
    auth = getattr(getattr(application, "state", None), "auth", None)
    people = bool(getattr(auth, "users_mode", False))
    who = "each person as themself" if people else f"decisions as {name!r}"
    typer.echo(  # the store URL's password masked, as every other command shows it
        f"loopwright ui: http://{shown}:{port}/  (store {redact_text(url)}, {who})"
    )
    if people:
        typer.echo(
            "this store has users: each person signs in with their own token "
            "(loopwright users token NAME); every page needs a sign-in"
        )
    elif "LOOPWRIGHT_UI_TOKEN" not in os.environ:
        typer.echo(f"sign-in token (shown once): {token}")
    if private and not people:
        typer.echo("non-loopback host: every page and API call needs the token")
    if private:
        typer.echo(f"answers to Host: {', '.join(hosts)} (add names with --allow-host)")
    # The server's own loggers masked as loopwright's are (invariant 9): uvicorn logs a route's
    # failure with its traceback (an exception's message may quote a key), and an access line
    # would hold the query string. Their filters outlive the logging config uvicorn installs.
    for logger in ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi"):
        mask(logging.getLogger(logger))
    # No access log: a token in a URL (an old /login?token= link) must not end up in it. The
    # socket is already bound.
    # Open event streams (/api/events) would hold a graceful shutdown forever: a few seconds.
    # The client's address is the connection's: uvicorn would take X-Forwarded-For from
    # 127.0.0.1, and every client of a loopback dashboard is 127.0.0.1 (the audit log's origin,
    # the once-per-source record of refused sign-ins would be whatever a header says).
    uvicorn.run(
        application,
        fd=sock.fileno(),
        proxy_headers=False,
        access_log=False,
        log_level="warning",
        timeout_graceful_shutdown=3,
    )
