"""The credentials the OTLP exporter sends (``OTEL_EXPORTER_OTLP_HEADERS``) are registered as
secrets when tracing is configured (``_otel_env.register_otlp_headers``): a collector or a
proxy echoing one in an error, or a run's value quoting one, has it masked (invariant 9). The
variable's name does not look secret, and a key alone (no ``Bearer`` before it) has no shape:
neither was masked before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright._errors import LoopwrightError
from loopwright._redact import redact, redact_text
from loopwright.trace import provider_from_env
from loopwright.trace._otlp import export_otlp

TEAM = "hcK7Qm2Xw9Lr4Tz6Vb1N"  # Honeycomb's key, under an ordinary name
TOKEN = "axT5Gp8Rk3Wm6Yq1Zs4C"  # a bearer token, percent-encoded in the variable
DSN_TOKEN = "upD3Fh6Jk9Lm2Np5Qr8S"
HEADERS = (
    f"x-honeycomb-team={TEAM},Authorization=Bearer%20{TOKEN},x-honeycomb-dataset=production-traces"
)
ECHO = f"401: bad team {TEAM} (token {TOKEN})"


def _provider() -> Any:
    """A provider given to the ``Runtime`` (no exporter is built, nothing is sent): the
    ``otel`` extra's."""
    trace = pytest.importorskip("opentelemetry.sdk.trace")
    return trace.TracerProvider()


@pytest.fixture
def otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", HEADERS)
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)


def test_a_traced_runtime_masks_the_exporters_header_credentials(
    otel_env: None, tmp_path: Path
) -> None:
    assert redact_text(ECHO) == ECHO  # nothing registered yet
    provider = _provider()
    with lw.Runtime(str(tmp_path / "s.db"), tracer_provider=provider):
        pass
    provider.shutdown()
    assert redact_text(ECHO) == "401: bad team *** (token ***)"
    assert redact({"said": f"the collector said {TEAM}"}) == {"said": "the collector said ***"}
    # a header that names a dataset is a name, not a credential: not masked everywhere
    assert redact_text("production-traces") == "production-traces"


def test_the_environments_provider_registers_them_too(otel_env: None) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
    provider = provider_from_env()
    assert provider is not None
    provider.shutdown()
    assert redact_text(ECHO) == "401: bad team *** (token ***)"


def test_trace_traces_headers_and_a_dsn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:9/v1/traces")
    monkeypatch.setenv(
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS", f"uptrace-dsn=https://{DSN_TOKEN}@api.uptrace.dev"
    )
    provider = _provider()
    with lw.Runtime(str(tmp_path / "s.db"), tracer_provider=provider):
        pass
    provider.shutdown()
    assert redact_text(f"dsn token {DSN_TOKEN}") == "dsn token ***"


def test_a_header_given_to_export_otlp_is_registered(tmp_path: Path) -> None:
    # no such run: refused before anything is sent
    with lw.Runtime(str(tmp_path / "s.db")) as rt, pytest.raises(LoopwrightError):
        export_otlp(rt.store, "nosuchrun", "http://127.0.0.1:9", headers={"api-key": TEAM})
    assert redact_text(f"echo {TEAM}") == "echo ***"
