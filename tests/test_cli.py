"""The `feedline` command line as a user meets it: every module imports, every command's
--help works and stays light (no tensor, array or image library is imported to build
a parser), a closed pipe ends quietly, and errors exit with their documented codes.

An ImportError in any module fails here loudly: nothing is skipped."""
from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from feedline.cli import COMMANDS, EXIT_BROKEN_PIPE, chosen_command, main

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("feedline", "converters")
# What building a parser must not import: each costs from 50 ms (numpy) to 1.5 s (torch).
HEAVY = ("torch", "numpy", "cv2", "PIL", "h5py", "lmdb", "nvidia")


def all_modules() -> list[str]:
    """Every module of the packages, found on disk (not by importing them, so a package
    that fails to import cannot hide its modules). ``__main__`` modules are scripts: they
    are run by the --help tests instead."""
    names = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__main__":
                continue
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


@pytest.mark.parametrize("module", all_modules())
def test_every_module_imports(module):
    importlib.import_module(module)


def test_module_list_covers_the_cli():
    found = set(all_modules())
    assert {f"feedline.cli.{name}" for name in COMMANDS} <= found and "converters" in found


def run_feedline(*args: str, module: str = "feedline") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_of_every_command_exits_0(command):
    done = run_feedline(*([command] if command else []), "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: feedline {command}".rstrip()), done.stdout[:200]
    assert "Traceback" not in done.stderr
    if not command:   # the top level lists every command
        assert all(name in done.stdout for name in COMMANDS)


def test_help_of_python_m_feedline_train_exits_0():
    done = run_feedline("--help", module="feedline.train")
    assert done.returncode == 0, done.stderr
    assert "--batch-size" in done.stdout


# Runs `feedline [COMMAND] --help` in a fresh interpreter and reports, for each heavy
# library imported, the chain of feedline/converters lines that imported it first.
PROBE = r"""
import contextlib, io, json, sys, traceback
heavy, chains = set(json.loads(sys.argv[1])), {}

class Watch:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in heavy and top not in chains:
            chains[top] = [f"{f.filename.split('/')[-2]}/{f.filename.split('/')[-1]}:{f.lineno}"
                           for f in traceback.extract_stack() if "/feedline/" in f.filename
                           or "/converters/" in f.filename]
        return None

sys.meta_path.insert(0, Watch())
from feedline.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(sys.argv[2:] + ["--help"])
        code = None
    except SystemExit as exc:
        code = exc.code
cli = sorted(m.split(".")[2] for m in sys.modules if m.startswith("feedline.cli."))
print(json.dumps({"code": code, "chains": chains, "cli_modules": cli}))
"""


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_imports_no_heavy_library(command):
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(HEAVY), *([command] if command else [])],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["code"] == 0
    imported = {name: " -> ".join(chain) for name, chain in report["chains"].items()}
    assert not imported, f"`feedline {command} --help` imports {imported}"
    others = set(COMMANDS) - {command}
    assert not others & set(report["cli_modules"]), f"other commands' modules imported: {report['cli_modules']}"


def test_chosen_command_skips_feedlines_own_options():
    assert chosen_command(["-v", "pack", "src", "out.lmdb"]) == "pack"
    assert chosen_command(["--verbose", "info", "x"]) == "info"
    assert chosen_command(["--help"]) is None and chosen_command([]) is None


def test_a_closed_pipe_ends_quietly(tmp_path):
    """`feedline info DATA | head -1`: the reader closes before we write; no traceback."""
    from feedline.sample import make_photo_folder
    make_photo_folder(str(tmp_path / "images"), n=4, classes=2, seed=0, sizes=[(96, 96), (120, 90)])
    proc = subprocess.Popen([sys.executable, "-m", "feedline", "info", str(tmp_path / "images")], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()   # nobody will read: the first write fails with EPIPE
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == EXIT_BROKEN_PIPE, stderr
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr and "Exception ignored" not in stderr


def test_the_same_command_with_a_reader_prints_its_table(tmp_path):
    from feedline.sample import make_photo_folder
    make_photo_folder(str(tmp_path / "images"), n=4, classes=2, seed=0, sizes=[(96, 96), (120, 90)])
    done = run_feedline("info", str(tmp_path / "images"))
    assert done.returncode == 0, done.stderr
    assert str(tmp_path / "images") in done.stdout


def test_unknown_command_and_missing_command_exit_2(capsys):
    for argv in (["no-such-command"], []):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'no-such-command'" in err and "required: COMMAND" in err


def test_an_error_the_user_can_fix_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["info", str(tmp_path / "missing.lmdb")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("feedline info: error: ") and "missing.lmdb" in err and "\n" not in err


def test_pack_max_side_shrinks_a_huge_jpeg_the_default_skips(tmp_path):
    """A 20000 x 20000 JPEG, end to end through the CLI: skipped as too large by default
    (saying how to pack it), packed at 2048 with --max-side 2048 (a DCT-scaled decode)."""
    from helpers_images import flat_gray_jpeg

    from feedline.stores import open_dataset
    (tmp_path / "src" / "a").mkdir(parents=True)
    (tmp_path / "src" / "a" / "huge.jpg").write_bytes(flat_gray_jpeg(20000, 20000))
    (tmp_path / "src" / "a" / "small.jpg").write_bytes(flat_gray_jpeg(64, 48))
    plain = run_feedline("pack", str(tmp_path / "src"), str(tmp_path / "plain.lmdb"))
    assert plain.returncode == 0, plain.stderr
    errors = (tmp_path / "plain.lmdb.errors.csv").read_text()
    assert "a/huge.jpg" in errors and "too-large" in errors and "pass --max-side" in errors
    shrunk = run_feedline("pack", str(tmp_path / "src"), str(tmp_path / "shrunk.lmdb"), "--max-side", "2048")
    assert shrunk.returncode == 0, shrunk.stderr
    with open_dataset(str(tmp_path / "shrunk.lmdb")) as store:
        assert sorted(store.size(i) for i in range(len(store))) == [(64, 48), (2048, 2048)]
