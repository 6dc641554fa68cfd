"""Shared fixtures: a tiny random model (built once per session) and a tiny-run config factory."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
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


@pytest.fixture
def forget_plugins() -> Iterator[list[str]]:
    """Restores every extension registry (envs, estimators, losses, plans, their settings) after the
    test, and forgets the user modules the test appends to the yielded list, so that a docs page's
    module can be imported, and register its names, again in the next test."""
    from aloft import registry as overlays
    from aloft.algorithms import registry
    from aloft.gym import core
    from aloft.trainer.plans import base as plans

    tables = (
        registry.policy_losses,
        registry.advantage_estimators,
        registry._PARAMS,
        core._REGISTRY,
        plans._PLANS,
        plans._PARAMS,
        overlays.ENV_OVERLAYS,
    )
    saved = [dict(table) for table in tables]
    modules: list[str] = []
    yield modules
    for table, before in zip(tables, saved, strict=True):
        table.clear()
        table.update(before)
    for module in modules:
        sys.modules.pop(module, None)


INTEGRATION_MODULES = (
    "tests/test_benchmarks.py",
    "tests/test_tutorials.py",
    "tests/test_readme_snippets.py",
    "tests/test_docs_code_blocks.py",
    "tests/test_gpu_check.py",
    "tests/report/test_report_page.py",
    "tests/tinker/",
    "tests/distributed/",
    "tests/experiments/test_skyrl_sql_experiment.py",
    "tests/experiments/test_warm_start.py",
    "tests/inference/test_remote_and_serve.py",
    "tests/inference/test_openai_sdk.py",
    "tests/inference/test_engine_contract.py",
    "tests/inference/test_vllm_rollout_benchmark.py",
    "tests/rollout/test_agent_env.py",
    "tests/trainer/",
    "tests/training/test_strategies.py",
    "tests/training/test_ulysses.py",
    "tests/tracking/",
)
"""Where the tests that run whole pieces together live: training runs, Ray, several processes,
servers, the browser, benchmarks. They are marked ``integration`` (``pytest_collection_modifyitems``)."""
MODEL_FIXTURES = {"tiny_overrides", "elements_server"}
"""A test that takes one of these runs a training run or a server, wherever it lives."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``integration`` every test of ``INTEGRATION_MODULES`` and every test that trains; the
    rest are the unit tests of the fast lane (``python -m pytest -m "not slow and not integration"``,
    CONTRIBUTING.md)."""
    root = Path(__file__).resolve().parents[1]
    for item in items:
        path = Path(str(item.fspath)).resolve().relative_to(root).as_posix()
        fixtures = set(getattr(item, "fixturenames", ()))
        if path.startswith(INTEGRATION_MODULES) or fixtures & MODEL_FIXTURES:
            item.add_marker(pytest.mark.integration)
