"""`aloft experiment skyrl-sql --quick`: the whole pipeline (data, both policies, both eval protocols,
report and plots) end to end on a tiny model, and a rerun that resumes instead of retraining."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file

from aloft.cli import main
from aloft.data import build_dataset
from aloft.experiments.sql_evals import OUTCOME_FIELDS, read_outcomes
from aloft.experiments.sql_stats import main as main_stats
from aloft.experiments.sql_study import STUDY_CONFIGS, read_training_steps
from aloft.experiments.warm_start import sql_demonstrations
from aloft.inference import make_engine
from aloft.models import build_tiny_model, load_tokenizer
from aloft.training.checkpoint import POLICY_ADAPTERS
from aloft.types import SamplingParams

REPO = Path(__file__).resolve().parents[2]
TINY = [
    "engine.dtype=float32",
    "optim.bf16_autocast=false",
    "trainer.progress_bar=false",
    "trainer.loggers=[jsonl]",
    "trainer.export_final=false",
]


def _save_scripted_demonstrations(model: str, out) -> None:
    tokenizer = load_tokenizer(model)
    rows = {
        turns: [
            r
            for r in build_dataset("sql", n=0, seed=0, split="train", max_turns=turns, hint=True)
            if r["db_id"] == "chinook"
        ][:2]
        for turns in (5, 1)
    }
    engine = make_engine(
        "scripted", tokenizer=tokenizer, replies=["<think>Look.</think><sql>SELECT Name FROM Artist</sql>"]
    )
    demos, counts = sql_demonstrations(
        engine, tokenizer, rows[5], rows[1], samples=1, sampling=SamplingParams(max_tokens=512)
    )
    out.mkdir(parents=True)
    (out / "demos.jsonl").write_text("".join(json.dumps(d.to_json()) + "\n" for d in demos))
    (out / "demos.json").write_text(json.dumps(counts))


def test_quick_experiment_end_to_end_and_resume(tmp_path, capsys):
    # Room for the SQL prompts: schemas run to thousands of byte-level tokens.
    model = build_tiny_model(
        tmp_path / "tiny", hidden_size=64, num_layers=2, seed=0, max_position_embeddings=8192
    )
    out = tmp_path / "exp"
    argv = ["experiment", "skyrl-sql", "--quick", "--out", str(out), f"model.path={model}"]
    argv += ["--seeds", "0", "--eval-size", "2", "--train-size", "8", "--warm-start", "4", *TINY]
    # A random tiny model writes no protocol to warm-start from (tested below): its demonstrations
    # come from a scripted first turn, saved where the experiment keeps them; it then fits them.
    _save_scripted_demonstrations(model, out / "warm_start")
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "# SkyRL-SQL at small scale" in printed
    # Data: the same 8 questions at 5 turns and at 1 turn; eval rows tagged per protocol.
    train5 = [json.loads(line) for line in (out / "data" / "train_multi_turn.jsonl").read_text().splitlines()]
    train1 = [
        json.loads(line) for line in (out / "data" / "train_single_turn.jsonl").read_text().splitlines()
    ]
    assert [r["question"] for r in train5] == [r["question"] for r in train1] and len(train5) == 8
    assert {r["max_turns"] for r in train5} == {5} and {r["max_turns"] for r in train1} == {1}
    evals = [json.loads(line) for line in (out / "data" / "eval_heldout.jsonl").read_text().splitlines()]
    assert sorted(r["eval_set"] for r in evals) == ["heldout_t1", "heldout_t1", "heldout_t5", "heldout_t5"]
    assert {r["db_id"] for r in evals} <= {"flights", "library"}
    # The starting model is evaluated once, on both protocols, by a 0-step run; then each policy
    # trains 3 steps and is evaluated after every step.
    base = [
        json.loads(line) for line in (out / "runs" / "base-seed0" / "metrics.jsonl").read_text().splitlines()
    ]
    assert [r["step"] for r in base if "eval/reward/mean" in r] == [0]
    assert not (out / "runs" / "base-seed0" / "rollouts").exists()
    start = yaml.safe_load((out / "runs" / "base-seed0" / "config.yaml").read_text())["model"]["path"]
    assert start == str(out / "warm_start" / "model")
    # ... and so is the model before the warm start.
    raw = yaml.safe_load((out / "runs" / "raw-seed0" / "config.yaml").read_text())["model"]["path"]
    assert raw == model and (out / "runs" / "raw-seed0" / "metrics.jsonl").exists()
    for variant in ("multi_turn", "single_turn"):
        records = [
            json.loads(line)
            for line in (out / "runs" / f"{variant}-seed0" / "metrics.jsonl").read_text().splitlines()
        ]
        assert max(r["step"] for r in records) == 3
        evaluated = [r for r in records if "eval/reward/mean" in r]
        assert [r["step"] for r in evaluated] == [1, 2, 3]
        for record in evaluated:
            for tag in ("heldout_t5", "heldout_t1"):
                assert record[f"eval/{tag}/num_prompts"] == 2.0
                for name in ("correct", "format_ok", "answer_correct"):
                    assert 0.0 <= record[f"eval/{tag}/env/{name}"] <= 1.0
        trained = [r for r in records if "reward/mean" in r]
        assert all("env/probe_failed" in r and "env/recovered" in r for r in trained)
        rollouts = sorted((out / "runs" / f"{variant}-seed0" / "rollouts").glob("step_*.jsonl"))
        assert len(rollouts) == 3
    report = (out / "results.md").read_text()
    assert "The model before the warm start" in report
    # The learning-rate study: every config a single-turn run of its own lr and rank from the warm
    # start, its update size logged each step, its final policy evaluated on the fixed study set.
    for name, config in STUDY_CONFIGS.items():
        run = out / "study" / name
        run_config = yaml.safe_load((run / "config.yaml").read_text())
        assert run_config["optim"]["lr"] == config["lr"]
        assert run_config["model"]["lora_rank"] == config["lora_rank"]
        assert run_config["model"]["path"] == str(out / "warm_start" / "model")
        assert run_config["engine"]["min_shared_prefix"] == 0  # whole prefills, as the first runs
        assert run_config["trainer"]["prompts_per_step"] == 8 and run_config["generator"]["n_samples"] == 4
        steps = read_training_steps(run)
        assert [r["step"] for r in steps] == [1, 2]
        # (a random tiny model's groups mostly tie at -1, so the size itself says little here)
        assert all(r["policy/update_rel_norm"] >= 0 and r["policy/update_kl"] >= 0 for r in steps)
        assert {r["env/turns"] for r in steps} == {1.0}  # single-turn rows
        study_eval = read_outcomes(out / "evals" / name / "study_t1")
        assert len(study_eval) == 3 and {r["protocol"] for r in study_eval} == {"study_t1"}
    assert len(read_outcomes(out / "evals" / "warm_start" / "study_t1")) == 3
    study = report.split("## Learning-rate study")[1].split("\n## ")[0]
    assert sum(line.startswith(("| lr3e", "| lr1e")) for line in study.splitlines()) == len(STUDY_CONFIGS)
    # The start/end evals: the warm start and both policies on every eval set, one record a question.
    outcomes = json.loads((out / "outcomes.json").read_text())
    assert {(r["model"], r["protocol"]) for r in outcomes} == {
        (model, protocol)
        for model in ("warm_start", "multi_turn-seed0", "single_turn-seed0")
        for protocol in ("heldout_t5", "heldout_t1", "indomain_t5")
    }
    assert len(outcomes) == 27 and all(set(OUTCOME_FIELDS) <= set(r) for r in outcomes)
    heldout = {r["question_id"] for r in outcomes if r["protocol"] == "heldout_t5"}
    indomain = {r["db_id"] for r in outcomes if r["protocol"] == "indomain_t5"}
    assert {r["db_id"] for r in outcomes if r["protocol"] == "heldout_t1"} <= {"flights", "library"}
    assert not indomain & {"flights", "library"} and len(heldout) == 3
    # Each start/end comparison is in the report, and the stats command recomputes it from the file.
    assert main_stats([str(out / "outcomes.json")]) == 0
    recomputed = capsys.readouterr().out
    assert recomputed in report
    assert recomputed.count("vs warm_start |") == 6 and recomputed.count("vs single_turn-seed0 |") == 3
    # Episode behaviour by step, for each run: 3 steps each.
    for variant in ("multi_turn", "single_turn"):
        table = report.split(f"Training episodes of {variant} seed 0")[1].split("\n\n")[1]
        assert [line.split(" | ")[0] for line in table.splitlines()[2:]] == ["| 1", "| 2", "| 3"]
    assert report.count("| multi_turn | 0 | 3 |") == 2 and report.count("| single_turn | 0 | 3 |") == 2
    # Where the time went, per run; each policy's 5-turn eval episodes counted (3 held-out, 3 in-domain).
    times = report.split("## Where the time went")[1].split("\n## ")[0]
    assert "| multi_turn-seed0 | 3 |" in times and "| lr3e-5_r16 | 2 |" in times
    for model in ("multi_turn-seed0", "single_turn-seed0"):
        assert f"### {model}: greedy eval episodes at 5 turns" in report
    assert report.count("\n6 episodes; ") == 2
    for plot in ("accuracy_by_step.png", "accuracy_by_time.png", "training_curves.png", "study_curves.png"):
        assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # A rerun finds the runs finished and only rewrites the report; --variants picks the policies.
    assert main([*argv, "--variants", "multi_turn"]) == 0
    captured = capsys.readouterr().out
    assert "multi_turn-seed0: finished, skipped" in captured
    assert "[skyrl-sql] single_turn-seed0" not in captured
    assert "base-seed0: finished, skipped" in captured and "raw-seed0: finished, skipped" in captured
    assert all(f"{name}: finished, skipped" in captured for name in STUDY_CONFIGS)
    assert "[skyrl-sql] eval" not in captured  # every eval chunk was kept
    assert "| single_turn | 0 | 3 |" in captured  # the report still covers every run

    # Its small state (adapters, metrics, rollouts, outcomes) is what a later machine needs: saved,
    # the output lost, restored with --state, every run is finished and every eval kept.
    assert main(["experiment", "skyrl-sql", "--out", str(out), "--save-state", str(tmp_path / "state")]) == 0
    capsys.readouterr()
    saved = [p for p in (tmp_path / "state").rglob("*") if p.is_file()]
    assert not any(p.name == "model.safetensors" for p in saved)  # no merged model
    # Committed as artifacts/skyrl-sql, all of it reaches git (a `runs/` ignore rule once kept every
    # run's metrics and adapters out, and they were lost with the machine).
    committed = [f"artifacts/skyrl-sql/{p.relative_to(tmp_path / 'state')}" for p in saved]
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        input="\n".join(committed),
        capture_output=True,
        text=True,
        cwd=REPO,
    ).stdout.split()
    assert ignored == [], f"git ignores {len(ignored)} state files, e.g. {ignored[:1]}"
    assert (tmp_path / "state" / "warm_start" / "model" / "adapter" / "adapter_model.safetensors").exists()
    assert (
        tmp_path / "state" / "runs" / "multi_turn-seed0" / "checkpoints" / "step_3" / POLICY_ADAPTERS
    ).exists()
    warm_start = load_file(out / "warm_start" / "model" / "model.safetensors")
    outcomes_before = (out / "outcomes.json").read_text()
    shutil.rmtree(out)
    assert main([*argv, "--state", str(tmp_path / "state")]) == 0
    captured = capsys.readouterr().out
    assert "rebuilding the warm start" in captured and "[skyrl-sql] eval" not in captured
    assert all(
        f"{name}: finished, skipped" in captured for name in ("multi_turn-seed0", "base-seed0", "raw-seed0")
    )
    rebuilt = load_file(out / "warm_start" / "model" / "model.safetensors")
    assert rebuilt.keys() == warm_start.keys() and all(
        torch.equal(rebuilt[k], warm_start[k]) for k in rebuilt
    )
    assert (out / "outcomes.json").read_text() == outcomes_before
    assert "| single_turn | 0 | 3 |" in captured


def test_warm_start_from_a_model_that_never_probes_fails_in_one_line(tmp_path, capsys):
    model = build_tiny_model(
        tmp_path / "tiny", hidden_size=64, num_layers=2, seed=0, max_position_embeddings=8192
    )
    out = tmp_path / "exp"
    argv = ["experiment", "skyrl-sql", "--quick", "--out", str(out), f"model.path={model}", "--seeds", "0"]
    argv += ["--eval-size", "2", "--train-size", "4", "--warm-start", "2", *TINY]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert (
        error.startswith("aloft: skyrl-sql warm start: none of 2 sampled first turns") and "\n" not in error
    )
    assert "--warm-start 0" in error and not (out / "runs").exists()


def test_examples_are_picked_from_the_latest_rollouts(tmp_path):
    from aloft.experiments.skyrl_sql import pick_examples

    def record(index, **metrics):
        base = {"correct": 0.0, "probes": 0.0, "sql_errors": 0.0, "recovered": 0.0}
        return {
            "prompt": f"p{index}",
            "completion": f"c{index}",
            "reward": 0.0,
            "metrics": {**base, **metrics},
        }

    rollouts = tmp_path / "rollouts"
    rollouts.mkdir()
    steps = {
        1: [
            record(1, recovered=1.0, correct=1.0, probes=2.0, sql_errors=1.0),
            record(2, correct=1.0, probes=1.0),
        ],
        2: [record(3, correct=1.0), record(4, correct=1.0, probes=1.0), record(5, probes=3.0)],
    }
    for step, records in steps.items():
        (rollouts / f"step_{step}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    picked = pick_examples(tmp_path)
    assert {name: (r["completion"], r["step"]) for name, r in picked.items()} == {
        "fixes its query after an error": ("c1", 1),
        "verifies an intermediate result": ("c4", 2),  # step 2's, not step 1's
        "fails": ("c5", 2),
    }
    assert list(picked) == list(pick_examples.__globals__["EXAMPLE_KINDS"])


def test_eval_examples_show_a_failure_of_a_policy_that_never_probes(tmp_path):
    """The final multi-turn policy answers at once: no probe, no recovery, yet its failures are shown."""
    from aloft.experiments.sql_plan import ExperimentPlan
    from aloft.experiments.sql_report import _eval_examples

    def record(index, correct):
        metrics = {"correct": correct, "probes": 0.0, "probe_failed": 0.0, "recovered": 0.0}
        prompt = f"... {{question}}: question {index}?<|im_end|>"
        return {"prompt": prompt, "completion": f"answer {index}", "reward": correct, "metrics": metrics}

    where = tmp_path / "evals" / "multi_turn-seed0" / "heldout_t5"
    where.mkdir(parents=True)
    records = [record(0, 1.0), record(1, 0.0), record(2, 0.0)]
    (where / "chunk_0000.rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    text = "\n".join(_eval_examples(ExperimentPlan(out=tmp_path, seeds=(0,))))
    assert "3 episodes; 0 probed the database before answering; 0 saw an SQL error" in text
    assert "#### multi_turn-seed0: fails (reward 0)" in text and "answer 1" in text
    assert "verifies an intermediate result" not in text and "answer 0" not in text
