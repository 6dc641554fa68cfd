"""A protocol warm start for small models: teach the reply format, not the answers.

Measured on the SkyRL-SQL task (README "SkyRL-SQL at small scale"): Qwen2.5-Coder-0.5B-Instruct
writes a well-formed first turn (``<think>...</think><sql>...</sql>``) but, at 5 turns, keeps
probing until its turns run out and never writes ``<solution>``. Every episode of a group then
scores -1, every advantage is 0, and multi-turn RL has nothing to learn from. SkyRL-SQL's 7B model
follows the protocol from the start; this warm start gives a 0.5B model that starting point.

How (``sql_demonstrations`` then ``fit_demonstrations``):

1. The model itself answers the train questions' first turn (5-turn prompt, sampled), and the
   real env runs its probe.
2. A first turn that is well formed and whose probe returns rows becomes two demonstrations, both
   with the model's own thinking and query: at 5 turns, the model's turn, the env's observation,
   then ``<solution>`` with that same query; at 1 turn, the same thinking and query answered at
   once. Each demonstration is replayed through a fresh env and must be well formed.
3. The model is fine-tuned on the demonstrations' policy tokens (cross-entropy; observations and
   prompts are masked out) and saved as a plain model directory for RL to start from.

No gold query and no reward is used: whether the query is right does not decide what is kept, so
what the warm start teaches is the protocol, and what RL adds to execution accuracy is RL's.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from aloft.data import DatasetRow, validate_row
from aloft.gym import make
from aloft.gym.envs.text2sql import parse_reply
from aloft.rollout import EpisodeLimits, Generator
from aloft.rollout.generator import ChatFormatter
from aloft.types import SamplingParams, Trajectory

__all__ = [
    "FINAL_THINKING",
    "WARM_START_FIT",
    "build_sql_warm_start",
    "fit_demonstrations",
    "sql_demonstrations",
]

FINAL_THINKING = "The query ran and its result answers the question."
"""The thinking of a demonstration's 5-turn final reply (the query is the model's own probe)."""


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def _final_reply(thinking: str, query: str) -> str:
    return f"<think>{thinking}</think>\n<solution>{query}</solution>"


def sql_demonstrations(
    engine: Any,
    tokenizer: Any,
    multi_turn_rows: Sequence[dict[str, Any]],
    single_turn_rows: Sequence[dict[str, Any]],
    *,
    samples: int = 2,
    seed: int = 0,
    sampling: SamplingParams,
    env_config: dict[str, Any] | None = None,
) -> tuple[list[Trajectory], dict[str, float]]:
    """Demonstrations of both protocols from the model's own first turns (see the module docstring).

    ``multi_turn_rows[i]`` and ``single_turn_rows[i]`` must ask the same question (the ``sql``
    builder's rows at ``max_turns=5`` and ``1``). Returns the trajectories (5-turn and 1-turn
    demonstrations; ``loss_mask`` 1 on the policy's tokens only) and counts: ``sampled``,
    ``well_formed`` (first turns in the protocol), ``kept`` (their probe returned rows).
    """
    if len(multi_turn_rows) != len(single_turn_rows):
        raise ValueError("sql_demonstrations needs as many 1-turn rows as 5-turn rows (the same questions)")
    multi_rows = [validate_row(row, i, "warm start (5 turns)") for i, row in enumerate(multi_turn_rows)]
    single_rows = [validate_row(row, i, "warm start (1 turn)") for i, row in enumerate(single_turn_rows)]
    if [r.extras.get("question") for r in multi_rows] != [r.extras.get("question") for r in single_rows]:
        raise ValueError(
            "sql_demonstrations: the 5-turn and 1-turn rows must ask the same questions in order"
        )
    generator = Generator(
        engine,
        tokenizer,
        limits=EpisodeLimits(max_turns=1, max_total_tokens=4096),
        default_env_config=env_config,
    )
    groups = asyncio.run(
        generator.generate(multi_rows, n=samples, sampling=sampling, seed=seed, group_prefix="warm")
    )
    chat = ChatFormatter(tokenizer)
    demos: list[Trajectory] = []
    counts = {"sampled": 0.0, "well_formed": 0.0, "kept": 0.0}
    for group, multi, single in zip(groups, multi_rows, single_rows, strict=True):
        for first in group.trajectories:
            counts["sampled"] += 1
            (start, end), *_ = first.info["segments"] or [[0, 0]]
            turn_ids = first.completion_ids[start:end]
            reply = parse_reply(tokenizer.decode(turn_ids, skip_special_tokens=True))
            if reply.problem is not None or reply.action != "sql" or not first.info["observation_spans"]:
                continue
            counts["well_formed"] += 1
            observation = tokenizer.decode(first.completion_ids[end:], skip_special_tokens=True)
            if "(no rows)" in observation or first.metrics.get("sql_errors", 0) > 0:
                continue
            thinking = reply_thinking(tokenizer.decode(turn_ids, skip_special_tokens=True))
            final_ids = _encode(tokenizer, _final_reply(FINAL_THINKING, reply.query or ""))
            demos.append(_with_policy_turn(first, final_ids))
            single_ids = _encode(tokenizer, _final_reply(thinking, reply.query or ""))
            single_prompt = chat.prompt_ids(list(single.prompt))
            demos.append(_demonstration(single_prompt, single_ids, f"{first.group_id}/t1"))
            for row, texts in (
                (multi, [tokenizer.decode(turn_ids, skip_special_tokens=True), tokenizer.decode(final_ids)]),
                (single, [tokenizer.decode(single_ids)]),
            ):
                _check_well_formed(row, texts, env_config)
            counts["kept"] += 1
    return demos, counts


def reply_thinking(text: str) -> str:
    """The text inside a reply's first ``<think>...</think>`` block."""
    start = text.index("<think>") + len("<think>")
    return text[start : text.index("</think>", start)].strip()


def _with_policy_turn(trajectory: Trajectory, ids: list[int]) -> Trajectory:
    """``trajectory`` (policy turn, observation) with one more policy turn: ``ids``, trained on.
    Sampler logprobs are zeroed, as in every demonstration (``fit_demonstrations`` reads its NLL
    from the update's sampler gap)."""
    n = len(ids)
    return replace(
        trajectory,
        completion_ids=trajectory.completion_ids + ids,
        loss_mask=trajectory.loss_mask + [1] * n,
        sampler_logprobs=[0.0] * (len(trajectory.completion_ids) + n),
        rewards=trajectory.rewards + [0.0] * n,
    )


def _demonstration(prompt_ids: list[int], ids: list[int], group_id: str) -> Trajectory:
    n = len(ids)
    return Trajectory(
        prompt_ids=prompt_ids,
        completion_ids=ids,
        loss_mask=[1] * n,
        sampler_logprobs=[0.0] * n,
        rewards=[0.0] * n,
        status="stop",
        group_id=group_id,
    )


def _check_well_formed(row: DatasetRow, replies: list[str], env_config: dict[str, Any] | None) -> None:
    """Replay ``replies`` through a fresh env: the episode must end well formed (reward >= 0)."""
    env = make(row.env_class or "text2sql", env_config, row.extras)
    try:
        env.reset(list(row.prompt))
        for reply in replies:
            out = env.step(reply)
        if not out.done or out.reward < 0:
            raise AssertionError(f"warm start: a demonstration is not well formed: {out.info}")
    finally:
        env.close()


def fit_demonstrations(
    model_path: str,
    tokenizer: Any,
    demos: Sequence[Trajectory],
    out: Path,
    *,
    epochs: int = 2,
    batch_size: int = 8,
    lr: float = 1e-4,
    lora: dict[str, Any] | None = None,
    micro_batch_tokens: int = 4096,
    seed: int = 0,
) -> dict[str, float]:
    """Fine-tune on ``demos``' policy tokens and save a plain model (LoRA merged) with its tokenizer
    to ``out``. Returns the mean loss of the first and the last epoch.

    The loss is the policy update's with advantage 1 on every trained token, exactly on-policy (the
    ratio's denominator is the detached current logprob, so the ratio is 1 and never clipped): its
    gradient is that of the token-mean cross-entropy, so supervised fine-tuning runs through the
    same worker, packing and LoRA code as RL.
    """
    from aloft.config.schema import AlgorithmConfig
    from aloft.training import collate
    from aloft.training.workers import OptimSettings, PolicyWorker

    if not demos:
        raise ValueError("fit_demonstrations: no demonstrations to fit (none of the sampled turns was kept)")
    torch.manual_seed(seed)
    steps = epochs * -(-len(demos) // batch_size)
    worker = PolicyWorker(
        model_path,
        OptimSettings(lr=lr, total_steps=steps, packing=True, micro_batch_tokens=micro_batch_tokens),
        lora=lora,
    )
    algo = AlgorithmConfig(kl_coef=0.0, entropy_coef=0.0)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    order = list(range(len(demos)))
    losses: list[list[float]] = []
    for epoch in range(epochs):
        random.Random(seed + epoch).shuffle(order)
        epoch_losses = []
        for start in range(0, len(order), batch_size):
            chosen = [demos[i] for i in order[start : start + batch_size]]
            batch = collate(chosen, int(pad), {t.group_id: i for i, t in enumerate(chosen)})
            metrics = worker.update(
                batch,
                batch.loss_mask.clone(),  # advantage 1 on every trained token
                algo,
                old_logprobs=None,
                ref_logprobs=None,
                mini_batches=[list(range(batch.num_rows))],
                max_len=batch.completion_width,
            )
            # The demonstrations' sampler logprobs are 0, so the update's "sampler_abs_diff" (the
            # token mean of |logprob - 0| before the step) is the batch's negative log-likelihood.
            epoch_losses.append(metrics["logprob/sampler_abs_diff"])
        losses.append(epoch_losses)
    out.mkdir(parents=True, exist_ok=True)
    worker.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return {
        "first_epoch_nll": sum(losses[0]) / len(losses[0]),
        "last_epoch_nll": sum(losses[-1]) / len(losses[-1]),
    }


WARM_START_FIT: dict[str, Any] = {"epochs": 2, "lr": 1e-4, "batch_size": 8}
"""How ``build_sql_warm_start`` fits its demonstrations (LoRA of the config's rank, merged)."""


def build_sql_warm_start(
    cfg: Any,
    multi_turn_rows: Sequence[dict[str, Any]],
    single_turn_rows: Sequence[dict[str, Any]],
    out: Path,
    *,
    quick: bool = False,
    echo: Any = print,
) -> Path:
    """The warm start of ``cfg``'s model (an ``AloftConfig``: model, LoRA, sampling, env config) from
    these questions, in two stages, each kept in ``out`` once done: the demonstrations
    (``demos.jsonl``, ``demos.json`` with their counts) and the fit (``model/``, ``summary.json``).
    Returns the model directory. ``quick``: one sample per question and one epoch."""
    from aloft.models import load_tokenizer, resolve_model_path

    model_path = resolve_model_path(cfg.model.path)
    tokenizer = load_tokenizer(model_path)
    if not (out / "demos.json").exists():
        _sample_and_save(cfg, model_path, tokenizer, multi_turn_rows, single_turn_rows, out, quick, echo)
    counts = json.loads((out / "demos.json").read_text())
    # ``reward`` in a trajectory's JSON is derived (the sum of ``rewards``), not a field.
    demos = [
        Trajectory(**{k: v for k, v in json.loads(line).items() if k != "reward"})
        for line in (out / "demos.jsonl").read_text().splitlines()
        if line.strip()
    ]
    echo(f"[skyrl-sql] warm start: fitting {len(demos)} demonstrations")
    t0 = time.perf_counter()
    settings = {**WARM_START_FIT, **({"epochs": 1} if quick else {})}
    fit = fit_demonstrations(
        model_path,
        tokenizer,
        demos,
        out / "model",
        **settings,
        lora={
            "r": cfg.model.lora_rank,
            "alpha": cfg.model.lora_alpha,
            "target_modules": cfg.model.lora_target_modules,
        },
        micro_batch_tokens=cfg.optim.micro_batch_tokens,
    )
    summary = {
        **counts,
        **fit,
        **settings,
        "demonstrations": len(demos),
        "fit_seconds": time.perf_counter() - t0,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return out / "model"


def _sample_and_save(
    cfg: Any,
    model_path: str,
    tokenizer: Any,
    multi_turn_rows: Sequence[dict[str, Any]],
    single_turn_rows: Sequence[dict[str, Any]],
    out: Path,
    quick: bool,
    echo: Any,
) -> None:
    """Sample the first turns with the hf engine and write the demonstrations to ``out``."""
    from aloft.inference import make_engine

    gen = cfg.generator
    sampling = SamplingParams(max_tokens=gen.max_new_tokens, temperature=gen.temperature, stop=list(gen.stop))
    echo(f"[skyrl-sql] warm start: sampling first turns of {len(multi_turn_rows)} train questions")
    t0 = time.perf_counter()
    engine = make_engine(
        "hf",
        model_or_path=model_path,
        tokenizer=tokenizer,
        dtype=cfg.engine.dtype,
        min_shared_prefix=cfg.engine.min_shared_prefix,
    )
    demos, counts = sql_demonstrations(
        engine,
        tokenizer,
        multi_turn_rows,
        single_turn_rows,
        samples=1 if quick else 2,
        sampling=sampling,
        env_config=dict(cfg.env.config),
    )
    del engine
    if not demos:
        raise RuntimeError(
            f"skyrl-sql warm start: none of {int(counts['sampled'])} sampled first turns was a well-formed "
            f"probe that returned rows ({int(counts['well_formed'])} well formed), so there is nothing to "
            "learn the protocol from; use a stronger model, or start from the model itself with --warm-start 0"
        )
    echo(f"[skyrl-sql] warm start: {int(counts['kept'])} of {int(counts['sampled'])} first turns kept")
    out.mkdir(parents=True, exist_ok=True)
    (out / "demos.jsonl").write_text("".join(json.dumps(d.to_json()) + "\n" for d in demos))
    (out / "demos.json").write_text(json.dumps({**counts, "sample_seconds": time.perf_counter() - t0}) + "\n")
