"""web_execute_js on a real Chromium: values, changes, navigation, tabs, dialogs (SPEC §9)."""

from __future__ import annotations

import json
import re
import socket
import threading
from types import SimpleNamespace

from genutil import drain
from web_site import close_tabs, goto, web_browser, web_site

from ga import GenericAgent, GenericAgentHandler
from llmcore.scripted import ScriptedClient
from tools.web.execute import resolve_script, web_execute_js
from tools.web.scan import web_scan
from tools.web.tab import TERMINATE_WAIT

__all__ = ["web_browser", "web_site"]


def test_last_value_top_level_await_and_return(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    r = web_execute_js(web_browser, "const a = await Promise.resolve(20);\na + 1", no_monitor=True)
    assert r["status"] == "success" and r["js_return"] == 21 and r["tab_id"]
    assert isinstance(r["ms"], int)
    r = web_execute_js(web_browser, "if (document.title) { return document.title }",
                       no_monitor=True)
    assert r["js_return"] == "Page one"


def test_a_promise_or_thenable_left_as_the_last_value_is_awaited(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    r = web_execute_js(web_browser, "fetch('/nav2.html').then(r => r.status)", no_monitor=True)
    assert r["status"] == "success" and r["js_return"] == 200, r
    r = web_execute_js(web_browser, "({then(done) { setTimeout(() => done({n: 5}), 10) }})",
                       no_monitor=True)
    assert r["js_return"] == {"n": 5}, r
    r = web_execute_js(web_browser, "Promise.reject(new Error('x'))", no_monitor=True)
    assert r["status"] == "failed" and r["error"] == "Error: x", r
    r = web_execute_js(web_browser, "return fetch('/nav2.html').then(r => r.ok)",
                       no_monitor=True)
    assert r["js_return"] is True, r


def test_a_promise_left_as_the_last_value_keeps_to_the_timeout(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    r = web_execute_js(web_browser, "new Promise(() => {})", timeout=1, no_monitor=True)
    assert r["status"] == "failed" and "1 s timeout" in r["error"], r
    assert web_execute_js(web_browser, "6 * 7", no_monitor=True)["js_return"] == 42


def test_values_are_serialized_for_the_model(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    r = web_execute_js(web_browser, "[document.querySelector('a'), document.querySelectorAll('p'),"
                       " window, {n: 1, nested: {deep: [1, 2]}}, undefined, NaN]", no_monitor=True)
    link, paras, win, obj, undef, nan = r["js_return"]
    assert link == '<a href="/nav2.html">Go to page two</a>'
    assert paras == ["<p>PAGE-ONE-BODY</p>"]
    assert win == f"[Window {web_site('/nav1.html')}]"
    assert obj == {"n": 1, "nested": {"deep": [1, 2]}} and undef is None and nan == "NaN"


def test_a_thrown_error_is_a_failed_result_with_its_first_line(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    r = web_execute_js(web_browser, "throw new TypeError('bad thing\\nsecond line')")
    assert r["status"] == "failed" and r["error"] == "TypeError: bad thing"
    r = web_execute_js(web_browser, "ga(999)")
    assert r["status"] == "failed" and "no element [999]" in r["error"]
    r = web_execute_js(web_browser, "document.querySelector('a').click(); missing.call()")
    assert r["status"] == "failed" and r["error"].startswith("ReferenceError: missing")
    assert r["navigated"]["to"] == web_site("/nav2.html")  # what it did before it threw


def test_monitor_reports_dom_changes_and_new_text(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    r = web_execute_js(web_browser, "setTimeout(() => { const p = document.createElement('p');"
                       " p.textContent = 'ADDED-LATER'; document.body.append(p); }, 100); 1")
    assert r["changes"]["added"] >= 1 and "ADDED-LATER" in r["changes"]["text"]
    r = web_execute_js(web_browser, "document.title", no_monitor=True)
    assert "changes" not in r


def test_click_reports_the_navigation_and_the_next_scan_shows_the_new_page(web_browser,
                                                                          web_site):
    goto(web_browser, web_site("/nav1.html"))
    text = web_scan(web_browser)
    n = re.search(r'\[(\d+)\]link "Go to page two"', text).group(1)
    r = web_execute_js(web_browser, f"ga({n}).click()")
    assert r["status"] == "success"
    assert r["navigated"] == {"from": web_site("/nav1.html"), "to": web_site("/nav2.html"),
                              "title": "Page two"}
    assert "PAGE-TWO-BODY" in web_scan(web_browser)


def test_navigation_mid_script_is_waited_for_and_reported(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    url = web_site("/nav2.html")
    r = web_execute_js(web_browser, f"location.href = '{url}';\n"
                       "await new Promise(r => setTimeout(r, 5000));\n'never returned'")
    assert r["status"] == "success" and r["js_return"] is None
    assert "did not run" in r["note"]
    assert r["navigated"]["to"] == url and r["navigated"]["title"] == "Page two"
    assert r["ms"] < 5000


def test_a_page_that_fails_to_load_or_a_blocked_navigation_is_said_so(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/"
    r = web_execute_js(web_browser, f"location.href = '{closed}'")
    assert r["navigated"]["to"] == closed and "did not load" in r["navigated"]["note"]
    r = web_execute_js(web_browser, "location.href = 'data:text/html,<p>x</p>'")
    assert "blocked or cancelled" in r["navigated"]["note"] and r["ms"] < 5000


def test_window_open_lists_the_new_tab_and_switching_works(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    home = web_execute_js(web_browser, "1", no_monitor=True)["tab_id"]
    r = web_execute_js(web_browser, "document.querySelector('button').click()")
    assert len(r["newTabs"]) == 1
    new = r["newTabs"][0]
    assert new["id"] != home and new["url"] == web_site("/nav2.html")
    out = web_scan(web_browser, switch_tab_id=new["id"])
    assert json.loads(out.split("\n")[0])["metadata"]["active_tab"] == new["id"]
    assert "PAGE-TWO-BODY" in out
    r = web_execute_js(web_browser, "location.pathname", switch_tab_id=home)
    assert r["tab_id"] == home and r["js_return"] == "/nav1.html"
    close_tabs(web_browser, web_browser.tab(new["id"]).target_id)
    web_browser.tab(home)


def test_alert_confirm_and_prompt_never_block(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    r = web_execute_js(web_browser, "alert('A'); [confirm('B?'), prompt('C?', 'dflt')]")
    assert r["status"] == "success" and r["js_return"] == [True, "dflt"]
    assert r["dialogs"] == [{"type": "alert", "message": "A"},
                            {"type": "confirm", "message": "B?"},
                            {"type": "prompt", "message": "C?"}]


def test_a_dialog_in_a_new_tab_blocks_neither_it_nor_its_opener(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    r = web_execute_js(web_browser, f"window.open('{web_site('/dialog-popup.html')}'); 1")
    assert r["status"] == "success", r
    popup = r["newTabs"][0]["id"]
    out = web_scan(web_browser, switch_tab_id=popup)
    assert "POPUP-DIALOG-BODY" in out, out
    r = web_execute_js(web_browser, "document.title", switch_tab_id=r["tab_id"])
    assert r["status"] == "success" and r["js_return"] == "Page one", r
    close_tabs(web_browser, next(t for t, short in web_browser.short.items() if short == popup))


def test_runaway_script_is_terminated_and_the_tab_stays_usable(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    r = web_execute_js(web_browser, "while (true) {}", timeout=1)
    assert r["status"] == "failed" and "terminated" in r["error"]
    assert web_execute_js(web_browser, "6 * 7", no_monitor=True)["js_return"] == 42
    assert "PAGE-ONE-BODY" in web_scan(web_browser)


def test_a_script_awaiting_forever_ends_at_its_timeout(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    r = web_execute_js(web_browser, "await new Promise(r => {})", timeout=1, no_monitor=True)
    assert r["status"] == "failed" and "timeout" in r["error"]
    assert r["ms"] < (1 + TERMINATE_WAIT / 2) * 1000  # not a wait for the termination too
    assert web_execute_js(web_browser, "6 * 7", no_monitor=True)["js_return"] == 42


def test_a_script_that_closes_its_own_tab_is_told_so(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    opened = web_execute_js(web_browser, "document.querySelector('button').click()")
    popup = opened["newTabs"][0]["id"]
    r = web_execute_js(web_browser, "window.close(); 1", switch_tab_id=popup)
    assert r["status"] == "success" and r["js_return"] == 1, r
    assert "tab closed" in r["note"] and "error" not in r
    meta = json.loads(web_scan(web_browser, tabs_only=True))
    assert meta["status"] == "success"
    assert popup not in [t["id"] for t in meta["metadata"]["tabs"]]


def test_an_aborted_task_stops_the_running_script(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    abort = threading.Event()
    abort.set()
    r = web_execute_js(web_browser, "while (true) {}", abort=abort)
    assert r["status"] == "failed" and "aborted" in r["error"] and r["ms"] < 5000
    assert web_execute_js(web_browser, "2", no_monitor=True)["js_return"] == 2


def test_save_to_file_writes_the_whole_value_and_returns_a_preview(web_browser, web_site,
                                                                   tmp_path):
    goto(web_browser, web_site("/nav1.html"))
    target = tmp_path / "out" / "big.txt"
    r = web_execute_js(web_browser, "'x'.repeat(50000) + 'END'", save_to=target)
    assert target.read_text() == "x" * 50000 + "END"
    assert len(r["js_return"]) < 300 and "50003 chars saved to" in r["saved"]
    r = web_execute_js(web_browser, "({a: [1, 2]})", save_to=tmp_path / "obj.json")
    assert json.loads((tmp_path / "obj.json").read_text()) == {"a": [1, 2]}


def test_save_to_file_writes_a_big_array_in_full(web_browser, web_site, tmp_path):
    goto(web_browser, web_site("/items.html?n=3000"))
    target = tmp_path / "items.json"
    r = web_execute_js(web_browser, "[...document.querySelectorAll('li')].map(e => e.innerText)",
                       save_to=target, no_monitor=True)
    items = json.loads(target.read_text())
    assert len(items) == 3000 and items[-1] == "Item number 3000"
    assert len(r["js_return"]) < 300 and "saved to" in r["saved"]


def test_big_values_are_trimmed_to_the_budget(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    r = web_execute_js(web_browser, "'a'.repeat(30000) + 'TAIL'", budget=2000, no_monitor=True)
    assert len(r["js_return"]) < 2200
    assert r["js_return"].endswith("TAIL") and "use save_to_file" in r["js_return"]


def test_the_whole_result_keeps_to_the_budget(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    budget = 4000
    r = web_execute_js(web_browser, "for (let i = 0; i < 200; i++) alert(i + 'm'.repeat(400));"
                       " 'x'.repeat(10000)", budget=budget)
    assert r["status"] == "success" and r["dialogs"][0]["message"].startswith("0mmm")
    assert r["dialogs"][-1] == "… 195 more"
    assert len(json.dumps(r, ensure_ascii=False)) < budget * 1.1
    r = web_execute_js(web_browser, "throw new Error('e'.repeat(200000))", budget=budget)
    assert r["status"] == "failed" and r["error"].startswith("Error: eeee")
    assert len(json.dumps(r, ensure_ascii=False)) < budget * 1.1
    r = web_execute_js(web_browser, "window.open('/nav2.html?' + 'q'.repeat(20000)); 1",
                       budget=budget)
    assert r["status"] == "success" and r["newTabs"][0]["url"].endswith("qqq")
    assert len(json.dumps(r, ensure_ascii=False)) < budget * 1.1
    close_tabs(web_browser, *[target for target, short in list(web_browser.short.items())
                              if short != r["tab_id"] and target in web_browser.targets])


def test_script_from_a_js_file_or_the_replys_code_block(tmp_path):
    (tmp_path / "s.js").write_text("1 + 1", encoding="utf-8")
    assert resolve_script("s.js", "", tmp_path) == "1 + 1"
    reply = "Let me read it.\n```javascript\ndocument.title\n```"
    assert resolve_script("", reply, tmp_path).strip() == "document.title"
    assert resolve_script("missing.js", "", tmp_path) == "missing.js"


def test_a_js_path_with_a_tilde_is_read_from_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "s.js").write_text("2 + 2", encoding="utf-8")
    assert resolve_script("~/s.js", "", tmp_path / "elsewhere") == "2 + 2"


def test_an_empty_script_is_a_failed_result_with_an_error(home):
    agent = GenericAgent(ScriptedClient([]), home=home)
    handler = GenericAgentHandler(agent, agent.cwd)
    _, outcome = drain(handler.dispatch("web_execute_js", {"script": " "},
                                        SimpleNamespace(content="", thinking="")))
    assert outcome.data["status"] == "failed" and "No script given" in outcome.data["error"]
