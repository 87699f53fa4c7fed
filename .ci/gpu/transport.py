"""Wheels carried to the GPU machine in bundles of parts, one bundle per device call
(at most 64 MiB each, with the working tree): the GPU machine's end.

    transport.py receive .whl/gpu/bundle-*  --store DIR   (.ci/gpu/receive.sh)
    transport.py assemble --store DIR --out WHEEL_DIR     (.ci/gpu/check.sh)

``receive`` checks each carried part against the bundle's manifest.json (sha256 and size
of every part, of every wheel as downloaded and of the file that gets installed) and
links it into a store outside the repository, which stays while the machine stays warm,
so the next call can carry the next bundle. ``assemble`` rebuilds every wheel whose parts
are all there (decompressing the xz ones) and checks it. Standard library only: this runs
under the GPU image's python3 before anything is installed. bundle.py makes the bundles.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import lzma
import os
import shutil
import sys
from pathlib import Path

MIB = 1 << 20
MANIFEST = "manifest.json"
FORMAT = 1


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(8 * MIB):
            h.update(chunk)
    return h.hexdigest()


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
    rc = sub.add_parser("receive", help="check carried bundles, link their parts into the store")
    rc.add_argument("bundles", type=Path, nargs="*")
    rc.add_argument("--store", type=Path, required=True)
    asm = sub.add_parser("assemble", help="rebuild and check the complete wheels")
    asm.add_argument("--store", type=Path, required=True)
    asm.add_argument("--out", type=Path, required=True)
    asm.add_argument("--report", type=Path)
    a = p.parse_args(argv)
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
