"""Sequence packing: the packed layout, and the same logits, loss and gradients as padded batches."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import AutoModelForCausalLM

from aloft.algorithms.logits import logprobs_from_logits
from aloft.config import load_config
from aloft.distributed.weight_sync import consecutive_chunks
from aloft.tracking import read_metrics
from aloft.trainer import Trainer
from aloft.training.batch import collate
from aloft.training.forward import token_logits
from aloft.training.packing import MicroBatching, pack_rows
from aloft.types import RolloutStatus, Trajectory


def trajectory(prompt: list[int], completion: list[int], group: str = "g") -> Trajectory:
    n = len(completion)
    return Trajectory(
        prompt_ids=prompt,
        completion_ids=completion,
        loss_mask=[1] * n,
        sampler_logprobs=[0.0] * n,
        rewards=[0.0] * n,
        status=RolloutStatus.STOP,
        group_id=group,
    )


def random_batch(vocab: int, rows: int, seed: int):
    rng = random.Random(seed)
    trajectories = [
        trajectory(
            [rng.randrange(3, vocab) for _ in range(rng.randint(2, 12))],
            [rng.randrange(3, vocab) for _ in range(rng.randint(1, 24))],
            group=str(i % 3),
        )
        for i in range(rows)
    ]
    return collate(trajectories, pad_token_id=0, group_index={"0": 0, "1": 1, "2": 2})


def test_pack_rows_lays_real_tokens_end_to_end():
    batch = collate([trajectory([11, 12, 13], [21, 22]), trajectory([14], [23, 24, 25])], 0, {"g": 0})
    packed = pack_rows(batch)
    assert packed.input_ids.tolist() == [[11, 12, 13, 21, 22, 14, 23, 24, 25]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 4, 0, 1, 2, 3]]
    # Completion tokens 21, 22 are predicted at 13, 21; 23, 24, 25 at 14, 23, 24.
    assert packed.logit_positions.tolist() == [2, 3, 5, 6, 7]
    assert packed.rows.tolist() == [0, 0, 1, 1, 1] and packed.columns.tolist() == [0, 1, 0, 1, 2]
    with pytest.raises(ValueError, match="row 0 has an empty prompt"):
        pack_rows(collate([trajectory([], [21, 22])], 0, {"g": 0}))


def test_pack_rows_shares_a_groups_prompt():
    """Rows with the same prompt lay it out once; later rows attend to it as a prefix."""
    rows = [
        trajectory([11, 12], [21, 22]),
        trajectory([11, 12], [23, 24, 25]),
        trajectory([13], [26]),
        trajectory([11, 12], [27]),
        trajectory([11, 12], []),  # nothing to lay out
    ]
    packed = pack_rows(collate(rows, 0, {"g": 0}), share_prompts=True)
    assert packed.input_ids.tolist() == [[11, 12, 21, 22, 23, 24, 25, 13, 26, 27]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 2, 3, 4, 0, 1, 2]]
    assert packed.boundaries.tolist() == [0, 4, 7, 9, 10]
    assert packed.prefixes.tolist() == [[0, 0], [0, 2], [0, 0], [0, 2]]  # row 4 has no segment
    # Row 1's first token (23) is predicted at the shared prompt's last token (12, position 1).
    assert packed.logit_positions.tolist() == [1, 2, 1, 4, 5, 7, 1]
    assert packed.rows.tolist() == [0, 0, 1, 1, 1, 2, 3]
    unshared = pack_rows(collate(rows, 0, {"g": 0}))
    assert unshared.input_ids.shape[1] == 16 and unshared.prefixes.tolist() == [[0, 0]] * 5


def test_pack_rows_shares_beginnings_of_different_prompts_nested():
    """A prompt that begins like an earlier one (>= min_shared_prefix tokens) is laid out from where
    they differ; a later prompt can share that one's whole beginning (its logical positions)."""
    a, b, c, d = [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 9], [1, 2, 3, 4, 9, 8], [1, 2, 7]
    rows = [trajectory(a, [21, 22]), trajectory(b, [23]), trajectory(b, [24, 25]), trajectory(c, [26])]
    rows.append(trajectory(d, [27]))  # shares 2 tokens with a: fewer than 3, laid out whole
    packed = pack_rows(collate(rows, 0, {"g": 0}), share_prompts=True, min_shared_prefix=3)
    assert packed.input_ids.tolist() == [[1, 2, 3, 4, 5, 6, 21, 22, 9, 23, 24, 25, 8, 26, 1, 2, 7, 27]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 5, 6, 5, 6, 0, 1, 2, 3]]
    assert packed.boundaries.tolist() == [0, 8, 10, 12, 14, 18]
    # b attends to a's first 4; b's second sample and c to b's first 5 logical positions (a's 4, then 9).
    assert packed.prefixes.tolist() == [[0, 0], [0, 4], [8, 13], [8, 13], [0, 0]]
    # b's first completion token is predicted at its own last prompt token (9, packed position 8).
    assert packed.logit_positions.tolist() == [5, 6, 8, 8, 10, 12, 16]
    assert packed.rows.tolist() == [0, 0, 1, 2, 2, 3, 4]
    only_identical = pack_rows(collate(rows, 0, {"g": 0}), share_prompts=True)
    assert only_identical.input_ids.shape[1] == 27 and only_identical.prefixes[:, 1].tolist() == [
        0,
        0,
        13,
        0,
        0,
    ]


def nested_prompt_batch(vocab: int, seed: int, samples: int = 2):
    """Prompts as agent prompts are built: one system block for all, one of two database blocks,
    then a question; ``samples`` completions each."""
    rng = random.Random(seed)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(3, vocab) for _ in range(n)]

    system, databases = tokens(8), [tokens(6), tokens(6)]
    trajectories = []
    for question in range(4):
        prompt = system + databases[question // 2] + tokens(rng.randint(1, 5))
        trajectories += [
            trajectory(prompt, tokens(rng.randint(1, 16)), group=str(question)) for _ in range(samples)
        ]
    return collate(trajectories, pad_token_id=0, group_index={str(q): q for q in range(4)})


@pytest.mark.parametrize("seed", [0, 1])
def test_packed_rows_sharing_beginnings_train_like_padded_rows(tiny_model_dir, seed):
    """Different prompts sharing nested beginnings in a packed row: the logprobs, loss and every
    gradient of a padded batch that shares nothing."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).float()
    batch = nested_prompt_batch(model.config.vocab_size, seed)
    assert pack_rows(batch, True, 4).input_ids.shape[1] < pack_rows(batch, True).input_ids.shape[1]
    advantages = torch.randn(batch.loss_mask.shape, generator=torch.Generator().manual_seed(seed))
    results = []
    for packing, share, least in ((False, False, 0), (True, True, 4)):
        model.zero_grad()
        logits, targets, to_rows = token_logits(model, batch, share, packing, min_shared_prefix=least)
        logprobs = to_rows(logprobs_from_logits(logits, targets))
        loss = -(logprobs * advantages * batch.loss_mask).sum() / batch.loss_mask.sum()
        loss.backward()
        results.append(
            (
                logprobs * batch.loss_mask,
                loss.detach(),
                {n: p.grad.clone() for n, p in model.named_parameters()},
            )
        )
    (lp_pad, loss_pad, grads_pad), (lp_pack, loss_pack, grads_pack) = results
    assert torch.allclose(lp_pack, lp_pad, atol=1e-5)
    assert torch.allclose(loss_pack, loss_pad, atol=1e-6)
    for name, grad in grads_pad.items():
        assert torch.allclose(grads_pack[name], grad, rtol=1e-4, atol=1e-6), name


def shared_prompt_batch(vocab: int, groups: int, samples: int, seed: int):
    """``groups`` prompts (a chat-template-like common start, then random) x ``samples`` completions."""
    rng = random.Random(seed)
    trajectories = []
    for g in range(groups):
        prompt = [5, 6, 7] + [rng.randrange(3, vocab) for _ in range(rng.randint(1, 12))]
        trajectories += [
            trajectory(prompt, [rng.randrange(3, vocab) for _ in range(rng.randint(1, 24))], group=str(g))
            for _ in range(samples)
        ]
    return collate(trajectories, pad_token_id=0, group_index={str(g): g for g in range(groups)})


@pytest.mark.parametrize(
    ("seed", "shared", "share_prompts"),
    [(0, False, False), (1, False, False), (0, True, True), (1, True, False)],
)
def test_packed_logits_loss_and_gradients_equal_padded(tiny_model_dir, seed, shared, share_prompts):
    """Packed (sharing a group's prompt or not) equals padded: logprobs, loss and every gradient."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).float()
    vocab = model.config.vocab_size
    batch = shared_prompt_batch(vocab, 3, 3, seed) if shared else random_batch(vocab, rows=7, seed=seed)
    advantages = torch.randn(batch.loss_mask.shape, generator=torch.Generator().manual_seed(seed))
    results = {}
    for packing in (False, True):
        model.zero_grad()
        logits, targets, to_rows = token_logits(model, batch, share_prompts=share_prompts, packing=packing)
        logprobs = to_rows(logprobs_from_logits(logits, targets))
        loss = -(logprobs * advantages * batch.loss_mask).sum() / batch.loss_mask.sum()
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        results[packing] = (logprobs * batch.loss_mask, loss.detach(), grads)
    (lp_pad, loss_pad, grads_pad), (lp_pack, loss_pack, grads_pack) = results[False], results[True]
    assert torch.allclose(lp_pack, lp_pad, atol=1e-5)
    assert torch.allclose(loss_pack, loss_pad, atol=1e-6)
    for name, grad in grads_pad.items():
        assert torch.allclose(grads_pack[name], grad, rtol=1e-4, atol=1e-6), name


def test_micro_batches_by_token_budget():
    assert consecutive_chunks([5, 5, 5], 10) == [[0, 1], [2]]
    assert consecutive_chunks([12, 3, 4, 9], 10) == [[0], [1, 2], [3]]  # a long row goes alone
    batch = collate(
        [trajectory([1] * 4, [2] * 4), trajectory([1] * 2, [2] * 2), trajectory([1] * 6, [2] * 6)],
        0,
        {"g": 0},
    )
    assert MicroBatching(packing=True, tokens=12).split(batch) == [[0, 1], [2]]
    assert MicroBatching(packing=True, tokens=12).split(batch, [2, 1]) == [[2], [1]]
    assert MicroBatching(rows=2).split(batch) == [[0, 1], [2]]


BASE = [
    "data.builder=arithmetic",
    "data.train_size=32",
    "data.eval_size=4",
    "generator.max_new_tokens=12",
    "generator.max_total_tokens=12",
    "generator.n_samples=4",
    "trainer.prompts_per_step=4",
    "trainer.max_steps=2",
    "trainer.eval_every=0",
    "trainer.checkpoint_every=0",
    "trainer.export_final=false",
    "trainer.deterministic=true",
    "optim.lr=1e-3",
]


def test_training_with_packing_equals_padded_training(tiny_overrides, tmp_path):
    """Two GRPO steps with packing on and off: the same rollouts, losses and gradient norms."""
    runs = {}
    for packing in (False, True):
        overrides = [*tiny_overrides, f"trainer.name=packing_{packing}", f"optim.packing={packing}"]
        trainer = Trainer(load_config(None, [*BASE, *overrides, "optim.micro_batch_tokens=64"]))
        trainer.fit()
        rows = read_metrics(trainer.c.run_dir / "metrics.jsonl")
        runs[packing] = [row for row in rows if "policy/loss" in row]
        trainer.c.close()
    assert len(runs[False]) == 2
    for padded, packed in zip(runs[False], runs[True], strict=True):
        assert packed["reward/mean"] == padded["reward/mean"]
        for key in ("policy/loss", "policy/grad_norm", "logprob/sampler_abs_diff"):
            assert packed[key] == pytest.approx(padded[key], rel=1e-3, abs=1e-6), key


def test_short_bf16_sequences_use_matmul_attention_with_the_same_result():
    """The eager path (CPU bf16, <= EAGER_MAX_LENGTH tokens) agrees with float32 SDPA, GQA included."""
    from aloft.training.packing import EAGER_MAX_LENGTH, _causal_attention

    gen = torch.Generator().manual_seed(0)
    for length in (1, 7, EAGER_MAX_LENGTH, EAGER_MAX_LENGTH + 1):
        query = torch.randn((1, 6, length, 16), generator=gen)
        key, value = (
            torch.randn((1, 2, length, 16), generator=gen),
            torch.randn((1, 2, length, 16), generator=gen),
        )
        reference = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, is_causal=True, enable_gqa=True
        )
        half = _causal_attention(query.bfloat16(), key.bfloat16(), value.bfloat16(), 0.0, None)
        assert half.dtype == torch.bfloat16
        assert torch.allclose(half.float(), reference, atol=3e-2), length


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_to_a_shared_prefix_equals_attention_over_the_whole_sequence(dtype):
    """A completion attending to a P-token prefix gets the last rows of causal attention over both."""
    from aloft.training.packing import EAGER_MAX_LENGTH, _causal_attention

    gen = torch.Generator().manual_seed(1)
    prefix = 9
    for length in (1, 5, EAGER_MAX_LENGTH, EAGER_MAX_LENGTH + 3):  # eager and SDPA paths under bf16
        query = torch.randn((1, 6, prefix + length, 16), generator=gen)
        key = torch.randn((1, 2, prefix + length, 16), generator=gen)
        value = torch.randn((1, 2, prefix + length, 16), generator=gen)
        whole = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, is_causal=True, enable_gqa=True
        )
        tail = _causal_attention(query[:, :, prefix:].to(dtype), key.to(dtype), value.to(dtype), 0.0, None)
        atol = 3e-2 if dtype == torch.bfloat16 else 1e-5
        assert torch.allclose(tail.float(), whole[:, :, prefix:], atol=atol), length


def random_model(config_class: str, **settings):
    """A randomly initialised 2-head transformers model of ``config_class`` over a 64-token vocabulary."""
    import transformers

    shape = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1}
    config = getattr(transformers, config_class)(vocab_size=64, head_dim=16, **shape, **settings)
    return AutoModelForCausalLM.from_config(config)


@pytest.mark.parametrize(
    ("config_class", "settings", "message"),
    [
        ("MistralConfig", {"sliding_window": 8}, "longer than MistralAttention's sliding window \\(8\\)"),
        (
            "Gemma2Config",
            {"attn_logit_softcapping": 50.0, "sliding_window": 4096},
            "soft-caps attention logits",
        ),
    ],
)
def test_packing_refuses_attention_it_does_not_reproduce(config_class, settings, message):
    """Sliding windows shorter than a sequence and soft-capped logits stop with one line, not silently."""
    model = random_model(config_class, num_hidden_layers=1, **settings)
    batch = random_batch(64, rows=4, seed=0)  # sequences of 3..36 tokens
    with pytest.raises(ValueError, match=f"optim.packing: .*{message}.*turn it off"):
        token_logits(model, batch, share_prompts=True, packing=True)
    token_logits(model, batch, share_prompts=True, packing=False)  # padded runs these models


@pytest.mark.parametrize(
    ("config_class", "settings", "packed"),
    [
        ("LlamaConfig", {}, True),
        ("MistralConfig", {"sliding_window": 8}, False),
        ("Qwen2Config", {"use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 0}, False),
    ],
)
def test_packing_auto_packs_where_packed_rows_reproduce_the_models_attention(
    config_class, settings, packed, tiny_overrides, tmp_path
):
    """The default (``optim.packing=auto``) packs plain causal models and keeps padded rows for the others."""
    from aloft.models import build_tiny_tokenizer
    from aloft.trainer.learner import build_learner

    path = tmp_path / config_class
    random_model(config_class, num_hidden_layers=1, **settings).save_pretrained(path)
    build_tiny_tokenizer().save_pretrained(path)
    cfg = load_config(None, [*BASE, *tiny_overrides, f"model.path={path}"])
    assert cfg.optim.packing == "auto"
    learner = build_learner(cfg)
    assert learner.policy.settings.packing is packed
    assert learner.policy.settings.micro_batching.packing is packed


@pytest.mark.parametrize("layout", ["packed", "padded-bf16"])
def test_gradient_checkpointing_recomputes_with_the_attention_its_forward_ran(layout):
    """Packed rows and short bf16 rows switch attention for one forward; a checkpointed layer runs again
    in backward, after the switch back, and must run that same attention: the same gradients as
    without checkpointing (before, torch stopped: "a different number of tensors was saved")."""
    from aloft.training.forward import enable_gradient_checkpointing

    batch = shared_prompt_batch(64, 2, 3, seed=0)
    grads = {}
    for checkpointed in (False, True):
        torch.manual_seed(0)
        model = random_model("LlamaConfig", num_hidden_layers=2).train()
        if checkpointed:
            enable_gradient_checkpointing(model)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=layout == "padded-bf16"):
            logits, targets, _ = token_logits(
                model, batch, share_prompts=layout == "packed", packing=layout == "packed"
            )
        logprobs_from_logits(logits, targets).sum().backward()
        grads[checkpointed] = {name: p.grad.clone() for name, p in model.named_parameters()}
    assert model.config._attn_implementation == "sdpa"  # switched back after the backward
    for name, grad in grads[False].items():
        torch.testing.assert_close(grads[True][name], grad, msg=name)


def test_packing_runs_within_a_sliding_window_like_padded():
    """A window longer than every sequence changes nothing: packed equals padded."""
    model = random_model("MistralConfig", num_hidden_layers=2, sliding_window=64).eval()
    batch = shared_prompt_batch(64, 2, 3, seed=0)
    values = {}
    for packing in (False, True):
        logits, targets, to_rows = token_logits(model, batch, share_prompts=True, packing=packing)
        values[packing] = to_rows(logprobs_from_logits(logits, targets)) * batch.loss_mask
    assert torch.allclose(values[True], values[False], atol=1e-5)
