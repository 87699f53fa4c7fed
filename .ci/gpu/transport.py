"""Carry wheels to the GPU machine, whose device calls take at most 64 MiB each.

    here:  transport.py pack --group NAME DIR ... --out .whl/gpu  (make gpu-wheels)
    there: transport.py receive .whl/gpu/bundle-*  --store DIR   (.ci/gpu/receive.sh)
           transport.py assemble --store DIR --out WHEEL_DIR     (.ci/gpu/check.sh)

``pack`` makes each wheel ready to travel: a large one is rewritten uncompressed (same
members, same order) and then xz-compressed with the x86 filter, which comes out about
30% smaller than the wheel itself (machine code compresses better that way than with the
wheel's per-member deflate); a small one travels as it is. The result is cut into parts
and the parts are grouped into bundles: folders of at most ``--bundle-mib``, one per
device call, each holding a copy of manifest.json (sha256 and size of every part, of
every wheel as downloaded and of the file that gets installed).

``receive`` checks each carried part against the manifest and links it into a store
outside the repository, which stays while the machine stays warm, so the next call can
carry the next bundle. ``assemble`` rebuilds every wheel whose parts are all there and
checks it. Standard library only: this runs under the GPU image's python3 before
anything is installed.
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

MIB = 1 << 20
MANIFEST = "manifest.json"
FORMAT = 1
COMPRESS_ABOVE = 4 * MIB   # smaller wheels gain too little to be worth a rewrite
XZ_FILTERS = [{"id": lzma.FILTER_X86}, {"id": lzma.FILTER_LZMA2, "preset": 6}]
GROUPS = ("core", "dali")  # core: what feedline itself needs; dali: NVIDIA DALI and its needs


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(8 * MIB):
            h.update(chunk)
    return h.hexdigest()


def project_of(file: str) -> str:
    """The normalized project name of a wheel file name (PEP 427, PEP 503), or the package
    name of a Debian package file (NAME_VERSION_ARCH.deb)."""
    if file.endswith(".deb"):
        return file.split("_", 1)[0]
    return file.split("-", 1)[0].lower().replace("_", "-").replace(".", "-")


# -- here: pack --------------------------------------------------------------------------
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
    cut where a bundle fills up, so all bundles but the last are full. No part exceeds
    ``part_max``."""
    bundles: list[list[tuple[int, int, int]]] = [[]]
    room = bundle_max
    for i, entry in enumerate(entries):
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


# -- there: receive and assemble ------------------------------------------------------------
def read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"transport: {path}: cannot read the manifest ({exc}); carry the whole "
                         "bundle folder that `make gpu-wheels` wrote") from None
    if manifest.get("format") != FORMAT:
        raise SystemExit(f"transport: {path} has format {manifest.get('format')!r}, this script reads {FORMAT}; "
                         "run `make gpu-wheels` again with this checkout")
    return manifest


def receive(bundles: list[Path], store: Path) -> tuple[list[str], list[str]]:
    """Link the parts of ``bundles`` into ``store`` after checking them; returns (parts
    received, problems). A store holding parts of another pack is emptied first."""
    received, problems = [], []
    for bundle in bundles:
        manifest = read_manifest(bundle)
        known = read_manifest(store) if (store / MANIFEST).is_file() else None
        if known is None or known["pack_id"] != manifest["pack_id"]:
            if store.exists():
                shutil.rmtree(store)
            store.mkdir(parents=True)
            (store / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        for wheel in manifest["wheels"]:
            for part in wheel["parts"]:
                src = bundle / part["name"]
                if part["bundle"] != bundle.name or not src.is_file():
                    continue
                if src.stat().st_size != part["size"] or sha256_of(src) != part["sha256"]:
                    problems.append(f"{src}: size or sha256 differs from the manifest (damaged in transit?)")
                    continue
                _link_or_copy(src, store / part["name"])
                received.append(part["name"])
    return received, problems


def _link_or_copy(src: Path, dst: Path) -> None:
    """A hard link where possible (the carried folder may be replaced by the next call;
    the link keeps the data), else a copy."""
    dst.unlink(missing_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def missing_bundles(manifest: dict, store: Path) -> dict[str, list[str]]:
    """Wheel file -> the bundles whose parts of it are not in ``store`` (empty: complete)."""
    return {w["file"]: sorted({p["bundle"] for p in w["parts"] if not (store / p["name"]).is_file()})
            for w in manifest["wheels"]}


def assemble_one(wheel: dict, store: Path, out: Path) -> None:
    target = out / wheel["file"]
    if target.is_file() and target.stat().st_size == wheel["install_size"] \
            and sha256_of(target) == wheel["install_sha256"]:
        return
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "wb") as w:
        if wheel["encoding"] == "xz":
            decomp = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
            for part in wheel["parts"]:
                with open(store / part["name"], "rb") as r:
                    while chunk := r.read(8 * MIB):
                        w.write(decomp.decompress(chunk))
            if not decomp.eof:
                raise ValueError("the xz stream ends early")
        else:
            for part in wheel["parts"]:
                with open(store / part["name"], "rb") as r:
                    shutil.copyfileobj(r, w, 8 * MIB)
    if tmp.stat().st_size != wheel["install_size"] or sha256_of(tmp) != wheel["install_sha256"]:
        tmp.unlink()
        raise ValueError("reassembled, but its size or sha256 differs from the manifest")
    os.replace(tmp, target)


def assemble(store: Path, out: Path) -> dict:
    """Rebuild every complete wheel of the store into ``out``; a report of what is there."""
    manifest = read_manifest(store)
    out.mkdir(parents=True, exist_ok=True)
    missing = missing_bundles(manifest, store)
    report = {"pack_id": manifest["pack_id"], "bundles": manifest["bundles"], "wheels": {}, "groups": {}}
    for wheel in manifest["wheels"]:
        row = {"group": wheel["group"], "project": wheel["project"], "size": wheel["install_size"]}
        if missing[wheel["file"]]:
            row.update(ok=False, reason="parts not received: carry " + ", ".join(missing[wheel["file"]]))
        else:
            try:
                assemble_one(wheel, store, out)
                row.update(ok=True, path=str(out / wheel["file"]))
            except (OSError, ValueError, lzma.LZMAError) as exc:
                row.update(ok=False, reason=f"{wheel['file']}: {exc}")
        report["wheels"][wheel["file"]] = row
    for group in sorted({w["group"] for w in manifest["wheels"]}):
        rows = [r for r in report["wheels"].values() if r["group"] == group]
        report["groups"][group] = {"complete": all(r["ok"] for r in rows),
                                   "missing": sorted(f for f, r in report["wheels"].items()
                                                     if r["group"] == group and not r["ok"])}
    return report


def status_lines(manifest: dict, store: Path) -> list[str]:
    missing = missing_bundles(manifest, store)
    needed = sorted({b for bundles in missing.values() for b in bundles})
    done = sum(1 for m in missing.values() if not m)
    lines = [f"{done}/{len(missing)} wheels complete in {store}"]
    lines.append("all bundles received" if not needed else "still to carry: " + ", ".join(needed))
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    pk = sub.add_parser("pack", help="here: wheels -> bundles of parts")
    pk.add_argument("--group", action="append", nargs=2, metavar=("NAME", "DIR"), required=True,
                    help=f"a group of wheels ({', '.join(GROUPS)}), in carrying order")
    pk.add_argument("--out", type=Path, required=True)
    pk.add_argument("--cache", type=Path, required=True, help="compressed forms, kept between runs")
    pk.add_argument("--bundle-mib", type=float, default=56.0)
    pk.add_argument("--part-mib", type=float, default=60.0)
    rc = sub.add_parser("receive", help="there: check carried bundles, link their parts into the store")
    rc.add_argument("bundles", type=Path, nargs="*")
    rc.add_argument("--store", type=Path, required=True)
    asm = sub.add_parser("assemble", help="there: rebuild and check the complete wheels")
    asm.add_argument("--store", type=Path, required=True)
    asm.add_argument("--out", type=Path, required=True)
    asm.add_argument("--report", type=Path)
    a = p.parse_args(argv)

    if a.command == "pack":
        unknown = [g for g, _ in a.group if g not in GROUPS]
        if unknown:
            p.error(f"unknown group {unknown[0]!r}; use {', '.join(GROUPS)}")
        manifest = pack({g: Path(d) for g, d in a.group}, a.out, a.cache, int(a.bundle_mib * MIB),
                        int(a.part_mib * MIB))
        for name in manifest["bundles"]:
            size = sum(f.stat().st_size for f in (a.out / name).iterdir())
            print(f"{a.out / name}: {size / MIB:.1f} MiB")
        return 0
    if a.command == "receive":
        if not a.bundles:
            print("receive: no bundle carried (expected .whl/gpu/bundle-N in the working tree)")
        received, problems = receive(a.bundles, a.store)
        print(f"receive: {len(received)} parts checked and stored")
        for line in problems:
            print(f"receive: ERROR {line}", file=sys.stderr)
        if (a.store / MANIFEST).is_file():
            for line in status_lines(read_manifest(a.store), a.store):
                print(f"receive: {line}")
        return 1 if problems else 0
    report = assemble(a.store, a.out)
    if a.report:
        a.report.parent.mkdir(parents=True, exist_ok=True)
        a.report.write_text(json.dumps(report, indent=1) + "\n")
    for file, row in report["wheels"].items():
        print(f"assemble: {'ok ' if row['ok'] else 'MISSING'} {file}" + ("" if row["ok"] else f": {row['reason']}"))
    bad = [r for r in report["wheels"].values() if not r["ok"] and not r["reason"].startswith("parts not received")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
