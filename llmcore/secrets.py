"""Secrets, in one place: the redactor every writer uses and the environment policy every
child process gets (SPEC §4 "Tool safety rules").

``Redactor`` masks every key of every configured profile, the values of secret-named
environment variables, key-shaped strings and the user-info of URLs (``user:pass@``).
``EnvPolicy`` gives a child the runtime's environment minus secret-named variables. Both
are built once from the config by the composition root (``from_config``) and handed to the
writers and tools.
``find_secrets`` / ``redact_secrets`` detect secret-looking strings in stored text (lint, L4).
"""

from __future__ import annotations

import json
import os
import re
import string
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:
    from .config import Config

MASK = "***"
# a profile's key shorter than this (a local server's placeholder such as "ollama") is not
# masked in text, where it would corrupt words; `ga config check` points it out
KEY_MIN_CHARS = 16
SECRET_MIN_CHARS = 8  # an environment value shorter than this is not treated as a secret
SECRET_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL", re.IGNORECASE)
SDK_KEY_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN",
                # the OTLP exporter's headers carry a tracing backend's credentials
                "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS")
# key shapes redacted even when we do not know the key (e.g. echoed by a server);
# "sk-ant-" + 8 characters is "sk-" + 12, so one shape covers both vendors' keys
_KEY_RE = re.compile(r"\bsk-[A-Za-z0-9_\-]{12,}")
KEY_SHAPE_START = "sk-"  # every shape _KEY_RE masks starts so
KEY_SHAPE_MIN = 15  # the shortest string _KEY_RE masks
# a tail that is not yet a key shape but may grow into one
_SHAPE_BEGUN = re.compile(r"\bs(?:k(?:-[A-Za-z0-9_\-]{0,11})?)?\Z")
KEY_RUN_CHARS = string.ascii_letters + string.digits + "_-"  # the characters of a key shape
# a URL's user-info (user:pass, a token as user name): after "://", up to the "@"
_USERINFO_RE = re.compile(r"(?<=://)[^\s/?#@]+(?=@)")
_USERINFO_END = re.compile(r"[\s/?#@]")  # a character that ends a user-info (or the chance of one)
URL_BEGUN = (":/", ":")  # tails that may grow into "://"
USERINFO_MAX_CHARS = 512  # a longer run after "://" is not held back as a possible user-info
MARGIN_MAX = 512  # chars kept past a cut to mask a secret across it (``Redactor.margin``)


class EnvPolicy:
    """Which environment variables a child process inherits: all but the secret ones.

    Secret: a name matching ``*KEY*``, ``*SECRET*``, ``*TOKEN*``, ``*PASSWORD*``,
    ``*CREDENTIAL*`` (any case), an SDK key variable (the OTLP headers included), or a name in
    ``drop`` (every profile's ``api_key_env`` and ``tools.env_drop``). Names in ``keep``
    (``tools.env_keep``) pass.
    """

    def __init__(self, drop: Iterable[str] = (), keep: Iterable[str] = ()) -> None:
        self.drop = frozenset(drop) | frozenset(SDK_KEY_VARS)
        self.keep = frozenset(keep)

    @classmethod
    def from_config(cls, cfg: Config | None) -> EnvPolicy:
        if cfg is None:
            return cls()
        from .config import tools_settings

        tools = tools_settings(cfg)
        named = {p.api_key_env for p in cfg.profiles.values() if p.api_key_env}
        return cls(drop=named | set(tools.env_drop), keep=tools.env_keep)

    def is_secret(self, name: str) -> bool:
        """True for a variable whose value must be masked (``keep`` does not change that)."""
        return name in self.drop or SECRET_NAME.search(name) is not None

    def child_env(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment for a child: ``environ`` (default: ours) minus the secrets."""
        env = os.environ if environ is None else environ
        return {k: v for k, v in env.items() if k in self.keep or not self.is_secret(k)}


class Redactor:
    """Masks known secrets and key-shaped strings; ``redactor(text)`` is the masked text."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        known = {s for s in secrets if s and len(s) >= SECRET_MIN_CHARS}
        self.secrets = sorted(known, key=len, reverse=True)
        known = "|".join(re.escape(s) for s in self.secrets) or "(?!)"
        self._re = re.compile(f"(?P<known>{known})|(?P<shape>{_KEY_RE.pattern})"
                              f"|(?P<userinfo>{_USERINFO_RE.pattern})")
        self._by_first: dict[str, list[str]] = {}
        for secret in self.secrets:
            self._by_first.setdefault(secret[0], []).append(secret)
        self._first = re.compile("[" + "".join(map(re.escape, self._by_first)) + "]"
                                 if self.secrets else r"(?!)")
        self.longest = len(self.secrets[0]) if self.secrets else 0
        # a text shorter than this holds no known secret and no key shape (a dict key…)
        self.shortest = min([KEY_SHAPE_MIN, *map(len, self.secrets)])

    @classmethod
    def from_config(cls, cfg: Config | None, policy: EnvPolicy | None = None,
                    environ: Mapping[str, str] | None = None) -> Redactor:
        """Every profile's key (``api_key``, or the variable ``api_key_env`` names) of
        ``KEY_MIN_CHARS`` or more, and the value of every other secret-named variable in
        ``environ`` (default: ours)."""
        env = os.environ if environ is None else environ
        policy = policy or EnvPolicy.from_config(cfg)
        key_vars = set(SDK_KEY_VARS)
        keys: list[str | None] = []
        for prof in (cfg.profiles.values() if cfg is not None else ()):
            keys += [prof.api_key, env.get(prof.api_key_env or "")]
            key_vars.add(prof.api_key_env or "")
        keys += [env.get(name) for name in SDK_KEY_VARS]
        values = [v for k, v in env.items() if k not in key_vars and policy.is_secret(k)]
        return cls(values + [k for k in keys if k and len(k) >= KEY_MIN_CHARS])

    def __call__(self, text: str) -> str:
        if not text or not self.may_hold_secret(text):
            return text
        return self._re.sub(MASK, text)

    def may_hold_secret(self, text: str) -> bool:
        """A plain substring search first: most text (a 16 KB tool output) holds none, and
        the regex costs many times more per character."""
        if "@" in text and "://" in text:  # a URL's user-info, maybe
            return True
        if len(text) < self.shortest:
            return False
        return KEY_SHAPE_START in text or any(s in text for s in self.secrets)

    def data(self, value: Any) -> Any:
        """``value`` with every string inside it (dict keys and values, list items) masked."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return self._dict(value)
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        return value

    def _dict(self, value: dict) -> dict:
        """A dict masked in keys and values; keys masked alike stay apart (``*** #2``)."""
        out: dict = {}
        for k, v in value.items():
            key = self(k) if isinstance(k, str) else k
            n = 1
            while key in out:
                n += 1
                key = f"{self(k)} #{n}"
            out[key] = self.data(v)
        return out

    def dumps(self, value: Any, indent: int | None = None) -> str:
        """``value`` as JSON text, masked as data first: the one way a writer turns records
        into JSON. (Masking the JSON text would miss a key holding ``"`` or ``\\``, which
        JSON escapes.)"""
        return json.dumps(self.data(value), ensure_ascii=False, indent=indent,
                          default=lambda obj: self(str(obj)))

    def lines(self, text: str) -> list[int]:
        """Line numbers (1-based) where a known secret occurs."""
        if not self.secrets:
            return []
        known = re.compile("|".join(re.escape(s) for s in self.secrets))
        return sorted({text.count("\n", 0, m.start()) + 1 for m in known.finditer(text)})

    def begins_secret(self, tail: str) -> bool:
        """True when a known secret longer than ``tail`` begins with it."""
        return any(len(s) > len(tail) and s.startswith(tail)
                   for s in self._by_first.get(tail[:1], ()))

    def secret_starts(self, text: str, start: int) -> Iterable[int]:
        """Positions from ``start`` on where a known secret may begin, near enough to the
        end of ``text`` for the rest to be shorter than the longest secret."""
        for first in self._first.finditer(text, max(start, len(text) - self.longest + 1)):
            yield first.start()

    def stream(self) -> StreamRedactor:
        return StreamRedactor(self)

    @property
    def margin(self) -> int:
        """How much text past a cut ``head`` needs to mask a secret across the cut: the
        longest secret known, at most ``MARGIN_MAX`` (a longer one across a cut is left out
        whole)."""
        return min(max(self.longest, KEY_SHAPE_MIN), MARGIN_MAX)

    def head(self, text: str, at: int) -> str:
        """The first ``at`` characters of ``text`` as the redactor shows it (a mask is kept
        whole), ``text`` being all that is known of a text that may go on past its end (a
        page's text with a margin kept past a cut at ``at``): masked, then cut. A part of a
        secret that may go on past the end of ``text`` is left out, as a stream holds it."""
        found = list(self._re.finditer(text)) if self.may_hold_secret(text) else []
        pieces = _masked(text, 0, self._undecided(text, 0, found), found)
        shown, size = [], 0
        for i, piece in enumerate(pieces):
            if size >= at:
                break
            shown.append(piece if i % 2 else piece[:at - size])
            size += len(piece)
        return "".join(shown)

    def _undecided(self, ctx: str, base: int, found: list[re.Match]) -> int:
        """The leftmost position from ``base`` on, outside ``found``'s matches, from which
        the rest of ``ctx`` may still grow into a known secret, a key shape or a URL's
        user-info; ``len(ctx)`` when there is none."""
        end = len(ctx)
        cut = min(self._known_from(ctx, base, end, found), _userinfo_from(ctx, base))
        begun = _SHAPE_BEGUN.search(ctx, max(base, end - KEY_SHAPE_MIN))
        while begun and begun.start() < cut and _inside(begun.start(), found):
            begun = _SHAPE_BEGUN.search(ctx, begun.start() + 1)
        return min(cut, begun.start()) if begun else cut

    def _known_from(self, ctx: str, start: int, stop: int, found: list[re.Match]) -> int:
        """The leftmost position in [start, stop) outside ``found``'s matches from which the
        rest of ``ctx`` may grow into a known secret; ``len(ctx)`` when there is none."""
        for pos in self.secret_starts(ctx, start):
            if pos >= stop:
                break
            if not _inside(pos, found) and self.begins_secret(ctx[pos:]):
                return pos
        return len(ctx)


class StreamRedactor:
    """Masks a text that arrives in pieces: what is shown is what the redactor shows of the
    whole text, never a part of a secret. A tail that may still grow into a known secret or
    a key shape is held back until a later piece (or ``flush``) decides it; a text that ends
    inside a known secret masks that tail too. A key shape that is no known secret's
    beginning is masked as soon as it is one, and the rest of its run is dropped as it
    arrives, so what is held stays short and the work linear."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self.pending = ""  # raw text not shown yet
        self.before = ""  # the raw character just before ``pending`` (for word boundaries)
        self.masking_run = False  # inside a key shape already shown as MASK

    def feed(self, piece: str) -> str:
        if self.masking_run:
            rest = piece.lstrip(KEY_RUN_CHARS)
            if len(rest) < len(piece):
                self.before = piece[len(piece) - len(rest) - 1]
            if not rest:
                return ""
            self.masking_run, piece = False, rest
        return self._settle(self.pending + piece, final=False)

    def flush(self) -> str:
        """The rest, the stream being over; a known secret it ends inside is masked."""
        text, self.pending = self.pending, ""
        shown = "" if self.masking_run else self._settle(text, final=True)
        self.before, self.masking_run = "", False
        return shown

    def _settle(self, text: str, final: bool) -> str:
        """Show the part of ``text`` that no later piece can change; hold back the rest."""
        ctx, base = self.before + text, len(self.before)
        end = len(ctx)
        found = (list(self.redactor._re.finditer(ctx, base))
                 if self.redactor.may_hold_secret(ctx) else [])
        cut = self._cut_short(ctx, base, found) if final else self._open_from(ctx, base, found)
        shown = _masked(ctx, base, cut, found)
        last = found[-1] if found else None
        if last and last.lastgroup == "shape" and last.span() == (cut, end) and \
                self.redactor._known_from(ctx, cut, cut + 1, found) == end:
            shown.append(MASK)  # no known secret starts here: the whole run is masked
            self.masking_run, cut = True, end
        if final and cut < end:
            shown.append(MASK)  # the text ends inside a known secret: no part of it is shown
            cut = end
        self.pending, self.before = ctx[cut:], ctx[cut - 1:cut] or self.before
        return "".join(shown)

    def _cut_short(self, ctx: str, base: int, found: list[re.Match]) -> int:
        """Where a known secret cut short by the end of the text begins (a stream that broke
        off, or was interrupted by another event, in the middle of one); else the end."""
        start = self.redactor._known_from(ctx, base, len(ctx), found)
        return start if len(ctx) - start >= SECRET_MIN_CHARS else len(ctx)

    def _open_from(self, ctx: str, base: int, found: list[re.Match]) -> int:
        """The leftmost position a later piece may still change: where a known secret or a
        key shape may begin or go on, outside the matches already settled before it."""
        cut = self.redactor._undecided(ctx, base, found)
        if found and found[-1].lastgroup == "shape" and found[-1].end() == len(ctx):
            return min(cut, found[-1].start())
        return cut


def _userinfo_from(ctx: str, base: int) -> int:
    """Where a URL's user-info may still be growing in ``ctx`` from ``base`` on (held back
    with its "://", which the redactor needs to see): after the last "://" no character
    has ended it yet, or the text ends in ":" or ":/"; else the end."""
    end = len(ctx)
    at = ctx.rfind("://", max(base, end - USERINFO_MAX_CHARS))
    if at >= 0 and not _USERINFO_END.search(ctx, at + 3):
        return at
    for tail in URL_BEGUN:
        if ctx.endswith(tail) and end - len(tail) >= base:
            return end - len(tail)
    return end


def _masked(text: str, start: int, stop: int, found: list[re.Match]) -> list[str]:
    """``text[start:stop]`` as pieces, text and MASK in turn: each of ``found``'s matches
    that begins before ``stop`` masked whole."""
    pieces, pos = [], start
    for m in found:
        if m.start() >= stop:
            break
        pieces += [text[pos:m.start()], MASK]
        pos = m.end()
    pieces.append(text[pos:stop])
    return pieces


def _inside(pos: int, found: list[re.Match]) -> bool:
    """True when ``pos`` lies strictly inside one of the matches (never tried by the regex)."""
    for m in reversed(found):  # sorted and apart: only the last few can reach ``pos``
        if m.end() <= pos:
            return False
        if m.start() < pos:
            return True
    return False


class EventRedactor:
    """Masks a stream of event dicts: the text of ``streamed`` kinds (type -> field) through
    a ``StreamRedactor`` each, every other event whole. A held-back tail comes out as its
    own event before the next event of another kind."""

    def __init__(self, redactor: Redactor, streamed: Mapping[str, str]) -> None:
        self.redactor = redactor
        self.streamed = dict(streamed)
        self._streams: dict[str, StreamRedactor] = {}

    def __call__(self, event: dict) -> list[dict]:
        kind = event.get("type")
        out = []
        for other in [k for k in self._streams if k != kind]:
            rest = self._streams.pop(other).flush()
            if rest:
                out.append({"type": other, self.streamed[other]: rest})
        if kind not in self.streamed:
            return out + [self.redactor.data(event)]
        field = self.streamed[kind]
        stream = self._streams.get(kind) or self._streams.setdefault(kind, self.redactor.stream())
        shown = stream.feed(str(event.get(field, "")))
        return out + ([dict(event, **{field: shown})] if shown else [])


def mask_userinfo(url: str) -> str:
    """``url`` with its user-info masked (``http://***@host/v1``), for showing a URL."""
    return _USERINFO_RE.sub(MASK, url)


def home_redactor(home: str | Path | None, config_path: str | None = None) -> Redactor:
    """The redactor of a run or a command: the keys of the config ga reads (``config_path``,
    else ``$GA_CONFIG``, else the home's) and the secret-named environment values."""
    from .config import open_config

    return Redactor.from_config(open_config(config_path, home))


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
        r"(?i)(?:\b|_)(?:api[_-]?key|secret|token|passw(?:or)?d|credentials?)\b['\"]?\s*[:=]\s*"
        r"['\"]?(?=[^\s'\"]*\d)[A-Za-z0-9_\-./+=]{16,}")),
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
