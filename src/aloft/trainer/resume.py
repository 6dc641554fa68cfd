"""Checkpoint contents of a run and exact resume.

``checkpoints/step_<n>/`` holds: ``policy.safetensors`` (+ ``policy_optim.pt``), the critic's
likewise, and ``trainer_state.pt`` (step, loader cursor, the python / numpy / torch RNG states, every GPU's too when CUDA is in use, and
the execution plan's state: a prefetched batch, an asynchronous buffer).
Everything a step depends on is either in there or derived from (seed, step), so a run killed at any
moment and started again with the same command continues exactly where the checkpoint left it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from aloft.models.device import rng_states, set_rng_states
from aloft.trainer.components import Components
from aloft.training import CheckpointManager


def checkpoints(c: Components) -> CheckpointManager:
    return CheckpointManager(c.run_dir / "checkpoints", keep=c.cfg.trainer.keep_checkpoints)


def save_checkpoint(
    c: Components, step: int, plan_state: Any = None, loader_state: dict[str, Any] | None = None
) -> Path | None:
    """Write a checkpoint (on the main rank; under a data-parallel strategy every rank must call this,
    as gathering the full weights and optimizer state is a collective). Returns its directory.

    ``plan_state``: what the execution plan needs to resume (pickled); ``loader_state``: the
    loader's cursor as of that state (default: now)."""
    if not c.is_main:
        c.learners.write_state(None)
        return None

    def write(d: Path) -> None:
        c.learners.write_state(d)
        torch.save(
            {
                "step": step,
                "loader": loader_state if loader_state is not None else c.loader.state_dict(),
                "plan": plan_state,
                "rng": rng_states(),
            },
            d / "trainer_state.pt",
        )

    return checkpoints(c).save(step, write)


def load_checkpoint(c: Components) -> tuple[int, Any] | None:
    """Restore the latest checkpoint into the components; returns its step and the plan's state
    (None: a fresh run)."""
    latest = checkpoints(c).latest()
    if latest is None:
        return None
    c.learners.read_state(latest)
    state = torch.load(latest / "trainer_state.pt", weights_only=False, map_location="cpu")
    c.loader.load_state_dict(state["loader"])
    set_rng_states(state["rng"])
    return int(state["step"]), state.get("plan")
