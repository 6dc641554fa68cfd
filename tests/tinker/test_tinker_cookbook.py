"""tinker-cookbook's minimal SL and RL loops (PyPI ``tinker-cookbook`` 0.6.1), their code unchanged,
run by ``python -m aloft.tinker.cookbook`` against a real ``aloft tinker-serve`` process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tinker", reason="the tinker extra is not installed: pip install 'aloft[tinker]'")
pytest.importorskip(
    "tinker_cookbook",
    reason="tinker-cookbook is not installed: pip install --no-deps -r requirements-offline.txt",
)
from tests.tinker.serving import start_server, stop


@pytest.fixture(scope="module")
def cookbook_server(tiny_model_dir, tmp_path_factory):
    checkpoints = tmp_path_factory.mktemp("cookbook-checkpoints")
    process, url = start_server(tiny_model_dir, "--checkpoint-dir", str(checkpoints))
    yield url, checkpoints
    stop(process)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh aloft cache, so the stand-in datasets are written by this test."""
    monkeypatch.setenv("ALOFT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def run_recipe(
    recipe: str, url: str, model: str, log_path: Path, *arguments: str
) -> subprocess.CompletedProcess[str]:
    """The recipe through the runner, with no mid-run checkpoints; its final one goes to the server."""
    common = [f"base_url={url}", f"model_name={model}", "save_every=0", f"log_path={log_path}"]
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "aloft.tinker.cookbook",
            f"tinker_cookbook.recipes.{recipe}",
            *common,
            *arguments,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )


def metrics(log_path: Path) -> list[dict]:
    return [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]


def final_checkpoint(log_path: Path) -> dict:
    (final,) = [
        json.loads(line)
        for line in (log_path / "checkpoints.jsonl").read_text().splitlines()
        if json.loads(line)["name"] == "final"
    ]
    return final


def test_the_sl_loop_trains_on_the_no_robots_stand_in(cookbook_server, cache, tmp_path, tiny_model_dir):
    url, checkpoints = cookbook_server
    log_path = tmp_path / "sl"
    done = run_recipe(
        "sl_loop",
        url,
        tiny_model_dir,
        log_path,
        "batch_size=8",
        "max_steps=3",
        "learning_rate=1e-2",
        "lora_rank=8",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = metrics(log_path)
    assert [row["step"] for row in rows] == [0, 1, 2]
    assert all(row["num_sequences"] == 8 for row in rows)
    # Three steps at a high rate on one-digit sums: the training NLL falls.
    assert rows[-1]["train_mean_nll"] < rows[0]["train_mean_nll"], rows
    final = final_checkpoint(log_path)
    assert final["state_path"].startswith("tinker://") and final["sampler_path"].startswith("tinker://")
    assert any(checkpoints.rglob("final/adapter.safetensors"))
    # The stand-in was written in the hub's layout, into the cache.
    assert (cache / "datasets" / "tinker-cookbook" / "HuggingFaceH4" / "no_robots" / "README.md").is_file()


def test_the_rl_loop_samples_grades_and_checkpoints(cookbook_server, cache, tmp_path, tiny_model_dir):
    url, _ = cookbook_server
    log_path = tmp_path / "rl"
    done = run_recipe(
        "rl_loop",
        url,
        tiny_model_dir,
        log_path,
        "loss_fn=importance_sampling",
        "batch_size=2",
        "group_size=4",
        "max_tokens=8",
        "max_steps=2",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = metrics(log_path)
    assert [row["step"] for row in rows] == [0, 1]
    # A random tiny model never boxes the right sum: the reward is 0 and every group is skipped,
    # which the loop itself reports; the run still ends with its final checkpoint.
    assert all(row["reward/total"] == 0.0 for row in rows)
    assert "all advantages zero, skipping training step" in done.stderr
    assert final_checkpoint(log_path)["state_path"].startswith("tinker://")
    gsm8k = cache / "datasets" / "tinker-cookbook" / "openai" / "gsm8k"
    assert sorted(p.name for p in (gsm8k / "main").iterdir()) == [
        "test-00000-of-00001.parquet",
        "train-00000-of-00001.parquet",
    ]


def test_the_runner_says_what_it_needs():
    done = subprocess.run(
        [sys.executable, "-m", "aloft.tinker.cookbook", "tinker_cookbook.recipes.rl_loop", "batch_size=2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "pass model_name=<the model tinker-serve serves> and base_url=" in done.stderr
