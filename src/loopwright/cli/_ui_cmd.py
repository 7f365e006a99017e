"""``loopwright ui``: the dashboard over the store (extra ``loopwright[ui]``)."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from .._errors import ConfigError
from ._app import app

__all__ = ["ui"]


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@app.command()
def ui(
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8321,
    store: Annotated[
        str | None, typer.Option("--store", help="Store URL or path (default: $LOOPWRIGHT_STORE).")
    ] = None,
    identity: Annotated[
        str | None,
        typer.Option("--as", help="Name decisions are recorded under ($LOOPWRIGHT_UI_IDENTITY)."),
    ] = None,
) -> None:
    """Serve the dashboard and HTTP API.

    Prints a sign-in token once unless $LOOPWRIGHT_UI_TOKEN is set; on a non-loopback --host
    every page needs the token.
    """
    import secrets

    from ..store import resolve_store_url

    try:
        import uvicorn

        from ..web import create_app
    except ImportError as exc:
        raise ConfigError(
            f"the dashboard needs its extra: pip install 'loopwright[ui]' ({exc})", field="ui"
        ) from None
    token = os.environ.get("LOOPWRIGHT_UI_TOKEN") or secrets.token_urlsafe(24)
    name = identity or os.environ.get("LOOPWRIGHT_UI_IDENTITY") or "operator"
    private = not _is_loopback(host)
    url = resolve_store_url(store)
    application = create_app(url, token=token, identity=name, require_token_for_reads=private)
    shown = f"[{host}]" if ":" in host else host
    from .._redact import redact_text

    typer.echo(  # the store URL's password masked, as every other command shows it
        f"loopwright ui: http://{shown}:{port}/  (store {redact_text(url)}, decisions as {name!r})"
    )
    if "LOOPWRIGHT_UI_TOKEN" not in os.environ:
        typer.echo(f"sign-in token (shown once): {token}")
    if private:
        typer.echo("non-loopback host: every page and API call needs the token")
    # No access log: a /login?token=… URL must not end up in it.
    uvicorn.run(application, host=host, port=port, access_log=False, log_level="warning")
