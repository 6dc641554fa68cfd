"""The protocol warm start: which sampled first turns become demonstrations (through the real
generator, env and Chinook database), what the demonstrations hold and train on, and a fit that
lowers their loss and saves a model that loads."""

from __future__ import annotations

import pytest
import torch

from aloft.data import build_dataset
from aloft.experiments.warm_start import FINAL_THINKING, fit_demonstrations, sql_demonstrations
from aloft.inference import make_engine
from aloft.models import load_model, load_tokenizer
from aloft.types import SamplingParams

SAMPLING = SamplingParams(max_tokens=2048, temperature=0.0)
PROBE = "SELECT Name FROM Artist ORDER BY ArtistId LIMIT 2"


@pytest.fixture(scope="module")
def chinook_rows():
    """One Chinook train question at 5 turns and at 1 turn."""
    rows = {}
    for turns in (5, 1):
        built = build_dataset("sql", n=0, seed=0, split="train", max_turns=turns, hint=True)
        rows[turns] = [r for r in built if r["db_id"] == "chinook"][:1]
    return rows


def _demos(tokenizer, rows, first_turn: str):
    engine = make_engine("scripted", tokenizer=tokenizer, replies=[first_turn])
    return sql_demonstrations(engine, tokenizer, rows[5], rows[1], samples=1, sampling=SAMPLING)


def test_a_probe_with_rows_becomes_a_demonstration_of_each_protocol(chinook_rows, tiny_model_dir):
    tokenizer = load_tokenizer(tiny_model_dir)
    first = f"<think>Look at the artists first.</think><sql>{PROBE}</sql>"
    demos, counts = _demos(tokenizer, chinook_rows, first)
    assert counts == {"sampled": 1.0, "well_formed": 1.0, "kept": 1.0}
    multi, single = demos
    text = tokenizer.decode(multi.completion_ids)
    # The model's own turn, the env's real observation (Chinook's first artists), then the answer.
    assert text.startswith(first)
    assert "<observation>" in text and "AC/DC" in text
    assert text.endswith(f"<think>{FINAL_THINKING}</think>\n<solution>{PROBE}</solution>")
    # Trained on: the policy's turns only, never the observation.
    trained = tokenizer.decode([t for t, m in zip(multi.completion_ids, multi.loss_mask, strict=True) if m])
    assert "<observation>" not in trained and "AC/DC" not in trained
    assert trained.startswith(first) and trained.endswith(f"<solution>{PROBE}</solution>")
    assert set(multi.sampler_logprobs) == {0.0}  # so the fit's sampler gap is its NLL
    # At 1 turn: the 1-turn prompt, and the same thinking and query answered at once.
    assert "You cannot run queries" in tokenizer.decode(single.prompt_ids)
    assert tokenizer.decode(single.completion_ids) == (
        f"<think>Look at the artists first.</think>\n<solution>{PROBE}</solution>"
    )
    assert all(single.loss_mask)


@pytest.mark.parametrize(
    ("first_turn", "well_formed"),
    [
        (f"<sql>{PROBE}</sql>", 0.0),  # no <think> block
        (f"<think>Answer now.</think><solution>{PROBE}</solution>", 0.0),  # no probe to learn from
        ("<think>Probe.</think><sql>SELECT Nme FROM Artist</sql>", 1.0),  # the probe fails
        ("<think>Probe.</think><sql>SELECT Name FROM Artist WHERE 0</sql>", 1.0),  # no rows
    ],
)
def test_first_turns_that_teach_nothing_are_dropped(chinook_rows, tiny_model_dir, first_turn, well_formed):
    tokenizer = load_tokenizer(tiny_model_dir)
    demos, counts = _demos(tokenizer, chinook_rows, first_turn)
    assert demos == [] and counts == {"sampled": 1.0, "well_formed": well_formed, "kept": 0.0}


def test_rows_must_ask_the_same_questions(chinook_rows, tiny_model_dir):
    tokenizer = load_tokenizer(tiny_model_dir)
    other = build_dataset("sql", n=0, seed=0, split="train", max_turns=1, hint=True)
    wrong = [r for r in other if r["question"] != chinook_rows[1][0]["question"]][:1]
    engine = make_engine("scripted", tokenizer=tokenizer, replies=["x"])
    with pytest.raises(ValueError, match="same questions"):
        sql_demonstrations(engine, tokenizer, chinook_rows[5], wrong, sampling=SAMPLING)


def test_fit_lowers_the_demonstrations_loss_and_saves_a_loadable_model(
    chinook_rows, tiny_model_dir, tmp_path
):
    tokenizer = load_tokenizer(tiny_model_dir)
    demos, _ = _demos(tokenizer, chinook_rows, f"<think>Artists.</think><sql>{PROBE}</sql>")
    fit = fit_demonstrations(
        tiny_model_dir, tokenizer, demos, tmp_path / "warm", epochs=4, batch_size=2, lr=3e-3
    )
    assert fit["last_epoch_nll"] < 0.8 * fit["first_epoch_nll"]
    # The saved model (with its tokenizer) gives the demonstrations' tokens more probability.
    before, after = load_model(tiny_model_dir), load_model(str(tmp_path / "warm"))
    assert load_tokenizer(str(tmp_path / "warm")).encode("<solution>") == tokenizer.encode("<solution>")
    demo = demos[1]
    ids = torch.tensor([demo.prompt_ids + demo.completion_ids])
    n = len(demo.completion_ids)

    def nll(model) -> float:
        with torch.no_grad():
            logits = model(ids).logits[0, -n - 1 : -1]
        return float(-torch.log_softmax(logits, -1).gather(1, ids[0, -n:, None]).mean())

    assert nll(after) < 0.8 * nll(before)


def test_fit_needs_demonstrations(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="no demonstrations"):
        fit_demonstrations(tiny_model_dir, load_tokenizer(tiny_model_dir), [], tmp_path / "warm")


def test_the_experiment_fits_saved_demonstrations_without_sampling_again(chinook_rows, tmp_path):
    """``build_warm_start``'s second stage: demonstrations already on disk are read back (as the
    trajectories they were) and fitted; no engine is started."""
    import json

    from aloft.experiments.skyrl_sql import ExperimentPlan, build_warm_start, prepare_data
    from aloft.models import build_tiny_model

    model = build_tiny_model(
        tmp_path / "tiny", hidden_size=64, num_layers=2, seed=0, max_position_embeddings=8192
    )
    tokenizer = load_tokenizer(model)
    demos, counts = _demos(tokenizer, chinook_rows, f"<think>Artists.</think><sql>{PROBE}</sql>")
    plan = ExperimentPlan(out=tmp_path / "exp", model=model, train_size=4, quick=True, warm_start=4)
    warm = plan.out / "warm_start"
    warm.mkdir(parents=True)
    (warm / "demos.jsonl").write_text("".join(json.dumps(d.to_json()) + "\n" for d in demos))
    (warm / "demos.json").write_text(json.dumps(counts))
    start = build_warm_start(plan, prepare_data(plan), echo=lambda _: None)
    assert start == warm / "model" and load_model(str(start)).config.vocab_size == len(tokenizer)
    summary = json.loads((warm / "summary.json").read_text())
    assert summary["demonstrations"] == 2 and summary["kept"] == 1.0 and summary["epochs"] == 1
    assert summary["first_epoch_nll"] > 0
