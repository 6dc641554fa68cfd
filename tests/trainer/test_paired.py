"""The paired comparison of two policies on the same items: the statistics, and `aloft eval --compare`."""

from __future__ import annotations

import json

import pytest

from aloft.cli import main
from aloft.models import build_tiny_model
from aloft.trainer.paired import compare
from tests.trainer import envs  # noqa: F401  (registers test_digits)


def outcomes(pairs: list[tuple[bool | None, bool | None]]):
    return {i: a for i, (a, _) in enumerate(pairs)}, {i: b for i, (_, b) in enumerate(pairs)}


def test_gain_counts_and_the_exact_mcnemar_p_value():
    # 8 items only B solved, 1 only A, 6 both, 5 neither, 2 failed on one side.
    pairs = [(False, True)] * 8 + [(True, False)] + [(True, True)] * 6 + [(False, False)] * 5
    pairs += [(None, True), (True, None)]
    result, items = compare(*outcomes(pairs))
    assert (result.items, result.excluded) == (20, 2)
    assert (result.only_b, result.only_a, result.a_solved, result.b_solved) == (8, 1, 7, 14)
    assert result.gain == pytest.approx(7 / 20)
    # Exact McNemar: two-sided binomial, 1 or fewer of 9 discordant at 1/2: 2 * (1 + 9) / 2**9.
    assert result.p_value == pytest.approx(20 / 512)
    assert result.ci_low < result.gain < result.ci_high and 0 < result.ci_low and result.ci_high <= 1
    assert [(r["a"], r["b"]) for r in items] == pairs  # every item kept, failures as None


def test_identical_sides_gain_nothing_with_certainty():
    result, _ = compare(*outcomes([(True, True), (False, False), (True, True)]))
    assert (result.gain, result.ci_low, result.ci_high, result.p_value) == (0.0, 0.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="same items"):
        compare({0: True}, {1: True})


def test_aloft_eval_compares_two_models_item_by_item(tiny_model_dir, tmp_path, capsys):
    """Two random tiny models on the same 24 rows (reward: the share of digits; solved, as pass@1
    counts it, when above 0): the summary printed is what the per-item file recomputes, it agrees
    with each side's pass@1, and a model against itself gains nothing."""
    other = build_tiny_model(tmp_path / "other", hidden_size=64, num_layers=2, seed=7)
    out = tmp_path / "comparison.json"
    common = [
        "data.builder=arithmetic",
        "data.eval_size=24",
        "env.name=test_digits",
        "generator.max_new_tokens=6",
    ]
    code = main(["eval", tiny_model_dir, "--compare", other, *common, "generator.eval_temperature=1.0"]
                + ["--comparison-out", str(out)])  # fmt: skip
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    saved = json.loads(out.read_text())
    result = saved["comparison"]
    assert printed["comparison"] == result and len(saved["items"]) == 24
    only_a = sum(1 for r in saved["items"] if r["a"] and not r["b"])
    only_b = sum(1 for r in saved["items"] if r["b"] and not r["a"])
    assert (result["only_a"], result["only_b"]) == (only_a, only_b) and only_a + only_b > 0
    assert result["gain"] == pytest.approx((only_b - only_a) / 24)
    assert result["ci_low"] <= result["gain"] <= result["ci_high"] and 0 < result["p_value"] <= 1
    assert printed["a"]["model"] == tiny_model_dir and printed["b"]["model"] == str(other)
    for side in ("a", "b"):
        assert result[f"{side}_solved"] / 24 == pytest.approx(printed[side]["eval/pass@1"])

    assert main(["eval", tiny_model_dir, "--compare", tiny_model_dir, *common]) == 0  # greedy: the same
    same = json.loads(capsys.readouterr().out)["comparison"]
    assert (same["gain"], same["only_a"], same["only_b"], same["p_value"]) == (0.0, 0, 0, 1.0)


def test_compare_needs_one_sample_an_item(tiny_model_dir, capsys):
    code = main(
        [
            "eval",
            tiny_model_dir,
            "--compare",
            tiny_model_dir,
            "data.builder=arithmetic",
            "generator.eval_n_samples=2",
        ]
    )
    assert code == 2 and "set generator.eval_n_samples=1" in capsys.readouterr().err


def test_an_item_is_solved_as_pass_at_1_counts_it_or_at_a_given_reward():
    from aloft.trainer.paired import solved_by_item
    from aloft.types import RolloutStatus, Trajectory, TrajectoryGroup

    def group(row: int, reward: float, status: str = "stop", **metrics: float) -> TrajectoryGroup:
        trajectory = Trajectory(
            prompt_ids=[1], completion_ids=[2], loss_mask=[1], sampler_logprobs=[0.0], rewards=[reward],
            status=RolloutStatus(status), group_id=f"g{row}", metrics=metrics, info={"row_index": row},
        )  # fmt: skip
        return TrajectoryGroup(group_id=f"g{row}", trajectories=[trajectory])

    groups = [group(0, 0.4), group(1, 1.0, correct=0.0), group(2, -1.0), group(3, 0.0, "env_error")]
    assert solved_by_item(groups, None) == {0: True, 1: False, 2: False, 3: None}  # the env's word first
    assert solved_by_item(groups, 1.0) == {0: False, 1: True, 2: False, 3: None}
    two = TrajectoryGroup(group_id="g", trajectories=groups[0].trajectories * 2)
    with pytest.raises(ValueError, match="use --n 1"):
        solved_by_item([two], None)
