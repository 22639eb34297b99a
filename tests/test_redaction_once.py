"""Redaction sees everything once (SPEC §4): secrets as dict keys, values redacted before
they are shortened, URL user-info masked wherever a URL is shown, and short local keys left
alone in text (and pointed out by ``ga config check``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from llm_server import Reply, llm_server, write_config

from frontends.cli import main
from llmcore.config import load_config
from llmcore.secrets import MASK, Redactor

__all__ = ["llm_server"]
KEY = "key-of-profile-b-22222222"
PASSWORD = "gw-s3cret-pass"  # basic-auth password of a gateway, in its base_url


@pytest.fixture
def config(home) -> Path:
    path = home / "config.yaml"
    path.write_text(yaml.safe_dump({"models": {
        "b": {"provider": "anthropic", "model": "m", "api_key": KEY},
        "local": {"provider": "openai", "model": "llama3", "api_key": "ollama",
                  "base_url": "http://127.0.0.1:11434/v1"}}}))
    return path


def script(tmp_path: Path, steps: list[dict]) -> str:
    p = tmp_path / "model.yaml"
    p.write_text(yaml.safe_dump(steps))
    return f"scripted:{p}"


def stored(home: Path) -> str:
    """Everything the run wrote under the home: journals, model logs, the L4 archive."""
    return "".join(p.read_text() for p in home.rglob("*")
                   if p.is_file() and p.suffix in (".jsonl", ".log", ".md", ".txt"))


# ---- dict keys -----------------------------------------------------------------------------
KEYED = '''
from pathlib import Path
from agent_loop import StepOutcome

def register(api):
    def do_lookup(self, what: str):
        """Look a token up.

        Args:
            what: The token's file.
        """
        token = Path(what).read_text().strip()
        return StepOutcome({token: "v", "nested": [{token: 1}]}, next_prompt="\\n")
    api.tool(do_lookup)
'''


def test_a_secret_as_a_dict_key_is_masked_for_every_writer(config, home, tmp_path, capsys):
    Path("token.txt").write_text(KEY)
    plugin = tmp_path / "keyed.py"
    plugin.write_text(KEYED)
    model = script(tmp_path, [{"tool_calls": [{"name": "lookup", "args": {"what": "token.txt"}}]},
                              {"text": "looked"}])
    for flags in (["--json"], ["-v"]):
        assert main(["-m", model, "--plugin", str(plugin), *flags, "look it up"]) == 0
        shown = "".join(capsys.readouterr())
        assert '"***": "v"' in shown and KEY not in shown
    for journal in (home / "sessions").glob("*.jsonl"):
        assert main(["sessions", "show", "-v", journal.stem]) == 0
        shown = capsys.readouterr().out
        assert '"***": "v"' in shown and KEY not in shown
    text = stored(home)
    assert '\\"***\\": \\"v\\"' in text and KEY not in text  # the result the model got


def test_secret_keys_that_mask_alike_stay_apart():
    redact = Redactor([KEY, "other-secret-key-333"])
    assert redact.data({KEY: 1, "other-secret-key-333": 2, "plain": 3}) == {
        MASK: 1, f"{MASK} #2": 2, "plain": 3}


# ---- URL user-info -------------------------------------------------------------------------
def test_url_user_info_is_masked_in_text_and_streams():
    redact = Redactor()
    text = (f"GET http://alice:{PASSWORD}@10.0.0.5/v1 and https://ghp_tok3n@github.com/x "
            "then git@github.com:me/r and mail bob@example.com")
    want = ("GET http://***@10.0.0.5/v1 and https://***@github.com/x then git@github.com:me/r"
            " and mail bob@example.com")
    assert redact(text) == want
    for size in range(1, 12):
        stream = redact.stream()
        shown = "".join(stream.feed(text[i:i + size]) for i in range(0, len(text), size))
        assert shown + stream.flush() == want, size


def test_base_url_credentials_are_masked_in_errors_journal_logs_and_config(home, llm_server,
                                                                           capsys):
    cfg = write_config(home, llm_server, p={"provider": "openai", "model": "m",
                                            "max_retries": 0})
    data = yaml.safe_load(Path(cfg).read_text())
    data["models"]["p"]["base_url"] = data["models"]["p"]["base_url"].replace(
        "http://", f"http://alice:{PASSWORD}@")
    Path(cfg).write_text(yaml.safe_dump(data))
    llm_server.queue(Reply(status=404, message="no such model"))
    assert main(["--config", cfg, "-m", "p", "hi"]) == 1
    err = capsys.readouterr().err
    assert "http://***@127.0.0.1" in err and PASSWORD not in err
    assert "http://***@127.0.0.1" in stored(home) and PASSWORD not in stored(home)
    assert main(["--config", cfg, "-m", "p", "config", "check"]) == 0
    out = capsys.readouterr().out
    assert "at http://***@127.0.0.1" in out and PASSWORD not in out


# ---- short local keys ----------------------------------------------------------------------
def test_a_short_local_key_does_not_corrupt_text(config, home, tmp_path, capsys):
    redact = Redactor.from_config(load_config(config, required=True), environ={})
    assert redact("install ollama then run ollama serve") == "install ollama then run ollama serve"
    assert redact(f"the key {KEY}") == f"the key {MASK}"
    Path("notes.txt").write_text("install ollama then run ollama serve\n")
    model = script(tmp_path, [{"tool_calls": [{"name": "file_read", "args": {
        "path": "notes.txt"}}]}, {"text": "read"}])
    assert main(["-m", model, "--json", "read the notes"]) == 0
    assert "install ollama then run ollama serve" in capsys.readouterr().out
    assert "install ollama then run ollama serve" in stored(home)


def test_config_check_points_out_a_key_too_short_to_mask(config, capsys):
    assert main(["config", "check", "-m", "b"]) == 0
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and notes[0].startswith("note: local: its key has fewer than 16")
    assert "ollama" not in out.replace("'ollama'", "")  # the key itself is not printed


def test_a_short_key_from_an_sdk_variable_is_not_masked_in_text(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "lm-studio")
    monkeypatch.setenv("BUILD_TOKEN", "tok-12345678")  # not a key: the 8-character rule
    redact = Redactor.from_config(None)
    assert redact("start lm-studio, token tok-12345678") == f"start lm-studio, token {MASK}"


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]
