"""The README's code is run: every shell and Python block either runs here as written, or
says in the comment before it why it is not run (set-up and install commands, the suite
itself). A README that drifts from the software fails here."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from converters import pack
from feedline.sample import make_photo_folder

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"(?:<!-- readme-test: (?P<note>.*?) -->\n)?```(?P<lang>\w*)\n(?P<code>.*?)```", re.S)


def blocks(lang: str) -> list[tuple[str | None, str]]:
    return [(m["note"], m["code"]) for m in BLOCK.finditer(README.read_text()) if m["lang"] == lang]


def runnable(lang: str, note: str) -> str:
    [code] = [code for n, code in blocks(lang) if n == note]
    return code


def test_every_code_block_is_run_or_says_why_not():
    for lang in ("sh", "python", "bash", "console", ""):
        for note, code in blocks(lang):
            assert lang in ("sh", "python", "text") or not code.strip(), f"untyped block: {code[:60]!r}"
            assert note is not None, f"no readme-test comment before the {lang} block {code[:60]!r}"
            assert note.startswith("run") or note.startswith("not run: "), note


def test_the_command_line_block_runs_as_written(tmp_path):
    code = runnable("sh", "run in an empty folder")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for line in filter(None, (ln.split("#")[0].strip() for ln in code.splitlines())):
        done = subprocess.run(line, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
    assert (tmp_path / "train.lmdb").is_file() and (tmp_path / "run" / "checkpoint.pt").is_file()


def test_the_python_block_runs_as_written(photo_folder, tmp_path, monkeypatch):
    pack(str(photo_folder), str(tmp_path / "train.lmdb"))
    make_photo_folder(str(tmp_path / "val"), n=40, classes=4, seed=3, sizes=[(160, 120), (200, 150)])
    pack(str(tmp_path / "val"), str(tmp_path / "val.h5"))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(runnable("python", "run where train.lmdb and val.h5 exist"), "README.md", "exec"), namespace)
    assert namespace["images"].shape == (32, 3, 224, 224)
    assert namespace["checkpoint"]["loader"]["epoch"] == 2


def test_the_augmentation_block_runs_as_written(packed_lmdb, tmp_path, monkeypatch):
    import shutil
    shutil.copy(packed_lmdb, tmp_path / "train.lmdb")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(runnable("python", "run where train.lmdb exists (augmentations)"), "README.md", "exec"), namespace)
    assert namespace["images"].shape == (16, 3, 128, 128)          # epoch 2: the end of the ramp
    assert namespace["targets"].shape == (16, 4)
