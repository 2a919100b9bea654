"""The machine a benchmark ran on, printed beside every figure."""

from __future__ import annotations

import os
import platform


def machine_details() -> dict:
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = None
    try:
        mem_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": mem_gib,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
    }


def describe_machine() -> str:
    d = machine_details()
    return (f"{d['cpu']}, {d['cores']} cores, {d['memory_gib']} GiB, {d['python']}, "
            f"{d['platform']}")
