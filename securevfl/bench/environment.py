"""The machine a benchmark ran on: CPU, cores, memory, library versions, accelerator, load.

Timings mean little without the machine, and less on a loaded one: the load average is read at
the start and the end of the run (and between sections), and :func:`load_warning` says so in the
report when it exceeded half a run queue entry per core at either end.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from importlib import metadata
from typing import Any

#: Distributions whose versions go into the report (the peers' included).
LIBRARIES = ("securevfl", "numpy", "torch", "cryptography", "gmpy2", "phe", "openmined-psi", "scikit-learn",
             "matplotlib", "psutil")
LOADED_PER_CORE = 0.5


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, ``platform`` elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_flags() -> list[str]:
    """The CPU features that decide crypto speed, where the OS lists them (AES-NI, AVX2, SHA, ADX)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return [f for f in ("aes", "avx2", "avx512f", "sha_ni", "adx", "bmi2") if f in flags]
    except OSError:
        pass
    return []


def load_average() -> float:
    """The 1-minute load average (0.0 where the OS has none)."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return 0.0


def versions() -> dict[str, str]:
    """Installed versions of :data:`LIBRARIES` (``"not installed"`` where absent)."""
    out = {"python": platform.python_version()}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def accelerator(device: str = "auto") -> dict[str, Any]:
    """The device model compute runs on, and the CUDA device's name and memory when there is one."""
    import torch

    from securevfl.networks.device import resolve_device

    out: dict[str, Any] = {"requested": device, "model_compute_on": str(resolve_device(device)),
                           "cuda_available": bool(torch.cuda.is_available()),
                           "torch_threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        out.update({"cuda_device": torch.cuda.get_device_name(0),
                    "cuda_memory_gib": round(props.total_memory / 2**30, 1),
                    "cuda_count": torch.cuda.device_count(), "cuda_runtime": torch.version.cuda})
    return out


def collect(device: str = "auto") -> dict[str, Any]:
    """Everything but the end-of-run load (added by :func:`finish`)."""
    import psutil

    memory = psutil.virtual_memory()
    cores = os.cpu_count() or 1
    return {
        "cpu_model": cpu_model(),
        "cpu_flags": cpu_flags(),
        "cores_logical": cores,
        "cores_physical": psutil.cpu_count(logical=False) or cores,
        "memory_gib": round(memory.total / 2**30, 1),
        "memory_available_gib_at_start": round(memory.available / 2**30, 1),
        "platform": platform.platform(),
        "python_executable": sys.executable,
        "versions": versions(),
        "accelerator": accelerator(device),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_average_1m_start": load_average(),
    }


def finish(env: dict[str, Any], load_samples: list[tuple[str, float, float]]) -> dict[str, Any]:
    """Add the end-of-run load, the load sampled between sections, and the warning if any."""
    env = dict(env)
    env["load_average_1m_end"] = load_average()
    env["load_samples"] = [{"at": label, "elapsed_s": t, "load_1m": load} for label, t, load in load_samples]
    env["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    warning = load_warning(env)
    env["loaded"] = warning is not None
    env["warning"] = warning
    return env


def load_warning(env: dict[str, Any]) -> str | None:
    """A sentence for the report when the load per core exceeded 0.5 at the start or the end."""
    cores = max(int(env.get("cores_logical", 1)), 1)
    start, end = env.get("load_average_1m_start", 0.0), env.get("load_average_1m_end", 0.0)
    worst = max(start, end) / cores
    if worst <= LOADED_PER_CORE:
        return None
    return (f"the machine was loaded: 1-minute load average {start:.2f} at the start and {end:.2f} at the end on "
            f"{cores} cores ({worst:.2f} per core > {LOADED_PER_CORE}); wall times are inflated by other jobs — "
            "read the CPU-time figures and the intervals (an overhead whose interval includes zero is within "
            "noise), and compare ratios measured in the same run")
