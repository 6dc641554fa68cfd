"""What machine a benchmark ran on, for its JSON: these CPUs vary (AMX Xeons, AVX512-BF16 and AVX2
EPYCs), and a figure means little without its machine and date."""

from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path
from typing import Any

FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
"""The CPU flags that decide the fast float32 / bfloat16 kernels."""


def machine_info() -> dict[str, Any]:
    """``{"cpu", "cpu_flags", "cores", "date"}`` of this machine, today."""
    from aloft.models.precision import cpu_flags

    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    return {
        "cpu": name,
        "cpu_flags": [flag for flag in FLAGS if flag in cpu_flags()],
        "cores": os.cpu_count(),
        "date": datetime.date.today().isoformat(),
    }
