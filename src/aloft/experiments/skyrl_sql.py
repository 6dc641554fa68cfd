"""SkyRL-SQL at small scale: multi-turn against single-turn RL on the same model, data and steps.

``aloft experiment skyrl-sql`` (``run_experiment``) does the seed's comparison at the size a CPU
allows, in stages that each resume where a stopped session left them:

1. **Data** (``prepare_data``): the ``sql`` builder's train split twice, as 5-turn rows (probes
   allowed) and as 1-turn rows (the model must answer at once), same questions; the runs' periodic
   eval file (``eval_size`` held-out questions, databases never seen in training, asked at 5 turns
   and at 1 turn: ``eval/heldout_t5/...``, ``eval/heldout_t1/...``); the fixed eval sets of
   ``aloft.experiments.sql_evals``.
2. **Warm start** (``build_warm_start``, ``aloft.experiments.warm_start``): the model's own first
   turns on 32 train questions that are well formed and whose probe returns rows become
   demonstrations of both protocols (no gold query, no reward), fitted once; every run starts from
   that model. ``warm_start=0`` starts from the model itself.
3. **Study** (``run_study``, ``aloft.experiments.sql_study``): short single-turn runs at several
   learning rates and LoRA ranks, each evaluated on a fixed in-domain set against the warm start.
4. **Long runs** (``run_long_runs``): the starting model is evaluated once (a 0-step run,
   ``OUT/runs/base-seed0``); then for every seed the multi-turn and the single-turn policy train
   (``LONG_RUN``), differing only in their training rows. Each run is ``aloft train`` in a
   subprocess under ``OUT/runs/<variant>-seed<k>``, resumed from its checkpoints when unfinished.
5. **Start/end evals** (``run_final_evals``): the warm start and every finished policy, greedy, on
   every question of the held-out (5 and 1 turns) and in-domain (5 turns) sets, one outcome record a
   question (``OUT/outcomes.json``; ``aloft.experiments.sql_stats`` pairs them).
6. **Report** (``aloft.experiments.sql_report.write_report``): ``OUT/results.md`` and its plots.

Execution accuracy is the env's ``correct`` metric (a well-formed ``<solution>`` whose rows equal the
gold rows); the format rate (``format_ok``) and ``answer_correct`` (the final query right whatever
the format) are reported beside it, so that learning the tags is never mistaken for learning SQL.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from aloft.data import build_dataset, write_rows
from aloft.experiments.sql_evals import EVAL_SETS as FIXED_EVAL_SETS
from aloft.experiments.sql_evals import evaluate_model, write_eval_sets
from aloft.experiments.sql_plan import (
    BASE_RUN,
    EVAL_SETS,
    FINAL_EVAL_SETS,
    LONG_RUN,
    QUICK_OVERRIDES,
    RAW_RUN,
    VARIANTS,
    ExperimentPlan,
    read_jsonl,
)
from aloft.experiments.sql_report import collect_runs, pick_examples, write_outcomes, write_report
from aloft.experiments.sql_state import restore_state, save_state
from aloft.experiments.sql_stats import BASELINE
from aloft.experiments.sql_study import STUDY_CONFIGS, study_overrides

__all__ = [
    "VARIANTS",
    "ExperimentPlan",
    "collect_runs",
    "pick_examples",
    "prepare_data",
    "run_experiment",
    "write_report",
]


def prepare_data(plan: ExperimentPlan) -> dict[str, Path]:
    """Write the train files of both variants, the runs' periodic eval file (``eval``) and the
    fixed eval sets (``eval_<name>``, ``aloft.experiments.sql_evals.EVAL_SETS``); returns their paths
    by name."""
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
    return paths | {
        f"eval_{name}": path
        for name, path in write_eval_sets(data_dir, hint=plan.hint, quick=plan.quick).items()
    }


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
    multi, single = (read_jsonl(data[variant]) for variant in ("multi_turn", "single_turn"))
    chosen = sorted(random.Random(4321).sample(range(len(multi)), min(plan.warm_start, len(multi))))
    echo(f"[skyrl-sql] warm start: building it from {len(chosen)} train questions")
    # In a process of its own, as every run is: the sampling engine's and the fit's memory (GBs for
    # a 0.5B model) would otherwise stay with this process, which glibc does not give back, beside
    # each run's own for the rest of the experiment (a multi-turn run was OOM-killed so on 24 GiB).
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(
            build_sql_warm_start,
            load_config("skyrl_sql", run_overrides(plan, "multi_turn", 0, data)),
            [multi[i] for i in chosen],
            [single[i] for i in chosen],
            out,
            quick=plan.quick,
        ).result()


def run_overrides(
    plan: ExperimentPlan,
    variant: str,
    seed: int,
    data: dict[str, Path],
    start_model: Path | None = None,
    extra: list[str] | None = None,
) -> list[str]:
    """The ``aloft train skyrl_sql`` overrides of one run. ``start_model``: the warm start's model,
    which then replaces the preset's (or ``plan.model``); ``extra``: the stage's own (after
    ``--quick``'s, before the plan's, which win)."""
    run_dir = plan.run_dir(variant, seed)
    overrides = [
        f"data.train_files=[{data[variant]}]",
        f"data.eval_files=[{data['eval']}]",
        "data.eval_size=0",
        # Whole prefills, as this experiment's first runs and evals ran them (before
        # aloft.inference.prefix_tree): greedy evals compared question by question must do the same
        # arithmetic, and in bf16 a shared prefill's rounding can turn a near-tie.
        "engine.min_shared_prefix=0",
        # Updates as the multi-turn run's were computed (before prompts that only begin alike shared
        # their beginning in a packed update), so the two policies differ by their episodes alone.
        "optim.min_shared_prefix=0",
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
    return overrides + list(extra or []) + list(plan.overrides)


def _finished(run_dir: Path) -> bool:
    """Whether the run trained all its steps, evaluated at the last one (when it evaluates at all)
    and exported (when it exports)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists() or not (run_dir / "config.yaml").exists():
        return False
    import yaml

    trainer = yaml.safe_load((run_dir / "config.yaml").read_text())["trainer"]
    max_steps, records = (
        trainer["max_steps"],
        [r for r in read_jsonl(path) if r.get("step") == trainer["max_steps"]],
    )
    evaluates = trainer.get("eval_every", 0) > 0 or max_steps == 0
    if evaluates and not any("eval/reward/mean" in r for r in records):
        return False
    if trainer.get("export_final") and max_steps > 0 and not (run_dir / "export" / "config.json").exists():
        return False
    return bool(records)


def run_experiment(plan: ExperimentPlan, echo: Any = print) -> Path:
    """Prepare the data and the warm start, then run (or resume) ``plan.stages`` in order: the
    learning-rate study, the long runs (the starting model evaluated once first, as the ``base``
    run), the start/end evals; writes the report and returns ``results.md``."""
    data = prepare_data(plan)
    if plan.state is not None and plan.state.is_dir():
        restore_state(plan.state, plan.out, _preset_model(plan), echo)
    start_model = build_warm_start(plan, data, echo)
    _keep_state(plan, echo)
    for stage, run in (("study", run_study), ("train", run_long_runs), ("eval", run_final_evals)):
        if stage in plan.stages:
            run(plan, data, start_model, echo)
            _keep_state(plan, echo)
    return write_report(plan)


def _keep_state(plan: ExperimentPlan, echo: Any) -> None:
    if plan.state is not None:
        written = save_state(plan.out, plan.state)
        echo(f"[skyrl-sql] state: {len(written)} files kept in {plan.state}")


def run_long_runs(plan: ExperimentPlan, data: dict[str, Path], start_model: Path | None, echo: Any) -> None:
    """The multi-turn and single-turn policies of every seed (``LONG_RUN``), after a 0-step run that
    evaluates the starting model on the periodic eval's rows (every run's step 0)."""
    # Every run starts from the same model and evaluates greedily on the same rows: its step-0
    # eval would be the same numbers each time, so it runs once, as a run of 0 steps.
    eval_only = ["trainer.max_steps=0", "trainer.export_final=false"]
    _train(plan, BASE_RUN, 0, run_overrides(plan, "multi_turn", 0, data, start_model) + eval_only, echo)
    long_run = [] if plan.quick else LONG_RUN
    for seed in plan.seeds:
        for variant in plan.variants:
            overrides = run_overrides(plan, variant, seed, data, start_model, extra=long_run)
            _train(plan, variant, seed, overrides + ["trainer.eval_before_training=false"], echo)
    if start_model is not None:  # the model before the warm start, evaluated the same way
        _train(plan, RAW_RUN, 0, run_overrides(plan, "multi_turn", 0, data) + eval_only, echo)


def run_study(plan: ExperimentPlan, data: dict[str, Path], start_model: Path | None, echo: Any) -> None:
    """The learning-rate study (``aloft.experiments.sql_study``): the starting model's and every
    study run's final policy's outcomes on the fixed ``study_t1`` set, each run trained first."""
    settings = eval_settings(plan, data, turns=1)
    study_set = data["eval_study_t1"]
    evaluate_model(
        str(start_model or _preset_model(plan)),
        BASELINE,
        "study_t1",
        study_set,
        plan.out / "evals",
        settings,
        echo,
    )
    for name in STUDY_CONFIGS:
        run_dir = plan.out / "study" / name
        overrides = run_overrides(
            plan, "single_turn", 0, data, start_model, extra=study_overrides(name, plan.quick)
        )
        _train_run(run_dir, overrides, echo)
        evaluate_model(str(run_dir), name, "study_t1", study_set, plan.out / "evals", settings, echo)


def run_final_evals(plan: ExperimentPlan, data: dict[str, Path], start_model: Path | None, echo: Any) -> None:
    """The starting model and every finished long run, greedily on every question of the start/end
    eval sets (all held-out at 5 and 1 turns, all in-domain at 5); then ``OUT/outcomes.json``."""
    models = {BASELINE: str(start_model or _preset_model(plan))}
    for seed in plan.seeds:
        for variant in VARIANTS:
            if _finished(plan.run_dir(variant, seed)):
                models[f"{variant}-seed{seed}"] = str(plan.run_dir(variant, seed))
    for set_name in FINAL_EVAL_SETS:
        settings = eval_settings(plan, data, turns=FIXED_EVAL_SETS[set_name].turns)
        for name, model in models.items():
            evaluate_model(
                model, name, set_name, data[f"eval_{set_name}"], plan.out / "evals", settings, echo
            )
            _keep_state(plan, echo)
    write_outcomes(plan)


def eval_settings(plan: ExperimentPlan, data: dict[str, Path], turns: int) -> Any:
    """Greedy, one sample, the runs' own token limits, stop strings and env config, ``turns`` turns."""
    from aloft.config import load_config
    from aloft.trainer.eval_command import EvalSettings

    config = load_config("skyrl_sql", run_overrides(plan, "multi_turn", 0, data))
    return EvalSettings(
        n=1,
        temperature=0.0,
        max_new_tokens=config.generator.max_new_tokens,
        max_turns=turns,
        max_total_tokens=config.generator.max_total_tokens,
        stop=list(config.generator.stop),
        env_config=dict(config.env.config),
        backend="hf",
        dtype=config.engine.dtype,
        min_shared_prefix=config.engine.min_shared_prefix,
    )


def _preset_model(plan: ExperimentPlan) -> str:
    """The model the experiment starts from: ``plan.model``, else the ``skyrl_sql`` preset's (read
    from the preset alone: it names no data, which a whole run's config check would require)."""
    from aloft.config.loading import read_preset_or_file

    return plan.model or str(read_preset_or_file("skyrl_sql")["model"]["path"])


def _train(plan: ExperimentPlan, variant: str, seed: int, overrides: list[str], echo: Any) -> None:
    _train_run(plan.run_dir(variant, seed), overrides, echo)
    _keep_state(plan, echo)


def _train_run(run_dir: Path, overrides: list[str], echo: Any) -> None:
    """``aloft train skyrl_sql`` in a subprocess as the run ``run_dir`` (resumed when it has
    checkpoints; skipped when finished)."""
    overrides = [o for o in overrides if not o.startswith(("trainer.name=", "trainer.run_root="))]
    overrides += [f"trainer.run_root={run_dir.parent}", f"trainer.name={run_dir.name}"]
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
