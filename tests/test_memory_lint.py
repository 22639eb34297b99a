"""``ga memory lint``: each rule fails in a fixture home; ``--fix`` repairs the mechanical ones."""

from __future__ import annotations

import pytest

from frontends.cli import main
from llmcore.secrets import find_secrets, redact_secrets
from memory.lint import L1_MAX_LINES, lint_store
from memory.store import MemoryStore

L1 = """# [Global Memory Insight - L1]
L0: memory_management_sop
L2: global_mem.txt
L3: subagent_sop (children) | plan_sop | scheduled_task_sop | memory_cleanup_sop | web_sop \
| web_extract_sop | vision_sop | verify_sop | long_task_sop | batch_sop | mcp_sop
deploy: deploy_sop (ssh first) | notes.md

[RULES]
1. Use the exact PID.
"""


@pytest.fixture
def store(home) -> MemoryStore:
    s = MemoryStore(home)
    s.seed()
    return s


def _messages(problems) -> list[str]:
    return [p.message for p in problems]


def test_fresh_home_is_clean(store):
    assert lint_store(store) == []


def test_dangling_l1_pointers_found_and_removed(store):
    store.l1_path.write_text(L1, encoding="utf-8")
    problems = lint_store(store)
    assert sorted(_messages(problems)) == [
        "L1 points at 'deploy_sop', which does not exist",
        "L1 points at 'notes.md', which does not exist",
    ]
    assert all(p.line == 5 and not p.fixed for p in problems)
    fixed = lint_store(store, fix=True)
    assert all(p.fixed for p in fixed)
    assert "deploy" not in store.insight() and "notes.md" not in store.insight()
    assert "L3: subagent_sop (children) | plan_sop" in store.insight()
    assert lint_store(store) == []


def test_dangling_pointer_inside_a_list_keeps_the_rest(store):
    text = L1.replace("| plan_sop |", "| gone_sop (old) | plan_sop |").replace(
        "deploy: deploy_sop (ssh first) | notes.md\n", "")
    store.l1_path.write_text(text, encoding="utf-8")
    lint_store(store, fix=True)
    assert "L3: subagent_sop (children) | plan_sop | scheduled_task_sop" in store.insight()
    assert lint_store(store) == []


def test_unindexed_sop_found_and_added(store):
    (store.dir / "deploy_sop.md").write_text("# Deploy\n", encoding="utf-8")
    (store.dir / "ocr_utils.py").write_text("x = 1\n", encoding="utf-8")
    problems = lint_store(store)
    assert sorted(_messages(problems)) == [
        "SOP deploy_sop.md is not indexed in L1",
        "SOP ocr_utils.py is not indexed in L1",
    ]
    lint_store(store, fix=True)
    l3 = [ln for ln in store.insight().splitlines() if "deploy_sop" in ln]
    assert l3 and "ocr_utils" in store.insight()
    assert lint_store(store) == []


def test_unindexed_sop_added_when_l1_has_no_l3_line(store):
    store.l1_path.write_text("L0: memory_management_sop\n\n[RULES]\n1. x\n", encoding="utf-8")
    lint_store(store, fix=True)
    lines = store.insight().splitlines()
    assert lines[1].startswith("L3: ") and "plan_sop" in store.insight()
    assert lines[-2:] == ["[RULES]", "1. x"]
    assert lint_store(store) == []


def test_long_l1_is_reported_not_fixed(store):
    extra = "".join(f"{i}. rule number {i}\n" for i in range(L1_MAX_LINES))
    store.l1_path.write_text(store.insight() + extra, encoding="utf-8")
    problems = lint_store(store, fix=True)
    assert len(problems) == 1 and not problems[0].fixed
    assert f"(max {L1_MAX_LINES})" in problems[0].message


def test_duplicate_l2_lines_found_and_removed(store):
    store.l2_path.write_text(
        "# [Global Memory - L2]\n## [PATHS]\nrepo: /srv/app\n\nrepo:  /srv/app\n"
        "## [HOSTS]\nci: 10.0.0.5\n## [PATHS]\nrepo: /srv/app\n", encoding="utf-8")
    problems = lint_store(store)
    assert [p.line for p in problems] == [5, 8, 9]
    fixed = lint_store(store, fix=True)
    assert [p.fixed for p in fixed] == [True, False, True]  # a repeated header needs a person
    assert store.global_mem() == (
        "# [Global Memory - L2]\n## [PATHS]\nrepo: /srv/app\n\n"
        "## [HOSTS]\nci: 10.0.0.5\n## [PATHS]\n")


SECRETS = [
    ("sk-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3", "sk- API key"),
    ("AKIA" + "ABCDEFGHIJKLMNOP", "AWS access key id"),
    ("ghp_" + "x" * 36, "GitHub token"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", "private key block"),
    ("password = hunter2hunter2hunter22", "assigned secret"),
]


@pytest.mark.parametrize(("secret", "kind"), SECRETS)
def test_secrets_in_any_layer_are_reported(store, secret, kind):
    store.append("global_mem.txt", f"## [KEYS]\n{secret}")
    (store.l4_dir).mkdir(exist_ok=True)
    (store.l4_dir / "s1.md").write_text(f"# Session\n{secret}\n", encoding="utf-8")
    problems = lint_store(store, fix=True)
    assert {(p.path.name, kind) for p in problems if not p.fixed} >= {
        ("global_mem.txt", kind), ("s1.md", kind)}
    assert secret.splitlines()[0] in store.global_mem()  # not removed by --fix
    assert kind in {k for _, k in find_secrets(secret)}
    assert secret.splitlines()[0] not in redact_secrets(secret)


def test_key_names_and_paths_are_not_secrets():
    text = "api_key_env: ANTHROPIC_API_KEY\nkeys live in ~/.config/keys/openai.txt\n"
    assert find_secrets(text) == []


def test_cli_lint_exit_codes_and_fix_report(store, capsys):
    (store.dir / "deploy_sop.md").write_text("# Deploy\n", encoding="utf-8")
    assert main(["memory", "lint"]) == 1
    out = capsys.readouterr().out
    assert "deploy_sop.md is not indexed" in out and "--fix" in out
    assert main(["memory", "lint", "--fix"]) == 0
    out = capsys.readouterr().out
    assert "[fixed]" in out and "1 fixed, 0 left" in out
    assert main(["memory", "lint"]) == 0
    assert "clean" in capsys.readouterr().out


def test_cli_lint_fails_when_unfixable_problems_remain(store, capsys):
    store.append("global_mem.txt", "token: " + "abc123" * 4)
    assert main(["memory", "lint", "--fix"]) == 1
    assert "0 fixed, 1 left" in capsys.readouterr().out


def test_pointers_inside_chinese_text(store):
    line = "定时任务见scheduled_task_sop，部署见deploy_sop"
    text = store.insight().replace("[RULES]", line + "\n[RULES]")
    store.l1_path.write_text(text, encoding="utf-8")
    assert _messages(lint_store(store)) == ["L1 points at 'deploy_sop', which does not exist"]
    lint_store(store, fix=True)
    assert "定时任务见scheduled_task_sop，部署见" in store.insight()


def test_fix_on_a_read_only_file_says_what_to_do_and_leaves_it(store, capsys):
    store.l2_path.write_text("# [Global Memory - L2]\nrepo: /srv/app\nrepo: /srv/app\n")
    store.l2_path.chmod(0o444)
    assert main(["memory", "lint", "--fix"]) == 1
    out = capsys.readouterr().out
    assert f"{store.l2_path}: cannot fix it: the file is read-only" in out
    assert "chmod u+w" in out and "0 fixed, 2 left" in out
    assert store.global_mem().count("repo: /srv/app") == 2
