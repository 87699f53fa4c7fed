"""What a benchmark ran on: CPU, cores, memory, GPU and library versions, for the JSON
and for the line each benchmark prints first."""
from __future__ import annotations

import logging
import os
import platform
import re
from importlib import metadata

from feedline.core.config import usable_cores

log = logging.getLogger(__name__)

# Distribution names to ask importlib.metadata about (no import, so no side effects).
_DISTRIBUTIONS = {
    "torch": ("torch",),
    "numpy": ("numpy",),
    "pillow": ("pillow", "Pillow", "pillow-simd"),
    "opencv": ("opencv-python-headless", "opencv-python", "opencv-contrib-python-headless",
               "opencv-contrib-python"),
    "nvimgcodec": ("nvidia-nvimgcodec-cu13", "nvidia-nvimgcodec-cu12"),
    "pyturbojpeg": ("PyTurboJPEG",),
    "dali": ("nvidia-dali-cuda130", "nvidia-dali-cuda120", "nvidia-dali-cuda110", "nvidia-dali"),
    "lmdb": ("lmdb",),
    "h5py": ("h5py",),
    "matplotlib": ("matplotlib",),
    "torchvision": ("torchvision",),
    "feedline": ("feedline",),
}
SHOWN = ("torch", "pillow", "opencv", "nvimgcodec", "pyturbojpeg", "libjpeg_turbo", "dali")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def library_versions() -> dict[str, str | None]:
    """Installed versions (None when not installed), plus the system libjpeg-turbo that
    PyTurboJPEG loads, if any."""
    versions: dict[str, str | None] = {}
    for key, names in _DISTRIBUTIONS.items():
        versions[key] = None
        for name in names:
            try:
                versions[key] = metadata.version(name)
                break
            except metadata.PackageNotFoundError:
                continue
    versions["libjpeg_turbo"] = libjpeg_turbo_version()
    return versions


def libjpeg_turbo_version() -> str | None:
    """The version string compiled into the system libturbojpeg, if one is findable."""
    try:
        import ctypes
        import ctypes.util
        path = ctypes.util.find_library("turbojpeg")
        if path is None:
            return None
        ctypes.CDLL(path)  # loaded: its real file now shows in /proc/self/maps
        real = _mapped_file("turbojpeg") or path
        with open(real, "rb") as fh:
            found = re.search(rb"libjpeg-turbo version ([0-9][0-9.]*[0-9])", fh.read())
        return found.group(1).decode() if found else None
    except Exception as exc:  # best effort: a missing or odd library is not an error here
        log.debug("libjpeg-turbo version not found: %s", exc)
        return None


def _mapped_file(fragment: str) -> str | None:
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 6 and fragment in os.path.basename(parts[-1]):
                    return parts[-1]
    except OSError:
        pass
    return None


def gpu_info() -> dict | None:
    """The first CUDA device as torch sees it; None without one."""
    import torch
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "capability": f"{props.major}.{props.minor}",
            "memory_gib": round(props.total_memory / 2**30, 1), "count": torch.cuda.device_count(),
            "cuda": torch.version.cuda}


def machine_info() -> dict:
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "usable_cores": usable_cores(),
            "memory_gib": memory_gib(), "gpu": gpu_info(), "python": platform.python_version(),
            "platform": platform.platform(), "libraries": library_versions()}


def machine_line(machine: dict) -> str:
    libs = machine["libraries"]
    gpu = machine["gpu"]["name"] if machine["gpu"] else "no GPU"
    shown = ", ".join(f"{k} {libs[k]}" for k in SHOWN if libs.get(k))
    return f"{machine['cpu']}, {machine['usable_cores']} cores, {gpu}; {shown}"
