"""SkyRL-SQL at small scale: multi-turn against single-turn RL on the same model, data and steps.

``aloft experiment skyrl-sql`` (``run_experiment``) does the seed's comparison at the size a CPU
allows:

1. **Data** (``prepare_data``): the ``sql`` builder's train split twice, as 5-turn rows (probes
   allowed) and as 1-turn rows (the model must answer at once), same questions; the eval file holds
   ``eval_size`` held-out questions (databases never seen in training) twice, tagged
   ``heldout_t5`` (asked at 5 turns) and ``heldout_t1`` (at 1 turn), so every eval measures both
   protocols and the trainer logs them apart (``eval/heldout_t5/...``, ``eval/heldout_t1/...``).
2. **Warm start** (``build_warm_start``, ``aloft.experiments.warm_start``): the model's own first
   turns on 32 train questions that are well formed and whose probe returns rows become
   demonstrations of both protocols (no gold query, no reward), fitted once; both policies start
   from that model. ``warm_start=0`` starts from the model itself.
3. **Runs**: the starting model is evaluated once (a 0-step run, ``OUT/runs/base-seed0``); then for
   every seed the multi-turn and the single-turn policy train with the ``skyrl_sql`` preset,
   differing only in their training rows. Each run is ``aloft train`` in a subprocess under
   ``OUT/runs/<variant>-seed<k>``; rerunning the experiment resumes unfinished runs from their
   checkpoints and skips finished ones.
4. **Report** (``write_report``): ``OUT/results.md`` (base and final execution accuracy, format
   rate, steps to reach the single-turn policy's final accuracy, episode behaviour by step, example
   trajectories) and ``OUT/accuracy_by_step.png`` /
   ``OUT/accuracy_by_time.png``, from the runs' ``metrics.jsonl``.

Execution accuracy is the env's ``correct`` metric (a well-formed ``<solution>`` whose rows equal the
gold rows); the format rate (``format_ok``) and ``answer_correct`` (the final query right whatever
the format) are reported beside it, so that learning the tags is never mistaken for learning SQL.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aloft.data import build_dataset, write_rows

__all__ = [
    "VARIANTS",
    "ExperimentPlan",
    "collect_runs",
    "prepare_data",
    "run_experiment",
    "write_report",
]

VARIANTS: dict[str, int] = {"multi_turn": 5, "single_turn": 1}
"""Variant name -> the turns its training episodes allow."""
EVAL_SETS: dict[str, int] = {"heldout_t5": 5, "heldout_t1": 1}
"""Eval set tag -> the turns its episodes allow (same held-out questions)."""
QUICK_OVERRIDES = [
    "trainer.max_steps=3",
    "trainer.eval_every=1",
    "trainer.checkpoint_every=3",
    "trainer.prompts_per_step=2",
    "generator.n_samples=2",
    "generator.max_new_tokens=24",
    "generator.max_total_tokens=512",
    "optim.micro_batch_tokens=16384",
]
"""``--quick``: a 3-step run of each variant, for tests and smoke checks."""


@dataclass
class ExperimentPlan:
    """What ``run_experiment`` runs. ``overrides`` go to every ``aloft train`` call (after the
    experiment's own), e.g. ``["trainer.max_steps=30", "model.lora_rank=16"]``."""

    out: Path
    model: str | None = None
    seeds: tuple[int, ...] = (0, 1)
    eval_size: int = 16
    train_size: int = 0
    overrides: list[str] = field(default_factory=list)
    quick: bool = False
    variants: tuple[str, ...] = tuple(VARIANTS)
    """Which policies to train (both by default; one alone to spread the runs over sessions)."""
    hint: bool = True
    """Restate the reply format at the end of each user message (``aloft.data.sources.sql.prompts``)."""
    warm_start: int = 32
    """Train questions whose sampled first turns make the protocol warm start
    (``aloft.experiments.warm_start``) both policies start from; 0: start from the model itself."""

    def run_dir(self, variant: str, seed: int) -> Path:
        return self.out / "runs" / f"{variant}-seed{seed}"


def prepare_data(plan: ExperimentPlan) -> dict[str, Path]:
    """Write the train files of both variants and the eval file; returns their paths by name."""
    data_dir = plan.out / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for variant, turns in VARIANTS.items():
        rows = build_dataset("sql", n=plan.train_size, seed=0, split="train", max_turns=turns, hint=plan.hint)
        paths[variant] = data_dir / f"train_{variant}.jsonl"
        write_rows(paths[variant], rows)
    eval_rows = []
    for tag, turns in EVAL_SETS.items():
        rows = build_dataset("sql", n=0, seed=0, split="heldout", max_turns=turns, hint=plan.hint)
        chosen = random.Random(1234).sample(rows, min(plan.eval_size, len(rows)))  # same questions
        eval_rows += [{**row, "eval_set": tag} for row in chosen]
    paths["eval"] = data_dir / "eval_heldout.jsonl"
    write_rows(paths["eval"], eval_rows)
    return paths


def build_warm_start(plan: ExperimentPlan, data: dict[str, Path], echo: Any = print) -> Path | None:
    """The protocol warm start both policies start from (``OUT/warm_start/model``, see
    ``aloft.experiments.warm_start.build_sql_warm_start``). None when ``plan.warm_start`` is 0."""
    if not plan.warm_start:
        return None
    from aloft.config import load_config
    from aloft.experiments.warm_start import build_sql_warm_start

    out = plan.out / "warm_start"
    if (out / "summary.json").exists():  # built by an earlier run of the experiment
        return out / "model"
    multi, single = (_read_jsonl(data[variant]) for variant in ("multi_turn", "single_turn"))
    chosen = sorted(random.Random(4321).sample(range(len(multi)), min(plan.warm_start, len(multi))))
    return build_sql_warm_start(
        load_config("skyrl_sql", run_overrides(plan, "multi_turn", 0, data)),
        [multi[i] for i in chosen],
        [single[i] for i in chosen],
        out,
        quick=plan.quick,
        echo=echo,
    )


def run_overrides(
    plan: ExperimentPlan, variant: str, seed: int, data: dict[str, Path], start_model: Path | None = None
) -> list[str]:
    """The ``aloft train skyrl_sql`` overrides of one run. ``start_model``: the warm start's model,
    which then replaces the preset's (or ``plan.model``)."""
    run_dir = plan.run_dir(variant, seed)
    overrides = [
        f"data.train_files=[{data[variant]}]",
        f"data.eval_files=[{data['eval']}]",
        "data.eval_size=0",
        f"trainer.seed={seed}",
        f"trainer.run_root={run_dir.parent}",
        f"trainer.name={run_dir.name}",
    ]
    if start_model is not None or plan.model:
        overrides.append(f"model.path={start_model or plan.model}")
    if not plan.hint:  # SkyRL-SQL's exact prompts and observations
        overrides.append("env.config.format_reminder=false")
    if plan.quick:
        overrides += QUICK_OVERRIDES
    return overrides + list(plan.overrides)


def _finished(run_dir: Path) -> bool:
    path = run_dir / "metrics.jsonl"
    if not path.exists() or not (run_dir / "config.yaml").exists():
        return False
    import yaml

    max_steps = yaml.safe_load((run_dir / "config.yaml").read_text())["trainer"]["max_steps"]
    return any(r.get("step") == max_steps and "eval/reward/mean" in r for r in _read_jsonl(path))


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_experiment(plan: ExperimentPlan, echo: Any = print) -> Path:
    """Prepare the data and the warm start, evaluate the starting model once (the ``base`` run),
    run (or resume) every run, and write the report; returns ``results.md``."""
    data = prepare_data(plan)
    start_model = build_warm_start(plan, data, echo)
    # Every run starts from the same model and evaluates greedily on the same rows: its step-0
    # eval would be the same numbers each time, so it runs once, as a run of 0 steps.
    eval_only = ["trainer.max_steps=0", "trainer.export_final=false"]
    _train(plan, BASE_RUN, 0, run_overrides(plan, "multi_turn", 0, data, start_model) + eval_only, echo)
    for seed in plan.seeds:
        for variant in plan.variants:
            overrides = run_overrides(plan, variant, seed, data, start_model)
            _train(plan, variant, seed, overrides + ["trainer.eval_before_training=false"], echo)
    if start_model is not None:  # the model before the warm start, evaluated the same way
        _train(plan, RAW_RUN, 0, run_overrides(plan, "multi_turn", 0, data) + eval_only, echo)
    return write_report(plan)


BASE_RUN = "base"
"""The 0-step run whose eval is every run's step 0 (``OUT/runs/base-seed0``)."""
RAW_RUN = "raw"
"""The 0-step run that evaluates the model before the warm start (``OUT/runs/raw-seed0``)."""


def _train(plan: ExperimentPlan, variant: str, seed: int, overrides: list[str], echo: Any) -> None:
    run_dir = plan.run_dir(variant, seed)
    overrides = [o for o in overrides if not o.startswith("trainer.name=")] + [f"trainer.name={run_dir.name}"]
    if _finished(run_dir):
        echo(f"[skyrl-sql] {run_dir.name}: finished, skipped")
        return
    echo(f"[skyrl-sql] {run_dir.name}: training")
    command = [sys.executable, "-m", "aloft.cli", "train", "skyrl_sql", *overrides]
    completed = subprocess.run(command, env=os.environ.copy(), check=False)
    if completed.returncode != 0:
        raise RuntimeError(
            f"skyrl-sql experiment: the run {run_dir.name} failed (exit {completed.returncode}); "
            f"see its log above and {run_dir}; rerun the same command to resume it"
        )


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
    for record in sorted(_read_jsonl(path), key=lambda r: (r["step"], "eval/reward/mean" in r)):
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
    lines += _behaviour_tables(plan)
    lines += _trajectory_examples(plan)
    report = plan.out / "results.md"
    report.write_text("\n".join(lines) + "\n")
    _plot(runs, plan.out)
    return report


def _behaviour_tables(plan: ExperimentPlan) -> list[str]:
    """Per run, the training episodes step by step: reward, format errors, execution accuracy,
    turns, probes, failed probes and how many of those episodes recovered."""
    lines = []
    for seed in plan.seeds:
        for variant in VARIANTS:
            path = plan.run_dir(variant, seed) / "metrics.jsonl"
            steps = [r for r in _read_jsonl(path) if "reward/mean" in r] if path.exists() else []
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
    "fails": "a wrong or badly formatted answer after probing",
}


def pick_examples(run_dir: Path) -> dict[str, dict[str, Any]]:
    """One trajectory of each ``EXAMPLE_KINDS`` from a run's rollouts, latest step first (the
    trained model); kinds with no such trajectory are left out."""

    def kind(record: dict[str, Any]) -> str | None:
        m = record["metrics"]
        if m.get("recovered"):
            return "fixes its query after an error"
        if m.get("correct") and m.get("probes", 0) >= 1 and not m.get("sql_errors"):
            return "verifies an intermediate result"
        if not m.get("correct") and m.get("probes", 0) >= 1:
            return "fails"
        return None

    found: dict[str, dict[str, Any]] = {}
    paths = sorted((run_dir / "rollouts").glob("step_*.jsonl"), key=lambda p: -int(p.stem.split("_")[1]))
    for path in paths:
        for record in _read_jsonl(path):
            name = kind(record)
            if name and name not in found:
                found[name] = {**record, "step": int(path.stem.split("_")[1])}
        if len(found) == len(EXAMPLE_KINDS):
            break
    return {name: found[name] for name in EXAMPLE_KINDS if name in found}


def _trajectory_examples(plan: ExperimentPlan) -> list[str]:
    """Transcripts of ``pick_examples`` from the multi-turn runs, with their step and reward."""
    lines = []
    for seed in plan.seeds:
        run_dir = plan.run_dir("multi_turn", seed)
        for name, record in pick_examples(run_dir).items():
            question = record["prompt"].rsplit("{question}:", 1)[-1].split("<|im_end|>", 1)[0].strip()
            lines += [
                "",
                f"### multi_turn seed {seed}: {name} (step {record['step']}, reward {record['reward']:.0f})",
                "",
                f"Question: {question}",
                "",
                "```",
                record["completion"].strip(),
                "```",
            ]
    return ["", "## Trajectories from the multi-turn runs' rollouts", *lines] if lines else []


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
