"""Every tutorial and ``python -m tedsl demo`` run to completion (small sizes, subprocesses)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = sorted((ROOT / "tutorials").glob("*.py"))


def _env():
    """The environment of a child: small sizes, and this checkout first on the import path."""
    env = dict(os.environ, TEDSL_TUTORIAL_SMALL="1", TEDSL_DEMO_SMALL="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def _run(cmd):
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} exited with {proc.returncode}\n--- stdout (tail)\n"
        f"{proc.stdout[-3000:]}\n--- stderr (tail)\n{proc.stderr[-5000:]}")
    return proc


def test_tutorials_exist():
    assert TUTORIALS, "no tutorials/*.py found"


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.name for p in TUTORIALS])
def test_tutorial_runs(path):
    _run([sys.executable, str(path)])


def test_demo_runs():
    proc = _run([sys.executable, "-m", "tedsl", "demo"])
    assert "matmul" in proc.stdout and "| kernel" in proc.stdout


def test_cli_unknown_command_exits_2():
    proc = subprocess.run([sys.executable, "-m", "tedsl", "no-such-command"], cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "unknown command" in proc.stderr
