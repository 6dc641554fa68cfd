"""``aloft experiment``: the command that runs a published result's reproduction."""

from __future__ import annotations

import argparse
from pathlib import Path


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
    plan = ExperimentPlan(
        out=Path(args.out),
        model=args.model,
        seeds=tuple(args.seeds),
        variants=tuple(args.variants),
        eval_size=args.eval_size,
        train_size=args.train_size,
        overrides=list(args.overrides),
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
