"""The webhook options shared by ``loopwright ui`` and ``loopwright worker``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from ..web._notify import NotifyConfig

__all__ = [
    "NotifyEndsOpt",
    "NotifyEveryOpt",
    "NotifyOpt",
    "NotifyRoundsOpt",
    "NotifySecretOpt",
    "notify_config",
    "notify_line",
]

NotifyOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--notify",
        metavar="URL",
        envvar="LOOPWRIGHT_NOTIFY",
        help="POST a JSON message to this webhook when a run asks for a decision "
        "(chat tools' incoming webhooks accept it; repeatable; the environment variable "
        "takes URLs separated by spaces and keeps them off the command line).",
    ),
]
NotifySecretOpt = Annotated[
    str | None,
    typer.Option(
        "--notify-secret",
        metavar="SECRET",
        envvar="LOOPWRIGHT_NOTIFY_SECRET",
        help="Sign webhook bodies with HMAC-SHA256 under this secret (prefer the environment "
        "variable: a command line is visible to other users).",
    ),
]
NotifyEndsOpt = Annotated[
    bool,
    typer.Option("--notify-run-ends", help="Also notify the --notify URLs when a run ends."),
]

NotifyEveryOpt = Annotated[
    float,
    typer.Option(
        "--notify-every",
        metavar="SECONDS",
        help="Seconds between two reads of the settlings to post to each --notify URL "
        "(default 1; more than 0, at most 3600).",
    ),
]
NotifyRoundsOpt = Annotated[
    int,
    typer.Option(
        "--notify-rounds",
        metavar="N",
        help="Give a settling or an approval request up after its post to a --notify URL "
        "failed N rounds in a row (each round 6 tries over about 31 s; default 10): recorded "
        "not delivered (`loopwright audit`), and the later ones go on.",
    ),
]


def notify_config(
    urls: list[str] | None,
    secret: str | None,
    run_ends: bool,
    link_base: str | None,
    link_option: str = "--public-url",
    *,
    every_s: float = 1.0,
    rounds: int = 10,
) -> NotifyConfig | None:
    """The notifier's settings, or None without ``--notify`` (a bad URL: one line, exit 2).
    ``link_base`` (the dashboard's URL, from ``link_option``) must be an http(s) URL even
    without ``--notify``: it is checked when given."""
    from .._errors import ConfigError

    if link_base is not None:
        from ..web._notify import check_webhook_url

        check_webhook_url(link_base, link_option)
    from ..web._notify import NotifyConfig

    # checked without --notify too: a typo is said, not kept for the day --notify is added
    NotifyConfig.of([], settled_every_s=every_s, settled_rounds=rounds)
    if not urls:
        if run_ends:
            raise ConfigError("needs --notify URL", field="--notify-run-ends")
        return None
    return NotifyConfig.of(
        urls,
        secret=secret,
        link_base=link_base,
        run_ends=run_ends,
        settled_every_s=every_s,
        settled_rounds=rounds,
    )


def notify_line(cfg: NotifyConfig) -> str:
    """What the command prints at start (hosts only: a webhook's path is a credential)."""
    from ..web._notify import url_where

    where = ", ".join(url_where(u) for u in cfg.urls)
    signed = (
        "signed (X-Loopwright-Signature)"
        if cfg.secret
        else "unsigned: set LOOPWRIGHT_NOTIFY_SECRET to sign them"
    )
    return f"webhooks: new approval requests{' and run ends' if cfg.run_ends else ''} to {where}, {signed}"
