"""OpenTelemetry traces of every task, model request and tool call (SPEC §15): a plugin on
the loop's hooks (``frontends.spans``), started by the standard ``OTEL_*`` variables.

Off by default and free when off: ``start()`` reads the environment and, unless tracing is
asked for, imports nothing of OpenTelemetry and registers no hook. Exporters: ``otlp``
(http/protobuf unless the protocol variable says grpc) and ``console`` (to stderr, never
stdout). Message content is recorded only with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``, through the agent's redactor.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
from typing import Any, Mapping

EXPORTERS_VAR = "OTEL_TRACES_EXPORTER"
ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOL_VARS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
TIMEOUT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
DISABLED_VAR = "OTEL_SDK_DISABLED"
CAPTURE_VAR = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
KNOWN_EXPORTERS = ("otlp", "console")
INSTALL = 'pip install "genericagent[otel]"'
GRPC_INSTALL = "pip install opentelemetry-exporter-otlp-proto-grpc"
EXPORT_TIMEOUT_SECONDS = 1.0  # one export's wait for the endpoint, unless the variables say
SHARED: dict[int, Any] = {}  # by pid: the one tracer of a process whose sessions share it


# ---- whether, and where to ---------------------------------------------------------------
def wanted(env: Mapping[str, str]) -> list[str]:
    """The exporters the environment asks for (``[]``: tracing is off). On when
    ``OTEL_TRACES_EXPORTER`` names one or an OTLP endpoint is set; ``none`` and
    ``OTEL_SDK_DISABLED=true`` win."""
    if env.get(DISABLED_VAR, "").strip().lower() == "true":
        return []
    names = [n.strip().lower() for n in env.get(EXPORTERS_VAR, "").split(",") if n.strip()]
    if "none" in names:
        return []
    if names:
        return list(dict.fromkeys(names))
    return ["otlp"] if any(env.get(var, "").strip() for var in ENDPOINT_VARS) else []


def start(env: Mapping[str, str] | None = None) -> Any:
    """A ``spans.Tracer`` when the environment asks for traces, else None (then nothing is
    imported). Asked for but not installed, or no exporter ga knows: one line on stderr, and
    the run goes on without traces."""
    env = os.environ if env is None else env
    names = wanted(env)
    if not names:
        return None
    try:
        from .spans import Tracer

        exporters = [made for name in names if (made := _exporter(name, env)) is not None]
    except ImportError as e:
        grpc = "grpc" in (e.name or "")
        what, install = ("its gRPC exporter", GRPC_INSTALL) if grpc else ("OpenTelemetry",
                                                                          INSTALL)
        print(f"ga: tracing was asked for ({_asked(env)}) but {what} is not installed: "
              f"{install}; the run goes on without traces", file=sys.stderr)
        return None
    if not exporters:
        return None
    return Tracer(exporters, capture=env.get(CAPTURE_VAR, "").strip().lower() == "true")


def shared() -> Any:
    """The tracer every session of this process shares (``start()``'s, or None), closed when
    the process exits: a batch worker runs task after task, and a tracer closed after each
    would wait on the exporter every time. Kept by pid: a forked child starts its own."""
    pid = os.getpid()
    if pid not in SHARED:
        SHARED[pid] = tracer = start()
        if tracer is not None:
            atexit.register(tracer.close)
    return SHARED[pid]


def _asked(env: Mapping[str, str]) -> str:
    var = EXPORTERS_VAR if env.get(EXPORTERS_VAR) else next(v for v in ENDPOINT_VARS if env.get(v))
    return f"{var}={env[var]}"


def _exporter(name: str, env: Mapping[str, str]) -> Any:
    """The span exporter ``name`` stands for; an unknown name is reported and left out."""
    if name == "console":  # stderr: stdout belongs to the answer or to --json events
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stderr)
    if name != "otlp":
        print(f"ga: {EXPORTERS_VAR} names {name!r}, which ga cannot export to (it knows "
              f"{', '.join(KNOWN_EXPORTERS)} and none); left out", file=sys.stderr)
        return None
    timeout = next((float(env[v]) for v in TIMEOUT_VARS if _number(env.get(v))),
                   EXPORT_TIMEOUT_SECONDS)
    protocol = next((env[v].strip().lower() for v in PROTOCOL_VARS if env.get(v)), "")
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:  # http/protobuf, not the SDK's own default of gRPC
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    quiet_exporter_logs(env)
    return OTLPSpanExporter(timeout=timeout)


def _number(text: str | None) -> bool:
    try:
        return text is not None and float(text) > 0
    except ValueError:
        return False


class FirstProblem(logging.Handler):
    """The exporter's complaints (an endpoint that does not answer) as one line on stderr for
    the run, instead of a warning per batch and retry."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(logging.ERROR)  # the retries' warnings end in an error, or in success
        self.endpoint = endpoint
        self.told = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.told:
            return
        self.told = True
        print(f"ga: tracing: spans could not be sent to {self.endpoint} "
              f"({record.getMessage().rstrip('.')}); check that a collector listens there "
              "(OTEL_EXPORTER_OTLP_ENDPOINT)", file=sys.stderr)


def quiet_exporter_logs(env: Mapping[str, str]) -> None:
    """The OTLP exporter's warnings become one ``FirstProblem`` line."""
    exporter_log = logging.getLogger("opentelemetry.exporter")
    if any(isinstance(h, FirstProblem) for h in exporter_log.handlers):
        return
    endpoint = env.get(ENDPOINT_VARS[0]) or (
        env.get(ENDPOINT_VARS[1], "http://localhost:4318").rstrip("/") + "/v1/traces")
    exporter_log.addHandler(FirstProblem(endpoint))
    exporter_log.propagate = False
