"""web_scan on a real Chromium: the page as text, its controls, tabs (SPEC §9)."""

from __future__ import annotations

import json
import re

from web_site import (
    INLINE_LINKS,
    LONG_TITLE,
    PARAGRAPHS,
    SECRET_PASSWORD,
    close_tabs,
    goto,
    web_browser,
    web_site,
)

from tools.web.execute import web_execute_js
from tools.web.scan import web_scan

__all__ = ["web_browser", "web_site"]


def scan(browser, **kw) -> tuple[dict, str]:
    out = web_scan(browser, **kw)
    head, _, rest = out.partition("\n```text\n")
    return json.loads(head), rest.removesuffix("\n```")


def test_scan_envelope_names_tabs_and_first_line_describes_the_page(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    meta, text = scan(web_browser)
    assert meta["status"] == "success"
    active = meta["metadata"]["active_tab"]
    tab = next(t for t in meta["metadata"]["tabs"] if t["id"] == active)
    assert tab == {"id": active, "url": web_site("/nav1.html"), "title": "Page one"}
    first = text.splitlines()[0]
    assert re.fullmatch(r"\[page\] Page one \| .*/nav1\.html \| scroll 0/\d+ px \| 2 interactive",
                        first), first


def test_long_article_keeps_every_paragraph_or_marks_the_cut(web_browser, web_site):
    goto(web_browser, web_site("/article.html"))
    _, text = scan(web_browser)
    assert "# A long article" in text
    for i in range(1, 60):  # the original cut an article's 59 <p> to 3 items
        assert f"Paragraph {i}:" in text
    _, small = scan(web_browser, budget=6000)
    assert len(small) < 6500
    marker = re.search(r"\[TRUNCATED at y=(\d+) of (\d+) px\]", small)
    assert marker and int(marker.group(1)) < int(marker.group(2))
    assert "END-OF-ARTICLE" not in small


def test_one_long_line_of_json_is_cut_at_the_budget_not_dropped(web_browser, web_site):
    goto(web_browser, web_site("/data.json"))
    _, text = scan(web_browser, budget=6000)
    lines = text.splitlines()
    assert lines[1].startswith('{"rows":[{"id":0,"name":"row-0"') and len(lines) == 3, lines
    assert len(text) <= 6000 + len(lines[0]) + len(lines[2]) + 2
    assert lines[2].startswith("[TRUNCATED at y=") and "JSON-END" not in text


def test_one_huge_paragraph_is_cut_at_the_budget_not_dropped(web_browser, web_site):
    goto(web_browser, web_site("/long-paragraph.html"))
    _, text = scan(web_browser, budget=6000)
    heading, paragraph, cut = text.splitlines()[1:]
    assert heading == "# One paragraph" and cut.startswith("[TRUNCATED at y=")
    assert paragraph.startswith("PARAGRAPH-START word0 word1") and "PARAGRAPH-END" not in text
    assert 5000 < len(heading) + len(paragraph) <= 6000


def test_a_run_of_inline_links_shows_the_links_that_fit_and_counts_those(web_browser,
                                                                        web_site):
    goto(web_browser, web_site("/inline-links.html"))
    _, text = scan(web_browser, budget=6000)
    first, links, cut = text.splitlines()
    shown = re.findall(r'\[(\d+)\]link "Link (\d+)" -> /l(\d+)', links)
    assert 50 < len(shown) < INLINE_LINKS and cut.startswith("[TRUNCATED at y=")
    assert [int(n) for n, _, _ in shown] == list(range(1, len(shown) + 1))  # no marker cut
    assert first.endswith(f"| {len(shown)} interactive")  # only those shown are counted
    last = len(shown)
    r = web_execute_js(web_browser, f"ga({last}).textContent", no_monitor=True)
    assert r["js_return"] == f"Link {last - 1}"
    r = web_execute_js(web_browser, f"ga({last + 1})", no_monitor=True)
    assert r["status"] == "failed" and f"no element [{last + 1}]" in r["error"]


def test_text_far_below_is_reachable_by_scrolling_and_viewport_mode(web_browser, web_site):
    goto(web_browser, web_site("/article.html"))
    web_execute_js(web_browser, "window.scrollTo(0, document.body.scrollHeight)")
    _, text = scan(web_browser, viewport=True, budget=20_000)
    assert f"Paragraph {PARAGRAPHS}: END-OF-ARTICLE" in text
    assert "Paragraph 1:" not in text
    y = int(re.search(r"scroll (\d+)/", text).group(1))
    assert y > 5000


def test_form_shows_labels_values_states_and_masks_the_password(web_browser, web_site):
    goto(web_browser, web_site("/form.html"))
    _, text = scan(web_browser)
    assert SECRET_PASSWORD not in text
    assert 'input type=email "Email address" value="ann@example.com"' in text
    assert 'input type=password "Password" value="••••"' in text
    assert 'checkbox [x] "Remember me"' in text
    assert 'checkbox [ ] "Send newsletter"' in text
    assert 'select "Colour" = "Green" {Red | Green* | Blue}' in text
    assert 'textarea "Notes" value="first line"' in text
    assert 'input type=text "Coupon" (disabled)' in text
    assert 'button "Pay now" (disabled)' in text
    assert re.search(r'\[\d+\]button "Cancel"(?! \(disabled\))', text)
    assert "Remember me" not in text.replace('"Remember me"', "")  # label shown once


def test_hidden_elements_of_every_kind_are_absent(web_browser, web_site):
    goto(web_browser, web_site("/hidden.html"))
    _, text = scan(web_browser)
    assert "VISIBLE-OK" in text and re.search(r'\[\d+\]button "Summary shown"', text)
    assert "[dialog]\nOPEN-DIALOG-TEXT\n[/dialog]" in text
    assert "HIDDEN" not in text, text


def test_a_page_that_renders_late_is_read_once_it_has_rendered(web_browser, web_site):
    goto(web_browser, web_site("/late.html"))
    _, text = scan(web_browser)
    assert "LATE-CONTENT-ARRIVED" in text and "Loading" not in text


def test_3000_item_list_is_cut_to_its_first_items_within_budget(web_browser, web_site):
    goto(web_browser, web_site("/items.html?n=3000"))
    meta, text = scan(web_browser, budget=35_000)
    assert len(text) < 2_000
    assert "- Item number 10" in text and "Item number 11" not in text
    assert "[… 2990 more similar items]" in text
    assert "AFTER-LIST" in text


def test_prose_in_divs_is_never_collapsed_but_a_run_of_cards_is(web_browser, web_site):
    goto(web_browser, web_site("/div-prose.html"))
    _, text = scan(web_browser)
    for i in range(1, 61):
        assert f"Para {i}: The quick" in text
    assert "Product 10" in text and "Product 11" not in text
    assert re.findall(r"\[… \d+ more similar items\]", text) == ["[… 50 more similar items]"]


def test_same_origin_iframe_is_inlined_and_its_elements_usable(web_browser, web_site):
    goto(web_browser, web_site("/iframe.html"))
    _, text = scan(web_browser)
    assert "OUTER-TEXT" in text and "INSIDE-FRAME" in text
    n = re.search(r'\[(\d+)\]button "Frame button"', text).group(1)
    result = web_execute_js(web_browser, f"ga({n}).click(); ga({n}).textContent")
    assert result["js_return"] == "Clicked inside"


def test_open_shadow_root_is_inlined_with_its_slotted_content(web_browser, web_site):
    goto(web_browser, web_site("/shadow.html"))
    _, text = scan(web_browser)
    assert "## SHADOW-HEADING" in text
    assert text.index("SHADOW-HEADING") < text.index("SLOTTED-TEXT") < text.index("Shadow button")
    assert re.search(r'\[\d+\]button "Shadow button"', text)


def test_text_only_keeps_the_form_state_in_plain_words(web_browser, web_site):
    goto(web_browser, web_site("/form.html"))
    web_execute_js(web_browser, "document.querySelector('textarea').value = 'typed in'")
    _, text = scan(web_browser, text_only=True)
    assert SECRET_PASSWORD not in text and not re.search(r"\[\d+\]", text)
    assert "Email address: ann@example.com" in text and "Password: ••••" in text
    assert "[x] Remember me" in text and "[ ] Send newsletter" in text
    assert "Colour: Green" in text and "Notes: typed in" in text
    assert "Coupon: (empty) (disabled)" in text and "Cancel" in text
    assert text.count("Remember me") == 1


def test_text_only_has_no_markers(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    _, text = scan(web_browser, text_only=True)
    assert "Go to page two" in text and "PAGE-ONE-BODY" in text
    assert not re.search(r"\[\d+\]", text) and "interactive" not in text


def test_tabs_only_lists_tabs_without_the_page(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    out = web_scan(web_browser, tabs_only=True)
    meta = json.loads(out)
    assert meta["metadata"]["tabs_count"] == len(meta["metadata"]["tabs"]) >= 1
    assert "```" not in out


def test_a_scan_leaves_the_scripts_of_other_tabs_alone(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    busy = web_site("/busy.html").replace("127.0.0.1", "localhost")  # its own renderer
    home = web_execute_js(web_browser, f"window.open('{busy}', '_blank', 'noopener'); 1")
    other = home["newTabs"][0]["id"]
    assert "BUSY-PAGE" in web_scan(web_browser, switch_tab_id=other)
    web_execute_js(web_browser, "setTimeout(spin, 0); 1", no_monitor=True)  # spins from now
    meta, _ = scan(web_browser, switch_tab_id=home["tab_id"])  # while spin() runs
    assert meta["status"] == "success"
    r = web_execute_js(web_browser, "document.title", switch_tab_id=other, no_monitor=True)
    assert r["js_return"] == "SPUN"  # spin() ran to its end
    close_tabs(web_browser, next(t for t, short in web_browser.short.items() if short == other))


def test_unknown_tab_id_is_an_error_listing_the_tabs(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    meta = web_scan(web_browser, switch_tab_id="99")
    assert meta["status"] == "error"
    assert "no tab '99'" in meta["msg"] and "/nav1.html" in meta["msg"]
    result = web_execute_js(web_browser, "1", switch_tab_id="99")
    assert result["status"] == "failed" and "no tab '99'" in result["error"]


def test_long_urls_in_the_tab_list_are_cut(web_browser, web_site):
    url = web_site("/nav2.html?" + "q" * 80)
    goto(web_browser, url)
    meta, _ = scan(web_browser)
    tab = meta["metadata"]["tabs"][int(meta["metadata"]["active_tab"]) - 1]
    assert tab["url"] == url[:50] + "..."


def test_no_tab_left_opens_one(web_browser, web_site):
    goto(web_browser, web_site("/nav1.html"))
    close_tabs(web_browser, *web_browser.targets)
    meta, text = scan(web_browser)
    assert meta["status"] == "success", meta
    assert meta["metadata"]["tabs_count"] == 1
    assert "about:blank" in text.splitlines()[0]


def test_a_page_that_replaces_builtins_is_read_all_the_same(web_browser, web_site):
    goto(web_browser, web_site("/tampered.html"))
    _, text = scan(web_browser)
    assert "TAMPERED-TEXT" in text
    n = re.search(r'\[(\d+)\]button "Tampered button"', text).group(1)
    r = web_execute_js(web_browser, "[1, 2, 3]", no_monitor=True)
    assert r["js_return"] == [1, 2, 3]
    r = web_execute_js(web_browser, "({a: 1, b: [true, 'x'], p: document.querySelector('p'),"
                       " m: new Map([['k', 2]])})")
    assert r["js_return"] == {"a": 1, "b": [True, "x"], "p": "<p>TAMPERED-TEXT</p>",
                              "m": [["k", 2]]}
    r = web_execute_js(web_browser, f"ga({n}).textContent = 'Pressed'; ga({n}).textContent")
    assert r["js_return"] == "Pressed" and "Pressed" in r["changes"]["text"]


def test_text_hidden_by_style_is_not_read(web_browser, web_site):
    goto(web_browser, web_site("/unseen.html"))
    _, text = scan(web_browser)
    assert "UNSEEN" not in text, text
    for seen in ("SEEN-TEXT", "SEEN-WHITE-ON-BLACK", "SEEN-OVER-IMAGE", "SEEN-FADING-IN",
                 "SEEN-LIGHT-GREY"):
        assert seen in text, seen
    assert re.search(r'\[\d+\]checkbox \[x\] "SEEN-STYLED-BOX"', text)
    assert re.search(r"\[\d+\]link -> /x", text)  # the link is there, its hidden text not
    assert re.search(r'\[\d+\]link "SEEN-LINK" -> /y', text)
    _, plain = scan(web_browser, text_only=True)
    assert "UNSEEN" not in plain and "SEEN-TEXT" in plain


def test_content_a_timer_draws_just_after_the_load_is_waited_for(web_browser, web_site):
    goto(web_browser, web_site("/timer.html"))
    _, text = scan(web_browser)
    assert "TIMER-CONTENT-DRAWN" in text and "Waiting" not in text


def test_a_huge_title_is_cut_in_the_tab_list_and_the_page_line(web_browser, web_site):
    moved = goto(web_browser, web_site("/long-title.html"))
    assert len(moved["navigated"]["title"]) <= 100
    out = web_scan(web_browser, budget=5_000)
    assert len(out) < 6_000 and "LONG-TITLE-BODY" in out
    meta, text = scan(web_browser)
    assert all(len(t["title"]) <= 100 for t in meta["metadata"]["tabs"])
    assert len(text.splitlines()[0]) < 300
    r = web_execute_js(web_browser, "document.title.length", no_monitor=True)
    assert r["js_return"] == LONG_TITLE + 4 and len(json.dumps(r)) < 1_000


def test_a_ticking_text_does_not_keep_a_page_from_settling_but_a_new_element_does(
        web_browser, web_site):
    goto(web_browser, web_site("/blank.html"))
    tab = web_browser.tab()

    def change(script: str) -> float:
        """Run ``script`` in the page; the page's clock just before it (the observer has run
        by the time the script's promise settles)."""
        result = web_execute_js(web_browser, f"const t = performance.now(); {script}; "
                                "await new Promise(r => setTimeout(r, 0)); t", no_monitor=True)
        return result["js_return"]

    ticked = change("document.querySelector('p').textContent = '12:00:01'")  # a clock ticks
    assert tab.page_value("window.__ga.lastMutation") < ticked  # no redraw: still settled
    added = change("document.body.append(document.createElement('section'))")
    assert tab.page_value("window.__ga.lastMutation") >= added  # drawing again
