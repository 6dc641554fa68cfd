"""`aloft eval` on runs, checkpoints (LoRA ones unexported) and models: what a user sees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aloft.cli import main
from aloft.trainer.eval_command import EvalSettings, EvalSource
from tests.trainer.test_trainer import run

TRAIN = ["trainer.max_steps=2", "trainer.checkpoint_every=2", "trainer.export_final=true", "optim.lr=1e-2"]


def evaluate(capsys, *words: str) -> tuple[dict[str, float], str]:
    assert main(["eval", *words]) == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


def completions(path: Path) -> list[list[int]]:
    return [json.loads(line)["completion_ids"] for line in path.read_text().splitlines()]


@pytest.mark.parametrize("lora", [False, True])
def test_a_checkpoint_evaluates_exactly_as_its_export(lora, tiny_overrides, tmp_path, capsys):
    """The latest checkpoint (LoRA adapters merged on the fly, no export needed) samples the same
    tokens and scores the same as the exported model; the run's eval rows are the default."""
    extra = ["model.lora_rank=4", "model.lora_alpha=8", "optim.lr=5e-2"] if lora else []
    trainer, _, _ = run([*tiny_overrides, *TRAIN, *extra, "generator.eval_n_samples=1"])
    run_dir = trainer.c.run_dir
    checkpoint = run_dir / "checkpoints" / "step_2"
    words = ["generator.eval_n_samples=3", "generator.eval_temperature=1.0", "engine.dtype=float32"]
    from_export, note = evaluate(capsys, str(run_dir), *words)
    assert f"eval trajectories in {run_dir / 'eval' / 'export.jsonl'}" in note
    from_checkpoint, note = evaluate(capsys, str(checkpoint), *words)
    assert f"eval trajectories in {run_dir / 'eval' / 'step_2.jsonl'}" in note
    assert from_checkpoint == from_export
    assert completions(run_dir / "eval" / "step_2.jsonl") == completions(run_dir / "eval" / "export.jsonl")
    assert from_export["eval/num_prompts"] == 8  # the run's eval rows (data.eval_size=8)
    assert {"eval/pass@1", "eval/pass@2", "eval/pass@3", "eval/error_share"} <= set(from_export)
    records = [json.loads(line) for line in (run_dir / "eval" / "export.jsonl").read_text().splitlines()]
    assert len(records) == 24 and {"prompt", "completion", "loss_mask", "sampler_logprobs", "status"} <= set(
        records[0]
    )
    # ...and differs from the base model's: the checkpoint's weights were really loaded.
    base_rollouts = tmp_path / "base.jsonl"
    data = str(run_dir / "data" / "eval.jsonl")
    evaluate(
        capsys, trainer.cfg.model.path, f"data.eval_files=[{data}]", "--rollouts", str(base_rollouts), *words
    )
    assert completions(base_rollouts) != completions(run_dir / "eval" / "export.jsonl")


def test_a_runs_settings_are_the_defaults_and_flags_win():
    config = {
        "env": {"name": "arithmetic", "config": {"max_turns": 3}},
        "generator": {"max_new_tokens": 12, "max_turns": 3, "max_total_tokens": 99, "stop": ["</x>"]},
        "engine": {"backend": "hf", "dtype": "float32", "min_shared_prefix": 0},
    }
    source = EvalSource("model", run_config=config)
    settings = EvalSettings().resolved(source)
    assert settings.min_shared_prefix == 0  # a run that prefilled whole is evaluated so
    assert EvalSettings(min_shared_prefix=128).resolved(source).min_shared_prefix == 128
    assert (settings.max_new_tokens, settings.max_turns, settings.max_total_tokens) == (12, 3, 99)
    assert settings.stop == ["</x>"] and settings.env_config == {"max_turns": 3}
    assert (settings.backend, settings.dtype) == ("hf", "float32")
    mine = EvalSettings(max_turns=1, stop=[], env_config={}, backend="remote", urls=["http://127.0.0.1:9"])
    settings = mine.resolved(source)
    assert (settings.max_turns, settings.stop, settings.env_config) == (1, [], {})
    assert (settings.backend, settings.urls) == ("remote", ["http://127.0.0.1:9"])
    bare = EvalSettings().resolved(EvalSource("model"))  # a plain model: built-in defaults
    assert (bare.max_new_tokens, bare.max_turns, bare.stop, bare.backend) == (64, 1, [], "hf")
    assert bare.min_shared_prefix == 64
    older = EvalSource("model", run_config={"engine": {"backend": "hf"}})  # saved before the setting
    assert EvalSettings().resolved(older).min_shared_prefix == 0


@pytest.mark.parametrize(
    "words, message",
    [
        (["/no/such/model", "data.builder=arithmetic"], "model '/no/such/model' is not available offline"),
        (
            ["smollm2-135m-instruct"],
            "eval needs rows: data.eval_files=[FILE], data.builder=NAME, or a run that has eval rows",
        ),
        (
            ["smollm2-135m-instruct", "data.eval_files=[/no/rows.jsonl]"],
            "/no/rows.jsonl: dataset file not found",
        ),
        (
            ["smollm2-135m-instruct", "data.builder=arithmetic", "env.config=[1]"],
            "config key 'env.config'",
        ),
        (
            ["smollm2-135m-instruct", "optim.lr=0.1"],
            "optim.lr is not a setting of aloft eval; it takes: data.eval_files, data.builder,",
        ),
        (
            ["smollm2-135m-instruct", "generator.eval_n_samples=0"],
            "config key 'generator.eval_n_samples'=0",
        ),
    ],
)
def test_bad_eval_input_is_one_line(words, message, capsys):
    assert main(["eval", *words]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("aloft: ") and message in err and "\n" not in err


def test_the_flags_of_the_last_release_work_with_a_note(capsys):
    """``--builder arithmetic --n 2``: read as data.builder and generator.eval_n_samples (the run
    gets as far as loading the model), each with one line naming its key."""
    assert main(["eval", "/no/such/model", "--builder", "arithmetic", "--n", "2", "-o", "low=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[:3] == [
        "aloft eval: --builder is deprecated and goes in the next release; write data.builder=VALUE instead",
        "aloft eval: -o is deprecated and goes in the next release; write data.builder_args.<key>=VALUE instead",
        "aloft eval: --n is deprecated and goes in the next release; write generator.eval_n_samples=VALUE instead",
    ]
    assert "model '/no/such/model' is not available offline" in err[3]
