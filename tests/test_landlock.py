"""The confinement mechanisms under code_run (tools/sandbox.py, tools/landlock.py): a
confined child writes only its folders, and a Python script under the Landlock wrapper runs
as `python SCRIPT` would."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from genutil import drain

from tools import landlock
from tools.code_run import code_run
from tools.sandbox import Confinement, bwrap_works, run_temp_dir

OPTIONAL = os.environ.get("GA_REALSANDBOX") != "require"  # CI: fail, not skip, without one
MECHANISMS = [  # every confinement test runs under each; CI has both
    pytest.param("landlock", marks=pytest.mark.skipif(
        OPTIONAL and landlock.abi() < landlock.SCOPE_ABI,
        reason="needs Landlock ABI 6 (Linux >= 6.12)")),
    pytest.param("bwrap", marks=pytest.mark.skipif(
        OPTIONAL and not bwrap_works(), reason="needs bubblewrap: apt-get install bubblewrap")),
]

PYTHON_AS_ITSELF = """import sys, os
print(sys.argv[0] == __file__, __name__, sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
print(sys.argv[1:])
def fails():
    raise ValueError("boom")
fails()
"""


def run(code: str, kind: str, jail: Confinement | None, cwd: Path) -> dict:
    env = jail.env({"PATH": "/usr/bin:/bin"}, run_temp_dir()) if jail else None
    _, result = drain(code_run(code, kind, cwd=cwd, confine=jail, env=env))
    return result


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("kind, write", [
    ("bash", "printf x > {path}"), ("python", "open({path!r}, 'w').write('x')")])
def test_a_confined_child_writes_only_its_folders(tmp_path, mechanism, kind, write):
    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir()
    outside.mkdir()
    jail = Confinement(mechanism, (str(inside), str(run_temp_dir())))
    assert run(write.format(path=str(inside / "a")), kind, jail, inside)["exit_code"] == 0
    denied = run(write.format(path=str(outside / "b")), kind, jail, inside)
    assert denied["exit_code"] != 0 and not (outside / "b").exists()
    assert (inside / "a").read_text() == "x"


def test_a_python_script_under_the_landlock_wrapper_runs_as_python_script(tmp_path):
    jail = Confinement("landlock", (str(tmp_path),))
    result = run(PYTHON_AS_ITSELF, "python", jail, tmp_path)
    plain = run(PYTHON_AS_ITSELF, "python", None, tmp_path)
    assert result["exit_code"] == plain["exit_code"] == 1
    assert result["stdout"].splitlines()[:2] == ["True __main__ True", "[]"]
    assert "landlock" not in result["stdout"]  # the traceback shows only the script
    assert result["stdout"].count('File "') == plain["stdout"].count('File "')


def test_a_python_script_under_the_landlock_wrapper_imports_as_python_script(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "helper.py").write_text("VALUE = 'from the import path'\n")
    code = "import sys, site, helper, yaml\nprint(sys.path, site.ENABLE_USER_SITE, helper.VALUE)"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    seen = []
    for jail in (None, Confinement("landlock", (str(tmp_path), str(run_temp_dir())))):
        _, result = drain(code_run(code, "python", cwd=tmp_path, confine=jail, env=env,
                                   import_path=[lib]))
        assert result["exit_code"] == 0, result
        seen.append(result["stdout"])
    assert seen[0] == seen[1] and "from the import path" in seen[1]


def test_a_command_under_the_landlock_wrapper_keeps_its_exit_code(tmp_path):
    jail = Confinement("landlock", (str(tmp_path),))
    assert run("exit 7", "bash", jail, tmp_path)["exit_code"] == 7


@pytest.mark.skipif(os.geteuid() != 0, reason="only root has capabilities to give up")
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confined_root_gives_up_every_capability(tmp_path, mechanism):
    jail = Confinement(mechanism, (str(tmp_path),))
    status = run("grep -E '^(Cap(Eff|Prm|Amb)|NoNewPrivs)' /proc/self/status", "bash", jail,
                 tmp_path)
    plain = run("grep -E '^CapEff' /proc/self/status", "bash", None, tmp_path)
    assert plain["stdout"].split()[1] != "0" * 16  # root had them
    found = dict(line.split(":\t") for line in status["stdout"].splitlines())
    assert found == {"CapPrm": "0" * 16, "CapEff": "0" * 16, "CapAmb": "0" * 16,
                     "NoNewPrivs": "1"}  # and none can come back through an exec
