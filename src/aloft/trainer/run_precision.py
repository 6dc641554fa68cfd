"""What a run's ``auto`` precision settings chose, kept with the run so that a resume keeps it.

``engine.dtype=auto`` and ``optim.bf16_autocast=auto`` choose bfloat16 where the hardware multiplies
it natively (``aloft.models.fast_dtype``: GPUs from Ampere on, CPUs with AVX512-BF16 or AMX), else
float32. A run's ``config.yaml`` keeps the word ``auto``, so a run resumed on another machine would
change precision half-way with the same config: an exact resume must not do that silently.
``PRECISION_FILE`` records what ``auto`` chose when the run started; the resume check compares the
run's choices with what the settings choose on this machine (``resolve_auto``), so ``auto`` and the
value it chose are the same setting, and a machine where ``auto`` chooses otherwise is refused with
the settings that resume the run as it ran.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aloft.atomic_files import write_text_atomically
from aloft.config import AloftConfig
from aloft.models import precision
from aloft.models.device import resolve_device

__all__ = ["AUTO_KEYS", "PRECISION_FILE", "choices_here", "record_precision", "recorded_precision"]

PRECISION_FILE = "precision.json"
"""In the run directory: ``{"engine.dtype": "bfloat16" | "float32" | ..., "optim.bf16_autocast": bool}``."""
AUTO_KEYS = ("engine.dtype", "optim.bf16_autocast")
"""The precision settings whose ``auto`` depends on the machine."""


def choices_here(cfg: AloftConfig) -> dict[str, Any]:
    """What ``cfg``'s precision settings mean on this machine (``auto`` resolved as the engine and
    the learner resolve it; explicit values as given)."""
    dtype = cfg.engine.dtype
    if dtype == "auto":
        engine_device = resolve_device(cfg.engine.device, key="engine.device")
        dtype = str(precision.fast_dtype(engine_device)).removeprefix("torch.")
    autocast = precision.bf16_autocast_choice(cfg.optim.bf16_autocast, resolve_device(cfg.trainer.device))
    return {"engine.dtype": dtype, "optim.bf16_autocast": autocast}


def record_precision(cfg: AloftConfig, run_dir: Path) -> None:
    """Write what ``cfg``'s precision settings choose here into ``run_dir``."""
    # atomic: the other ranks of a data-parallel run read it while they start
    write_text_atomically(run_dir / PRECISION_FILE, json.dumps(choices_here(cfg)) + "\n")


def recorded_precision(run_dir: Path) -> dict[str, Any] | None:
    """What the run in ``run_dir`` chose (None for a run from before the record existed)."""
    path = run_dir / PRECISION_FILE
    return json.loads(path.read_text()) if path.exists() else None
