"""Redaction before the page's own cuts (SPEC §4 "Redaction sees everything once"), with the
real browser: where the page's code shortens a text (a title, a URL, an attribute, an
element's outerHTML, new text seen by the monitor, the line at the scan's budget) it never
holds the key, so it returns a margin past the cut that Python masks before cutting. A key
across any cut shows as ``***…``; nothing of it reaches the model, the journal or --json."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from test_redaction_once import TOKEN, pieces, stored
from web_site import goto, web_browser, web_site

from frontends.cli import main
from llmcore.secrets import MASK, Redactor
from tools.web.execute import web_execute_js
from tools.web.scan import web_scan

__all__ = ["web_browser", "web_site"]  # fixtures
BEFORE = 10  # characters of the key before each cut
# the page's caps (extract.js, serialize.js): a longer text keeps CAP - 1 characters and '…'
TITLE_CHARS, PAGE_URL_CHARS, HREF_CHARS, VALUE_CHARS, LABEL_CHARS = 100, 300, 100, 200, 80
HTML_CHARS, CHANGE_TEXT_CHARS = 2_000, 1_500
BUDGET = 3_000  # of the scan that cuts a paragraph
AFTER = ".and.the.text.after.it"
CUT = MASK + AFTER[:BEFORE - len(MASK)] + "…"  # a key across a cut, masked, then cut


def across(cap: int, lead: str = "") -> str:
    """A text whose key lies across the cut of a text capped at ``cap`` that the page makes
    of ``lead`` + this text."""
    return "a" * (cap - 1 - BEFORE - len(lead)) + TOKEN + AFTER


def cuts_page() -> str:
    head = '<div id="big">'
    return (f"<!doctype html><html><head><title>{across(TITLE_CHARS)}</title></head><body>"
            f'<a href="/x?k={across(HREF_CHARS, "/x?k=")}">a link</a>'
            f'<input aria-label="{across(LABEL_CHARS)}" value="{across(VALUE_CHARS)}">'
            f"<select><option>plain</option><option>{across(LABEL_CHARS)}</option></select>"
            f'<iframe src="data:text/html,{across(HREF_CHARS, "data:text/html,")}"></iframe>'
            f'{head}{across(HTML_CHARS, head)}</div>'
            f'<div id="later" hidden>{across(CHANGE_TEXT_CHARS)}</div></body></html>')


@pytest.fixture
def secret_site(web_site, web_browser, monkeypatch):
    """The site with the key on its pages; the browser's redactor knows the key."""
    monkeypatch.setattr(web_browser, "redact", Redactor([TOKEN]))
    web_site.pages["/cuts.html"] = cuts_page()
    web_site.pages["/budget.html"] = f"<p>{across(BUDGET)}</p>"
    return web_site


def test_a_key_across_any_cut_of_the_scan_is_masked_first(web_browser, secret_site):
    lead = secret_site("/cuts.html?q=")
    url = lead + across(PAGE_URL_CHARS, lead)
    went = web_execute_js(web_browser, f"location.href = {json.dumps(url)}", no_monitor=True)
    assert went["navigated"]["title"].endswith(CUT) and not pieces(json.dumps(went))
    text = web_browser.redact(web_scan(web_browser))  # whole keys: masked as the loop does
    assert not pieces(text)
    cut = f"a{re.escape(CUT)}"  # the end of a text cut across the key
    page_line = text.split("```text\n")[1].splitlines()[0]
    assert re.match(rf"\[page\] a+{cut} \| http://\S+/cuts.html\?q=a+{cut} \| ", page_line)
    assert re.search(rf'-> /x\?k=a+{cut} \[2\]input type=text "a+{cut}" value="a+{cut}"', text)
    assert re.search(rf"{{plain\* \| a+{cut}}}", text)  # the option's text
    assert re.search(rf"\[iframe data:text/html,a+{cut}]", text)
    goto(web_browser, secret_site("/budget.html"))
    text = web_scan(web_browser, budget=BUDGET)
    assert f"aaa{CUT}\n[TRUNCATED" in text and not pieces(web_browser.redact(text))


def test_a_key_across_the_cut_of_an_outer_html_or_new_text_is_masked_first(web_browser,
                                                                          secret_site):
    goto(web_browser, secret_site("/cuts.html"))
    got = web_execute_js(web_browser, "document.getElementById('big')")
    assert got["js_return"].endswith(f"aaa{CUT}") and not pieces(json.dumps(got))
    got = web_execute_js(web_browser, "const p = document.createElement('p'); p.textContent ="
                         " document.getElementById('later').textContent; document.body.append(p)")
    assert got["changes"]["text"].endswith(f"aaa{CUT}") and not pieces(json.dumps(got))


def test_a_run_keeps_every_part_of_a_key_on_a_page_from_model_journal_and_json(
        home, tmp_path, secret_site, capsys):
    (home / "config.yaml").write_text(yaml.safe_dump({"models": {"p": {
        "provider": "openai", "model": "m", "api_key": TOKEN}}}))
    steps = [{"tool_calls": [{"name": "web_execute_js", "args": {
                 "script": f"location.href = {json.dumps(secret_site('/cuts.html'))}"}}]},
             {"tool_calls": [{"name": "web_scan", "args": {}}]},
             {"tool_calls": [{"name": "web_execute_js", "args": {
                 "script": "document.getElementById('big')"}}]},
             {"text": "read it"}]
    model = Path(tmp_path / "model.yaml")
    model.write_text(yaml.safe_dump(steps))
    assert main(["-m", f"scripted:{model}", "--json", "read the page"]) == 0
    out = capsys.readouterr().out
    assert not pieces(out) and not pieces(stored(home)) and out.count(CUT) >= 5
    for journal in (home / "sessions").glob("*.jsonl"):
        assert main(["sessions", "show", "-v", journal.stem]) == 0
        assert not pieces(capsys.readouterr().out)
