"""A run killed with SIGKILL mid-way and started again with the same command ends exactly like an
uninterrupted run (deterministic mode, tiny model, real subprocesses)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from aloft.tracking import read_metrics
from aloft.training.checkpoint import POLICY_ADAPTERS, POLICY_WEIGHTS

REPO = Path(__file__).resolve().parents[2]


def command(tiny_model_dir: str, run_root: Path, name: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "aloft.cli",
        "train",
        f"model.path={tiny_model_dir}",
        f"trainer.run_root={run_root}",
        f"trainer.name={name}",
        "trainer.imports=[tests.trainer.envs]",
        "env=test_digits",
        "data.builder=arithmetic",
        "data.train_size=64",
        "data.eval_size=8",
        "generator.max_new_tokens=8",
        "generator.max_total_tokens=8",
        "generator.temperature=1.0",
        "trainer.prompts_per_step=4",
        "trainer.max_steps=16",
        "trainer.checkpoint_every=2",
        "trainer.eval_every=4",
        "trainer.deterministic=true",
        "trainer.num_threads=1",
        "trainer.progress_bar=false",
        "trainer.loggers=[jsonl]",
        "engine.dtype=float32",
        "optim.bf16_autocast=false",
        "optim.lr=1e-3",
        "trainer.export_final=false",
        *extra,
    ]


def kill_at_step_4_then_rerun(cmd: list[str], run_dir: Path) -> None:
    """Start ``cmd`` (16 steps, a checkpoint every 2), SIGKILL it once step 4's checkpoint exists,
    then run it again to the end."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'src'}"}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = run_dir / "checkpoints" / "step_4"
    deadline = time.time() + 120
    while not ckpt.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.005)
    # Kill at once: a tiny-model step takes well under a second, and the run must die far from its end.
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert ckpt.exists(), "the run never reached its step-4 checkpoint"
    assert not (run_dir / "checkpoints" / "step_16").exists(), "killed too late to test resume"
    subprocess.run(cmd, check=True, cwd=REPO, env=env, capture_output=True)


PLANS = {
    "sync": [],
    # The prefetched batch rides in the checkpoint: the resumed run trains on the very same samples.
    "one_step_off": ["trainer.plan=one_step_off", "algorithm.off_policy_correction=tis_token"],
    # LoRA with a KL term (its reference is the policy's base) and adapter-only syncs to the engine.
    "sync-lora": ["model.lora_rank=4", "algorithm.kl_coef=0.05", "optim.lr=1e-2"],
}


@pytest.mark.parametrize("plan", PLANS)
def test_sigkill_then_rerun_matches_uninterrupted(tiny_model_dir, tmp_path, plan):
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'src'}"}
    subprocess.run(
        command(tiny_model_dir, tmp_path, "full", *PLANS[plan]),
        check=True,
        cwd=REPO,
        env=env,
        capture_output=True,
    )

    kill_at_step_4_then_rerun(command(tiny_model_dir, tmp_path, "killed", *PLANS[plan]), tmp_path / "killed")

    full = read_metrics(tmp_path / "full" / "metrics.jsonl")
    resumed = read_metrics(tmp_path / "killed" / "metrics.jsonl")

    def strip(rows):
        # Wall-clock fields differ between any two runs; everything else must match exactly.
        return [
            {k: v for k, v in r.items() if k != "time" and not k.startswith(("timing/", "throughput/"))}
            for r in rows
        ]

    assert strip(resumed) == strip(full)
    weights = POLICY_ADAPTERS if "model.lora_rank=4" in PLANS[plan] else POLICY_WEIGHTS
    a = load_file(tmp_path / "full" / "checkpoints" / "step_16" / weights)
    b = load_file(tmp_path / "killed" / "checkpoints" / "step_16" / weights)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


KILL_DURING_EXPORT = """
import os, signal, sys
from aloft.training import PolicyWorker
from aloft.cli import main

save = PolicyWorker.save_pretrained

def save_then_die(self, path, state_dict=None):
    save(self, path, state_dict=state_dict)  # the model is written; the tokenizer is not yet
    os.kill(os.getpid(), signal.SIGKILL)

PolicyWorker.save_pretrained = save_then_die
sys.exit(main(sys.argv[1:]))
"""


def test_a_run_killed_during_its_export_leaves_nothing_behind_once_rerun(tiny_model_dir, tmp_path):
    """SIGKILL while the final export is being written leaves ``export.tmp-<pid>/`` (a full model
    copy); the next start of the run removes it, and its own export is whole."""
    cmd = command(tiny_model_dir, tmp_path, "export", "trainer.max_steps=1", "trainer.export_final=true")
    run_dir = tmp_path / "export"
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'src'}"}
    killed = subprocess.run(
        [sys.executable, "-c", KILL_DURING_EXPORT, *cmd[3:]],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    (partial,) = run_dir.glob("export.tmp-*")
    assert (partial / "model.safetensors").exists() and not (run_dir / "export").exists()
    rerun = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert not list(run_dir.rglob("*.tmp-*"))
    export = run_dir / "export"
    assert (export / "model.safetensors").exists() and (export / "tokenizer_config.json").exists()
