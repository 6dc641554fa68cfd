"""The SkyRL-SQL experiment's plan: what it runs and the names its stages and report share
(``aloft.experiments.skyrl_sql`` runs it, ``aloft.experiments.sql_report`` reports it)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "BASE_RUN",
    "EVAL_SETS",
    "FINAL_EVAL_SETS",
    "LONG_RUN",
    "QUICK_OVERRIDES",
    "RAW_RUN",
    "STAGES",
    "VARIANTS",
    "ExperimentPlan",
    "read_jsonl",
]

VARIANTS: dict[str, int] = {"multi_turn": 5, "single_turn": 1}
"""Variant name -> the turns its training episodes allow."""
EVAL_SETS: dict[str, int] = {"heldout_t5": 5, "heldout_t1": 1}
"""The training runs' periodic eval (a fixed subset of ``eval_size`` held-out questions): set tag ->
the turns its episodes allow (the same questions at both)."""
STAGES = ("study", "train", "eval")
"""The experiment's stages after the data and the warm start, in order: the learning-rate study
(``aloft.experiments.sql_study``), the long runs, the start/end evals (``aloft.experiments.sql_evals``)."""
LONG_RUN = [
    # Chosen by the learning-rate study (docs/experiments/skyrl-sql.md): LoRA rank 16 at 1e-4.
    "optim.lr=1e-4",
    "model.lora_rank=16",
    "trainer.max_steps=32",
    "trainer.prompts_per_step=8",
    "generator.n_samples=4",
    "trainer.eval_every=8",
    "trainer.checkpoint_every=1",
]
"""The long runs' geometry: 32 steps x 8 questions x 4 samples = 1,024 training episodes, an eval of
the fixed held-out subset every 8 steps, a checkpoint every step (a step of multi-turn episodes is
minutes of work that a stopped session should not lose)."""
QUICK_OVERRIDES = [
    "trainer.max_steps=3",
    "trainer.eval_every=1",
    "trainer.checkpoint_every=3",
    "trainer.prompts_per_step=2",
    "generator.n_samples=2",
    "generator.max_new_tokens=24",
    "generator.max_total_tokens=512",
    "optim.micro_batch_tokens=16384",
]
"""``--quick``: a 3-step run of each variant, for tests and smoke checks."""


@dataclass
class ExperimentPlan:
    """What ``run_experiment`` runs. ``overrides`` go to every ``aloft train`` call (after the
    experiment's own), e.g. ``["trainer.max_steps=30", "model.lora_rank=16"]``."""

    out: Path
    model: str | None = None
    seeds: tuple[int, ...] = (0, 1)
    eval_size: int = 32
    train_size: int = 0
    overrides: list[str] = field(default_factory=list)
    quick: bool = False
    variants: tuple[str, ...] = tuple(VARIANTS)
    """Which policies to train (both by default; one alone to spread the runs over sessions)."""
    hint: bool = True
    """Restate the reply format at the end of each user message (``aloft.data.sources.sql.prompts``)."""
    warm_start: int = 32
    """Train questions whose sampled first turns make the protocol warm start
    (``aloft.experiments.warm_start``) both policies start from; 0: start from the model itself."""
    stages: tuple[str, ...] = STAGES
    """Which stages to run (after the data and the warm start): ``study``, ``train``, ``eval``."""
    state: Path | None = None
    """Where to keep the experiment's small state as well (``aloft.experiments.sql_state``):
    restored into ``out`` where ``out`` lacks it, saved after the warm start and after each stage."""

    def run_dir(self, variant: str, seed: int) -> Path:
        return self.out / "runs" / f"{variant}-seed{seed}"


BASE_RUN = "base"
"""The 0-step run whose eval is every run's step 0 (``OUT/runs/base-seed0``)."""
RAW_RUN = "raw"
"""The 0-step run that evaluates the model before the warm start (``OUT/runs/raw-seed0``)."""


FINAL_EVAL_SETS = ("heldout_t5", "heldout_t1", "indomain_t5")
"""The start/end eval sets (``aloft.experiments.sql_evals.EVAL_SETS``)."""


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
