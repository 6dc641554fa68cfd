"""Failed trajectories (the env or the engine raised) never reach the loss, and never pass quietly."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from aloft.algorithms import drop_failed_trajectories
from aloft.config import load_config
from aloft.trainer import Trainer
from aloft.trainer.failures import TooManyFailures, check_error_share, error_metrics
from aloft.types import RolloutStatus, Trajectory
from tests.trainer.test_trainer import BASE, run

FAILING = ["env=test_sometimes_failing", "trainer.max_error_share=0.6"]


def failed(source: str = "env", error: str = "env: RuntimeError('tool crashed')", row: int = 3) -> Trajectory:
    return Trajectory(
        prompt_ids=[1],
        completion_ids=[2],
        loss_mask=[1],
        sampler_logprobs=[-0.1],
        rewards=[0.0],
        status=RolloutStatus.ENV_ERROR,
        group_id="g",
        info={"error": error, "error_source": source, "row_index": row, "env_class": "text2sql"},
    )


def test_the_error_share_stops_a_step_in_one_line_naming_the_first_error_and_the_fix():
    check_error_share([failed()] * 5, 10, "step 2", max_share=0.5)  # at the limit: goes on
    with pytest.raises(TooManyFailures) as stop:
        check_error_share(
            [failed(error="env: OSError('no such\nfile')"), failed("engine")] * 3, 10, "step 2", 0.5
        )
    message = str(stop.value)
    assert "\n" not in message
    assert message.startswith("step 2: 6 of 10 trajectories failed (engine 3, env 3)")
    assert "(row 3, env text2sql): env: OSError('no such file')" in message
    assert "trainer.max_error_share=0.5" in message
    with pytest.raises(TooManyFailures, match="1 of 1"):  # every one failed: stops even at 1.0
        check_error_share([failed()], 1, "step 1", max_share=1.0)
    assert error_metrics([failed(), failed("engine"), dataclasses.replace(failed(), status="stop")]) == {
        "rollout/error_share": pytest.approx(2 / 3),
        "rollout/error_share/env": pytest.approx(1 / 3),
        "rollout/error_share/engine": pytest.approx(1 / 3),
    }


def params(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.c.policy.model.state_dict().items()}


def test_an_update_with_failed_trajectories_equals_one_without_them(tiny_overrides):
    """A step's groups with ~30% failed samples train exactly like the same groups with those
    samples removed (GRPO's mean and std over the samples that ran), and unlike the old way of
    training on them at reward 0."""
    overrides = [*BASE, *tiny_overrides, *FAILING, "trainer.deterministic=true", "optim.lr=1e-2"]

    def update(name: str, groups) -> dict[str, torch.Tensor]:
        trainer = Trainer(load_config(None, [*overrides, f"trainer.name={name}"]))
        trainer.train_on(groups, step=1)
        return params(trainer)

    generator = Trainer(load_config(None, [*overrides, "trainer.name=generate"]))
    before = params(generator)
    groups = generator.c.run(generator.generate_groups(generator.c.loader.next_batch(), seed=5, prefix="g"))
    trajectories = [t for g in groups for t in g.trajectories]
    share = sum(t.failed for t in trajectories) / len(trajectories)
    assert 0.1 <= share <= 0.5, share
    assert all("tool crashed" in t.info["error"] for t in trajectories if t.failed)

    with_failures = update("with", groups)
    removed, _ = drop_failed_trajectories(groups)
    without = update("without", removed)
    at_reward_zero = update(
        "zero",
        [
            dataclasses.replace(
                g, trajectories=[dataclasses.replace(t, status="stop") for t in g.trajectories]
            )
            for g in groups
        ],
    )
    assert any(not torch.equal(before[k], with_failures[k]) for k in before)  # it trained
    assert all(torch.equal(with_failures[k], without[k]) for k in before)
    assert any(not torch.equal(with_failures[k], at_reward_zero[k]) for k in before)


def test_a_run_with_failing_env_steps_trains_on_the_rest_and_reports_them(tiny_overrides):
    _, _, rows = run([*tiny_overrides, *FAILING, "trainer.max_steps=2", "trainer.eval_before_training=false"])
    steps = [r for r in rows if "reward/mean" in r]
    assert len(steps) == 2
    run_dir = tiny_overrides[1].split("=", 1)[1] + "/run"
    for row in steps:
        records = [json.loads(line) for line in open(f"{run_dir}/rollouts/step_{row['step']}.jsonl")]
        errors = [r for r in records if r["status"] == "env_error"]
        assert len(records) == 16 and 0 < len(errors) <= 0.6 * 16
        assert all(
            "tool crashed" in r["info"]["error"] and r["info"]["error_source"] == "env" for r in errors
        )
        assert row["rollout/error_share"] == row["status/env_error"] == len(errors) / 16
        assert row["rollout/error_share/engine"] == 0
        ran = [r["reward"] for r in records if r["status"] != "env_error"]
        assert row["reward/mean"] == pytest.approx(sum(ran) / len(ran))  # failures are no reward


def test_a_run_whose_env_steps_hang_fails_those_trajectories_goes_on_and_exits(tiny_overrides):
    """An env whose ``step`` never returns on ~30% of replies: those trajectories fail as env_error
    after ``generator.env_timeout_s``, both steps train on the rest, and the process exits although
    the abandoned calls are still sleeping (a pool's worker threads would hold the exit forever)."""
    command = [
        sys.executable,
        "-m",
        "aloft.cli",
        "train",
        *BASE,
        *tiny_overrides,
        "env=test_sometimes_hanging",
        "trainer.imports=[tests.trainer.envs]",
        "trainer.max_error_share=0.6",
        "trainer.max_steps=2",
        "trainer.eval_before_training=false",
        "generator.env_timeout_s=1",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = Path(tiny_overrides[1].split("=", 1)[1]) / "run"
    steps = [json.loads(line) for line in open(run_dir / "metrics.jsonl") if '"reward/mean"' in line]
    assert [row["step"] for row in steps] == [1, 2]
    hung = 0
    for row in steps:
        records = [json.loads(line) for line in open(run_dir / "rollouts" / f"step_{row['step']}.jsonl")]
        errors = [r for r in records if r["status"] == "env_error"]
        hung += len(errors)
        assert row["status/env_error"] == len(errors) / len(records)
        for r in errors:
            assert r["info"]["error_source"] == "env"
            assert (
                "EnvCallTimeout" in r["info"]["error"] and "generator.env_timeout_s=1 s" in r["info"]["error"]
            )
    assert hung > 0


@pytest.mark.parametrize("plan", ["sync", "one_step_off", "fully_async"])
def test_a_run_whose_env_always_fails_stops_at_step_1_with_the_envs_error(tiny_overrides, plan):
    """Every plan stops (fully_async: the groups finished by then, at least a step's 16)."""
    extra = [] if plan == "sync" else ["algorithm.off_policy_correction=tis_token"]
    with pytest.raises(TooManyFailures) as stop:
        run(
            [
                *tiny_overrides,
                "env=test_flaky",
                f"trainer.plan={plan}",
                "trainer.eval_before_training=false",
                *extra,
            ]
        )
    count = int(str(stop.value).split()[2])
    assert count >= 16 and str(stop.value).startswith(
        f"step 1: {count} of {count} trajectories failed (env {count})"
    )
    assert "RuntimeError('tool crashed')" in str(stop.value)
    run_dir = tiny_overrides[1].split("=", 1)[1] + "/run"
    records = [json.loads(line) for line in open(f"{run_dir}/rollouts/step_1.jsonl")]
    assert len(records) == count and all("tool crashed" in r["info"]["error"] for r in records)
    assert not (Path(run_dir) / "checkpoints").exists() or not any((Path(run_dir) / "checkpoints").iterdir())


def test_the_eval_stops_the_run_when_its_env_fails(tiny_overrides):
    with pytest.raises(TooManyFailures, match="the eval at step 0: 8 of 8 trajectories failed"):
        run([*tiny_overrides, "env=test_flaky"])


@pytest.mark.parametrize(
    "ranks",
    [[], ["trainer.strategy=fsdp2", "trainer.num_processes=2"]],
    ids=["one process", "two local ranks"],
)
def test_the_cli_prints_one_line_and_exits_1(tiny_overrides, ranks):
    """Also with trainer.num_processes=2: rank 0 finds too many failures, the other rank (waiting in a
    collective) is ended, and the CLI prints rank 0's one line, not a child's traceback."""
    command = [
        sys.executable,
        "-m",
        "aloft.cli",
        "train",
        *BASE,
        *tiny_overrides,
        "env=test_flaky",
        "trainer.imports=[tests.trainer.envs]",
        "trainer.eval_before_training=false",
        *ranks,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("aloft: run stopped: step 1: 16 of 16 trajectories failed (env 16)")
    assert "tool crashed" in last and "Traceback" not in done.stderr
