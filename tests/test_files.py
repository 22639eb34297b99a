"""File tools on real files under tmp_path: read, write, patch, refs, reply content."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools import ToolError
from tools.files import (
    LARGE_WRITE_BYTES,
    MAX_LINE_CHARS,
    content_from_reply,
    expand_file_refs,
    file_patch,
    file_read,
    file_write,
    suggest_paths,
)


@pytest.fixture
def numbered(tmp_path):
    path = tmp_path / "n.txt"
    path.write_text("".join(f"line {i}\n" for i in range(1, 501)))
    return path


# --- file_read -----------------------------------------------------------------------------

def test_read_header_and_numbers(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("alpha\nbeta\n")
    assert file_read(path) == "[FILE] 2 lines\n1|alpha\n2|beta"
    assert file_read(path, show_linenos=False) == "[FILE] 2 lines\nalpha\nbeta"


def test_read_partial_note(numbered):
    out = file_read(numbered, start=10, count=5)
    lines = out.splitlines()
    assert lines[0] == "[FILE] 500 lines"
    assert lines[1:6] == [f"{i}|line {i}" for i in range(10, 15)]
    assert "[PARTIAL] showing lines 10-14 of 500; use start=15" in out


def test_read_default_window_is_partial(numbered):
    out = file_read(numbered)
    assert "200|line 200" in out and "201|" not in out
    assert "use start=201" in out


def test_read_keyword_window(numbered):
    out = file_read(numbered, keyword="LINE 300", count=10)
    lines = out.splitlines()
    assert lines[1] == "297|line 297"
    assert "300|line 300" in lines
    assert "[PARTIAL] showing lines 297-306" in out


def test_read_keyword_absent_falls_back_to_start(numbered):
    out = file_read(numbered, start=40, count=2, keyword="nowhere")
    assert "not found" in out and "nowhere" in out
    assert "40|line 40" in out and "41|line 41" in out


def test_read_cuts_long_lines(tmp_path):
    path = tmp_path / "long.txt"
    path.write_text("x" * (MAX_LINE_CHARS + 500) + "\nshort\n")
    out = file_read(path)
    first = out.splitlines()[1]
    assert "... [TRUNCATED]" in first
    assert len(first) < MAX_LINE_CHARS + 100
    assert "2|short" in out


def test_read_crlf_and_bad_utf8(tmp_path):
    path = tmp_path / "w.txt"
    path.write_bytes(b"one\r\ntw\xffo\r\n")
    assert file_read(path) == "[FILE] 2 lines\n1|one\n2|tw\ufffdo"


def test_read_missing_suggests_similar_names(tmp_path):
    (tmp_path / "config.yaml").write_text("x")
    with pytest.raises(ToolError) as err:
        file_read(tmp_path / "confg.yaml")
    assert "Did you mean:" in str(err.value)
    assert "config.yaml" in str(err.value)


def test_read_missing_finds_same_name_in_a_sibling_folder(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("x")
    (tmp_path / "lib").mkdir()
    suggestions = suggest_paths(tmp_path / "lib" / "main.py")
    assert any(s.endswith(os.path.join("src", "main.py")) for s in suggestions)


def test_read_directory_and_binary_rejected(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "inside.txt").write_text("x")
    with pytest.raises(ToolError, match="directory.*inside.txt"):
        file_read(tmp_path / "d")
    (tmp_path / "b.bin").write_bytes(b"\x89PNG\0\0\x01")
    with pytest.raises(ToolError, match="binary"):
        file_read(tmp_path / "b.bin")


# --- file_write ----------------------------------------------------------------------------

def test_write_modes(tmp_path):
    path = tmp_path / "m.txt"
    result = file_write(path, "middle\n")
    assert result["status"] == "success" and result["lines"] == 1
    assert result["bytes"] == len(b"middle\n")
    file_write(path, "end\n", mode="append")
    file_write(path, "start\n", mode="prepend")
    assert path.read_text() == "start\nmiddle\nend\n"
    with pytest.raises(ToolError, match="mode"):
        file_write(path, "x", mode="insert")
    assert path.read_text() == "start\nmiddle\nend\n"


def test_write_creates_missing_folders(tmp_path):
    path = tmp_path / "a" / "b" / "c.txt"
    file_write(path, "deep\n")
    assert path.read_text() == "deep\n"


def test_write_keeps_crlf(tmp_path):
    path = tmp_path / "win.txt"
    path.write_bytes(b"old\r\n")
    file_write(path, "one\ntwo\n", mode="append")
    assert path.read_bytes() == b"old\r\none\r\ntwo\r\n"
    file_write(path, "fresh\n")
    assert path.read_bytes() == b"fresh\r\n"


def test_write_lf_file_stays_lf(tmp_path):
    path = tmp_path / "unix.txt"
    path.write_bytes(b"old\n")
    file_write(path, "a\r\nb\r\n", mode="append")
    assert path.read_bytes() == b"old\na\nb\n"


def test_write_is_atomic(tmp_path, monkeypatch):
    folder = tmp_path / "atomic"
    folder.mkdir()
    path = folder / "keep.txt"
    path.write_text("original\n")
    file_write(path, "second\n")
    assert sorted(p.name for p in folder.iterdir()) == ["keep.txt"]

    def broken_replace(src, dst, **_):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        file_write(path, "third\n")
    assert path.read_text() == "second\n"
    assert sorted(p.name for p in folder.iterdir()) == ["keep.txt"]


def test_write_warns_when_large(tmp_path):
    small = file_write(tmp_path / "s.txt", "x\n")
    big = file_write(tmp_path / "b.txt", "y" * (LARGE_WRITE_BYTES + 1))
    assert "warning" not in small
    assert "large" in big["warning"]


def test_write_expands_refs_when_asked(tmp_path):
    (tmp_path / "src.txt").write_text("a\nb\nc\n")
    file_write(tmp_path / "out.txt", "{{file:src.txt:2:3}}\n", refs_base=tmp_path)
    assert (tmp_path / "out.txt").read_text() == "b\nc\n"


# --- {{file:...}} and reply content --------------------------------------------------------

def test_expand_file_refs(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f.py").write_text("l1\nl2\nl3\nl4\n")
    text = "head\n{{file:sub/f.py:2:3}}\nmid\n{{file:sub/f.py}}\n"
    assert expand_file_refs(text, tmp_path) == "head\nl2\nl3\nmid\nl1\nl2\nl3\nl4\n"
    assert expand_file_refs("no refs {here}", tmp_path) == "no refs {here}"


def test_expand_file_refs_errors_name_the_ref(tmp_path):
    (tmp_path / "f.txt").write_text("1\n2\n")
    with pytest.raises(ToolError, match=r"\{\{file:f.txt:2:9\}\}"):
        expand_file_refs("{{file:f.txt:2:9}}", tmp_path)
    with pytest.raises(ToolError, match=r"\{\{file:nope.txt\}\}"):
        expand_file_refs("{{file:nope.txt}}", tmp_path)


def test_content_from_reply():
    tagged = "x\n<file_content>\nfirst\n</file_content>\n<file_content>\nlast\n</file_content>"
    assert content_from_reply(tagged) == "last\n"
    fenced = "Here:\n```python\nprint(1)\n```\nand\n```\nplain text\n```\n"
    assert content_from_reply(fenced) == "plain text\n"
    assert content_from_reply("just words") is None


# --- file_patch ----------------------------------------------------------------------------

def test_patch_success(tmp_path):
    folder = tmp_path / "patch"
    folder.mkdir()
    path = folder / "p.py"
    path.write_text("def f():\n    return 1\n\ndef g():\n    return 2\n")
    result = file_patch(path, "def g():\n    return 2", "def g():\n    return 3")
    assert result["status"] == "success"
    assert result["replaced_lines"] == 2
    assert path.read_text() == "def f():\n    return 1\n\ndef g():\n    return 3\n"
    assert sorted(p.name for p in folder.iterdir()) == ["p.py"]


def test_patch_keeps_crlf(tmp_path):
    path = tmp_path / "w.txt"
    path.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    file_patch(path, "two\nthree", "2\n3\n3.5")
    assert path.read_bytes() == b"one\r\n2\r\n3\r\n3.5\r\n"


def test_patch_zero_matches_leaves_file_and_shows_nearest(tmp_path):
    path = tmp_path / "z.py"
    original = b"def alpha():\n    return compute(1, 2)\n"
    path.write_bytes(original)
    with pytest.raises(ToolError) as err:
        file_patch(path, "    return compute(1, 3)", "x")
    message = str(err.value)
    assert "file_read" in message and "whitespace" in message
    assert "2|    return compute(1, 2)" in message
    assert path.read_bytes() == original


def test_patch_two_matches_leaves_file(tmp_path):
    path = tmp_path / "t.txt"
    original = b"x = 1\ny = 2\nx = 1\n"
    path.write_bytes(original)
    with pytest.raises(ToolError) as err:
        file_patch(path, "x = 1", "x = 9")
    assert "2 places" in str(err.value)
    assert "more surrounding lines" in str(err.value)
    assert path.read_bytes() == original


def test_patch_takes_escaped_markers_only_when_the_text_matches_nowhere_as_given(tmp_path):
    path = tmp_path / "page.md"
    path.write_text("a &lt;key_info> b\nc <key_info> d\n[SYSTEM] e\n")
    file_patch(path, "a &lt;key_info> b", "a &lt;key_info> B")
    assert path.read_text() == "a &lt;key_info> B\nc <key_info> d\n[SYSTEM] e\n"
    result = file_patch(path, "c &lt;key_info> d\n\\[SYSTEM\\] e", "c &lt;key_info> D")
    assert result["at_line"] == 2 and "markers_note" in result
    assert path.read_text() == "a &lt;key_info> B\nc <key_info> D\n"


def test_patch_in_escaped_form_still_needs_exactly_one_match(tmp_path):
    path = tmp_path / "twice.py"
    path.write_text("x = '<key_info>'\ny = 1\nx = '<key_info>'\n")
    with pytest.raises(ToolError, match=r"matches 2 places .* lines 1, 3\)"):
        file_patch(path, "x = '&lt;key_info>'", "z")
    with pytest.raises(ToolError, match="was not found"):
        file_patch(path, "x = '&lt;history>'", "z")
    assert path.read_text() == "x = '<key_info>'\ny = 1\nx = '<key_info>'\n"


def test_patch_missing_file_suggests(tmp_path):
    (tmp_path / "settings.py").write_text("x")
    with pytest.raises(ToolError, match="Did you mean:.*settings.py"):
        file_patch(tmp_path / "setings.py", "x", "y")


def test_patch_keeps_undecodable_bytes(tmp_path):
    path = tmp_path / "latin.txt"
    path.write_bytes(b"caf\xe9\nold\n")
    file_patch(path, "old", "new")
    assert path.read_bytes() == b"caf\xe9\nnew\n"


@settings(max_examples=100, deadline=None)
@given(widths=st.lists(st.integers(0, 3000), min_size=1, max_size=60), start=st.integers(1, 70),
       count=st.integers(1, 60), max_chars=st.integers(1, 20_000))
def test_read_window_stops_at_its_budget_and_counts_every_line(widths, start, count,
                                                               max_chars):
    rows = [f"{i}:" + "w" * width for i, width in enumerate(widths, 1)]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "w.txt")
        path.write_text("\n".join(rows) + "\n")
        if start > len(rows):
            with pytest.raises(ToolError):
                file_read(path, start=start, count=count, max_chars=max_chars)
            return
        out = file_read(path, start=start, count=count, max_chars=max_chars).splitlines()
    expected, used = [], 0
    for n, row in enumerate(rows[start - 1:start - 1 + count], start):
        cut = f"{row[:MAX_LINE_CHARS]} ... [TRUNCATED] ({len(row)} chars)"
        text = f"{n}|{row if len(row) <= MAX_LINE_CHARS else cut}"
        used += len(text) + 1
        if expected and used > max_chars:
            break
        expected.append(text)
    assert out[0] == f"[FILE] {len(rows)} lines"
    assert out[1:1 + len(expected)] == expected and len(out) <= len(expected) + 2


def test_read_start_past_end(numbered):
    with pytest.raises(ToolError, match="past the end"):
        file_read(numbered, start=900)


def test_write_to_directory_rejected(tmp_path):
    with pytest.raises(ToolError, match="directory"):
        file_write(tmp_path, "x")
