"""Secrets: masking known keys and key-shaped strings, finding them in stored text, and
the environment values that look like keys."""

from __future__ import annotations

import os
import re
from typing import Iterable

MASK = "***"
MIN_SECRET_LEN = 6
# key shapes redacted even when we do not know the key (e.g. echoed by a server)
_KEY_RE = re.compile(r"\b(sk-[A-Za-z0-9_\-]{12,}|sk-ant-[A-Za-z0-9_\-]{8,})")


def redact(text: str, secrets: Iterable[str | None]) -> str:
    for secret in secrets:
        if secret and len(secret) >= MIN_SECRET_LEN:
            text = text.replace(secret, MASK)
    return _KEY_RE.sub(MASK, text)


SECRET_ENV = re.compile(r"(API_KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)
SECRET_MIN_CHARS = 8


def env_secrets() -> list[str]:
    """Values of environment variables that look like keys; never written to a journal."""
    return sorted((v for k, v in os.environ.items()
                   if SECRET_ENV.search(k) and len(v) >= SECRET_MIN_CHARS), key=len, reverse=True)


REDACTED = "[REDACTED]"

SECRET_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("private key block", re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:.*?-----END [A-Z ]*PRIVATE KEY-----)?", re.S)),
    ("sk- API key", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}")),
    ("AWS access key id", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_\w{40,})")),
    ("Slack token", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}")),
    ("Google API key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("assigned secret", re.compile(
        r"(?i)\b(?:api[_-]?key|secret|token|passw(?:or)?d)\b['\"]?\s*[:=]\s*['\"]?"
        r"(?=[^\s'\"]*\d)[A-Za-z0-9_\-./+=]{16,}")),
)


def find_secrets(text: str) -> list[tuple[int, str]]:
    """(line number, kind) for each secret-looking string in ``text``."""
    hits = []
    for kind, pat in SECRET_PATTERNS:
        for m in pat.finditer(text):
            hits.append((text.count("\n", 0, m.start()) + 1, kind))
    return sorted(set(hits))


def redact_secrets(text: str) -> str:
    for _kind, pat in SECRET_PATTERNS:
        text = pat.sub(REDACTED, text)
    return text
