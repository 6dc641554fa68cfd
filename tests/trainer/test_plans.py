"""Execution plans end to end on a tiny model: each one learns, each keeps its staleness promise
(read back from every trained sample's policy version), and an asynchronous run resumes after a
SIGKILL without losing or repeating a prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from aloft.config import ConfigError, load_config
from aloft.tracking import read_metrics
from aloft.trainer import Trainer
from tests.trainer import envs  # noqa: F401  (registers test_digits)
from tests.trainer.test_kill_resume import command, kill_at_step_4_then_rerun

PLANS = {
    "sync": [],
    "one_step_off": ["trainer.plan=one_step_off", "algorithm.off_policy_correction=tis_token"],
    "fully_async": [
        "trainer.plan=fully_async",
        "trainer.max_staleness=2",
        "algorithm.off_policy_correction=tis_token",
    ],
}


def trained_samples(run_dir: Path) -> dict[int, list[dict]]:
    """Every step's trained trajectories, from rollouts/step_<n>.jsonl."""
    return {
        int(path.stem.removeprefix("step_")): [json.loads(line) for line in path.read_text().splitlines()]
        for path in sorted((run_dir / "rollouts").glob("step_*.jsonl"))
    }


def ages(samples: dict[int, list[dict]]) -> dict[int, set[int]]:
    """Per step: how many versions old its samples were (the step's update is done by version step - 1)."""
    return {step: {step - 1 - s["policy_version"] for s in rows} for step, rows in samples.items()}


@pytest.mark.parametrize("plan", PLANS)
def test_each_plan_learns_and_keeps_its_staleness_bound(tiny_overrides, plan):
    cfg = load_config(
        None,
        [
            *tiny_overrides,
            "data.builder=arithmetic",
            "data.train_size=64",
            "data.eval_size=0",
            "env=test_digits",
            "generator.max_new_tokens=8",
            "generator.max_total_tokens=8",
            "generator.n_samples=4",
            "trainer.prompts_per_step=8",
            "trainer.max_steps=60",
            "trainer.checkpoint_every=0",
            "trainer.export_final=false",
            "optim.lr=3e-3",
            *PLANS[plan],
        ],
    )
    trainer = Trainer(cfg)
    trainer.fit()
    rows = [r for r in read_metrics(trainer.c.run_dir / "metrics.jsonl") if "reward/mean" in r]
    first = sum(r["reward/mean"] for r in rows[:5]) / 5
    last = sum(r["reward/mean"] for r in rows[-5:]) / 5
    assert last > first + 0.3, (first, last)

    by_step = ages(trained_samples(trainer.c.run_dir))
    assert sorted(by_step) == list(range(1, 61))
    if plan == "sync":
        assert all(a == {0} for a in by_step.values())
    elif plan == "one_step_off":
        assert by_step[1] == {0} and all(by_step[s] == {1} for s in range(2, 61))  # exactly one behind
    else:
        assert all(max(a) <= 2 and min(a) >= 0 for a in by_step.values())
        assert any(max(a) > 0 for a in by_step.values())  # it did run ahead of the trainer
    for step, row in enumerate(rows, start=1):
        assert row["async/staleness_max"] == max(by_step[step])


def test_fully_async_sigkill_resume_loses_and_repeats_no_prompt(tiny_model_dir, tmp_path):
    extra = [
        "trainer.plan=fully_async",
        "trainer.max_staleness=1",
        "algorithm.off_policy_correction=tis_token",
    ]
    cmd = [
        arg
        for arg in command(tiny_model_dir, tmp_path, "async", *extra)
        if arg != "trainer.deterministic=true"
    ]
    kill_at_step_4_then_rerun(cmd, tmp_path / "async")

    metrics = [r for r in read_metrics(tmp_path / "async" / "metrics.jsonl") if "reward/mean" in r]
    assert [r["step"] for r in metrics] == list(range(1, 17))
    samples = trained_samples(tmp_path / "async")
    assert sorted(samples) == list(range(1, 17))
    assert all(max(a) <= 1 for a in ages(samples).values())
    # Group "a<i>-..." holds the i-th prompt drawn: none is trained twice, and every prompt drawn is
    # trained, dropped (too stale) or still buffered / pending in the last checkpoint.
    trained = [
        int(s["group_id"].removeprefix("a").split("-")[0]) for rows in samples.values() for s in rows[::4]
    ]
    assert len(trained) == len(set(trained)) == 16 * 4
    final = torch.load(
        tmp_path / "async" / "checkpoints" / "step_16" / "trainer_state.pt", weights_only=False
    )
    state = final["plan"]
    left = {f.index for f in state.buffer} | {index for index, _, _ in state.pending}
    assert set(trained) | set(state.dropped) | left == set(range(state.next_index))
    assert not set(trained) & (set(state.dropped) | left)


def test_off_policy_plans_refuse_an_uncorrected_loss(tiny_overrides):
    cfg = load_config(None, [*tiny_overrides, "data.builder=arithmetic", "trainer.plan=one_step_off"])
    with pytest.raises(ConfigError, match="set algorithm.off_policy_correction=tis_token"):
        Trainer(cfg)
    with pytest.raises(ConfigError, match="not a registered plan"):
        Trainer(load_config(None, [*tiny_overrides, "data.builder=arithmetic", "trainer.plan=nope"]))
