"""``aloft eval``: a model, a run or a checkpoint evaluated on rows, with any engine.

What is evaluated (``resolve_eval_source``):
- a run directory: its ``export/`` if there is one, else its latest checkpoint;
- a checkpoint directory (``runs/<name>/checkpoints/step_<n>``): its weights over the run's base
  model; a LoRA checkpoint is merged first (``aloft.training.lora.merged_state``), no export needed;
- a model directory or a built-in name.

A run or checkpoint brings its run's settings as defaults: the env config, stop strings, token and
turn limits, the engine, and the eval rows; a flag given on the command line wins. The eval
trajectories are written like a training step's rollouts (one JSON record per trajectory), by
default to ``<run>/eval/<export|step_n>.jsonl`` for a run.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from aloft.data import DatasetRow, read_rows
from aloft.inference import make_engine
from aloft.inference.prefix_tree import MIN_SHARED_TOKENS
from aloft.models import load_tokenizer, resolve_model_path
from aloft.rollout import EpisodeLimits, Generator
from aloft.trainer.components import ADDED_SETTINGS
from aloft.trainer.evaluation import evaluate
from aloft.trainer.trainer import rollout_record
from aloft.training import CheckpointManager
from aloft.training.checkpoint import POLICY_ADAPTERS, POLICY_WEIGHTS
from aloft.types import SamplingParams, TrajectoryGroup


@dataclass
class EvalSource:
    """What ``aloft eval`` loads: a model path, optional checkpoint weights over it, and the run it
    came from (whose config gives the defaults)."""

    model_path: str
    checkpoint: Path | None = None
    """A checkpoint directory whose weights go over ``model_path`` (``policy.safetensors``, or a LoRA
    run's ``policy_adapter.safetensors`` merged over that base)."""
    run_dir: Path | None = None
    run_config: dict[str, Any] = field(default_factory=dict)
    label: str = "model"
    """``export``, ``step_<n>`` or the model's name: names the default rollouts file."""

    def default(self, dotted: str, fallback: Any) -> Any:
        """The run's config value at ``section.key`` (``fallback`` without a run or the key)."""
        section, _, key = dotted.partition(".")
        return self.run_config.get(section, {}).get(key, fallback)

    def eval_rows(self, env: str | None) -> list[DatasetRow]:
        """The run's own eval rows: its ``data.eval_files``, or the rows it built (``data/eval.jsonl``)."""
        files = self.default("data.eval_files", [])
        if not files and self.run_dir is not None and (self.run_dir / "data" / "eval.jsonl").exists():
            files = [str(self.run_dir / "data" / "eval.jsonl")]
        env = env or self.default("env.name", None)
        return [row for path in files for row in read_rows(path, default_env=env)]


def resolve_eval_source(model: str) -> EvalSource:
    path = Path(model)
    # runs/<name>/checkpoints/step_<n>
    if any((path / name).exists() for name in (POLICY_WEIGHTS, POLICY_ADAPTERS)):
        run_dir = path.parent.parent
        config = _run_config(run_dir)
        return EvalSource(_base_model(config), path, run_dir, config, label=path.name)
    if (path / "config.yaml").exists() and ((path / "export").is_dir() or (path / "checkpoints").is_dir()):
        config = _run_config(path)
        if (path / "export" / "config.json").exists():
            return EvalSource(str(path / "export"), None, path, config, label="export")
        latest = CheckpointManager(path / "checkpoints").latest()
        if latest is None:
            raise ValueError(f"run {path} has neither an export/ nor a checkpoint yet; train it first")
        return EvalSource(_base_model(config), latest, path, config, label=latest.name)
    return EvalSource(resolve_model_path(model), label=Path(model).name or model)


def _run_config(run_dir: Path) -> dict[str, Any]:
    return yaml.safe_load((run_dir / "config.yaml").read_text()) or {}


def _base_model(config: dict[str, Any]) -> str:
    return resolve_model_path(config["model"]["path"])


def checkpoint_weights(source: EvalSource) -> dict[str, Any]:
    """The checkpoint's weights under plain HF names (a LoRA checkpoint merged over its base; an
    adapter-only one gives just the modules its adapters change)."""
    from safetensors.torch import load_file

    from aloft.training.lora import is_lora_state, merged_state

    assert source.checkpoint is not None
    model = source.run_config.get("model", {})
    if (source.checkpoint / POLICY_ADAPTERS).exists():
        adapters = load_file(source.checkpoint / POLICY_ADAPTERS)
        state = {**adapters, **base_weights_under(adapters, source.model_path)}
        return merged_state(state, scale=model["lora_alpha"] / model["lora_rank"])
    state = load_file(source.checkpoint / POLICY_WEIGHTS)
    if not is_lora_state(state):
        return state
    return merged_state(state, scale=model["lora_alpha"] / model["lora_rank"])  # peft's alpha / r


def base_weights_under(adapters: dict[str, Any], model_path: str) -> dict[str, Any]:
    """The base weights (float32, peft-named ``...base_layer.weight``) of the modules that
    ``adapters`` (peft-named ``lora_A`` / ``lora_B`` entries) change, read from ``model_path``'s
    safetensors files."""
    import torch
    from safetensors import safe_open

    suffix, prefix = ".lora_A.default.weight", "base_model.model."
    wanted = {
        name[: -len(suffix)].removeprefix(prefix) + ".weight": name[: -len(suffix)] + ".base_layer.weight"
        for name in adapters
        if name.endswith(suffix)
    }
    found: dict[str, Any] = {}
    for file in sorted(Path(model_path).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for key in set(f.keys()) & set(wanted):
                found[wanted[key]] = f.get_tensor(key).to(torch.float32)
    missing = sorted(key for key, name in wanted.items() if name not in found)
    if missing:
        raise ValueError(
            f"the LoRA checkpoint's base {model_path} has no weight {missing[0]} (of {len(missing)} missing); "
            "evaluate it with the model.path its run trained on"
        )
    return found


@dataclass(kw_only=True)
class EvalSettings:
    """How to sample; ``None`` fields take the run's value (or the built-in default)."""

    n: int = 1
    temperature: float = 0.0
    seed: int = 1_000_003
    max_new_tokens: int | None = None
    max_turns: int | None = None
    max_total_tokens: int | None = None
    stop: list[str] | None = None
    env_config: dict[str, Any] | None = None
    backend: str | None = None
    urls: list[str] | None = None
    dtype: str | None = None
    min_shared_prefix: int | None = None
    """hf engine: ``engine.min_shared_prefix`` (``aloft.inference.prefix_tree``); 0 prefills every
    prompt whole, as evals made before shared prefills did."""

    def resolved(self, source: EvalSource) -> EvalSettings:
        """These settings with every ``None`` filled from the run's config, then the defaults."""
        max_new_tokens = self.max_new_tokens or source.default("generator.max_new_tokens", 64)
        max_turns = self.max_turns or source.default("generator.max_turns", 1)
        return EvalSettings(
            n=self.n,
            temperature=self.temperature,
            seed=self.seed,
            max_new_tokens=max_new_tokens,
            max_turns=max_turns,
            max_total_tokens=self.max_total_tokens
            or source.default("generator.max_total_tokens", max_new_tokens * max_turns * 4),
            stop=self.stop if self.stop is not None else source.default("generator.stop", []),
            env_config=self.env_config if self.env_config is not None else source.default("env.config", {}),
            backend=self.backend or source.default("engine.backend", "hf"),
            urls=self.urls if self.urls is not None else source.default("engine.urls", []),
            dtype=self.dtype or source.default("engine.dtype", "auto"),
            min_shared_prefix=self.min_shared_prefix
            if self.min_shared_prefix is not None
            # A run whose config predates the setting ran as ADDED_SETTINGS says (whole prefills).
            else source.default(
                "engine.min_shared_prefix",
                ADDED_SETTINGS["engine.min_shared_prefix"] if source.run_config else MIN_SHARED_TOKENS,
            ),
        )


def run_eval(
    source: EvalSource, rows: list[DatasetRow], settings: EvalSettings
) -> tuple[dict[str, float], list[TrajectoryGroup], Any]:
    """Evaluate ``source`` on ``rows``; returns the metrics, the trajectory groups and the tokenizer."""
    settings = settings.resolved(source)
    tokenizer = load_tokenizer(source.model_path)
    options: dict[str, Any] = {"dtype": settings.dtype}
    if settings.backend == "hf":
        options["min_shared_prefix"] = settings.min_shared_prefix
    if settings.backend == "remote":
        options = {"urls": settings.urls}
    engine = make_engine(settings.backend, model_or_path=source.model_path, tokenizer=tokenizer, **options)

    async def run() -> tuple[dict[str, float], list[TrajectoryGroup]]:
        if source.checkpoint is not None:
            await engine.update_weights(list(checkpoint_weights(source).items()), version=1)
        assert settings.max_turns is not None and settings.max_total_tokens is not None
        generator = Generator(
            engine,
            tokenizer,
            limits=EpisodeLimits(max_turns=settings.max_turns, max_total_tokens=settings.max_total_tokens),
            default_env_config=settings.env_config,
        )
        sampling = SamplingParams(
            max_tokens=settings.max_new_tokens or 64,
            temperature=settings.temperature,
            stop=list(settings.stop or []),
        )
        return await evaluate(generator, rows, n=settings.n, sampling=sampling, seed=settings.seed)

    try:
        metrics, groups = asyncio.run(run())
    finally:
        engine.close()
    return metrics, groups, tokenizer


def write_eval_rollouts(path: Path, groups: list[TrajectoryGroup], tokenizer: Any) -> None:
    """One JSON record per trajectory, as a training step's ``rollouts/step_<n>.jsonl``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for group in groups:
            for trajectory in group.trajectories:
                f.write(json.dumps(rollout_record(trajectory, tokenizer.decode)) + "\n")


def default_rollouts_path(source: EvalSource) -> Path | None:
    return source.run_dir / "eval" / f"{source.label}.jsonl" if source.run_dir is not None else None
