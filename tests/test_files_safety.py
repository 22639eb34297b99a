"""File tools under hostile input: FIFOs, devices, sockets, huge files, symlinks, modes,
hard links, read-only files, concurrent writers, slow near-match and path searches."""

from __future__ import annotations

import fcntl
import os
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import tracemalloc
from io import BytesIO
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools import ToolError, files, fslock, fsutil, lines, nearmatch
from tools.files import file_patch, file_read, file_write, suggest_paths

HANG_GUARD_SECONDS = 5  # a call still running after this is blocked (the test then fails)
READ_PEAK_BYTES = 3 << 20  # file_read of a big file must stay under this (traced)
BIG_FILE_LINES = 300_000  # ~20 MB of text
APPEND_FILE_BYTES = 64 << 20  # file_write append to a file this big stays under the read peak
WRITERS = 12
REPO = Path(__file__).resolve().parent.parent


def run_unblocked(fn, fifo: Path):
    """``fn()``'s result or exception; fails (after unblocking it) if it blocks on ``fifo``."""
    box: dict = {}

    def run():
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            box["error"] = e

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(HANG_GUARD_SECONDS)
    if worker.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # the reader sees EOF
        worker.join(HANG_GUARD_SECONDS)
        pytest.fail(f"the call blocked on the FIFO {fifo}")
    if "error" in box:
        raise box["error"]
    return box["result"]


# --- only regular files --------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda p: file_read(p),
    lambda p: file_read(p, keyword="x"),
    lambda p: file_write(p, "x\n"),
    lambda p: file_write(p, "x\n", mode="append"),
    lambda p: file_write(p, "x\n", mode="prepend"),
    lambda p: file_patch(p, "a", "b"),
], ids=["read", "read-keyword", "overwrite", "append", "prepend", "patch"])
def test_file_tools_refuse_a_fifo_without_blocking(tmp_path, call):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ToolError, match=r"FIFO \(named pipe\), not a regular file"):
        run_unblocked(lambda: call(fifo), fifo)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_file_read_refuses_a_device(device):
    if not os.path.exists(device):
        pytest.skip(f"{device} is not there")
    with pytest.raises(ToolError, match="character device, not a regular file"):
        file_read(Path(device))
    with pytest.raises(ToolError, match="character device"):
        file_write(Path(device), "x")


def test_file_read_refuses_a_socket(tmp_path):
    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        with pytest.raises(ToolError, match="socket, not a regular file"):
            file_read(path)
    finally:
        server.close()


def test_open_regular_refuses_a_fifo_swapped_in_after_the_check(tmp_path, monkeypatch):
    fifo, plain = tmp_path / "pipe", tmp_path / "plain.txt"
    os.mkfifo(fifo)
    plain.write_text("x\n")
    real_stat = os.stat

    def stat_before_the_swap(path, *args, **kwargs):
        return real_stat(plain if Path(path) == fifo else path, *args, **kwargs)

    monkeypatch.setattr(fsutil.os, "stat", stat_before_the_swap)
    with pytest.raises(ToolError, match="FIFO"):
        run_unblocked(lambda: fsutil.open_regular(fifo), fifo)


# --- bounded reads -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def big_log(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "app.log"
    row = "2024-01-01 12:00:00 INFO worker handled request id={:08d} in 12 ms\n"
    with open(path, "w") as f:
        for first in range(0, BIG_FILE_LINES, 10_000):
            f.write("".join(row.format(i) for i in range(first, first + 10_000)))
        f.write("2024-01-01 12:00:01 ERROR Disk Quota exceeded near the end\n")
    return path


def traced_peak(fn) -> tuple[object, int]:
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_append_and_prepend_hold_only_the_head_they_sniff_and_keep_crlf(tmp_path):
    path = tmp_path / "huge.log"
    with open(path, "wb") as f:
        f.write(b"first\r\n")
        f.truncate(APPEND_FILE_BYTES)  # sparse: big to read, free to store
    result, peak = traced_peak(lambda: file_write(path, "tail line\n", mode="append"))
    assert result["status"] == "success" and peak < READ_PEAK_BYTES
    assert path.stat().st_size == APPEND_FILE_BYTES + len(b"tail line\r\n")
    with open(path, "rb") as f:
        f.seek(APPEND_FILE_BYTES)
        assert f.read() == b"tail line\r\n"
    result, peak = traced_peak(lambda: file_write(path, "top\n", mode="prepend"))
    assert result["status"] == "success" and peak < READ_PEAK_BYTES
    with open(path, "rb") as f:
        assert f.read(12) == b"top\r\nfirst\r\n"


def test_file_read_holds_only_what_it_shows(big_log):
    assert big_log.stat().st_size > 6 * READ_PEAK_BYTES
    out, peak = traced_peak(lambda: file_read(big_log))
    assert peak < READ_PEAK_BYTES
    assert out.startswith(f"[FILE] {BIG_FILE_LINES + 1} lines\n1|")
    assert f"[PARTIAL] showing lines 1-200 of {BIG_FILE_LINES + 1}; use start=201" in out


def test_file_read_keyword_search_streams(big_log):
    out, peak = traced_peak(lambda: file_read(big_log, keyword="disk QUOTA", count=10))
    assert peak < READ_PEAK_BYTES
    last = BIG_FILE_LINES + 1
    assert f"{last}|2024-01-01 12:00:01 ERROR Disk Quota exceeded" in out
    assert f"[PARTIAL] showing lines {last - 3}-{last} of {last}" in out


def test_file_read_far_start_streams(big_log):
    out, peak = traced_peak(lambda: file_read(big_log, start=BIG_FILE_LINES, count=5))
    assert peak < READ_PEAK_BYTES
    assert out.splitlines()[1].startswith(f"{BIG_FILE_LINES}|")
    assert f"id={BIG_FILE_LINES - 1:08d}" in out


def test_file_read_of_one_huge_line_is_bounded(tmp_path):
    path = tmp_path / "one.line"
    size = 12 << 20
    with open(path, "wb") as f:
        f.write(b"a" * size + b" NEEDLE\r\nnext\n")
    out, peak = traced_peak(lambda: file_read(path, keyword="needle"))
    assert peak < READ_PEAK_BYTES
    first, second = out.splitlines()[1:3]
    assert first == f"1|{'a' * files.MAX_LINE_CHARS} ... [TRUNCATED] ({size + 7} chars)"
    assert second == "2|next"


def test_keyword_across_a_piece_boundary_of_a_long_line_is_found(tmp_path):
    path = tmp_path / "edge.txt"
    edge = 2 * lines.SCAN_CHUNK_BYTES  # the keyword straddles the second piece's end
    path.write_bytes(b"short\n" + b"b" * (edge - 9) + b"KEYWORD" + b"b" * (edge * 2) + b"\n")
    assert "[FILE] 2 lines" in file_read(path, keyword="keyword")
    assert "[NOTE]" not in file_read(path, keyword="keyword")


def one_by_one(data: bytes, count: int) -> tuple[list, int]:
    f = BytesIO(data)
    out = []
    while len(out) < count and (line := lines.read_line(f)) is not None:
        out.append(line)
    return out, f.tell()


LONG = b"y" * (lines.LINE_PIECE_BYTES + 5)  # ends in no piece it starts in
text_parts = st.lists(st.sampled_from([b"ab", b"\xc3\xa9", b"\xc3", b"\xff", b"\r", b"\n",
                                       b"\r\n", LONG]), max_size=40)


@settings(max_examples=150, deadline=None)
@given(parts=text_parts, skip=st.integers(0, 30), count=st.integers(1, 30))
def test_lines_read_and_skipped_in_pieces_are_those_read_one_by_one(parts, skip, count):
    data = b"".join(parts)
    f = BytesIO(data)
    skipped = lines.skip_lines(f, skip)
    expected, _ = one_by_one(data, skipped)
    assert skipped == len(expected) and f.tell() == one_by_one(data, skip)[1]
    at = f.tell()
    got = [line for batch in lines.read_lines(f, count) for line in batch]
    expected, end = one_by_one(data[at:], count)
    assert got == expected and f.tell() == at + end


def test_file_write_overwrite_reads_only_the_head_of_the_old_file(tmp_path):
    path = tmp_path / "old.log"
    path.write_bytes(b"old line\r\n" * (1 << 20))
    _, peak = traced_peak(lambda: file_write(path, "fresh\n"))
    assert peak < READ_PEAK_BYTES
    assert path.read_bytes() == b"fresh\r\n"


def test_file_read_stops_at_its_budget_on_a_whole_line(tmp_path):
    path = tmp_path / "wide.txt"
    path.write_text("".join(f"{i:03d}" + "x" * 96 + "\n" for i in range(1, 101)))
    out = file_read(path, count=100, max_chars=1_000)
    shown = [line for line in out.splitlines() if "|" in line]
    assert shown[-1] == "9|009" + "x" * 96
    assert "[PARTIAL] showing lines 1-9 of 100; use start=10" in out


# --- file_patch near-match search ----------------------------------------------------------

@pytest.fixture
def near_miss(tmp_path):
    path = tmp_path / "long.py"
    body = "".join(f"value_{i} = compute({i})\n" for i in range(20_000))
    path.write_text(body + "    return reticulate(splines, 42)\n")
    return path


def test_file_patch_near_match_search_stops_on_abort(near_miss):
    with pytest.raises(ToolError) as found:
        file_patch(near_miss, "    return reticulate(splines, 43)", "x")
    assert "closest lines in the file are:\n20000|" in str(found.value)
    assert "20001|    return reticulate(splines, 42)" in str(found.value)
    stop = threading.Event()
    stop.set()
    with pytest.raises(ToolError) as aborted:
        file_patch(near_miss, "    return reticulate(splines, 43)", "x", abort=stop)
    assert "was not found" in str(aborted.value)
    assert "closest lines" not in str(aborted.value)
    assert ("The search for similar lines was cut short (the task was stopped) at line 1 of "
            "20002 and found none.") in str(aborted.value)


def test_file_patch_near_match_search_keeps_to_its_time_budget(near_miss, monkeypatch):
    monkeypatch.setattr(nearmatch, "NEAR_MATCH_SECONDS", -1)
    with pytest.raises(ToolError) as err:
        file_patch(near_miss, "    return reticulate(splines, 43)", "x")
    assert "was not found" in str(err.value)
    assert "closest lines" not in str(err.value)
    assert "cut short (after -1 s) at line 1 of 20002" in str(err.value)


def test_file_patch_near_match_cut_short_says_where_and_not_closest(tmp_path, monkeypatch):
    path = tmp_path / "slow.py"
    body = [f"item_{i} = fetch({i})" for i in range(400)]
    body[3] = "    return reticulate(spleens, 7)"  # similar, found first
    body[390] = "    return reticulate(splines, 42)"  # the closest, never reached
    path.write_text("\n".join(body) + "\n")
    clock = iter(range(1000))  # each look at the clock is one second later
    monkeypatch.setattr(nearmatch, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    monkeypatch.setattr(nearmatch, "NEAR_MATCH_SECONDS", 2)
    monkeypatch.setattr(nearmatch, "NEAR_MATCH_SLICE_LINES", 100)
    with pytest.raises(ToolError) as err:
        file_patch(path, "    return reticulate(splines, 43)", "x")
    message = str(err.value)
    assert "The closest lines in the file are" not in message
    assert ("cut short (after 2 s) at line 101 of 401; the most similar lines it found "
            "(maybe not the closest) are:\n3|item_2") in message
    assert "4|    return reticulate(spleens, 7)" in message and "391|" not in message


def test_file_patch_finds_the_closest_line_deep_in_a_200000_line_file(tmp_path, monkeypatch):
    monkeypatch.setattr(nearmatch, "NEAR_MATCH_SECONDS", 600)  # correctness here; speed: bench
    body = [f"    value_{i} = compute(alpha, beta, {i})" for i in range(200_000)]
    body[150_000] = "    return reticulate(splines, 42)"
    body[10_002] = "    return recalculate(spines, 4)"
    path = tmp_path / "big.py"
    path.write_text("\n".join(body) + "\n")
    with pytest.raises(ToolError) as err:
        file_patch(path, "    return reticulate(splines, 43)", "x")
    assert "The closest lines in the file are:\n150000|    value_149999" in str(err.value)
    assert "150001|    return reticulate(splines, 42)" in str(err.value)
    assert "10003|" not in str(err.value)


def test_near_match_picks_the_first_of_equally_close_lines():
    lines = ["zzz", "  alpha beta gamma 1", "other", "alpha beta gamma 2", "alpha beta gamma 1"]
    assert nearmatch.closest_line("alpha beta gamma 3", lines).index == 1
    assert nearmatch.closest_line("alpha beta gamma 2", lines).index == 3
    assert nearmatch.closest_line("nothing like it at all", lines).index is None


# --- did you mean --------------------------------------------------------------------------

def test_did_you_mean_looks_only_in_the_folder_and_its_parent(tmp_path):
    (tmp_path / "x.conf").write_text("x")
    assert suggest_paths(tmp_path / "a" / "b" / "c" / "x.conf") == []
    with pytest.raises(ToolError) as err:
        file_read(Path("/nonexistent/x.conf"))
    assert str(err.value) == "file not found: /nonexistent/x.conf."


def test_did_you_mean_finds_the_name_in_a_sibling_or_the_parent(tmp_path):
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "test_io.py").write_text("x")
    (tmp_path / "setup.cfg").write_text("x")
    assert suggest_paths(tmp_path / "tests" / "test_io.py") == [
        str(tmp_path / "test" / "test_io.py")]
    assert suggest_paths(tmp_path / "tests" / "setup.cfg") == [str(tmp_path / "setup.cfg")]


@pytest.mark.parametrize("call", [
    {"name": "file_read", "args": {"path": "src/mian.py"}},
    {"name": "file_patch", "args": {"path": "src/mian.py", "old_content": "a",
                                    "new_content": "b"}},
    {"name": "file_write", "args": {"path": "notes.md",
                                    "content": "{{file:src/mian.py}}"}}], ids=lambda c: c["name"])
def test_did_you_mean_is_relative_to_the_working_folder(home, tmp_path, call):
    from ga import GenericAgent
    from llmcore.scripted import ScriptedClient

    project = tmp_path / "w48"
    (project / "src").mkdir(parents=True)
    (project / "src" / "main.py").write_text("x = 1\n")
    assert Path.cwd() != project
    client = ScriptedClient([{"tool_calls": [call]}, {"text": "done"}])
    list(GenericAgent(client, home=home, cwd=project).run_task("read it"))
    result = client.calls[1]["messages"][0]["tool_results"][0]["content"]
    assert "Did you mean: src/main.py?" in result


def test_did_you_mean_gives_up_at_its_deadline(tmp_path, monkeypatch):
    (tmp_path / "config.yaml").write_text("x")
    assert suggest_paths(tmp_path / "confg.yaml") == [str(tmp_path / "config.yaml")]
    monkeypatch.setattr(files, "SUGGEST_SECONDS", -1)
    assert suggest_paths(tmp_path / "confg.yaml") == []


# --- symlinks, modes, hard links, read-only ------------------------------------------------

@pytest.mark.parametrize("write", [
    lambda p: file_write(p, "new\n"),
    lambda p: file_write(p, "new\n", mode="append"),
    lambda p: file_patch(p, "old", "new"),
], ids=["overwrite", "append", "patch"])
def test_writes_go_through_a_symlink_and_keep_the_link(tmp_path, write):
    (tmp_path / "dotfiles").mkdir()
    target = tmp_path / "dotfiles" / "bashrc"
    target.write_text("old\n")
    link = tmp_path / ".bashrc"
    link.symlink_to(Path("dotfiles") / "bashrc")
    write(link)
    assert link.is_symlink() and os.readlink(link) == os.path.join("dotfiles", "bashrc")
    assert "new" in target.read_text()
    assert sorted(p.name for p in (tmp_path / "dotfiles").iterdir()) == ["bashrc"]


def test_write_through_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "made.txt")
    file_write(link, "hello\n")
    assert link.is_symlink() and (tmp_path / "made.txt").read_text() == "hello\n"


@pytest.mark.parametrize("write", [
    lambda p: file_write(p, "x\n"),
    lambda p: file_write(p, "x\n", mode="append"),
    lambda p: fsutil.atomic_write(p, "x\n"),
], ids=["overwrite", "append", "atomic_write"])
def test_a_dangling_symlink_never_creates_folders_for_its_target(tmp_path, write):
    work = tmp_path / "work"
    (work / "links").mkdir(parents=True)
    outside = tmp_path / "outside"
    (work / "dangling").symlink_to(outside / "deep" / "target")
    (work / "links" / "to_dir").symlink_to(outside / "dir")
    with pytest.raises(ToolError, match=r"dangling is a symlink to .*outside/deep/target, "
                                        r"and .*outside/deep is not an existing folder"):
        write(work / "dangling")
    with pytest.raises(ToolError, match=r"to_dir is a symlink to .*outside/dir, which does "
                                        r"not exist; nothing was written"):
        write(work / "links" / "to_dir" / "sub" / "x.txt")
    assert not outside.exists()


def test_a_file_where_a_folder_should_be_is_named(tmp_path):
    (tmp_path / "plainfile").write_text("keep\n")
    for path in (tmp_path / "plainfile" / "x.txt", tmp_path / "plainfile" / "sub" / "x.txt"):
        with pytest.raises(ToolError) as err:
            file_write(path, "x\n")
        assert str(err.value).startswith(
            f"{tmp_path / 'plainfile'} is a file, not a folder, so {path} cannot be created")
    assert (tmp_path / "plainfile").read_text() == "keep\n"


def test_file_write_to_a_folder_path_is_an_error(run_agent):
    calls = [{"name": "file_write", "args": {"path": p, "content": "x"}}
             for p in ("newdir/", "newdir/.", "./")]
    _, client, _ = run_agent([{"tool_calls": calls}, {"text": "ok"}])
    results = [r["content"] for r in client.calls[1]["messages"][0]["tool_results"]]
    assert all("is a folder path; give a file name" in r for r in results), results
    assert "'newdir/notes.md'" in results[0]
    assert not Path("newdir").exists()


def test_writes_keep_the_permission_bits(tmp_path):
    path = tmp_path / "run.sh"
    path.write_text("echo old\n")
    path.chmod(0o754)
    file_write(path, "echo new\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o754
    file_patch(path, "new", "newer")
    assert stat.S_IMODE(path.stat().st_mode) == 0o754


@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_new_files_honour_the_umask(tmp_path, umask, expected):
    old = os.umask(umask)
    try:
        file_write(tmp_path / "new.txt", "x\n")
        fsutil.atomic_write(tmp_path / "deep" / "also.txt", "x\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == expected
    assert stat.S_IMODE((tmp_path / "deep" / "also.txt").stat().st_mode) == expected


@pytest.mark.parametrize("write", [
    lambda p: file_write(p, "changed\n"),
    lambda p: file_write(p, "more\n", mode="append"),
    lambda p: file_patch(p, "keep", "changed"),
    lambda p: fsutil.atomic_write(p, "changed\n"),
], ids=["overwrite", "append", "patch", "atomic_write"])
def test_a_read_only_file_is_refused(tmp_path, write):
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "locked.txt"
    path.write_text("keep me\n")
    path.chmod(0o444)
    with pytest.raises(ToolError, match=r"locked.txt is read-only \(mode 444\); nothing was"):
        write(path)
    assert path.read_text() == "keep me\n"
    assert [p.name for p in folder.iterdir()] == ["locked.txt"]


def test_a_read_only_file_in_a_linked_folder_is_not_called_a_link(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "via").symlink_to("real")
    path = tmp_path / "real" / "locked.txt"
    path.write_text("keep me\n")
    path.chmod(0o444)
    with pytest.raises(ToolError) as err:
        file_write(tmp_path / "via" / "locked.txt", "new\n")
    assert str(err.value).startswith(f"{tmp_path / 'via' / 'locked.txt'} is read-only")
    link = tmp_path / "link.txt"
    link.symlink_to(path)
    with pytest.raises(ToolError, match=r"link.txt \(a link to .*locked.txt\) is read-only"):
        file_write(link, "new\n")


BIND_MOUNTED = """
import sys
from tools.files import file_patch, file_write
file_write(sys.argv[1], "new\\n")
file_write(sys.argv[1], "more\\n", mode="append")
file_patch(sys.argv[1], "more", "last")
try:
    file_write(sys.argv[2], "x\\n")
except OSError as e:
    print(e)
"""


def test_a_bind_mounted_single_file_is_written_in_place(tmp_path):
    """Docker's ``-v file:file``: the file is a mount point, so it cannot be replaced; and
    an error never names the temp file beside it (a read-only mounted folder)."""
    outside, mounted = tmp_path / "outside.txt", tmp_path / "bind" / "mounted.txt"
    mounted.parent.mkdir()
    outside.write_text("old\n")
    mounted.write_text("")
    frozen = tmp_path / "frozen"
    frozen.mkdir()
    shell = (f'mount --bind "{outside}" "{mounted}" && mount --bind "{frozen}" "{frozen}" && '
             f'mount -o remount,bind,ro "{frozen}" || exit 99; '
             f'exec "{sys.executable}" -c "$0" "$1" "$2"')
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    try:
        proc = subprocess.run(["unshare", "-rm", "sh", "-c", shell, BIND_MOUNTED, str(mounted),
                               str(frozen / "new.txt")],
                              capture_output=True, text=True, env=env, timeout=60)
    except FileNotFoundError:
        pytest.skip("no unshare")
    if proc.returncode == 99 or "unshare:" in proc.stderr:
        pytest.skip(f"cannot bind-mount in a user namespace here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert outside.read_text() == "new\nlast\n"
    assert os.listdir(mounted.parent) == ["mounted.txt"]  # no temp file left
    assert "new.txt" in proc.stdout and "Read-only file system" in proc.stdout
    assert fsutil.TEMP_SUFFIX not in proc.stdout


def test_writes_split_a_hard_link_and_say_so(tmp_path):
    store = tmp_path / "store" / "lib.py"
    store.parent.mkdir()
    store.write_text("shared = 1\n")
    project = tmp_path / "lib.py"
    os.link(store, project)
    result = file_patch(project, "shared = 1", "shared = 2")
    assert project.read_text() == "shared = 2\n"
    assert store.read_text() == "shared = 1\n"
    assert "2 hard links" in result["note"] and "keep the old one" in result["note"]
    assert "note" not in file_write(project, "shared = 3\n")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_a_rewrite_by_root_keeps_the_owner(tmp_path):
    path = tmp_path / "theirs.txt"
    path.write_text("x\n")
    os.chown(path, 4321, 4321)
    file_write(path, "y\n")
    assert (path.stat().st_uid, path.stat().st_gid) == (4321, 4321)


# --- concurrent writers --------------------------------------------------------------------

def run_writers(code: str, tmp_path: Path, rounds: int) -> None:
    """Start ``WRITERS`` processes running ``code`` (with ``me``, ``rounds``, ``path`` set)."""
    script = tmp_path / "writer.py"
    script.write_text(textwrap.dedent(code))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, str(script), str(me), str(rounds)], env=env,
                              cwd=tmp_path, stderr=subprocess.PIPE, text=True)
             for me in range(WRITERS)]
    errors = [p.communicate()[1] for p in procs if p.wait() != 0]
    assert not any(p.returncode for p in procs), errors


def test_concurrent_appends_from_12_processes_keep_every_line(tmp_path):
    run_writers("""
        import sys
        from tools.files import file_write
        me, rounds = int(sys.argv[1]), int(sys.argv[2])
        for i in range(rounds):
            file_write("shared.log", f"writer {me} line {i}\\n", mode="append")
    """, tmp_path, rounds=6)
    lines = (tmp_path / "shared.log").read_text().splitlines()
    assert sorted(lines) == sorted(f"writer {w} line {i}" for w in range(WRITERS)
                                   for i in range(6))


def test_concurrent_patches_from_12_processes_keep_every_edit(tmp_path):
    (tmp_path / "slots.txt").write_text("".join(f"slot {w}: 0\n" for w in range(WRITERS)))
    run_writers("""
        import sys
        from tools.files import file_patch
        me, rounds = int(sys.argv[1]), int(sys.argv[2])
        for i in range(rounds):
            file_patch("slots.txt", f"slot {me}: {i}\\n", f"slot {me}: {i + 1}\\n")
    """, tmp_path, rounds=6)
    expected = "".join(f"slot {w}: 6\n" for w in range(WRITERS))
    assert (tmp_path / "slots.txt").read_text() == expected


def test_a_write_waiting_for_a_held_lock_stops_on_abort(tmp_path):
    held = os.open(tmp_path, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)  # another process's, for the writer
    stop = threading.Event()
    stop.set()
    try:
        with pytest.raises(ToolError, match="stopped while waiting for the lock"):
            file_write(tmp_path / "a.txt", "x", abort=stop)
    finally:
        os.close(held)
    assert not (tmp_path / "a.txt").exists()


def test_file_lock_leaves_no_lock_file(tmp_path):
    folder = tmp_path / "locked"
    with fslock.file_lock(folder / "a.txt"):
        assert folder.is_dir()
    assert list(folder.iterdir()) == []
