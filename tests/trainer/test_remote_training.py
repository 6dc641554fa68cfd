"""Training end to end with engine.backend=remote against a real `aloft serve` on loopback."""

from __future__ import annotations

import math

import pytest

from aloft.config import ConfigError, load_config
from aloft.inference import make_engine
from aloft.inference.server import ServerThread, build_app
from aloft.models import load_tokenizer
from aloft.trainer import Trainer
from tests.trainer import envs  # noqa: F401  (registers test_digits)


def test_training_through_aloft_serve(tiny_model_dir, tiny_overrides):
    tokenizer = load_tokenizer(tiny_model_dir)
    served = make_engine("hf", model_or_path=tiny_model_dir, tokenizer=tokenizer, dtype="float32")
    with ServerThread(build_app(served, tokenizer)) as server:
        cfg = load_config(
            None,
            [
                *tiny_overrides,
                "data.builder=arithmetic",
                "data.train_size=32",
                "data.eval_size=4",
                "env=test_digits",
                "generator.max_new_tokens=8",
                "generator.max_total_tokens=8",
                "trainer.max_steps=2",
                "trainer.prompts_per_step=4",
                "trainer.eval_every=2",
                "trainer.checkpoint_every=0",
                "trainer.export_final=false",
                "optim.lr=1e-3",
                "engine.backend=remote",
                f"engine.urls=[{server.url}]",
            ],
        )
        trainer = Trainer(cfg)
        final = trainer.fit()
        trainer.c.close()
    for key in ("reward/mean", "policy/loss", "eval/reward/mean"):
        assert math.isfinite(final[key]), key
    assert served.version == 2  # the trainer's weights reached the server after each step
    # The served weights are the trained ones.
    trained = dict(trainer.c.policy.named_weights())
    for name, tensor in served.model.state_dict().items():
        if name in trained:
            assert (tensor - trained[name]).abs().max() < 1e-6, name


def test_remote_without_urls_is_a_one_line_error():
    with pytest.raises(ConfigError, match=r"engine.backend=remote needs engine.urls="):
        load_config("quickstart", ["engine.backend=remote"])
