"""docs/tutorial_new_env.md, run as written: its env module and its one training command."""

from __future__ import annotations

import importlib
import re
import shlex
import sys
from pathlib import Path

from aloft.cli import main
from aloft.data import build_dataset
from aloft.gym import check_env, make
from aloft.tracking import read_metrics

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "tutorial_new_env.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", TUTORIAL.read_text(), re.S)


def test_tutorial_env_and_command(tmp_path, monkeypatch, tiny_model_dir):
    (code,) = blocks("python")
    assert len([line for line in code.splitlines() if line.strip()]) <= 30
    (tmp_path / "calc_adder.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("calc_adder")

    rows = build_dataset("arithmetic", n=4, seed=0)
    check_env("calc_adder", rows, {"max_turns": 2})
    env = make("calc_adder", config={"max_turns": 2}, extras={"answer": "14"})
    env.reset([{"role": "user", "content": "Add 7 and 7. End your reply with: The answer is N."}])
    tool_turn = env.step("<calculator>7+7</calculator>")
    assert tool_turn.observations == [{"role": "user", "content": "<result>14</result>"}]
    assert not tool_turn.done
    assert env.step("The answer is 14").reward == 1.0
    env.close()

    (command,) = blocks("bash")
    argv = shlex.split(command)
    assert argv[0] == "aloft"
    tiny = [
        f"model.path={tiny_model_dir}",
        f"trainer.run_root={tmp_path / 'runs'}",
        "trainer.max_steps=2",
        "trainer.eval_every=0",
        "trainer.checkpoint_every=0",
        "trainer.export_final=false",
        "trainer.progress_bar=false",
        "trainer.loggers=[jsonl]",
        "data.train_size=32",
        "data.eval_size=4",
        "engine.dtype=float32",
        "optim.bf16_autocast=false",
    ]
    monkeypatch.setattr(sys, "argv", argv)
    assert main([*argv[1:], *tiny]) == 0
    rows = read_metrics(tmp_path / "runs" / "calc_adder" / "metrics.jsonl")
    assert [r["step"] for r in rows if "reward/mean" in r] == [1, 2]
