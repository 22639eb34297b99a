"""Streamed text never shows a part of a secret (SPEC §4): a known key or a key-shaped
string split across pieces of any size is masked whole on the console, in --json deltas,
in the journal, in L4 and in ``ga sessions show``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from llm_server import Reply, llm_server, write_config

from frontends.cli import main
from llmcore.secrets import MASK, Redactor

__all__ = ["llm_server"]
# real-shaped keys: an Anthropic key from the config, an OpenAI key from the environment,
# and a key shape no one configured
ANT_KEY = "sk-ant-api03-" + "Qx7_bR2-kLm9" * 8 + "AAzz"
OPENAI_KEY = "sk-proj-" + "T3a_Bc4-Zy8w" * 10
UNKNOWN_KEY = "sk-proj-" + "n0tC0nf1gur3d" * 5
REPLY = (f"The configured key is {ANT_KEY}, keep it safe. From the environment: "
         f"{OPENAI_KEY}\nand a stray one ({UNKNOWN_KEY}) sk-short s sk")
SHOWN = (f"The configured key is {MASK}, keep it safe. From the environment: {MASK}\n"
         f"and a stray one ({MASK}) sk-short s sk")
CHUNK_SIZES = range(1, 17)
KEYS = (ANT_KEY, OPENAI_KEY, UNKNOWN_KEY)


def shows_no_key_part(text: str) -> bool:
    """True when no 8 characters of any key's body appear in ``text``."""
    return not any(key[i:i + 8] in text for key in KEYS for i in range(6, len(key) - 7))


@pytest.fixture
def keys(home, monkeypatch) -> Path:
    """The Anthropic key in a profile, the OpenAI key in the SDK's variable."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    path = home / "config.yaml"
    path.write_text(yaml.safe_dump({"models": {"claude": {
        "provider": "anthropic", "model": "claude-sonnet-4-6", "api_key": ANT_KEY}}}))
    return path


@pytest.mark.parametrize("size", CHUNK_SIZES)
def test_a_stream_split_at_any_size_shows_no_part_of_a_key(size):
    stream = Redactor([ANT_KEY, OPENAI_KEY]).stream()
    pieces = [stream.feed(REPLY[i:i + size]) for i in range(0, len(REPLY), size)]
    assert "".join(pieces) + stream.flush() == SHOWN


def test_a_stream_holds_a_key_shape_until_it_is_decided():
    stream = Redactor().stream()
    assert stream.feed("a key: sk-pr") == "a key: "
    assert stream.feed("oj-abcd") == ""  # not yet long enough to be a key shape
    assert stream.feed("efgh") == MASK  # now it is one: masked whole, once
    assert stream.feed("lmnopqrstu") == "" and stream.feed("vw. done") == ". done"
    assert stream.feed(" task-sk-") == " task-" and stream.flush() == "sk-"


def test_a_stream_masks_a_long_known_secret_with_other_characters():
    secret = "pw/with+signs=and sk-shaped-part-inside"
    stream = Redactor([secret, secret[:12]]).stream()
    text = f"[{secret}] [{secret[:12]}] [{secret[:25]}]"
    shown = "".join(stream.feed(c) for c in text) + stream.flush()
    assert shown == Redactor([secret, secret[:12]])(text)
    assert shown == f"[{MASK}] [{MASK}] [{MASK}s=and sk-shap]"


def test_a_stream_keeps_word_boundaries_across_pieces():
    stream = Redactor().stream()
    shown = [stream.feed(p) for p in ("mask", "sk-abcdefghijklmnop", " x")]
    assert "".join(shown) + stream.flush() == "masksk-abcdefghijklmnop x"  # no key: no \b


def test_a_stream_that_ends_inside_a_known_key_shows_no_part_of_it():
    redact = Redactor([ANT_KEY, "hunter2-password"])
    stream = redact.stream()
    assert stream.feed(f"the key is {ANT_KEY[:20]}") == "the key is "
    assert stream.flush() == MASK  # the stream broke off (or another event came) mid-key
    stream = redact.stream()
    assert stream.feed("hunt") == "" and stream.flush() == "hunt"  # too short to tell


def test_a_long_key_shaped_run_is_not_held_in_memory():
    stream = Redactor().stream()
    assert stream.feed("sk-" + "a" * 20) == MASK
    for _ in range(1000):
        assert stream.feed("b" * 64) == ""
        assert len(stream.pending) == 0
    assert stream.feed(" end") + stream.flush() == " end"


def _json_text(out: str) -> str:
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return "".join(e.get("delta", "") for e in events if e["type"] == "text")


def test_every_writer_masks_a_streamed_key_at_any_chunk_size(keys, home, tmp_path, capsys):
    for size in CHUNK_SIZES:
        model = tmp_path / f"m{size}.yaml"
        model.write_text(yaml.safe_dump([{"text": REPLY, "chunk": size}]))
        assert main(["-m", f"scripted:{model}", "--json", "show the key"]) == 0
        out, err = capsys.readouterr()
        assert _json_text(out) == SHOWN and shows_no_key_part(out + err)
        assert main(["-m", f"scripted:{model}", "show the key"]) == 0
        out, err = capsys.readouterr()
        assert SHOWN in out + err and shows_no_key_part(out + err)
    journals = sorted((home / "sessions").glob("*.jsonl"))
    assert len(journals) == 2 * len(CHUNK_SIZES)
    for journal in journals:
        events = [json.loads(line) for line in journal.read_text().splitlines()]
        assert SHOWN in "".join(e.get("text", "") for e in events if e["type"] == "text")
    stored = [p.read_text() for p in journals]
    stored += [p.read_text() for p in (home / "memory" / "L4_raw_sessions").rglob("*.*")]
    assert all(shows_no_key_part(text) for text in stored)
    assert main(["sessions", "show", journals[-1].stem]) == 0
    shown = capsys.readouterr().out
    assert MASK in shown and shows_no_key_part(shown)


def test_a_real_provider_stream_masks_keys_at_any_chunk_size(keys, home, llm_server, capsys):
    config = write_config(home, llm_server, p={"provider": "openai", "model": "m",
                                               "api_key": "local-server-key"},
                          claude={"provider": "anthropic", "model": "m", "api_key": ANT_KEY})
    for size in CHUNK_SIZES:
        llm_server.queue(Reply(text=REPLY, chunk=size))
        assert main(["--config", config, "-m", "p", "--json", "show the key"]) == 0
        out, err = capsys.readouterr()
        assert _json_text(out) == SHOWN and shows_no_key_part(out + err)

