"""A run whose precision settings say ``auto`` resumes in the precision it ran in: on a machine where
``auto`` chooses otherwise, resuming is refused in one line that names the settings to pass, and with
them it resumes. Likewise a run saved before a setting existed resumes with the value it ran as."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from aloft.config import ConfigError, load_config
from aloft.models import precision
from aloft.trainer import Trainer, run_precision
from tests.trainer import envs  # noqa: F401  (registers the test envs)

RUN = [
    "data.builder=arithmetic",
    "data.train_size=8",
    "data.eval_size=4",
    "env=test_digits",
    "trainer.prompts_per_step=2",
    "generator.n_samples=2",
    "generator.max_new_tokens=4",
    "trainer.checkpoint_every=1",
    "trainer.eval_every=0",
    "trainer.name=auto",
]


def fit(overrides: list[str]) -> Trainer:
    trainer = Trainer(load_config(None, overrides))
    trainer.fit()
    return trainer


def test_a_run_in_auto_precision_resumes_only_in_the_precision_it_chose(tiny_overrides, monkeypatch):
    on_auto = [o for o in tiny_overrides if not o.startswith(("engine.dtype=", "optim.bf16_autocast="))]
    first = fit([*on_auto, *RUN, "trainer.max_steps=1"])
    ran_with = json.loads((first.c.run_dir / run_precision.PRECISION_FILE).read_text())
    native = ran_with["engine.dtype"] == "bfloat16"
    assert ran_with == {"engine.dtype": "bfloat16" if native else "float32", "optim.bf16_autocast": native}

    # The same command on a machine where auto chooses the other precision.
    other = torch.float32 if native else torch.bfloat16
    monkeypatch.setattr(precision, "fast_dtype", lambda device: other)
    as_it_ran = f"engine.dtype={ran_with['engine.dtype']} optim.bf16_autocast={str(native).lower()}"
    with pytest.raises(ConfigError, match="what auto chose on its machine") as info:
        fit([*on_auto, *RUN, "trainer.max_steps=2"])
    assert "\n" not in str(info.value) and f"resume with {as_it_ran} to keep" in str(info.value)

    # Pinned to what auto chose, it resumes from its checkpoint and trains the second step.
    resumed = fit([*on_auto, *RUN, "trainer.max_steps=2", *as_it_ran.split()])
    rows = [json.loads(line) for line in (resumed.c.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if "reward/mean" in row] == [1, 2]  # step 1 not trained again


def test_a_run_saved_before_a_setting_existed_resumes_with_the_value_it_ran_as(tiny_overrides):
    """A run whose config.yaml predates ``optim.min_shared_prefix`` ran as 0: resuming with the new
    default is refused in one line that names the setting to add, and with it the run resumes."""
    first = fit([*tiny_overrides, *RUN, "trainer.name=older", "trainer.max_steps=1"])
    saved_path = first.c.run_dir / "config.yaml"
    saved = yaml.safe_load(saved_path.read_text())
    del saved["optim"]["min_shared_prefix"]  # as a run saved before the setting was written
    saved_path.write_text(yaml.safe_dump(saved, sort_keys=False))

    with pytest.raises(ConfigError, match=r"saved before optim\.min_shared_prefix=0 was a setting") as info:
        fit([*tiny_overrides, *RUN, "trainer.name=older", "trainer.max_steps=2"])
    assert "\n" not in str(info.value)
    resumed = fit(
        [*tiny_overrides, *RUN, "trainer.name=older", "trainer.max_steps=2", "optim.min_shared_prefix=0"]
    )
    rows = [json.loads(line) for line in (resumed.c.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if "reward/mean" in row] == [1, 2]
