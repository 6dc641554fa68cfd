"""Bad input stops `aloft train` before a model loads: one line naming the key and the fix, exit 2."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from aloft.cli import main
from aloft.config import ConfigError, load_config
from tests.trainer.test_trainer import BASE


def bad_rows(tmp_path: Path) -> str:
    path = tmp_path / "rows.jsonl"
    good = {"prompt": [{"role": "user", "content": "Add 1 and 2."}], "env_class": "arithmetic", "answer": "3"}
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "prompt": "not a list"}) + "\n")
    return str(path)


def rows_with_env(tmp_path: Path, env_class: str) -> str:
    path = tmp_path / f"{env_class}.jsonl"
    row = {"prompt": [{"role": "user", "content": "Add 1 and 2."}], "env_class": env_class, "answer": "3"}
    path.write_text(json.dumps(row) + "\n")
    return str(path)


CASES = {
    "missing model": (["model.path=/no/such/model"], "model.path=/no/such/model: "),
    "missing model, two local ranks": (
        ["model.path=/no/such/model", "trainer.strategy=fsdp2", "trainer.num_processes=2"],
        "model.path=/no/such/model: ",
    ),
    "missing file": (
        ["data.train_files=[/no/such/rows.jsonl]"],
        "data: /no/such/rows.jsonl: dataset file not found",
    ),
    "bad row": (["data.train_files=[{rows}]"], "rows.jsonl row 1: field 'prompt'"),
    "unknown backend": (["engine.backend=fastest"], "engine.backend=fastest is not a known inference engine"),
    "missing import": (
        ["trainer.imports=[no_such_plugin]"],
        "trainer.imports: cannot import 'no_such_plugin'",
    ),
    "unregistered env_class": (
        ["data.train_files=[{nowhere}]", "data.builder=null"],
        "train row 0: env_class='nowhere' is not a registered env",
    ),
    "env that cannot be built": (
        ["env=arithmetic", "env.config={max_turns: 0}"],
        "env arithmetic cannot start an episode on train row 0: ValueError: arithmetic env: max_turns must be",
    ),
    "a GPU asked of a machine without one": (
        ["trainer.device=cuda"],
        "trainer.device=cuda but torch sees no CUDA GPU (torch.cuda.is_available() is False",
    ),
    "the engine on a GPU the machine lacks": (
        ["engine.device=cuda:0"],
        "engine.device=cuda:0 but torch sees no CUDA GPU",
    ),
    "FSDP2 CPU offload without a GPU": (
        ["trainer.strategy=fsdp2", "trainer.fsdp_cpu_offload=true"],
        "trainer.fsdp_cpu_offload moves GPU state to CPU memory, but trainer.device=auto resolved to the CPU",
    ),
    "turn limits disagree": (
        ["env=arithmetic", "env.config={max_turns: 3}", "generator.max_turns=1"],
        "generator.max_turns=1 is below the arithmetic env's max_turns=3",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_and_exit_2_before_the_model_loads(case, tiny_overrides, tmp_path, capsys):
    overrides, expected = CASES[case]
    files = {"rows": bad_rows(tmp_path), "nowhere": rows_with_env(tmp_path, "nowhere")}
    overrides = [o.replace("{rows}", files["rows"]).replace("{nowhere}", files["nowhere"]) for o in overrides]
    start = time.perf_counter()
    assert main(["train", *BASE, *tiny_overrides, *overrides]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("aloft: config error: ") and expected in err, err
    assert "\n" not in err and "Traceback" not in err
    assert time.perf_counter() - start < 20  # no model was loaded, no step ran
    assert not list((tmp_path / "runs").glob("*/checkpoints"))


def test_debug_shows_the_traceback_behind_the_line(tiny_overrides):
    with pytest.raises(ConfigError, match="engine.backend=fastest"):
        main(["train", *BASE, *tiny_overrides, "engine.backend=fastest", "--debug"])


def test_an_env_named_as_a_preset_says_how_to_train_it(capsys):
    assert main(["train", "text2sql"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "aloft: config error: 'text2sql' is an env, not a preset: run `aloft train quickstart env=text2sql` "
        "(known presets: ['quickstart', 'skyrl_sql'])"
    )


def test_another_env_on_a_preset_is_another_run():
    """`aloft train quickstart env=text2sql` after a quick start must not resume runs/quickstart."""
    assert load_config("quickstart", []).trainer.name == "quickstart"
    assert load_config("quickstart", ["env=arithmetic"]).trainer.name == "quickstart"  # the preset's own env
    assert load_config("quickstart", ["env=text2sql"]).trainer.name == "quickstart-text2sql"
    assert load_config("quickstart", ["env=text2sql", "trainer.name=mine"]).trainer.name == "mine"
