"""The SkyRL-SQL experiment's report: ``OUT/results.md`` and its plots, from what the runs and evals
wrote (``metrics.jsonl``, rollouts, outcome records); nothing here trains or evaluates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aloft.experiments.sql_evals import read_outcomes
from aloft.experiments.sql_plan import (
    BASE_RUN,
    EVAL_SETS,
    FINAL_EVAL_SETS,
    RAW_RUN,
    VARIANTS,
    ExperimentPlan,
    read_jsonl,
)
from aloft.experiments.sql_stats import BASELINE, stats_table
from aloft.experiments.sql_study import STUDY_CONFIGS, read_training_steps, study_table

__all__ = [
    "EXAMPLE_KINDS",
    "collect_runs",
    "example_kind",
    "eval_rollouts",
    "pick_examples",
    "write_outcomes",
    "write_report",
]


def write_outcomes(plan: ExperimentPlan) -> Path:
    """Every start/end outcome record so far in one JSON list, ``OUT/outcomes.json``."""
    records = []
    evals = plan.out / "evals"
    for model_dir in sorted(p for p in evals.glob("*") if p.is_dir()) if evals.is_dir() else []:
        for set_name in FINAL_EVAL_SETS:
            records += read_outcomes(model_dir / set_name)
    path = plan.out / "outcomes.json"
    path.write_text(json.dumps(records, indent=0) + "\n")
    return path


# ---- the report ---------------------------------------------------------------------------------
def collect_runs(plan: ExperimentPlan) -> dict[tuple[str, int], list[dict[str, float]]]:
    """Per run, its evals in step order: ``step``, ``train_seconds`` (training time up to that step,
    evals excluded) and the eval metrics of both eval sets. A run without its own step-0 eval gets
    the ``base`` run's (the same starting model on the same rows). Runs with no eval yet are left out."""
    base = _evals(plan.run_dir(BASE_RUN, 0) / "metrics.jsonl")
    runs = {}
    for seed in plan.seeds:
        for variant in VARIANTS:
            evals = _evals(plan.run_dir(variant, seed) / "metrics.jsonl")
            if not evals:  # not started, or no eval yet
                continue
            if base and evals[0]["step"] > 0:
                evals = base[:1] + evals
            runs[(variant, seed)] = evals
    return runs


def _evals(path: Path) -> list[dict[str, float]] | None:
    """The eval records of one run's ``metrics.jsonl``, with ``train_seconds``; None: no such run."""
    if not path.exists():
        return None
    seconds, evals = 0.0, []
    for record in sorted(read_jsonl(path), key=lambda r: (r["step"], "eval/reward/mean" in r)):
        seconds += record.get("timing/step_s", 0.0)
        if "eval/reward/mean" in record:
            evals.append({**record, "train_seconds": seconds})
    return evals


def _metric(record: dict[str, float], tag: str, name: str) -> float:
    return record.get(f"eval/{tag}/env/{name}", float("nan"))


def _mean(values: list[float]) -> float:
    kept = [v for v in values if v == v]
    return sum(kept) / len(kept) if kept else float("nan")


def _steps_to_reach(evals: list[dict[str, float]], target: float, tag: str) -> int | None:
    for record in evals:
        if _metric(record, tag, "correct") >= target:
            return int(record["step"])
    return None


def write_report(plan: ExperimentPlan) -> Path:
    """``results.md`` and the two plots from the runs' metrics; returns the path of ``results.md``."""
    runs = collect_runs(plan)
    lines = [
        "# SkyRL-SQL at small scale",
        "",
        f"Held-out databases (never in training), {plan.eval_size} questions, greedy; execution accuracy "
        "is `correct` (right rows in a well-formed `<solution>`), `format` the well-formed share, "
        "`any-format` the final query right whatever the format.",
        "",
        "| policy | seed | steps | train min | eval at | accuracy base -> final | format base -> final "
        "| any-format base -> final |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (variant, seed), evals in sorted(runs.items()):
        if not evals:
            continue
        first, last = evals[0], evals[-1]
        for tag in EVAL_SETS:
            lines.append(
                f"| {variant} | {seed} | {int(last['step'])} | {last['train_seconds'] / 60:.1f} | {tag} "
                f"| {_metric(first, tag, 'correct'):.3f} -> {_metric(last, tag, 'correct'):.3f} "
                f"| {_metric(first, tag, 'format_ok'):.3f} -> {_metric(last, tag, 'format_ok'):.3f} "
                f"| {_metric(first, tag, 'answer_correct'):.3f} -> {_metric(last, tag, 'answer_correct'):.3f} |"
            )
    raw = _evals(plan.run_dir(RAW_RUN, 0) / "metrics.jsonl")
    if raw:
        lines += ["", "The model before the warm start (every run's base is the warm-started model):"]
        lines += [
            f"- {tag}: accuracy {_metric(raw[0], tag, 'correct'):.3f}, format {_metric(raw[0], tag, 'format_ok'):.3f}, "
            f"any-format {_metric(raw[0], tag, 'answer_correct'):.3f}"
            for tag in EVAL_SETS
        ]
    single_final = _mean(
        [
            evals[-1].get("eval/heldout_t5/env/correct", float("nan"))
            for (v, _), evals in runs.items()
            if v == "single_turn" and evals
        ]
    )
    if single_final == single_final and single_final > 0:
        lines += ["", f"Single-turn policy's mean final accuracy (asked at 5 turns): {single_final:.3f}."]
        for (variant, seed), evals in sorted(runs.items()):
            step = _steps_to_reach(evals, single_final, "heldout_t5")
            lines.append(
                f"- {variant} seed {seed} reaches it at step: {step if step is not None else 'never'}"
            )
    lines += _study_section(plan)
    lines += _final_eval_section(plan)
    lines += _time_table(plan)
    lines += _behaviour_tables(plan)
    lines += _eval_examples(plan)
    lines += _trajectory_examples(plan)
    report = plan.out / "results.md"
    report.write_text("\n".join(lines) + "\n")
    _plot(runs, plan.out)
    long_runs = {
        f"{v}-seed{s}": read_training_steps(plan.run_dir(v, s)) for s in plan.seeds for v in VARIANTS
    }
    study_runs = {name: read_training_steps(plan.out / "study" / name) for name in STUDY_CONFIGS}
    for curves, name in ((long_runs, "training_curves.png"), (study_runs, "study_curves.png")):
        if curves := {run: steps for run, steps in curves.items() if steps}:
            _plot_training(curves, plan.out / name)
    return report


def _study_section(plan: ExperimentPlan) -> list[str]:
    """The learning-rate study's table (``aloft.experiments.sql_study.study_table``), once a study
    run has trained."""
    runs = {name: read_training_steps(plan.out / "study" / name) for name in STUDY_CONFIGS}
    runs = {name: steps for name, steps in runs.items() if steps}
    if not runs:
        return []
    evals = plan.out / "evals"
    outcomes = {name: read_outcomes(evals / name / "study_t1") for name in runs}
    table = study_table(runs, outcomes, read_outcomes(evals / BASELINE / "study_t1"))
    return ["", "## Learning-rate study (single-turn, 8 questions x 4 samples a step)", "", table]


def _final_eval_section(plan: ExperimentPlan) -> list[str]:
    """The start/end evals on every question (``aloft.experiments.sql_stats``), once any has run."""
    records = json.loads(write_outcomes(plan).read_text())
    if not records:
        return []
    return [
        "",
        "## Start and end evals (greedy, every question; paired over the same questions)",
        "",
        f"Recompute: `python -m aloft.experiments.sql_stats {plan.out / 'outcomes.json'}`",
        "",
        stats_table(records),
    ]


def _behaviour_tables(plan: ExperimentPlan) -> list[str]:
    """Per run, the training episodes step by step: reward, format errors, execution accuracy,
    turns, probes, failed probes and how many of those episodes recovered."""
    lines = []
    for seed in plan.seeds:
        for variant in VARIANTS:
            path = plan.run_dir(variant, seed) / "metrics.jsonl"
            steps = [r for r in read_jsonl(path) if "reward/mean" in r] if path.exists() else []
            if not steps:
                continue
            lines += [
                "",
                f"Training episodes of {variant} seed {seed}, by step (means over the step's episodes; "
                "`recovered` is the share of episodes with a failed probe that still answered correctly):",
                "",
                "| step | reward | format errors | correct | turns | probes | failed probe | recovered |",
                "|---|---|---|---|---|---|---|---|",
            ]
            for r in sorted(steps, key=lambda r: r["step"]):
                failed = r.get("env/probe_failed", 0.0)
                recovered = f"{r.get('env/recovered', 0.0) / failed:.2f}" if failed else "-"
                lines.append(
                    f"| {int(r['step'])} | {r['reward/mean']:.2f} | {1 - r.get('env/format_ok', 0.0):.2f} "
                    f"| {r.get('env/correct', 0.0):.2f} | {r.get('env/turns', 0.0):.2f} "
                    f"| {r.get('env/probes', 0.0):.2f} | {failed:.2f} | {recovered} |"
                )
    return lines


EXAMPLE_KINDS: dict[str, str] = {
    "fixes its query after an error": "a probe failed, a later query ran and the answer is right",
    "verifies an intermediate result": "a probe returned rows, then a right answer",
    "fails": "a wrong or badly formatted answer (after probing, where an episode probed)",
}


def example_kind(record: dict[str, Any]) -> str | None:
    """Which of ``EXAMPLE_KINDS`` a rollout record is (None: none of them)."""
    m = record["metrics"]
    if m.get("recovered"):
        return "fixes its query after an error"
    if m.get("correct") and m.get("probes", 0) >= 1 and not m.get("sql_errors"):
        return "verifies an intermediate result"
    if not m.get("correct") and m.get("probes", 0) >= 1:
        return "fails"
    return None


def pick_examples(run_dir: Path) -> dict[str, dict[str, Any]]:
    """One trajectory of each ``EXAMPLE_KINDS`` from a run's rollouts, latest step first (the
    trained model); kinds with no such trajectory are left out."""
    found: dict[str, dict[str, Any]] = {}
    paths = sorted((run_dir / "rollouts").glob("step_*.jsonl"), key=lambda p: -int(p.stem.split("_")[1]))
    for path in paths:
        for record in read_jsonl(path):
            name = example_kind(record)
            if name and name not in found:
                found[name] = {**record, "step": int(path.stem.split("_")[1])}
        if len(found) == len(EXAMPLE_KINDS):
            break
    return {name: found[name] for name in EXAMPLE_KINDS if name in found}


def eval_rollouts(plan: ExperimentPlan, model: str, set_name: str) -> list[dict[str, Any]]:
    """The eval trajectories of ``model`` on ``set_name`` (``OUT/evals/<model>/<set>/``), in order."""
    where = plan.out / "evals" / model / set_name
    return [r for path in sorted(where.glob("chunk_*.rollouts.jsonl")) for r in read_jsonl(path)]


def _eval_examples(plan: ExperimentPlan) -> list[str]:
    """Per trained policy, from its 5-turn start/end eval rollouts: how many episodes probed, how
    many hit an SQL error and how many of those still answered right, and one transcript of each
    example kind (a failure whether or not it probed: a policy that never probes fails too)."""
    lines = []
    models = sorted(p.name for p in (plan.out / "evals").glob("*-seed*") if p.is_dir())
    for model in models:
        records = [r for name in ("heldout_t5", "indomain_t5") for r in eval_rollouts(plan, model, name)]
        if not records:
            continue
        probed = [r for r in records if r["metrics"].get("probes", 0) >= 1]
        failed = [r for r in records if r["metrics"].get("probe_failed")]
        recovered = [r for r in failed if r["metrics"].get("recovered")]
        lines += [
            "",
            f"### {model}: greedy eval episodes at 5 turns (held-out and in-domain)",
            "",
            f"{len(records)} episodes; {len(probed)} probed the database before answering; {len(failed)} "
            f"saw an SQL error observation, and {len(recovered)} of those fixed their query and answered "
            f"right ({len(recovered) / len(records):.1%} of all episodes).",
        ]
        found: dict[str, dict[str, Any]] = {}
        for record in records:
            if (name := example_kind(record)) and name not in found:
                found[name] = record
        wrong = next((r for r in records if not r["metrics"].get("correct")), None)
        if "fails" not in found and wrong is not None:
            found["fails"] = wrong
        for name in EXAMPLE_KINDS:
            if name in found:
                lines += _transcript(f"{model}: {name} (reward {found[name]['reward']:.0f})", found[name])
    return ["", "## Trajectories from the final policies' eval rollouts", *lines] if lines else []


def _transcript(title: str, record: dict[str, Any]) -> list[str]:
    question = record["prompt"].rsplit("{question}:", 1)[-1].split("<|im_end|>", 1)[0].strip()
    return ["", f"#### {title}", "", f"Question: {question}", "", "```", record["completion"].strip(), "```"]


def _trajectory_examples(plan: ExperimentPlan) -> list[str]:
    """Transcripts of ``pick_examples`` from the multi-turn runs' training rollouts."""
    lines = []
    for seed in plan.seeds:
        for name, record in pick_examples(plan.run_dir("multi_turn", seed)).items():
            title = f"multi_turn seed {seed}: {name} (step {record['step']}, reward {record['reward']:.0f})"
            lines += _transcript(title, record)
    return ["", "## Trajectories from the multi-turn runs' training rollouts", *lines] if lines else []


def _time_table(plan: ExperimentPlan) -> list[str]:
    """Where each run's time went: mean seconds a step (generation, update) and its evals."""
    runs = {f"{v}-seed{s}": plan.run_dir(v, s) for s in plan.seeds for v in VARIANTS}
    runs |= {name: plan.out / "study" / name for name in STUDY_CONFIGS}
    lines = []
    for name, run_dir in runs.items():
        path = run_dir / "metrics.jsonl"
        records = read_jsonl(path) if path.exists() else []
        steps = [r for r in records if "timing/step_s" in r]
        evals = [r["timing/eval_s"] for r in records if "timing/eval_s" in r]
        if not steps:
            continue
        mean = {
            key: _mean([r.get(f"timing/{key}_s", float("nan")) for r in steps])
            for key in ("step", "generate", "train")
        }
        lines.append(
            f"| {name} | {len(steps)} | {mean['step'] / 60:.2f} | {mean['generate'] / 60:.2f} "
            f"| {mean['train'] / 60:.2f} | {len(evals)} | {sum(evals) / 60:.1f} |"
        )
    if not lines:
        return []
    head = [
        "",
        "## Where the time went (minutes)",
        "",
        "| run | steps | a step | generation | update | evals | eval minutes in all |",
        "|---|---|---|---|---|---|---|",
    ]
    return head + lines


TRAINING_CURVES = {
    "reward/mean": "training reward",
    "env/answer_correct": "answer right (any format)",
    "env/format_ok": "well formed",
    "policy/update_kl": "update KL (log)",
    "policy/update_rel_norm": "update ||dθ|| / ||θ|| (log)",
    "env/turns": "turns",
    "env/probes": "probes",
    "env/recovered": "recovered after an SQL error",
}
"""The training-curve panels: metric -> title."""


def _plot_training(curves: dict[str, list[dict[str, float]]], path: Path) -> None:
    """One panel per ``TRAINING_CURVES`` metric, one line per run, by training step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(2, 4, figsize=(14, 6))
    for axis, (metric, title) in zip(axes.flat, TRAINING_CURVES.items(), strict=True):
        for name, steps in curves.items():
            axis.plot(
                [r["step"] for r in steps],
                [r.get(metric, float("nan")) for r in steps],
                marker=".",
                label=name,
            )
        if "(log)" in title:
            axis.set_yscale("log")
        axis.set_title(title, fontsize=9)
        axis.set_xlabel("step", fontsize=8)
        axis.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _plot(runs: dict[tuple[str, int], list[dict[str, float]]], out: Path) -> None:
    """Eval accuracy by step and by training time, one line per (policy, seed, eval set)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"multi_turn": "tab:blue", "single_turn": "tab:orange"}
    styles = {"heldout_t5": "-", "heldout_t1": "--"}
    for x_key, name, label in (
        ("step", "accuracy_by_step.png", "training step"),
        ("train_seconds", "accuracy_by_time.png", "training time (minutes)"),
    ):
        figure, axes = plt.subplots(figsize=(7, 4.5))
        for (variant, seed), evals in sorted(runs.items()):
            for tag, style in styles.items():
                xs = [r[x_key] / (60 if x_key == "train_seconds" else 1) for r in evals]
                ys = [_metric(r, tag, "correct") for r in evals]
                axes.plot(
                    xs,
                    ys,
                    style,
                    marker="o",
                    color=colors[variant],
                    alpha=0.6 + 0.4 * (seed == 0),
                    label=f"{variant} seed {seed}, eval {tag[-2:]}",
                )
        axes.set_xlabel(label)
        axes.set_ylabel("held-out execution accuracy")
        axes.set_ylim(-0.02, 1.02)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7)
        figure.tight_layout()
        figure.savefig(out / name, dpi=110)
        plt.close(figure)
