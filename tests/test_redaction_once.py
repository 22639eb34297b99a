"""Redaction sees everything once (SPEC §4): secrets as dict keys, values redacted before
they are shortened, URL user-info masked wherever a URL is shown, and short local keys left
alone in text (and pointed out by ``ga config check``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from llm_server import Reply, llm_server, write_config
from web_site import web_browser, web_site

from frontends.cli import main
from ga import CODE_OUTPUT_CHARS, GenericAgent
from llmcore.config import load_config
from llmcore.scripted import ScriptedClient
from llmcore.secrets import MASK, Redactor
from tools.files import MAX_LINE_CHARS
from tools.sandbox import Sandbox
from tools.web.execute import web_execute_js
from tools.web.scan import URL_CHARS, web_scan

__all__ = ["llm_server", "web_browser", "web_site"]
KEY = "key-of-profile-b-22222222"
TOKEN = "tok-Q1w2E3r4T5y6U7i8O9p0"  # every 8 characters of it are found nowhere else
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
    data["browser"] = {"cdp_url": f"http://bob:{PASSWORD}@127.0.0.1:9333"}
    Path(cfg).write_text(yaml.safe_dump(data))
    assert main(["--config", cfg, "-m", "p", "config", "check"]) == 0
    out = capsys.readouterr().out
    assert "at http://***@127.0.0.1" in out and PASSWORD not in out
    assert "attach to http://***@127.0.0.1:9333" in out


def test_a_diagnostic_masks_the_credentials_of_an_attach_url(home, tmp_path, capsys):
    (home / "config.yaml").write_text(yaml.safe_dump({"browser": {
        "cdp_url": f"http://bob:{PASSWORD}@127.0.0.1:9"}}))  # nothing listens there
    model = script(tmp_path, [{"tool_calls": [{"name": "web_scan", "args": {}}]},
                              {"text": "no browser"}])
    assert main(["-m", model, "--json", "look"]) == 0
    out, err = capsys.readouterr()
    assert "no browser answers at http://***@127.0.0.1:9" in err
    assert PASSWORD not in err + out + stored(home)


def test_a_key_a_server_echoes_is_masked_before_its_error_is_shortened(home, llm_server,
                                                                      capsys):
    cfg = write_config(home, llm_server, p={"provider": "openai", "model": "m",
                                            "api_key": TOKEN, "max_retries": 0})
    llm_server.queue(Reply(status=401, message="x" * 290 + f" {TOKEN} is not a valid key"))
    assert main(["--config", cfg, "-m", "p", "hi"]) == 1
    err = capsys.readouterr().err
    assert f"x {MASK}" in err and not pieces(err) and not pieces(stored(home))


SAID = "x" * 290 + f" {TOKEN} is not a valid key"  # the key across the 300-character cut
NOT_JSON = "{not json " + "x" * 185 + f" {TOKEN}"  # the key across the 200-character snippet


@pytest.mark.parametrize("kind, reply", [
    ("openai-responses", Reply(text="partial answer", error_after=3, message=SAID,
                               error_type="invalid_request_error")),  # an error event
    ("openai", Reply(text="partial answer", error_after=3, body=NOT_JSON)),  # a broken event
    ("openai-responses", Reply(text="partial answer", error_after=0, body=NOT_JSON)),
    ("anthropic", Reply(page=("application/json", json.dumps(
        {"type": "error", "error": {"type": "invalid_request_error", "message": SAID}})))),
    ("openai", Reply(page=("application/json", json.dumps({"error": {"message": SAID}})))),
], ids=["error-event", "broken-event", "broken-first-event", "error-as-200", "json-as-200"])
def test_a_key_in_a_streamed_error_is_masked_before_it_is_shortened(home, llm_server, capsys,
                                                                   kind, reply):
    cfg = write_config(home, llm_server, p={"provider": kind, "model": "m", "api_key": TOKEN,
                                            "max_retries": 0})
    llm_server.queue(reply)
    main(["--config", cfg, "-m", "p", "--json", "hi"])
    out, err = capsys.readouterr()
    assert MASK in err + out and not pieces(err) and not pieces(out)
    assert not pieces(stored(home))


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


# ---- redact, then shorten ----------------------------------------------------------------
def pieces(text: str, secret: str = TOKEN, size: int = 8) -> list[str]:
    """The parts of ``secret`` (``size`` characters or more) that ``text`` shows."""
    return [secret[i:i + size] for i in range(len(secret) - size + 1) if secret[i:i + size] in text]


def sent_result(client: ScriptedClient) -> str:
    return client.calls[1]["messages"][0]["tool_results"][0]["content"]


def test_a_head_is_masked_then_cut_and_never_shows_part_of_a_key_that_may_go_on():
    redact = Redactor([TOKEN])
    text = "a" * 10 + TOKEN + " after"
    assert redact.head(text, 14) == "a" * 10 + MASK + " "  # across the cut: masked, then cut
    assert redact.head(text[:20], 14) == "a" * 10  # may go on past the margin: left out
    assert redact.head("see https://user:pass", 12) == "see https"  # a user-info, maybe
    assert redact.head("the sk-abcdefghijklmnop key", 10) == f"the {MASK} ke"  # a key shape
    assert redact.head("plain text, no key", 5) == "plain"


def test_a_page_cut_past_its_marks_is_masked_without_a_tail():
    from tools.web.cuts import CUTS_MAX, PageCuts

    cuts = PageCuts(Redactor([TOKEN]))
    first, last = chr(cuts.first), chr(cuts.first + CUTS_MAX)  # the last mark has no tail
    text = f"{'a' * 10}{TOKEN[:6]}{first} | {'b' * 10}{TOKEN[:6]}{last} end"
    assert cuts.restore({"text": text}, [TOKEN[6:] + " more"]) == {
        "text": f"{'a' * 10}{MASK} mo… | {'b' * 10}… end"}


def test_piped_stdin_is_masked_before_it_is_cut(config, home, tmp_path, monkeypatch, capsys):
    from frontends import task_input

    data = tmp_path / "build.log"
    data.write_text("x" * 30 + f" {KEY} and the rest of the log\n")
    monkeypatch.setattr(task_input, "STDIN_MAX_BYTES", 40)  # the cut falls inside the key
    with open(data) as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        assert main(["-m", script(tmp_path, [{"text": "ok"}]), "--json", "why"]) == 0
    text = stored(home) + capsys.readouterr().out
    assert f"x {MASK} and" in text and "[stdin was cut at 40 bytes" in text
    assert not pieces(text, KEY)


def test_code_output_is_masked_before_its_head_is_cut(home):
    head = (CODE_OUTPUT_CHARS - 40) // 2  # the head Output keeps (tools/code_run.py)
    code = f"print('x' * {head - 10} + {TOKEN!r} + 'y' * {2 * CODE_OUTPUT_CHARS})"
    client = ScriptedClient([{"tool_calls": [{"name": "code_run", "args": {"script": code}}]},
                             {"text": "ran"}])
    agent = GenericAgent(client, home=home, cwd=Path.cwd(), redactor=Redactor([TOKEN]))
    events = list(agent.run_task("print it"))
    sent = sent_result(client)
    assert "chars omitted" in sent and f"xx{MASK}" in sent and not pieces(sent)
    assert not pieces(json.dumps(events))


@pytest.mark.parametrize("inline", [False, True])
def test_inline_output_and_long_lines_are_masked_before_they_are_cut(home, inline):
    line = "a" * (MAX_LINE_CHARS - 10) + TOKEN + "b" * 100
    Path("wide.txt").write_text(line + "\n")
    call = ({"name": "code_run", "args": {"inline_eval": True, "script": (
        f"print('x' * {(CODE_OUTPUT_CHARS - 40) // 2 - 10} + {TOKEN!r} + 'y' * 30000)")}}
            if inline else {"name": "file_read", "args": {"path": "wide.txt"}})
    client = ScriptedClient([{"tool_calls": [call]}, {"text": "read"}])
    agent = GenericAgent(client, home=home, cwd=Path.cwd(), redactor=Redactor([TOKEN]),
                         sandbox=Sandbox("full-access"))  # inline code runs only unconfined
    list(agent.run_task("read it"))
    sent = sent_result(client)
    assert MASK in sent and not pieces(sent)
    assert ("chars omitted" if inline else "[TRUNCATED]") in sent


def test_the_agent_gives_its_browser_its_redactor(home):
    agent = GenericAgent(ScriptedClient([]), home=home, redactor=Redactor([TOKEN]))
    assert agent.browser.redact is agent.redactor  # built, not started


def test_a_tab_url_is_masked_before_it_is_shortened(web_browser, web_site, monkeypatch):
    monkeypatch.setattr(web_browser, "redact", Redactor([TOKEN]))
    url = web_site(f"/nav1.html?token={TOKEN}&page=2")
    assert url.index(TOKEN) < URL_CHARS < url.index(TOKEN) + len(TOKEN)  # the cut is inside
    went = web_execute_js(web_browser, f"location.href = {json.dumps(url)}", no_monitor=True)
    assert went["status"] == "success" and not pieces(json.dumps(went))
    listed = web_scan(web_browser, tabs_only=True)
    assert "token=***" in listed and not pieces(listed)
    shown = web_execute_js(web_browser, "location.href + ' ' + 'z'.repeat(20000)", budget=2000)
    assert "chars omitted" in json.dumps(shown) and not pieces(json.dumps(shown))
