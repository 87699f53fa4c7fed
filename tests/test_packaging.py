"""`pip install -e .` (as .ci/setup.sh and `make` run it) prints no setuptools warning of ours
(issue 23, item 6: "Please be careful with folders in your working directory with the same
name as your package", on every make). pip installs a copy of the project in editable mode,
as .ci/setup.sh does, into a scratch prefix: with the installed setuptools (no network, no
dependencies), so that only our packaging can speak."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_editable_install_is_a_plain_path_entry_without_warnings(tmp_path):
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"pyproject.toml asks for setuptools>=77; {setuptools.__version__} is installed")
    project = tmp_path / "project"
    project.mkdir()
    for name in ("pyproject.toml", "setup.cfg", "README.md"):
        shutil.copy(ROOT / name, project / name)
    for package in ("feedline", "converters", "tests", "bench"):   # folders beside the packages too
        shutil.copytree(ROOT / package, project / package, ignore=shutil.ignore_patterns("__pycache__", "results"))
    prefix = tmp_path / "prefix"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # --ignore-installed: without it pip first uninstalls the feedline the running venv holds.
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "--ignore-installed", "--prefix", str(prefix), "-e", str(project)],
                          cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout + done.stderr == ""    # was: BuildBackendWarning ... "careful with folders"
    [pth] = prefix.rglob("__editable__.feedline-*.pth")
    assert pth.read_text().strip() == str(project)   # a plain path entry: the tree imports as it is
