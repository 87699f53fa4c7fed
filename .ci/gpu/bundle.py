"""Make the bundles that carry wheels to the GPU machine: here, in `make gpu-wheels`.

    bundle.py --group core DIR --group dali DIR --out .whl/gpu --cache DIR [--bundle-mib 58]

Each wheel (or .deb) is made ready to travel: a large one is rewritten uncompressed (same
members, same order) and then xz-compressed with the x86 filter, which comes out about
30% smaller than the wheel itself (machine code compresses better that way than with the
wheel's per-member deflate); a small one travels as it is. The result is cut into parts
and the parts are grouped into bundles: folders of at most ``--bundle-mib``, one per
device call, each holding a copy of manifest.json. transport.py is the other end.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from transport import FORMAT, MANIFEST, MIB, sha256_of  # noqa: E402

COMPRESS_ABOVE = 4 * MIB   # smaller wheels gain too little to be worth a rewrite
XZ_FILTERS = [{"id": lzma.FILTER_X86}, {"id": lzma.FILTER_LZMA2, "preset": 6}]
GROUPS = ("core", "dali")  # core: what feedline itself needs; dali: NVIDIA DALI and its needs


def project_of(file: str) -> str:
    """The normalized project name of a wheel file name (PEP 427, PEP 503), or the package
    name of a Debian package file (NAME_VERSION_ARCH.deb)."""
    if file.endswith(".deb"):
        return file.split("_", 1)[0]
    return file.split("-", 1)[0].lower().replace("_", "-").replace(".", "-")


def stored_copy(wheel: Path, out: Path) -> None:
    """The wheel rewritten without compression: the same members in the same order with
    the same metadata, so pip installs exactly what the original holds."""
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            copy = zipfile.ZipInfo(info.filename, info.date_time)
            copy.external_attr, copy.create_system = info.external_attr, info.create_system
            copy.compress_type = zipfile.ZIP_STORED
            with src.open(info) as r, dst.open(copy, "w", force_zip64=info.file_size > 1 << 31) as w:
                shutil.copyfileobj(r, w, 8 * MIB)


def xz_file(src: Path, out: Path) -> None:
    with open(src, "rb") as r, lzma.open(out, "wb", format=lzma.FORMAT_XZ, filters=XZ_FILTERS) as w:
        shutil.copyfileobj(r, w, 8 * MIB)


def travelling_form(wheel: Path, cache: Path, compress_above: int = COMPRESS_ABOVE) -> dict:
    """The file that travels for ``wheel`` (made once, kept in ``cache`` under the wheel's
    sha256) and what the GPU machine checks it against."""
    digest = sha256_of(wheel)
    entry = {"file": wheel.name, "project": project_of(wheel.name), "size": wheel.stat().st_size,
             "sha256": digest}
    if wheel.stat().st_size <= compress_above:
        return entry | {"encoding": "raw", "install_size": entry["size"], "install_sha256": digest,
                        "blob": str(wheel)}
    cache.mkdir(parents=True, exist_ok=True)
    blob, meta = cache / f"{digest}.xz", cache / f"{digest}.json"
    if not (blob.is_file() and meta.is_file()):
        print(f"  compressing {wheel.name} ({wheel.stat().st_size / MIB:.0f} MiB; minutes for the largest)",
              flush=True)
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            stored = Path(tmp) / wheel.name
            stored_copy(wheel, stored)
            xz_file(stored, Path(tmp) / "blob.xz")
            meta.write_text(json.dumps({"install_size": stored.stat().st_size,
                                        "install_sha256": sha256_of(stored)}))
            os.replace(Path(tmp) / "blob.xz", blob)
    return entry | {"encoding": "xz", **json.loads(meta.read_text()), "blob": str(blob)}


def plan_bundles(entries: list[dict], bundle_max: int, part_max: int) -> list[list[tuple[int, int, int]]]:
    """Bundles as lists of (entry index, offset, length): entries in the order given, each
    cut where a bundle fills up; a new group starts a new bundle, so the first call carries
    the core group alone. No part exceeds ``part_max``."""
    bundles: list[list[tuple[int, int, int]]] = [[]]
    room = bundle_max
    for i, entry in enumerate(entries):
        if i and entry["group"] != entries[i - 1]["group"] and bundles[-1]:
            bundles.append([])
            room = bundle_max
        size, offset = Path(entry["blob"]).stat().st_size, 0
        while offset < size:
            if room == 0:
                bundles.append([])
                room = bundle_max
            length = min(size - offset, room, part_max)
            bundles[-1].append((i, offset, length))
            offset += length
            room -= length
    return [b for b in bundles if b]


def copy_range(src: Path, offset: int, length: int, out: Path) -> str:
    h = hashlib.sha256()
    with open(src, "rb") as r, open(out, "wb") as w:
        r.seek(offset)
        left = length
        while left:
            chunk = r.read(min(left, 8 * MIB))
            h.update(chunk)
            w.write(chunk)
            left -= len(chunk)
    return h.hexdigest()


def pack(groups: dict[str, Path], out: Path, cache: Path, bundle_max: int, part_max: int,
         compress_above: int = COMPRESS_ABOVE) -> dict:
    """Bundles in ``out`` for the wheels of ``groups`` (group name -> folder of wheels);
    core first, the largest wheels last, so the first call brings what feedline needs."""
    entries = []
    for group, folder in groups.items():
        files = [*folder.glob("*.whl"), *folder.glob("*.deb")]
        for wheel in sorted(files, key=lambda p: (p.stat().st_size, p.name)):
            entries.append(travelling_form(wheel, cache, compress_above) | {"group": group})
    if not entries:
        raise SystemExit("transport: no wheels to pack")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for entry in entries:
        entry["parts"] = []
    names = []
    for b, bundle in enumerate(plan_bundles(entries, bundle_max, part_max), 1):
        name = f"bundle-{b}"
        names.append(name)
        (out / name).mkdir()
        for i, offset, length in bundle:
            entry = entries[i]
            part = f"{entry['file']}.part{len(entry['parts']):02d}"
            digest = copy_range(Path(entry["blob"]), offset, length, out / name / part)
            entry["parts"].append({"name": part, "size": length, "sha256": digest, "bundle": name})
    for entry in entries:
        del entry["blob"]
    wheels = [{k: e[k] for k in sorted(e)} for e in entries]
    pack_id = hashlib.sha256(json.dumps(wheels, sort_keys=True).encode()).hexdigest()[:16]
    manifest = {"format": FORMAT, "pack_id": pack_id, "bundles": names, "bundle_max": bundle_max,
                "part_max": part_max, "wheels": wheels}
    text = json.dumps(manifest, indent=1) + "\n"
    (out / MANIFEST).write_text(text)
    for name in names:
        (out / name / MANIFEST).write_text(text)
    return manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--group", action="append", nargs=2, metavar=("NAME", "DIR"), required=True,
                   help=f"a group of wheels ({', '.join(GROUPS)}), in carrying order")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--cache", type=Path, required=True, help="compressed forms, kept between runs")
    p.add_argument("--bundle-mib", type=float, default=56.0)
    p.add_argument("--part-mib", type=float, default=60.0)
    a = p.parse_args(argv)
    unknown = [g for g, _ in a.group if g not in GROUPS]
    if unknown:
        p.error(f"unknown group {unknown[0]!r}; use {', '.join(GROUPS)}")
    manifest = pack({g: Path(d) for g, d in a.group}, a.out, a.cache, int(a.bundle_mib * MIB), int(a.part_mib * MIB))
    for name in manifest["bundles"]:
        size = sum(f.stat().st_size for f in (a.out / name).iterdir())
        print(f"{a.out / name}: {size / MIB:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
