"""docs/tutorials/, run as written: each page's module, its checks and its commands (on a tiny model)."""

from __future__ import annotations

import contextlib
import io
import json
import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from aloft.cli import main
from aloft.data import build_dataset
from aloft.gym import check_env, make
from aloft.tracking import read_metrics

TUTORIALS = Path(__file__).resolve().parents[1] / "docs" / "tutorials"
SHORT_RUN = [
    "trainer.eval_every=0",
    "trainer.checkpoint_every=0",
    "trainer.export_final=false",
    "data.train_size=32",
    "data.eval_size=4",
]
"""With the ``tiny_overrides`` fixture: a run of seconds that writes its metrics and nothing else."""


def blocks(page: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (TUTORIALS / page).read_text(), re.S)


def code_lines(code: str) -> int:
    return len([line for line in code.splitlines() if line.strip()])


def save_module(page: str, name: str, folder: Path, monkeypatch, forget: list[str]) -> None:
    """The page's first python block as ``folder/name.py``, importable as the reader's would be."""
    (folder / f"{name}.py").write_text(blocks(page, "python")[0])
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.chdir(folder)
    forget.append(name)


def run_command(command: str, tiny: list[str]) -> int:
    argv = shlex.split(command)
    assert argv[0] == "aloft"
    return main([*argv[1:], *tiny])


def refused(command: str, tiny: list[str], tmp_path: Path) -> int:
    """``run_command`` for a command that should stop before training (its own run root: a refused
    config must not be compared with the run the page's command trained)."""
    return run_command(command, [*tiny, f"trainer.run_root={tmp_path / 'refused'}"])


def private_trainer_use(code: str) -> list[str]:
    """Where ``code`` reaches into a Trainer past the plan API: its components (``trainer.c``) or a
    private member (``trainer._x``)."""
    return re.findall(r"trainer\.(?:c\b|_\w+)", code)


def test_the_built_in_plans_use_the_plan_api_alone():
    plans = Path(__file__).resolve().parents[1] / "src" / "aloft" / "trainer" / "plans"
    for module in plans.glob("*.py"):
        assert not private_trainer_use(module.read_text()), module.name


def test_new_env(tmp_path, monkeypatch, forget_plugins, tiny_overrides, capsys):
    save_module("new_env.md", "calc_adder", tmp_path, monkeypatch, forget_plugins)
    assert code_lines(blocks("new_env.md", "python")[0]) <= 40
    (command,) = blocks("new_env.md", "bash")
    assert len(command.strip()) < 100  # the env brings its own run settings

    assert run_command(command, [*tiny_overrides, *SHORT_RUN, "trainer.max_steps=2"]) == 0
    rows = read_metrics(tmp_path / "runs" / "quickstart-calc_adder" / "metrics.jsonl")
    assert [r["step"] for r in rows if "reward/mean" in r] == [1, 2]
    config = (tmp_path / "runs" / "quickstart-calc_adder" / "config.yaml").read_text()
    assert "- </calculator>" in config and "max_turns: 2" in config  # the overlay reached the run

    # aloft eval on the run imports the run's trainer.imports, so the user env is found there too
    done = subprocess.run(
        [sys.executable, "-m", "aloft.cli", "eval", "runs/quickstart-calc_adder", "data.eval_size=2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["eval/num_prompts"] == 2

    rows = build_dataset("arithmetic", n=4, seed=0)
    check_env("calc_adder", rows, {})
    env = make("calc_adder", extras={"answer": "14"})
    assert env.config == {"max_turns": 2}  # the declared default, filled in
    env.reset([{"role": "user", "content": "Add 7 and 7. End your reply with: The answer is N."}])
    tool_turn = env.step("<calculator>7+7</calculator>")
    assert tool_turn.observations == [{"role": "user", "content": "<result>14</result>"}]
    assert not tool_turn.done
    assert env.step("The answer is 14").reward == 1.0
    env.close()

    # The page's claims about the env's own setting: a wrong value is one line naming the key ...
    capsys.readouterr()
    assert refused(f"{command} env.config.max_turns=three", tiny_overrides, tmp_path) == 2
    assert capsys.readouterr().err.strip() == (
        "aloft: config error: env.config.max_turns='three' is invalid for the env calc_adder: "
        "Input should be a valid integer, unable to parse string as an integer"
    )
    # ... as is a key the env does not declare, and help lists the declared one.
    assert refused(f"{command} env.config.turns=3", tiny_overrides, tmp_path) == 2
    assert "env.config.turns is not a setting of the env calc_adder" in capsys.readouterr().err
    assert main(["train", "--help", "trainer.imports=[calc_adder]"]) == 0
    assert "env.config.max_turns  int = 2" in capsys.readouterr().out


def test_new_loss(tmp_path, monkeypatch, forget_plugins, tiny_overrides, capsys):
    save_module("new_loss.md", "w_reinforce", tmp_path, monkeypatch, forget_plugins)
    module, check = blocks("new_loss.md", "python")
    assert code_lines(module) <= 25

    printed = io.StringIO()
    (tmp_path / "check.py").write_text(check)
    with contextlib.redirect_stdout(printed):
        namespace = runpy.run_path(str(tmp_path / "check.py"))
    grad = namespace["logprobs"].grad
    # d loss / d logprob = -w A / N: 2 policy tokens a sample, token_mean over 4 tokens (quickstart)
    assert grad[0, :2].tolist() == pytest.approx([-0.5 / 4, -0.5 / 4])
    assert grad[1, :2].tolist() == pytest.approx([1 / 4, 1 / 4])
    assert grad[:, 2].tolist() == [0.0, 0.0]
    assert namespace["metrics"] == {"clip_frac": 0.0, "approx_kl": 0.0, "ratio_mean": 1.0}
    assert printed.getvalue().startswith("tensor(")

    (command,) = blocks("new_loss.md", "bash")
    # (the tiny model earns no reward: without dynamic sampling its zero-variance groups still train)
    tiny = [*tiny_overrides, *SHORT_RUN, "trainer.max_steps=2", "algorithm.dynamic_sampling=false"]
    assert run_command(command, tiny) == 0
    records = read_metrics(tmp_path / "runs" / "quickstart" / "metrics.jsonl")
    assert [r["step"] for r in records if "policy/loss" in r] == [1, 2]
    config = yaml.safe_load((tmp_path / "runs" / "quickstart" / "config.yaml").read_text())["algorithm"]
    assert config["policy_loss"] == "w_reinforce" and config["params"] == {"positive_weight": 0.1}

    (shown,) = re.findall(r"```\n\$ (.*?)\n(.*?)\n```", (TUTORIALS / "new_loss.md").read_text(), re.S)
    capsys.readouterr()
    assert refused(shown[0], tiny_overrides, tmp_path) == 2
    assert capsys.readouterr().err.strip() == shown[1]


def test_new_plan(tmp_path, monkeypatch, forget_plugins, tiny_overrides, capsys):
    save_module("new_plan.md", "pipelined", tmp_path, monkeypatch, forget_plugins)
    (module,) = blocks("new_plan.md", "python")
    assert len(module.splitlines()) <= 100
    assert not private_trainer_use(module)  # the public plan API alone

    (command,) = blocks("new_plan.md", "bash")
    assert run_command(command, [*tiny_overrides, *SHORT_RUN, "trainer.max_steps=4"]) == 0
    records = read_metrics(tmp_path / "runs" / "quickstart" / "metrics.jsonl")
    staleness = [r["async/staleness_max"] for r in records if "async/staleness_max" in r]
    assert staleness == [0.0, 0.0, 1.0, 1.0]  # sync_steps=2: on-policy, then one version behind

    capsys.readouterr()  # the page's claim: without a correction, the run refuses to start
    uncorrected = command.replace("algorithm.off_policy_correction=tis_token", "")
    assert refused(uncorrected, tiny_overrides, tmp_path) == 2
    assert "set algorithm.off_policy_correction=tis_token" in capsys.readouterr().err
    assert refused(f"{command} trainer.plan_params.sync_steps=0", tiny_overrides, tmp_path) == 2
    assert capsys.readouterr().err.strip() == (
        "aloft: config error: trainer.plan_params.sync_steps=0 is invalid for the execution plan "
        "pipelined: Input should be greater than or equal to 1"
    )
