"""Choose the wheels to carry to the GPU machine and prove nothing is missing.

    closure.py --provided provided.txt --pyproject pyproject.toml --extras gpu,dali,test \
               --group core DIR --group dali DIR --out CARRY_DIR

Each group folder holds what `pip download` resolved for the GPU machine (Python 3.12,
manylinux x86_64). A wheel of a project the machine's image already has (provided.txt) is
left out, and so is a second copy of a wheel in a later group. Then every requirement of
every carried wheel (with the extras asked for, markers evaluated for Python 3.12 on
Linux x86_64) and of feedline itself must be met by a carried wheel or a provided
package, else this exits 1 naming what is missing. Runs here only (needs `packaging`).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tomllib
import zipfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

TARGET_ENV = default_environment() | {
    "python_version": "3.12", "python_full_version": "3.12.3", "implementation_name": "cpython",
    "platform_python_implementation": "CPython", "sys_platform": "linux", "platform_system": "Linux",
    "platform_machine": "x86_64", "os_name": "posix"}


def read_provided(path: Path) -> dict[str, Version | None]:
    """name -> version (None when the image's version is not known)."""
    provided = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, version = line.partition("==")
        provided[canonicalize_name(name)] = Version(version) if version else None
    return provided


def wheel_requirements(wheel: Path) -> list[Requirement]:
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        text = zf.read(meta).decode("utf-8", "replace")
    headers = text.split("\n\n", 1)[0]
    return [Requirement(line.split(":", 1)[1].strip()) for line in headers.splitlines()
            if line.startswith("Requires-Dist:")]


def applies(req: Requirement, extras: set[str]) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate(TARGET_ENV | {"extra": e}) for e in (extras or {""}))


def choose(groups: list[tuple[str, Path]], provided: dict) -> tuple[dict[str, tuple[str, Path]], list[str]]:
    """project -> (group, wheel) to carry; and notes on what was left out."""
    carried, notes = {}, []
    for group, folder in groups:
        for wheel in sorted(folder.glob("*.whl")):
            name = canonicalize_name(parse_wheel_filename(wheel.name)[0])
            if name in provided:
                notes.append(f"left out {wheel.name}: the GPU image has {name}")
            elif name in carried:
                if carried[name][1].name != wheel.name:
                    raise SystemExit(f"closure: two versions of {name}: {carried[name][1].name} and {wheel.name}; "
                                     "pin one in .ci/gpu/requirements-*.txt")
            else:
                carried[name] = (group, wheel)
    return carried, notes


def unmet(roots: list[Requirement], carried: dict[str, tuple[str, Path]], provided: dict) -> list[str]:
    """Requirements of ``roots`` and of every carried wheel that nothing meets, following
    extras to a fixed point."""
    extras: dict[str, set[str]] = {}
    pending = list(roots)
    problems, seen = [], set()
    while pending:
        req = pending.pop()
        name = canonicalize_name(req.name)
        key = (str(req), name)
        if key in seen:
            continue
        seen.add(key)
        if name in carried:
            version = parse_wheel_filename(carried[name][1].name)[1]
            if not req.specifier.contains(version, prereleases=True):
                problems.append(f"{req} but {carried[name][1].name} is carried")
            new = set(req.extras) - extras.get(name, set())
            if name not in extras or new:
                extras[name] = extras.get(name, set()) | set(req.extras)
                pending += [r for r in wheel_requirements(carried[name][1]) if applies(r, extras[name])]
        elif name in provided:
            version = provided[name]
            if version is not None and not req.specifier.contains(version, prereleases=True):
                problems.append(f"{req} but the GPU image has {name} {version}")
        else:
            problems.append(f"{req}: neither carried nor on the GPU image")
    return sorted(set(problems))


def feedline_requirements(pyproject: Path, extras: list[str]) -> list[Requirement]:
    project = tomllib.loads(pyproject.read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        reqs += [Requirement(r) for r in project["optional-dependencies"].get(extra, [])]
    return [r for r in reqs if applies(r, set())]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--provided", type=Path, required=True)
    p.add_argument("--pyproject", type=Path, required=True)
    p.add_argument("--extras", default="", help="feedline's extras the check uses, comma-separated")
    p.add_argument("--group", action="append", nargs=2, metavar=("NAME", "DIR"), required=True)
    p.add_argument("--out", type=Path, required=True, help="one folder per group of the chosen wheels")
    a = p.parse_args(argv)
    provided = read_provided(a.provided)
    groups = [(g, Path(d)) for g, d in a.group]
    carried, notes = choose(groups, provided)
    extras = [e for e in a.extras.split(",") if e]
    # Requirements DALI and the others state for themselves are followed from the wheels.
    problems = unmet(feedline_requirements(a.pyproject, extras), carried, provided)
    problems += unmet([Requirement(f"{name}") for name in carried], carried, provided)
    for note in notes:
        print(f"closure: {note}")
    if problems:
        for line in sorted(set(problems)):
            print(f"closure: UNMET {line}", file=sys.stderr)
        print("closure: add the missing packages to .ci/gpu/requirements-*.txt (or to provided.txt if the "
              "GPU image has them)", file=sys.stderr)
        return 1
    if a.out.exists():
        shutil.rmtree(a.out)
    for group, _ in groups:
        (a.out / group).mkdir(parents=True)
    for group, wheel in carried.values():
        os.link(wheel, a.out / group / wheel.name) if _same_fs(wheel, a.out) else shutil.copy2(wheel, a.out / group)
    print(f"closure: {len(carried)} wheels to carry, every requirement met")
    return 0


def _same_fs(a: Path, b: Path) -> bool:
    return a.stat().st_dev == b.stat().st_dev


if __name__ == "__main__":
    sys.exit(main())
