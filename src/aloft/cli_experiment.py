"""``aloft experiment``: the command that runs a published result's reproduction."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def base_model(args: argparse.Namespace) -> tuple[str | None, list[str]]:
    """The experiment's base model and the rest of its settings.

    ``model.path=X`` means what it means to ``aloft train``: the model the runs train from. Here that
    is the base the warm start is built on, so it is taken out of the settings every run gets (as a
    last word there it would replace the warm start's model). ``--model X`` is its old spelling.
    """
    words = [word for word in args.overrides if word.partition("=")[0].strip() == "model.path"]
    rest = [word for word in args.overrides if word not in words]
    given = words[-1].partition("=")[2].strip() if words else None
    if args.model is not None:
        print(
            "aloft experiment: --model is deprecated and goes in the next release; use model.path=X",
            file=sys.stderr,
        )
        if given is not None and given != args.model:
            raise ValueError(f"--model {args.model} and model.path={given} disagree; give model.path= alone")
    return given or args.model, rest


def run_experiment_command(args: argparse.Namespace) -> int:
    """Run (or resume) the experiment, rewrite its report (``--report-only``) or save its state
    (``--save-state``); prints the report."""
    from aloft.experiments.skyrl_sql import ExperimentPlan, run_experiment, write_report

    if (args.report_only or args.save_state) and not Path(args.out).is_dir():
        flag = "--report-only" if args.report_only else "--save-state"
        raise ValueError(
            f"{flag}: no experiment in {args.out}; run it first (without {flag}), "
            "or pass the --out it was run with"
        )
    model, overrides = base_model(args)
    plan = ExperimentPlan(
        out=Path(args.out),
        model=model,
        seeds=tuple(args.seeds),
        variants=tuple(args.variants),
        eval_size=args.eval_size,
        train_size=args.train_size,
        overrides=overrides,
        quick=args.quick,
        hint=not args.no_hint,
        warm_start=args.warm_start,
        stages=tuple(args.stages),
        state=Path(args.state) if args.state else None,
    )
    if args.save_state:
        from aloft.experiments.sql_state import save_state

        written = save_state(plan.out, Path(args.save_state))
        print(f"[skyrl-sql] state: {len(written)} files of {plan.out} kept in {args.save_state}")
        return 0
    report = write_report(plan) if args.report_only else run_experiment(plan)
    print(report.read_text())
    return 0
