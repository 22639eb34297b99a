"""Pages busy from their first script never leave the browser unusable: the call fails at
its timeout saying so, and the next call can navigate away or open a tab; and no wait of a
web call, a navigation's included, outlives a signal (SPEC §9).

These pages run their own browser: a tab they leave busy is replaced, not reused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from web_site import (
    BUSY_PAGES,
    EXIT_WAIT,
    close_tabs,
    need_browser,
    short_temp,
    web_browser,
    web_site,
)

from tools.web.execute import web_execute_js
from tools.web.scan import web_scan

__all__ = ["short_temp", "web_browser", "web_site"]
ROOT = Path(__file__).resolve().parent.parent
HELD = 60.0  # seconds the test site holds back /held.html (released when the test ends)

TITLES = {"/spin.html": "Spin", "/spin-frame.html": "Spin frame",
          "/alert-loop.html": "Alert loop", "/huge.html": "Huge"}


@pytest.mark.parametrize("path", [p for p in BUSY_PAGES if p in TITLES])
def test_a_page_busy_from_its_first_script_fails_the_call_and_the_next_one_goes_on(
        web_browser, web_site, path):
    busy = web_site(path)
    r = web_execute_js(web_browser, f"location.href = '{busy}'", timeout=1)
    moved = r["navigated"]
    assert moved["to"] == busy
    assert moved.get("title", TITLES[path]) == TITLES[path], moved  # the title or none: no error
    if path != "/huge.html" or r["status"] == "failed":  # a huge page answers now and then
        assert r["status"] == "failed" and "did not answer" in r["error"], r
    away = web_site("/nav2.html")
    r = web_execute_js(web_browser, f"location.href = '{away}'")
    assert r["status"] == "success", r
    assert r["navigated"]["to"] == away and r["navigated"]["title"] == "Page two"
    assert "PAGE-TWO-BODY" in web_scan(web_browser)


def test_after_a_busy_page_the_next_call_can_open_a_tab(web_browser, web_site):
    r = web_execute_js(web_browser, f"location.href = '{web_site('/alert-loop.html')}'",
                       timeout=1)
    assert r["status"] == "failed", r
    r = web_execute_js(web_browser, f"window.open('{web_site('/nav1.html')}'); 1")
    assert r["status"] == "success" and r["newTabs"][0]["url"] == web_site("/nav1.html"), r
    assert "load the page again" in r["note"]  # the busy tab was replaced, and it is said
    opened = next(t for t, short in web_browser.short.items() if short == r["newTabs"][0]["id"])
    out = web_scan(web_browser, switch_tab_id=r["newTabs"][0]["id"])
    assert "PAGE-ONE-BODY" in out
    close_tabs(web_browser, opened)


def test_a_page_whose_script_was_ended_stays_in_its_tab(web_browser, web_site):
    first = web_execute_js(web_browser, f"location.href = '{web_site('/spin.html')}'",
                           timeout=1)
    assert first["status"] == "failed" and "the tab is usable" in first["error"], first
    r = web_execute_js(web_browser, "document.body.innerText", no_monitor=True)
    assert r["status"] == "success" and "SPIN-AFTER" in r["js_return"], r  # it loaded on
    assert r["tab_id"] == first["tab_id"] and "note" not in r


def test_an_aborted_call_ends_its_waits_on_the_page(web_browser, web_site):
    r = web_execute_js(web_browser, f"location.href = '{web_site('/late.html')}'")
    assert r["status"] == "success", r
    abort = threading.Event()
    abort.set()
    out = web_scan(web_browser, abort=abort)
    assert out["status"] == "error" and "aborted" in out["msg"], out
    r = web_execute_js(web_browser, f"location.href = '{web_site('/nav2.html')}'", abort=abort)
    assert r["status"] == "failed" and "aborted" in r["error"], r


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143),
                                       (signal.SIGHUP, 129)])
def test_a_signal_ends_the_wait_for_a_navigation(tmp_path, short_temp, web_site, sig, code):
    """The page the script goes to never answers: ga waits for the navigation when the
    signal comes, and the wait ends at once (the front end waits ABORT_GRACE_SECONDS for
    the task before it gives up on it and says so)."""
    need_browser()
    arrived, release = threading.Event(), threading.Event()
    web_site.server.hooks["/held.html"] = lambda: (arrived.set(), release.wait(HELD))
    go = {"name": "web_execute_js",
          "args": {"script": f"location.href = '{web_site('/held.html')}'"}}
    model = tmp_path / "model.yaml"
    model.write_text(yaml.safe_dump([{"text": "<summary>go</summary>", "tool_calls": [go]},
                                     {"text": "there"}]), encoding="utf-8")
    env = {**os.environ, "GA_HOME": str(tmp_path / "h"), "TMPDIR": str(short_temp)}
    proc = subprocess.Popen([sys.executable, str(ROOT / "ga.py"), "--json", "-m",
                             f"scripted:{model}", "go there"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert arrived.wait(EXIT_WAIT * 3), "the navigation never reached the site"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=EXIT_WAIT * 3)
    finally:
        release.set()
        web_site.server.hooks.pop("/held.html")
        proc.kill()
    assert proc.returncode == code, err
    assert "did not stop in time" not in err
    result = next(json.loads(line)["data"] for line in out.splitlines()
                  if '"tool_result"' in line)
    assert result["status"] == "failed" and "aborted" in result["error"], result
