"""What machine a benchmark ran on, for its JSON: these CPUs vary (AMX Xeons, AVX512-BF16 and AVX2
EPYCs), and a figure means little without its machine and date."""

from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path
from typing import Any

FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx_ne_convert")
"""The CPU flags that decide the fast float32 / bfloat16 kernels."""

BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
"""Either one: the CPU multiplies bfloat16 natively."""


def machine_info() -> dict[str, Any]:
    """``{"cpu", "cpu_flags", "bf16_native", "cores", "date"}`` of this machine, today.

    Read from ``/proc/cpuinfo`` here rather than through ``aloft.models.precision.cpu_flags``: that
    module imports torch, and ``render.py`` and the results tests need no torch.
    """
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []

    def first(field: str) -> str:
        line = next((line for line in lines if line.startswith(field)), "")
        return line.partition(":")[2].strip()

    flags = set(first("flags").split())
    return {
        "cpu": first("model name") or platform.processor() or platform.machine(),
        "cpu_flags": [flag for flag in FLAGS if flag in flags],
        # aloft.models.precision.cpu_has_native_bf16's rule (what `auto` precision runs in bf16 on).
        "bf16_native": bool(flags & BF16_FLAGS),
        "cores": os.cpu_count(),
        "date": datetime.date.today().isoformat(),
    }
