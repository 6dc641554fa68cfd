"""The SkyRL-SQL experiment's learning-rate study: short single-turn runs that choose the long runs'
settings from evidence.

Every ``STUDY_CONFIGS`` entry is a single-turn run from the shared warm start with the long runs'
batch geometry (8 questions x 4 samples a step), the same data and seed, for ``STUDY_STEPS`` steps,
differing only in its LoRA learning rate and rank. Each is compared by (``study_table``):

- how far its updates moved the policy: the mean over steps of ``policy/update_kl`` (KL between
  the policy before and after the step's update, on the step's own batch) and of
  ``policy/update_rel_norm`` (``||delta theta|| / ||theta||`` over the LoRA weights);
- its training trend: reward and ``answer_correct`` in the first and the last half of its steps,
  the least-squares slope of the reward per step with its p-value (``scipy.stats.linregress``), and
  its reward over the last half minus the first run's on the same questions (every study run draws
  the same questions at each step, so this difference is free of their difficulty);
- the fixed 32-question in-domain eval at 1 turn (``study_t1``) of its final policy, paired
  against the warm start on the same questions (``aloft.trainer.paired.compare``).
"""

from __future__ import annotations

import json
from pathlib import Path
from statistics import fmean
from typing import Any

from scipy import stats

from aloft.experiments.sql_stats import compare_outcomes

__all__ = ["STUDY_CONFIGS", "STUDY_STEPS", "study_overrides", "study_table", "training_trend"]

STUDY_STEPS = 8
"""Steps of each study run (256 single-turn episodes at 8 questions x 4 samples)."""

STUDY_CONFIGS: dict[str, dict[str, float | int]] = {
    "lr3e-5_r16": {"lr": 3e-5, "lora_rank": 16},
    "lr1e-4_r16": {"lr": 1e-4, "lora_rank": 16},
    "lr3e-4_r16": {"lr": 3e-4, "lora_rank": 16},
    "lr3e-4_r1": {"lr": 3e-4, "lora_rank": 1},
}
"""Study run name -> its LoRA learning rate and rank (alpha stays 32, as "LoRA Without Regret" keeps
it fixed across ranks, so the best learning rate hardly depends on the rank). 3e-5 is SkyRL-SQL's
LoRA rate; 1e-4 and 3e-4 span 10x, where short LoRA runs were found to want it."""

GEOMETRY = ["trainer.prompts_per_step=8", "generator.n_samples=4"]
"""The long runs' batch geometry, which the study shares so its learning rate carries over."""


def study_overrides(name: str, quick: bool = False) -> list[str]:
    """The ``aloft train`` overrides that make a single-turn run the study run ``name``."""
    config = STUDY_CONFIGS[name]
    steps = 2 if quick else STUDY_STEPS
    return [
        *GEOMETRY,
        f"optim.lr={config['lr']}",
        f"model.lora_rank={config['lora_rank']}",
        f"trainer.max_steps={steps}",
        f"trainer.checkpoint_every={min(2, steps)}",
        "trainer.eval_every=0",
        "trainer.eval_before_training=false",
        "trainer.export_final=true",
    ]


def training_trend(steps: list[dict[str, float]]) -> dict[str, float]:
    """A run's training records (one per step, in order) summarised: mean update size, reward and
    ``answer_correct`` in the first and last half, and the reward's slope per step with its p."""
    half = max(1, len(steps) // 2)
    reward = [r["reward/mean"] for r in steps]
    answer = [r.get("env/answer_correct", float("nan")) for r in steps]
    out = {
        "steps": float(len(steps)),
        "update_kl": fmean(r.get("policy/update_kl", float("nan")) for r in steps),
        "update_rel_norm": fmean(r.get("policy/update_rel_norm", float("nan")) for r in steps),
        "reward_first": fmean(reward[:half]),
        "reward_last": fmean(reward[-half:]),
        "answer_first": fmean(answer[:half]),
        "answer_last": fmean(answer[-half:]),
        "format_last": fmean(r.get("env/format_ok", float("nan")) for r in steps[-half:]),
    }
    if len(steps) >= 3:
        fit = stats.linregress(range(len(reward)), reward)
        out["reward_slope"], out["reward_slope_p"] = float(fit.slope), float(fit.pvalue)
    return out


def study_table(
    runs: dict[str, list[dict[str, float]]],
    outcomes: dict[str, list[dict[str, Any]]],
    baseline: list[dict[str, Any]],
) -> str:
    """The study's markdown table. ``runs``: name -> training records by step; ``outcomes``: name ->
    the final policy's ``study_t1`` outcome records; ``baseline``: the warm start's."""
    lines = [
        f"Warm start on the study eval: {sum(bool(r['correct']) for r in baseline)} of {len(baseline)} right.",
        "",
        "| run | lr | rank | steps | update KL | update rel. norm | reward first -> last half "
        "| reward slope / step (p) | last half vs first run, same questions "
        "| any-format right first -> last half | format (last half) "
        "| eval right (vs warm start) | gain, 95% CI | McNemar p |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    reference = next(iter(runs.values()), [])
    for name, steps in runs.items():
        config = STUDY_CONFIGS.get(name, {})
        trend = training_trend(steps)
        slope = (
            f"{trend['reward_slope']:+.3f} ({trend['reward_slope_p']:.2g})"
            if "reward_slope" in trend
            else "-"
        )
        row = (
            f"| {name} | {config.get('lr', '?')} | {config.get('lora_rank', '?')} | {int(trend['steps'])} "
            f"| {trend['update_kl']:.2e} | {trend['update_rel_norm']:.2e} "
            f"| {trend['reward_first']:+.2f} -> {trend['reward_last']:+.2f} | {slope} "
            f"| {_paired_reward_gap(steps, reference)} "
            f"| {trend['answer_first']:.2f} -> {trend['answer_last']:.2f} | {trend['format_last']:.2f} "
        )
        if (result := compare_outcomes(baseline, outcomes.get(name, []))) is not None:
            row += (
                f"| {result.b_solved} of {result.items} | {result.gain:+.3f} ({result.ci_low:+.3f} to "
                f"{result.ci_high:+.3f}) | {result.p_value:.2g} |"
            )
        else:
            row += "| - | - | - |"
        lines.append(row)
    return "\n".join(lines)


def _paired_reward_gap(steps: list[dict[str, float]], reference: list[dict[str, float]]) -> str:
    """Mean reward difference from ``reference`` over the last half of the steps both ran: every
    study run draws the same questions at each step, so the difference is free of their difficulty."""
    shared = min(len(steps), len(reference))
    if steps is reference or shared == 0:
        return "-"
    half = range(shared - max(1, shared // 2), shared)
    gap = fmean(steps[k]["reward/mean"] - reference[k]["reward/mean"] for k in half)
    return f"{gap:+.2f}"


def read_training_steps(run_dir: Path) -> list[dict[str, float]]:
    """A run's training records (``reward/mean`` present), one per step, in step order (the last
    record of a step wins: a resumed run may log a step twice)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    by_step = {}
    for line in path.read_text().splitlines():
        if line.strip() and "reward/mean" in (record := json.loads(line)):
            by_step[record["step"]] = record
    return [by_step[step] for step in sorted(by_step)]
