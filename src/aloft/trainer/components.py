"""Wiring: build every component of a run from its config (the only place that knows them all)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from aloft.config import AloftConfig, ConfigError, save_config
from aloft.data import DatasetRow, PromptLoader, build_dataset, read_rows, write_rows
from aloft.inference import make_engine
from aloft.inference.base import InferenceEngine
from aloft.models import load_tokenizer
from aloft.models.compute_thread import on_compute_thread
from aloft.rollout import EpisodeLimits, Generator
from aloft.tracking import JsonlSink, MetricsLogger, MlflowSink, RunIds, TensorBoardSink, WandbSink
from aloft.trainer.learner import Learner, Learners, LocalLearners, build_learner
from aloft.trainer.preflight import (
    check_devices,
    check_envs,
    check_names,
    import_plugins,
    read_data,
    resolve_model,
)
from aloft.trainer.run_precision import AUTO_KEYS, choices_here, record_precision, recorded_precision
from aloft.trainer.seeding import seed_everything
from aloft.training import CriticWorker, PolicyWorker, ReferenceWorker
from aloft.training.checkpoint import remove_stale_partials, write_directory_atomically

T = TypeVar("T")

logger = logging.getLogger(__name__)


@dataclass
class Components:
    cfg: AloftConfig
    run_dir: Path
    tokenizer: Any
    pad_token_id: int
    train_rows: list[DatasetRow]
    eval_rows: list[DatasetRow]
    loader: PromptLoader
    learners: Learners
    """The training processes, as the loop sees them (this process's learner, or Ray actors)."""
    learner: Learner | None
    """This process's learner (None under placement.backend=ray: the actors hold theirs)."""
    is_main: bool
    """Rank 0 (or the Ray driver): generates, evaluates, logs and writes."""
    world_size: int
    """Training processes that run this same loop (local data-parallel ranks; 1 under Ray)."""
    engine: InferenceEngine | None
    """None on data-parallel ranks other than 0 (only rank 0 generates)."""
    generator: Generator | None
    loop: asyncio.AbstractEventLoop
    placement: Any = None
    """The RayPlacement that owns the actors (placement.backend=ray)."""
    logger: MetricsLogger = field(default_factory=lambda: MetricsLogger([]))

    @property
    def policy(self) -> PolicyWorker:
        assert self.learner is not None, "under placement.backend=ray the policy lives in the learner actors"
        return self.learner.policy

    @property
    def reference(self) -> ReferenceWorker | None:
        return self.learner.reference if self.learner is not None else None

    @property
    def critic(self) -> CriticWorker | None:
        return self.learner.critic if self.learner is not None else None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine on the run's single event loop (the engine's batcher lives on it)."""
        return self.loop.run_until_complete(coro)

    def settle(self) -> None:
        """Cancel what is still scheduled on the loop (an idle engine batcher) and let it unwind."""
        leftover = [task for task in asyncio.all_tasks(self.loop) if not task.done()]
        for task in leftover:
            task.cancel()
        if leftover:
            self.loop.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))

    def close(self) -> None:
        """Release the engine and the event loop; the components are unusable afterwards."""
        if self.loop.is_closed():
            return
        self.settle()
        if self.engine is not None:
            self.engine.close()
        if self.placement is not None:
            self.placement.close()
        self.loop.close()

    def open_loggers(self, resume_step: int | None) -> None:
        tr = self.cfg.trainer
        sinks: list[Any] = []
        names = tr.loggers
        if "jsonl" in names:
            sinks.append(JsonlSink(self.run_dir / "metrics.jsonl", resume_step=resume_step))
        if "tensorboard" in names:
            sinks.append(
                TensorBoardSink(
                    self.run_dir / "tensorboard", purge_step=(resume_step or 0) + 1 if resume_step else None
                )
            )
        # A resumed run logs on to the same W&B / MLflow run; a fresh one starts new ones.
        ids = RunIds(self.run_dir / "tracking.json", fresh=resume_step is None)
        config = self.cfg.model_dump(mode="json")
        if "wandb" in names:
            sinks.append(
                WandbSink(
                    self.run_dir,
                    tr.name,
                    config,
                    project=tr.tracking_project,
                    entity=tr.wandb_entity,
                    mode=tr.wandb_mode,
                    ids=ids,
                )
            )
        if "mlflow" in names:
            uri = tr.mlflow_tracking_uri or f"sqlite:///{Path(tr.run_root).resolve() / 'mlflow.db'}"
            sinks.append(MlflowSink(uri, tr.tracking_project, tr.name, config, ids=ids))
        self.logger = MetricsLogger(sinks)

    def export_policy(self) -> Path | None:
        """Write the policy in HF format to <run>/export (atomically; rank 0 of a data-parallel run,
        but every rank calls this: gathering the weights is a collective)."""
        if not self.is_main:
            self.learners.save_pretrained(None)
            return None

        def write(directory: Path) -> None:
            self.learners.save_pretrained(directory)
            self.tokenizer.save_pretrained(str(directory))

        return write_directory_atomically(self.run_dir / "export", write)


def _load_or_build_rows(cfg: AloftConfig, run_dir: Path) -> tuple[list[DatasetRow], list[DatasetRow]]:
    data, env = cfg.data, cfg.env
    default_env = env.name
    if data.train_files:
        train = [r for path in data.train_files for r in read_rows(path, default_env=default_env)]
    else:
        train = _built(
            run_dir / "data" / "train.jsonl",
            data.builder,
            data.train_size,
            cfg.trainer.seed,
            data.builder_args,
            default_env,
            split="train",
        )
    if data.eval_files:
        evals = [r for path in data.eval_files for r in read_rows(path, default_env=default_env)]
        evals = evals[: data.eval_size] if data.eval_size > 0 else evals
    elif data.builder and data.eval_size > 0:
        # A disjoint seed keeps eval prompts apart from training order (the task space may overlap).
        evals = _built(
            run_dir / "data" / "eval.jsonl",
            data.builder,
            data.eval_size,
            cfg.trainer.seed + 1_000_003,
            data.builder_args,
            default_env,
            split=data.eval_split,
        )
    else:
        evals = []
    if env.name is not None:  # env=NAME routes every row to that env
        for row in [*train, *evals]:
            row.env_class = env.name
    return train, evals


def _built(
    path: Path,
    builder: str | None,
    n: int,
    seed: int,
    args: dict[str, Any],
    default_env: str | None,
    split: str,
) -> list[DatasetRow]:
    if not path.exists():  # built once per run dir, so a resumed run reads the same rows
        assert builder is not None
        try:
            rows = build_dataset(builder, n=n, seed=seed, split=split, **args)
        except ValueError as error:  # too many rows asked of a fixed dataset, a bad option, ...
            size_key = "data.train_size" if split == "train" else "data.eval_size"
            raise ConfigError(f"{error} (check {size_key} and data.builder_args)") from None
        write_rows(path, rows)
    return read_rows(path, default_env=default_env)


def build_components(cfg: AloftConfig) -> Components:
    # What can be checked before a model loads is checked first, each failure one line (preflight).
    import_plugins(cfg)  # user plugins register their envs / estimators / losses
    check_names(cfg)
    check_devices(cfg)
    model_path = resolve_model(cfg)
    tr = cfg.trainer
    run_dir = Path(tr.run_root) / tr.name
    run_dir.mkdir(parents=True, exist_ok=True)
    # A run killed while writing its export or a checkpoint left a partial copy: no one finishes it.
    for directory in (run_dir, run_dir / "checkpoints"):
        for partial in remove_stale_partials(directory):
            logger.info("removed %s, left by a run that stopped while writing it", partial)
    _check_same_config(cfg, run_dir)
    save_config(cfg, run_dir / "config.yaml")
    record_precision(cfg, run_dir)
    seed_everything(tr.seed, tr.deterministic, tr.num_threads)

    train_rows, eval_rows = read_data("data", lambda: _load_or_build_rows(cfg, run_dir))
    check_envs(cfg, train_rows, eval_rows)
    loader = PromptLoader(train_rows, batch_size=tr.prompts_per_step, shuffle=cfg.data.shuffle, seed=tr.seed)
    tokenizer = load_tokenizer(model_path)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    loop = asyncio.new_event_loop()

    learner = placement = None
    if cfg.placement.backend == "ray":
        from aloft.placement import RayPlacement  # only Ray runs import Ray

        placement = RayPlacement(cfg, model_path)
        engine, learners, main_rank, world_size = placement.engine, placement.learner_group, True, 1
    else:
        learner = build_learner(cfg)  # needs the process group trainer.train starts, for fsdp2 / ulysses
        main_rank, world_size = learner.rank == 0, learner.policy.strategy.world_size
        # One GPU for the learner and an embedded engine: they take turns (placement.offload), when
        # generation does not overlap the update (plan=sync).
        swap = (
            main_rank
            and cfg.placement.offload
            and learner.policy.device.type != "cpu"
            and cfg.trainer.plan == "sync"
            and cfg.engine.backend in ("hf", "vllm", "sglang")
        )
        if swap:  # generation comes first, and the engine sizes itself by the GPU memory it finds free
            on_compute_thread(learner.move_to, "cpu")
        engine = _local_engine(cfg, model_path, tokenizer) if main_rank else None  # rank 0 alone generates
        learners = LocalLearners(learner, engine, swap=swap, loop=loop)
    generator = None
    if main_rank:
        gen = cfg.generator
        generator = Generator(
            engine,
            tokenizer,
            limits=EpisodeLimits(max_turns=gen.max_turns, max_total_tokens=gen.max_total_tokens),
            default_env_config=cfg.env.config,
            default_env=cfg.env.name,
            lockstep=tr.deterministic,  # the same engine batches on every run, whatever the env threads do
            env_threads=gen.env_threads,
            env_timeout_s=gen.env_timeout_s,
        )
    return Components(
        cfg=cfg,
        run_dir=run_dir,
        tokenizer=tokenizer,
        pad_token_id=int(pad),
        train_rows=train_rows,
        eval_rows=eval_rows,
        loader=loader,
        learners=learners,
        learner=learner,
        is_main=main_rank,
        world_size=world_size,
        engine=engine,
        generator=generator,
        loop=loop,
        placement=placement,
    )


def _local_engine(cfg: AloftConfig, model_path: str, tokenizer: Any) -> InferenceEngine:
    remote = (
        {"urls": cfg.engine.urls, "api_key": cfg.engine.api_key, "server": cfg.engine.server}
        if cfg.engine.urls
        else {}
    )
    return make_engine(
        cfg.engine.backend,
        model_or_path=model_path,
        tokenizer=tokenizer,
        dtype=cfg.engine.dtype,
        max_batch_size=cfg.engine.max_batch_size,
        **cfg.engine_options(),
        **remote,
    )


# Keys that may change when a run is resumed (extending a run, turning output on or off).
_RESUMABLE_CHANGES = {
    "trainer.max_steps",
    "trainer.eval_every",
    "trainer.checkpoint_every",
    "trainer.keep_checkpoints",
    "trainer.progress_bar",
    "trainer.loggers",
    "trainer.tracking_project",
    "trainer.wandb_entity",
    "trainer.wandb_mode",
    "trainer.mlflow_tracking_uri",
    "trainer.save_rollouts",
    "trainer.rollouts_per_step",
    "trainer.export_final",
}


# Settings added after runs were saved without them, with the value that reproduces how such a run
# ran: it resumes with the setting at that value, and is refused at another.
ADDED_SETTINGS = {"engine.min_shared_prefix": 0, "optim.min_shared_prefix": 0}


def _check_same_config(cfg: AloftConfig, run_dir: Path) -> None:
    """Refuse to resume the run in ``run_dir`` under other settings, in one line; ``auto`` precision
    settings compare as what they chose (``aloft.trainer.run_precision``)."""
    saved_path = run_dir / "config.yaml"
    if not saved_path.exists() or not (run_dir / "checkpoints").exists():
        return
    saved = _flatten(yaml.safe_load(saved_path.read_text()) or {})
    older = {key: value for key, value in ADDED_SETTINGS.items() if key not in saved}
    saved.update(older)
    now = _flatten(cfg.model_dump(mode="json"))
    ran_with = recorded_precision(run_dir)
    by_auto = any("auto" in (saved.get(k), now.get(k)) for k in AUTO_KEYS)
    if ran_with is not None:
        saved.update(ran_with)
        now.update(choices_here(cfg))
    changed = sorted(
        k for k in set(saved) | set(now) if saved.get(k) != now.get(k) and k not in _RESUMABLE_CHANGES
    )
    if changed and set(changed) <= set(AUTO_KEYS) and ran_with is not None and by_auto:
        as_it_ran = " ".join(f"{k}={str(ran_with[k]).lower()}" for k in AUTO_KEYS)
        here = ", ".join(f"{k}={str(now[k]).lower()}" for k in changed)
        raise ConfigError(
            f"run directory {run_dir} ran with {as_it_ran} (what auto chose on its machine), and here the "
            f"settings choose {here}: resume with {as_it_ran} to keep its precision, or pick a new trainer.name"
        )
    if changed:
        added = " ".join(f"{k}={older[k]}" for k in changed if k in older)
        before = f" (saved before {added} was a setting: add it to resume)" if added else ""
        raise ConfigError(
            f"run directory {run_dir} holds a run with a different config ({', '.join(changed)}){before}; "
            "rerun with the same settings to resume, or pick a new trainer.name"
        )


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and k not in ("builder_args", "config"):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
