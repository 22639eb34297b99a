"""Memory store: seeding, reads, writes, access stats; prompt assembly; LTU gate."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from memory import texts
from memory.lint import lint_store
from memory.prompt import (
    MIN_LTU_TURN,
    build_system_prompt,
    insight_reminder,
    long_term_update_prompt,
    memory_read_tip,
)
from memory.store import MemoryStore, bundled_sop_dir

STARTER = {"memory_management_sop.md", "subagent_sop.md", "plan_sop.md",
           "scheduled_task_sop.md", "memory_cleanup_sop.md", "web_sop.md", "web_extract_sop.md",
           "vision_sop.md", "long_task_sop.md", "verify_sop.md", "mcp_sop.md", "batch_sop.md"}


@pytest.fixture
def store(home) -> MemoryStore:
    s = MemoryStore(home)
    s.seed()
    return s


# ---- seeding -------------------------------------------------------------------------
def test_seed_creates_layers_and_starter_sops(home):
    store = MemoryStore(home)
    created = store.seed()
    names = {p.name for p in created}
    assert {"global_mem_insight.txt", "global_mem.txt"} | STARTER <= names
    assert store.global_mem().startswith("# [Global Memory - L2]")
    assert "[RULES]" in store.insight()
    assert store.l0_sop().startswith("# Memory Management SOP (L0)")
    assert STARTER <= {p.name for p in bundled_sop_dir().glob("*.md")}


def test_seed_is_idempotent_and_keeps_user_edits(home):
    store = MemoryStore(home)
    store.seed()
    store.l1_path.write_text("my own index\n", encoding="utf-8")
    (store.dir / "plan_sop.md").write_text("my plan rules\n", encoding="utf-8")
    assert store.seed() == []
    assert store.insight() == "my own index\n"
    assert (store.dir / "plan_sop.md").read_text(encoding="utf-8") == "my plan rules\n"


def test_upgrade_adds_only_new_starter_sops(home):
    store = MemoryStore(home)
    store.seed()
    (store.dir / "subagent_sop.md").unlink()  # the user deleted it: it stays deleted
    manifest = store.dir / ".starter_sops.json"
    names = json.loads(manifest.read_text(encoding="utf-8"))
    names.remove("plan_sop.md")  # as if plan_sop.md were new in this version
    manifest.write_text(json.dumps(names), encoding="utf-8")
    (store.dir / "plan_sop.md").unlink()
    created = store.seed()
    assert [p.name for p in created] == ["plan_sop.md"]
    assert not (store.dir / "subagent_sop.md").exists()


def test_seeded_l1_indexes_every_starter_sop_and_lints_clean(store):
    for lang in texts.L1_TEMPLATE:
        store.l1_path.write_text(texts.L1_TEMPLATE[lang], encoding="utf-8")
        assert lint_store(store) == [], lang


def test_zh_seed_uses_zh_template(home):
    store = MemoryStore(home)
    store.seed(lang="zh")
    assert "写记忆前必读" in store.insight()


# ---- reads and writes -----------------------------------------------------------------
def test_list_sops_excludes_l1_l2_and_stats(store):
    (store.dir / "helper.py").write_text("x = 1\n", encoding="utf-8")
    store.record_access(store.dir / "plan_sop.md")
    names = {p.name for p in store.list_sops()}
    assert names == STARTER | {"helper.py"}


def test_missing_layers_read_as_empty(home):
    store = MemoryStore(home)
    assert store.insight() == ""
    assert store.global_mem() == ""
    assert store.list_sops() == []
    assert store.access_stats() == {}


def test_is_memory_file(store, tmp_path):
    assert store.is_memory_file(store.dir / "plan_sop.md")
    assert store.is_memory_file(store.l4_dir / "x.md")
    assert store.is_memory_file(bundled_sop_dir() / "plan_sop.md")
    assert not store.is_memory_file(tmp_path / "work" / "plan_sop.md")
    assert not store.is_memory_file(store.home / "config.yaml")
    assert not store.is_memory_file(store.home / "memory-old" / "plan_sop.md")
    (tmp_path / "link").symlink_to(store.dir)
    assert store.is_memory_file(tmp_path / "link" / "plan_sop.md")


def test_append_and_patch_are_atomic_edits(store):
    store.append("global_mem.txt", "## [PATHS]")
    store.append("global_mem.txt", "repo: /srv/app")
    assert store.global_mem().endswith("## [PATHS]\nrepo: /srv/app\n")
    store.patch("global_mem.txt", "repo: /srv/app", "repo: /srv/app2")
    assert "repo: /srv/app2\n" in store.global_mem()
    with pytest.raises(ValueError, match="found 0"):
        store.patch("global_mem.txt", "absent", "x")
    store.append("global_mem.txt", "repo: /srv/app2")
    with pytest.raises(ValueError, match="found 2"):
        store.patch("global_mem.txt", "repo: /srv/app2", "y")
    assert not list(store.dir.glob(".*.tmp"))


def test_writes_refuse_paths_outside_memory(store):
    with pytest.raises(ValueError, match="outside"):
        store.append("../config.yaml", "x")


def test_record_access_counts_and_dates(store):
    sop = store.dir / "plan_sop.md"
    store.record_access(sop, today=date(2025, 1, 2))
    store.record_access(sop, today=date(2025, 3, 4))
    stats = json.loads(store.stats_path.read_text(encoding="utf-8"))
    assert stats["plan_sop.md"] == {"count": 2, "last": "2025-03-04"}
    assert store.access_stats() == stats


def test_record_access_survives_a_corrupt_stats_file(store):
    store.stats_path.write_text("{not json", encoding="utf-8")
    store.record_access(store.dir / "plan_sop.md")
    assert store.access_stats()["plan_sop.md"]["count"] == 1


# ---- prompts --------------------------------------------------------------------------
def test_system_prompt_has_role_date_structure_insight_extra(store):
    store.patch("global_mem_insight.txt", "[RULES]", "deploy: deploy_sop\n[RULES]")
    prompt = build_system_prompt(store, extra="Answer like a pirate.", today=date(2025, 5, 6))
    assert prompt.startswith("# Role:")
    assert "Today: 2025-05-06 (Tuesday)" in prompt
    assert f"[MEMORY] Folder {store.dir}/" in prompt
    assert "memory_management_sop.md" in prompt and "L4_raw_sessions" in prompt
    assert "deploy: deploy_sop" in prompt
    assert prompt.rstrip().endswith("Answer like a pirate.")


def test_system_prompt_zh(store):
    prompt = build_system_prompt(store, lang="zh", today=date(2025, 5, 6))
    assert "今天：2025-05-06（星期二）" in prompt
    assert "[记忆] 目录" in prompt


def test_system_prompt_stays_small_with_seeded_l1(store):
    # chars/4 is a rough cl100k stand-in; bench/bench_tokens.py measures the real figure.
    assert len(build_system_prompt(store)) / 4 < 900


def test_texts_tables_have_the_same_keys():
    assert set(texts.EN) == set(texts.ZH)
    assert set(texts.L1_TEMPLATE) == set(texts.WEEKDAYS) == set(texts.TEXTS)


def test_long_term_update_refused_before_turn_10(store):
    ok, msg = long_term_update_prompt(store, turn=3)
    assert not ok
    assert f"from turn {MIN_LTU_TURN}" in msg and "now turn 3" in msg
    assert "Decision tree" not in msg


def test_long_term_update_gives_l0_from_turn_10(store):
    ok, msg = long_term_update_prompt(store, turn=12)
    assert ok
    assert "verified" in msg
    assert "## Decision tree: which layer?" in msg
    assert str(store.l2_path) in msg


def test_long_term_update_without_l0(home):
    store = MemoryStore(home)
    store.seed()
    store.l0_path.unlink()
    ok, msg = long_term_update_prompt(store, turn=12)
    assert ok and "Decision tree" in msg  # falls back to the bundled copy


def test_insight_reminder_and_read_tip(store):
    assert store.insight().strip() in insight_reminder(store)
    assert "update_working_checkpoint" in memory_read_tip("en")
    assert "update_working_checkpoint" in memory_read_tip("zh")
    store.l1_path.unlink()
    assert insight_reminder(store) == ""


def test_bundled_sops_are_english_markdown():
    for path in Path(bundled_sop_dir()).glob("*.md"):
        text = path.read_text(encoding="utf-8")
        assert text.startswith("# "), path.name


def test_append_and_patch_keep_bytes_that_are_not_utf8(store):
    path = store.dir / "global_mem.txt"
    path.write_bytes(b"caf\xe9 latin-1 line\n")
    store.append("global_mem.txt", "new fact")
    store.patch("global_mem.txt", "new fact", "newer fact")
    assert path.read_bytes() == b"caf\xe9 latin-1 line\nnewer fact\n"
