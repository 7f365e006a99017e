"""Azure storage's account key under its name as a mapping key or a printed JSON key (no
``=``): ``AccountKey=…`` in a connection string was masked, ``{"AccountKey": "…"}`` was not."""

from __future__ import annotations

import json

import pytest

from loopwright._redact import redact, redact_text

_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@pytest.mark.parametrize(
    "name", ["AccountKey", "accountKey", "account_key", "accountkey", "storage_account_key"]
)
def test_an_account_key_is_masked_under_its_name(name: str) -> None:
    assert redact({name: _KEY}) == {name: "***"}
    printed = json.dumps({name: _KEY, "container": "logs"})
    assert redact_text(printed) == json.dumps({name: "***", "container": "logs"})
    assert redact_text(repr({name: _KEY})) == repr({name: "***"})


def test_a_name_that_only_holds_account_stays() -> None:
    assert redact({"account": "contoso", "account_name": "contoso"}) == {
        "account": "contoso", "account_name": "contoso"
    }  # fmt: skip
