"""Says what installing torch is about to download: reads the JSON report of
`pip install --dry-run --report FILE ...` (FILE given) and prints one line per package,
its version and where it comes from, then a note when that is the CUDA build."""
from __future__ import annotations

import json
import os
import sys
from urllib.parse import unquote, urlparse


def main(report_path: str) -> int:
    with open(report_path, encoding="utf-8") as fh:
        planned = json.load(fh).get("install", [])
    local = remote = 0
    cuda = False
    for item in planned:
        meta, url = item["metadata"], urlparse(item["download_info"]["url"])
        if url.scheme == "file":
            where = "a local file"
            try:
                local += os.path.getsize(unquote(url.path))
            except OSError:
                pass
        else:
            where, remote = url.netloc, remote + 1
        cuda = cuda or meta["name"].lower().startswith("nvidia-") or "+cu" in meta["version"]
        print(f"setup:   {meta['name']} {meta['version']} from {where}")
    if local:
        print(f"setup:   {local / 2**20:,.0f} MiB of it from local files")
    if cuda:
        print("setup: this is torch's CUDA build (with its nvidia-* libraries: several GB). For a CPU-only "
              "run, stop now (Ctrl-C) and run: make demo TORCH='torch --index-url "
              "https://download.pytorch.org/whl/cpu'")
    elif remote:
        print(f"setup: {remote} package(s) to download")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
