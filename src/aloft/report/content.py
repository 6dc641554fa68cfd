"""What a report shows, as plain data for the page: curves by section, configs and their diff, the
eval table, and the trajectories of the browser.

Trajectories are kept compact: each run's token texts are a table (decoded once per distinct id),
and each trajectory holds ids, a loss-mask string, sampler logprobs rounded to 1e-4 and the
trainer's as differences from them (mostly 0). Per step at most ``samples_per_step`` trajectories
are kept, whole groups first; the page gzips the whole (``aloft.report.page``).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from aloft.config import flatten
from aloft.report.runs import RunRecord, read_rollouts

__all__ = ["SECTIONS", "build_payload", "config_diff", "metric_columns", "metric_sections"]

SECTIONS: list[tuple[str, re.Pattern[str]]] = [
    ("Reward and eval", re.compile(r"^(reward/|rollout/|eval/([^/]+/)?(reward/mean|pass@\d+)$)")),
    ("Eval: lengths and env metrics", re.compile(r"^eval/")),
    ("Env metrics", re.compile(r"^env/")),
    ("Lengths and turns", re.compile(r"^(completion/|prompt/|status/|train/|mask/)")),
    ("Policy: loss, KL, entropy, clipping", re.compile(r"^(policy/|advantage/|critic/|value/)")),
    ("Off-policy: staleness and importance weights", re.compile(r"^(async/|off_policy/|sampling/)")),
    ("Sampler vs trainer logprobs", re.compile(r"^(logprob/|sync/logprob)")),
    ("Timing and throughput", re.compile(r"^(timing/|throughput/|sync/)")),
]
"""Sections of the curves, each taking the metrics its pattern matches (first match wins); the first
section is open when the page loads, the others draw when opened."""

_NOT_CURVES = {"step", "time", "policy_version"}


def config_diff(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keys whose values differ between the (flattened) configs: ``[{"key", "values": [...]}]``."""
    flat = [flatten(config) for config in configs]
    keys = sorted(set().union(*flat)) if flat else []
    return [
        {"key": key, "values": [f.get(key) for f in flat]}
        for key in keys
        if len({repr(f.get(key)) for f in flat}) > 1
    ]


def metric_sections(runs: list[RunRecord]) -> list[dict[str, Any]]:
    """``[{"title", "keys"}]``: every metric any run logged, grouped; unmatched ones under "Other"."""
    logged = {key for run in runs for row in [*run.steps, *run.evals] for key in row} - _NOT_CURVES
    sections: list[dict[str, Any]] = [{"title": title, "keys": []} for title, _ in SECTIONS]
    other: list[str] = []
    # reward/mean first, then eval rewards, then the rest by name (the charts people look for first).
    keys = sorted(logged, key=lambda key: (key != "reward/mean", not key.endswith("reward/mean"), key))
    for key in keys:
        for section, (_, pattern) in zip(sections, SECTIONS, strict=True):
            if pattern.match(key):
                section["keys"].append(key)
                break
        else:
            other.append(key)
    if other:
        sections.append({"title": "Other", "keys": other})
    return [section for section in sections if section["keys"]]


def build_payload(runs: list[RunRecord], samples_per_step: int, tokenizers: list[Any]) -> dict[str, Any]:
    """The page's data: one entry per run, the curve sections and the config diff."""
    return {
        "runs": [_run_payload(run, samples_per_step, tok) for run, tok in zip(runs, tokenizers, strict=True)],
        "sections": metric_sections(runs),
        "config_diff": config_diff([run.config for run in runs]) if len(runs) > 1 else [],
    }


def _run_payload(run: RunRecord, samples_per_step: int, tokenizer: Any) -> dict[str, Any]:
    start = next((row["time"] for row in run.steps if isinstance(row.get("time"), int | float)), None)
    trajectories = {step: _step_trajectories(run, step, samples_per_step) for step in run.rollout_steps}
    shown = [record["ids"] for records in trajectories.values() for record in records]
    ids = np.unique(np.concatenate(shown)).tolist() if shown else []
    return {
        "name": run.name,
        "path": str(run.path),
        "config": flatten(run.config),
        "steps": metric_columns(run.steps, start),
        "evals": metric_columns(run.evals, start),
        "eval_table": _eval_table(run.evals),
        "notes": run.notes,
        "tokens": _token_texts(ids, tokenizer),
        "trajectories": {str(step): records for step, records in trajectories.items()},
    }


def metric_columns(rows: list[dict[str, Any]], start: float | None) -> dict[str, list[Any]]:
    """Rows -> columns (``step``, ``minutes`` since the run's first step, one list per metric;
    null where a row lacks the metric or it is not finite)."""
    keys = sorted({key for row in rows for key in row} - {"time"})
    columns = {key: [_number(row.get(key)) for row in rows] for key in keys}
    if start is not None:
        columns["minutes"] = [
            round((row["time"] - start) / 60, 4) if isinstance(row.get("time"), int | float) else None
            for row in rows
        ]
    return columns


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return value


_PASS = re.compile(r"^eval/(?:(?P<label>[^/]+)/)?(?P<metric>pass@\d+|reward/mean|error_share)$")


def _eval_table(evals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``[{"step", "label", "reward/mean", "pass@1", ...}]``: one row per eval and eval set."""
    table = []
    for row in evals:
        by_label: dict[str, dict[str, Any]] = {}
        for key, value in row.items():
            match = _PASS.match(key)
            if match and _number(value) is not None:
                label = match.group("label") or "eval"
                by_label.setdefault(label, {"step": row.get("step"), "label": label})[
                    match.group("metric")
                ] = value
        table.extend(by_label.values())
    return table


def _step_trajectories(run: RunRecord, step: int, samples_per_step: int) -> list[dict[str, Any]]:
    """Up to ``samples_per_step`` trajectories of the step in file order (a group's samples are
    written together, so whole groups come first), and every failed one besides (the trainer writes
    them last, and they are what a reader looks for): compacted. Past the first ones, only lines
    that name a failure are parsed."""
    kept: list[dict[str, Any]] = []
    index_in_group: dict[str, int] = {}

    def want(line: str) -> bool:
        return len(kept) < samples_per_step or '"env_error"' in line

    for record in read_rollouts(run, step, want):
        if len(kept) >= samples_per_step and record.get("status") != "env_error":
            continue  # "env_error" appeared in the line's text, not as its status
        group_id = record.get("group_id", "")
        index = index_in_group[group_id] = index_in_group.get(group_id, -1) + 1
        kept.append(_compact(record, group_id, index))
    return kept


def _compact(record: dict[str, Any], group_id: str, index: int) -> dict[str, Any]:
    # Per-token fields go through numpy, one pass each (ids, mask string, rounding, turn rewards):
    # per-token Python was most of a 200-step x 64-sample page's build time (3.3M logprobs). The
    # page's JSON writer (orjson) takes the arrays as they are.
    ids = np.asarray(record.get("completion_ids", []), dtype=np.int64)
    mask = np.asarray(record.get("loss_mask", []), dtype=bool)
    info = record.get("info", {}) or {}
    sampler = np.round(np.asarray(record.get("sampler_logprobs", []), dtype=np.float64), 4)
    trainer_logprobs = record.get("trainer_logprobs") or []
    if trainer_logprobs and len(trainer_logprobs) != len(sampler):
        raise ValueError(
            f"rollout record has {len(trainer_logprobs)} trainer logprobs for {len(sampler)} sampler logprobs"
        )
    return {
        "group": group_id,
        "sample": index,
        "status": record.get("status"),
        "reward": _number(record.get("reward")),
        "env": info.get("env_class", ""),
        "version": record.get("policy_version"),
        "prompt": record.get("prompt", ""),
        "ids": ids,
        "mask": (mask.astype(np.uint8) + ord("0")).tobytes().decode("ascii"),
        "lp": sampler,
        # The trainer's logprobs as differences from the sampler's: mostly 0 on-policy, so the page
        # stays small; the page adds them back.
        "tlp_diff": (
            np.round(np.asarray(trainer_logprobs, dtype=np.float64) - sampler, 4)
            if trainer_logprobs
            else None
        ),
        "adv": record.get("advantage"),
        "turn_rewards": _turn_rewards(mask, np.asarray(record.get("rewards", []), dtype=np.float64)),
        "error": info.get("error"),
        "metrics": record.get("metrics", {}),
    }


def _turn_rewards(mask: np.ndarray, token_rewards: np.ndarray) -> list[float]:
    """The reward of each policy turn (a run of trained tokens): the sum of its tokens' rewards.

    mask: [T] bool; token_rewards: [T'] (zipped: the shorter one decides). Sums run in token order,
    as a loop would add them."""
    length = min(len(mask), len(token_rewards))
    mask, token_rewards = mask[:length], token_rewards[:length]
    starts = mask & ~np.concatenate(([False], mask[:-1]))
    turn_of_token = np.cumsum(starts) - 1
    sums = np.bincount(turn_of_token[mask], weights=token_rewards[mask], minlength=int(starts.sum()))
    return np.round(sums, 6).tolist()


def _token_texts(ids: list[int], tokenizer: Any) -> dict[str, str]:
    """``{id: text}`` for the ids shown (each decoded once); ``⟨id⟩`` without a tokenizer."""
    if tokenizer is None:
        return {str(i): f"⟨{i}⟩" for i in ids}
    return {str(i): tokenizer.decode([i]) for i in ids}
