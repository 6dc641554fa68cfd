"""scripts/gpu_check.sh, the check prepared for the day a GPU is lent: its dry run says what it will
run and what it lacks, and its checks run on the CPU with a tiny model (so the script works when a
GPU finally runs it)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHECKS = [
    "environment",
    "grpo_single",
    "grpo_fsdp2",
    "packing",
    "hf_engine",
    "sleep_wake",
    "weight_sync",
    "grpo_vs_trl",
]


def gpu_check(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def test_the_dry_run_prints_the_plan_and_names_what_is_missing(tmp_path):
    run = gpu_check("--dry-run", "--model", str(tmp_path / "nowhere"))
    assert run.returncode == 2, run.stderr
    planned = [line.split()[0] for line in run.stdout.splitlines() if line.startswith("  ")]
    assert planned[: len(CHECKS)] == CHECKS and planned[-1] == "total"
    assert "MISSING no SmolLM2 config and tokenizer at" in run.stdout
    assert "bash scripts/gpu_check.sh --prepare" in run.stdout
    # The TRL comparison's wheels, where neither installed here nor carried, are named too.
    absent = [m for m in ("trl", "datasets", "dill", "multiprocess") if importlib.util.find_spec(m) is None]
    carried = {path.name.split("-")[0] for path in (REPO / ".gpu_check" / "wheels").glob("*.whl")}
    for module in absent:
        assert (f"MISSING {module} is neither installed nor carried" in run.stdout) == (module not in carried)
    missing = run.stdout.count("\nMISSING ")
    assert f"inputs: {missing} missing" in run.stdout and missing >= 1


def test_a_run_without_the_trl_check_needs_no_trl(tmp_path):
    run = gpu_check("--dry-run", "--model", "tiny", "--only", "grpo_single,packing")
    assert run.returncode == 0 and "MISSING" not in run.stdout, run.stdout
    assert run.stdout.strip().endswith("inputs: ok")


def test_the_dry_run_passes_with_its_inputs_and_runs_nothing(tiny_model_dir, tmp_path):
    out = tmp_path / "figures.json"
    only = CHECKS if importlib.util.find_spec("trl") else CHECKS[:-1]  # the TRL check needs trl here
    run = gpu_check("--dry-run", "--model", tiny_model_dir, "--out", str(out), "--only", ",".join(only))
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().endswith("inputs: ok")
    assert not out.exists()


def test_unknown_checks_are_refused():
    run = gpu_check("--dry-run", "--only", "grpo_single,warp_speed")
    assert run.returncode == 2 and "--only: unknown checks ['warp_speed']" in run.stderr


def test_every_check_runs_on_the_cpu_with_a_tiny_model(tmp_path):
    """All but the TRL comparison (its benchmark has tests of its own: tests/test_benchmarks.py)."""
    checks = CHECKS[:-1]
    out = tmp_path / "figures.json"
    run = gpu_check(
        "--device", "cpu", "--model", "tiny", "--steps", "2", "--only", ",".join(checks), "--out", str(out),
        timeout=600,
    )  # fmt: skip
    lines = [line for line in run.stdout.splitlines() if line.split(" ", 1)[0] in ("PASS", "FAIL", "SKIP")]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert [line.split()[1].rstrip(":") for line in lines] == checks
    assert all(line.startswith("PASS ") for line in lines), lines
    figures = json.loads(out.read_text())
    assert figures["packing"]["logprob_max_diff"] <= 1e-4
    assert figures["grpo_single"]["steps"] == 2 and figures["grpo_fsdp2"]["steps"] == 2
    assert figures["hf_engine"]["tokens"] == 32 * 16
    assert figures["weight_sync"]["bytes"] > 0
