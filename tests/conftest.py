"""Shared fixtures: a tiny random model (built once per session) and a tiny-run config factory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def build_vllm_tiny_model(path: Path, **overrides) -> str:
    """A tiny random Llama that vLLM's CPU attention accepts (head_dim >= 32); ``overrides`` go to build_tiny_model."""
    from aloft.models import build_tiny_model

    shape = {"hidden_size": 64, "num_heads": 2, "num_kv_heads": 1, "head_dim": 32, "seed": 0}
    return build_tiny_model(path, **{**shape, **overrides})


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    from aloft.models import build_tiny_model

    return build_tiny_model(
        tmp_path_factory.mktemp("tiny-model") / "llama", hidden_size=64, num_layers=2, seed=0
    )


@pytest.fixture
def tiny_overrides(tiny_model_dir: str, tmp_path: Path) -> list[str]:
    """Overrides that turn any preset into a seconds-long run on the tiny model."""
    return [
        f"model.path={tiny_model_dir}",
        f"trainer.run_root={tmp_path / 'runs'}",
        "trainer.progress_bar=false",
        "trainer.loggers=[jsonl]",
        "engine.dtype=float32",
        "optim.bf16_autocast=false",
    ]


@pytest.fixture(scope="session")
def long_tiny_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A tiny model with room for the SQL prompts (schemas run to thousands of byte-level tokens)."""
    from aloft.models import build_tiny_model

    return build_tiny_model(
        tmp_path_factory.mktemp("tiny-long") / "llama",
        hidden_size=64,
        num_layers=2,
        seed=0,
        max_position_embeddings=8192,
    )
