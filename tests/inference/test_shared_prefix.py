"""Shared-prefix attention and the prefix cache: a prompt stored once, the next turn prefilled from where it ended.

What a user sees: the same tokens and logprobs as an engine that keeps one full cache per row
(``sdpa``) and as the trainer's full forward pass, with far fewer tokens prefilled.
"""

from __future__ import annotations

import asyncio
import random

import pytest
import torch
from transformers import AutoModelForCausalLM

from aloft.inference.hf import HFEngine
from aloft.inference.prefix_cache import CachedHistory, CachedSegment, PrefixCache
from aloft.inference.shared_prefix import (
    SHARED_PREFIX_ATTENTION,
    SegmentBatch,
    decode_attention,
    shared_prefix_attention,
    shared_prefix_supported,
)
from aloft.models import build_tiny_model
from aloft.types import GenerationRequest, SamplingParams


class _Layer(torch.nn.Module):
    layer_idx = 0
    num_key_value_groups = 2


def _reference(query, key, value, lengths):
    """Plain causal attention of each row over its whole sequence (segment + own tokens), ``[B, n, H, D]``."""
    outputs = []
    for row, length in enumerate(lengths):
        q = query[row : row + 1]
        k = key[row : row + 1, :, -length:].repeat_interleave(2, dim=1)
        v = value[row : row + 1, :, -length:].repeat_interleave(2, dim=1)
        new = q.shape[2]
        allowed = torch.ones(new, length, dtype=torch.bool).tril_(length - new)
        outputs.append(torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed))
    return torch.cat(outputs).transpose(1, 2)


@pytest.mark.parametrize("new", [1, 5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [3, 2])
def test_attention_split_over_a_segment_and_own_tokens_equals_plain_causal_attention(new, dtype, rows):
    """Three rows on two segments of different lengths (two rows on one), or two rows on one segment
    each, in the other order; own caches of different widths (left padding). With one new token a
    row, the decode step's ``decode_attention`` too."""
    torch.manual_seed(0)
    heads, kv_heads, dim = 4, 2, 16
    segment_lengths, own_lengths = [7, 4], [3 + new, 1 + new, new][:rows]  # row 2 has nothing cached yet
    row_segment = [0, 1, 0] if rows == 3 else [1, 0]  # with 2 rows: not in their segments' order
    full_keys = [
        torch.randn(kv_heads, segment_lengths[g] + own_lengths[r], dim) for r, g in enumerate(row_segment)
    ]
    full_values = [torch.randn_like(k) for k in full_keys]
    if rows == 3:  # rows on one segment share its keys: copy segment 0's part of row 0 into row 2
        full_keys[2][:, : segment_lengths[0]] = full_keys[0][:, : segment_lengths[0]]
        full_values[2][:, : segment_lengths[0]] = full_values[0][:, : segment_lengths[0]]
    query = torch.randn(rows, heads, new, dim)

    width = max(segment_lengths)
    seg_keys = torch.zeros(2, kv_heads, width, dim)
    seg_values = torch.zeros(2, kv_heads, width, dim)
    for g, row in ((0, row_segment.index(0)), (1, row_segment.index(1))):
        seg_keys[g, :, width - segment_lengths[g] :] = full_keys[row][:, : segment_lengths[g]]
        seg_values[g, :, width - segment_lengths[g] :] = full_values[row][:, : segment_lengths[g]]
    own_width = max(own_lengths)
    own_keys = torch.zeros(rows, kv_heads, own_width, dim)
    own_values = torch.zeros(rows, kv_heads, own_width, dim)
    mask = torch.zeros(rows, 1, new, own_width, dtype=torch.bool)
    for r, g in enumerate(row_segment):
        own_keys[r, :, own_width - own_lengths[r] :] = full_keys[r][:, segment_lengths[g] :]
        own_values[r, :, own_width - own_lengths[r] :] = full_values[r][:, segment_lengths[g] :]
        mask[r, 0, :, own_width - own_lengths[r] :] = torch.ones(new, own_lengths[r], dtype=torch.bool).tril_(
            own_lengths[r] - new
        )
    segments = SegmentBatch(
        keys=[seg_keys.to(dtype)],
        values=[seg_values.to(dtype)],
        lengths=torch.tensor(segment_lengths),
        tokens=[(1,) * 7, (2,) * 4],
        logits=[torch.zeros(3), torch.zeros(3)],
        row_segment=torch.tensor(row_segment),
    )
    out, _ = shared_prefix_attention(
        _Layer(),
        query.to(dtype),
        own_keys.to(dtype),
        own_values.to(dtype),
        mask,
        segments=segments.plan(dtype),
    )

    padded_keys = torch.stack([torch.nn.functional.pad(k, (0, 0, 20 - k.shape[1], 0)) for k in full_keys])
    padded_values = torch.stack([torch.nn.functional.pad(v, (0, 0, 20 - v.shape[1], 0)) for v in full_values])
    lengths = [segment_lengths[g] + own_lengths[r] for r, g in enumerate(row_segment)]
    expected = _reference(query, padded_keys, padded_values, lengths)
    assert out.shape == (rows, new, heads, dim)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(out.float(), expected, atol=tolerance, rtol=tolerance)
    if new == 1:
        private_bias = torch.zeros(mask.shape).masked_fill_(~mask, float("-inf"))  # [B, 1, 1, W]
        decoded = decode_attention(
            query[:, :, 0].to(dtype),
            own_keys.to(dtype),
            own_values.to(dtype),
            private_bias,
            segments.plan(dtype),
            layer=0,
            scale=dim**-0.5,
        )
        torch.testing.assert_close(decoded.float(), expected[:, 0], atol=tolerance, rtol=tolerance)


def test_models_whose_attention_is_not_plain_softmax_keep_full_caches(tmp_path):
    for arch in ("llama", "qwen2"):
        assert shared_prefix_supported(
            AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / arch, arch=arch))
        )
    windowed = AutoModelForCausalLM.from_pretrained(tmp_path / "qwen2")
    windowed.config.use_sliding_window, windowed.config.sliding_window = True, 16
    assert not shared_prefix_supported(windowed)
    capped = AutoModelForCausalLM.from_pretrained(tmp_path / "llama")
    capped.config.attn_logit_softcapping = 50.0  # Gemma-2
    assert not shared_prefix_supported(capped)


@pytest.fixture(scope="module")
def long_model_dir(tmp_path_factory):
    """Tiny Llama with room for 1,024-token prompts."""
    return build_tiny_model(
        tmp_path_factory.mktemp("long") / "llama", hidden_size=64, num_layers=2, max_position_embeddings=1400
    )


def _prompt(length, seed):
    rng = random.Random(seed)
    return [rng.randrange(10, 200) for _ in range(length)]


def _generate(engine, requests):
    return asyncio.run(engine.generate(requests))


def _request(prompt, session=None, **sampling):
    return GenerationRequest(prompt_ids=list(prompt), sampling=SamplingParams(**sampling), session_id=session)


def _full_cache_engine(model_dir, **kwargs):
    """The engine as it was: one full KV cache per row (plain SDPA), no prefix cache."""
    engine = HFEngine(model_dir, prefix_cache_gb=0, **kwargs)
    engine.model.set_attn_implementation("sdpa")
    return engine


def test_groups_at_long_prompts_match_one_full_cache_per_row_and_the_trainer(long_model_dir):
    """GRPO shape at 1,024 tokens: 3 prompts x 4 samples, rows of different lengths joining and leaving."""
    prompts = [_prompt(1024 - 37 * i, seed=i) for i in range(3)]
    batch = [
        _request(p, max_tokens=8 + 5 * j, temperature=0.8, seed=10 * i + j)
        for i, p in enumerate(prompts)
        for j in range(4)
    ]
    shared = HFEngine(long_model_dir, max_batch_size=6)  # 12 rows through 6 slots: later rows join
    full = _full_cache_engine(long_model_dir, max_batch_size=6)
    try:
        assert shared.model.config._attn_implementation == SHARED_PREFIX_ATTENTION
        ours, theirs = _generate(shared, batch), _generate(full, batch)
        assert shared.stats.prefilled_tokens < full.stats.prefilled_tokens
    finally:
        shared.close()
        full.close()
    model = AutoModelForCausalLM.from_pretrained(long_model_dir).eval()
    for request, a, b in zip(batch, ours, theirs):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0)
        ids = torch.tensor([request.prompt_ids + a.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(request.prompt_ids) - 1 : -1].float() / 0.8
        trainer = torch.log_softmax(logits, -1).gather(1, torch.tensor(a.token_ids)[:, None]).squeeze(1)
        torch.testing.assert_close(torch.tensor(a.logprobs), trainer, atol=1e-4, rtol=0)


def _episode(engine, prompt, samples, turns, observation, max_tokens=12):
    """``samples`` trajectories of ``turns`` turns: each turn re-sends prompt + everything so far."""
    histories = [list(prompt) for _ in range(samples)]
    completions = []
    for turn in range(turns):
        requests = [
            _request(h, session=f"s{j}", max_tokens=max_tokens, temperature=1.0, seed=100 * turn + j)
            for j, h in enumerate(histories)
        ]
        outs = _generate(engine, requests)
        completions.append(outs)
        histories = [
            h + out.token_ids + observation(turn, j) for j, (h, out) in enumerate(zip(histories, outs))
        ]
    return completions


def test_later_turns_prefill_only_their_new_tokens_and_sample_what_a_full_prefill_samples(long_model_dir):
    prompt = _prompt(600, seed=1)

    def observation(turn, sample):
        return _prompt(20 + 7 * sample, seed=1000 + 10 * turn + sample)

    cached = HFEngine(long_model_dir)
    full = _full_cache_engine(long_model_dir)
    try:
        ours = _episode(cached, prompt, samples=3, turns=3, observation=observation)
        theirs = _episode(full, prompt, samples=3, turns=3, observation=observation)
        for turn_a, turn_b in zip(ours, theirs):
            for a, b in zip(turn_a, turn_b):
                assert a.token_ids == b.token_ids
                torch.testing.assert_close(
                    torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-4, rtol=0
                )
        # Turn 1: the prompt once. Turns 2 and 3: per trajectory, the last sampled token and the observation.
        new_tokens = sum(1 + len(observation(turn, j)) for turn in range(2) for j in range(3))
        assert cached.stats.prefilled_tokens == len(prompt) + new_tokens
        # Without the cache every later turn prefills its whole history again.
        assert full.stats.prefilled_tokens > len(prompt) + 2 * 3 * len(prompt)
        assert cached.prefix_cache.hits == 6
    finally:
        cached.close()
        full.close()


def test_a_weight_update_clears_the_cache(long_model_dir, tmp_path):
    prompt = _prompt(300, seed=2)
    engine = HFEngine(long_model_dir)
    other = build_tiny_model(
        tmp_path / "other", hidden_size=64, num_layers=2, max_position_embeddings=1400, seed=3
    )
    reference = _full_cache_engine(other)
    try:
        (first,) = _generate(engine, [_request(prompt, session="a", max_tokens=6, temperature=0)])
        assert len(engine.prefix_cache) > 0
        asyncio.run(engine.update_weights(other, version=1))
        assert len(engine.prefix_cache) == 0
        turn_two = prompt + first.token_ids + [5, 6, 7]
        (ours,) = _generate(engine, [_request(turn_two, session="a", max_tokens=6, temperature=0)])
        (theirs,) = _generate(reference, [_request(turn_two, max_tokens=6, temperature=0)])
        assert ours.token_ids == theirs.token_ids
        torch.testing.assert_close(
            torch.tensor(ours.logprobs), torch.tensor(theirs.logprobs), atol=1e-4, rtol=0
        )
    finally:
        engine.close()
        reference.close()


def test_a_request_equal_to_a_decoding_prompt_joins_its_segment_without_prefill(long_model_dir):
    """More samples of one prompt than rows: the late ones reuse the segment (from its stored logits)."""
    prompt = _prompt(500, seed=4)
    batch = [_request(prompt, max_tokens=4 + j, temperature=1.0, seed=j) for j in range(6)]
    engine = HFEngine(long_model_dir, max_batch_size=2)
    full = _full_cache_engine(long_model_dir, max_batch_size=2)
    try:
        ours, theirs = _generate(engine, batch), _generate(full, batch)
        assert engine.stats.prefilled_tokens == len(prompt)
        assert engine.prefix_cache.hits == 4  # the 4 samples after the first 2 reused the segment
        assert [c.token_ids for c in ours] == [c.token_ids for c in theirs]
    finally:
        engine.close()
        full.close()


def test_the_cache_keeps_to_its_budget_least_recently_used_out():
    def history(session, tokens):
        keys = [torch.zeros(2, tokens, 4)]  # 32 bytes a token
        return CachedHistory(
            segment=(1, 2), tokens=(session,) * tokens, keys=keys, values=[k.clone() for k in keys]
        )

    cache = PrefixCache(max_bytes=64 * 10)
    for session in range(3):
        cache.add_history(history(session + 10, 4))  # 4 tokens x 2 x 32 bytes = 256 bytes each
    assert cache.nbytes <= cache.max_bytes and len(cache.histories) == 2
    prompt = [1, 2, 12, 12, 12, 12, 99]
    assert cache.take_history(prompt, {(1, 2)}).tokens == (12,) * 4  # the most recent survives
    assert cache.take_history(prompt, {(1, 2)}) is None  # taken: a history serves one next turn
    assert cache.take_history([1, 2, 11, 11, 11, 11, 5], set()) is None  # its segment is gone: useless
    with pytest.raises(ValueError, match="max_bytes must be >= 0"):
        PrefixCache(max_bytes=-1)


def _history(segment, marker, tokens=2):
    keys = [torch.zeros(1, tokens, 4)]  # 16 bytes a token
    return CachedHistory(
        segment=segment, tokens=(marker,) * tokens, keys=keys, values=[k.clone() for k in keys]
    )


def _segment():
    keys = [torch.zeros(1, 3, 4)]
    return CachedSegment(keys=keys, values=[k.clone() for k in keys], logits=torch.zeros(8))


def test_ending_a_session_frees_its_histories_and_the_segments_no_other_history_continues():
    cache = PrefixCache(max_bytes=1 << 20)
    a, b = (1, 2), (3, 4)
    cache.add_segment(a, _segment())
    cache.add_segment(b, _segment())
    cache.add_history(_history(a, 10), "g0/1")  # two samples of group 0 share segment a
    cache.add_history(_history(a, 11), "g0/2")
    cache.add_history(_history(b, 12), "g1/1/0")  # a server's sample 0 of an n=2 request
    cache.add_history(_history(b, 13), "g1/12")  # "g1/1" must not cover "g1/12"
    cache.add_history(_history(b, 14))  # a history without a session: left to eviction

    cache.release_sessions(["g0/1"])
    assert {h.tokens[0] for h in cache.histories.values()} == {11, 12, 13, 14}
    assert a in cache.segments  # g0/2's history still continues it
    cache.release_sessions(["g0/2", "no-such-session"])
    assert a not in cache.segments and {h.tokens[0] for h in cache.histories.values()} == {12, 13, 14}
    cache.release_sessions(["g1/1"])
    assert {h.tokens[0] for h in cache.histories.values()} == {13, 14} and b in cache.segments
    cache.release_sessions(["g1/12"])
    assert b in cache.segments  # the session-less history continues it
    assert cache.nbytes == sum(x.nbytes for x in [*cache.histories.values(), *cache.segments.values()])


def test_a_session_ended_during_a_batch_is_released_at_the_batchs_next_safe_point():
    cache = PrefixCache(max_bytes=1 << 20)
    cache.add_history(_history((1,), 10), "s")
    with cache.in_use():
        cache.release_sessions(["s"])  # from the event loop while the compute thread decodes
        assert len(cache.histories) == 1  # not between finding an entry and using it
        cache.apply_released()
        assert len(cache.histories) == 0
        cache.add_history(_history((1,), 11), "t")
        cache.release_sessions(["t"])
    assert len(cache.histories) == 0 and cache.nbytes == 0  # the batch's end applies the rest
    cache.add_history(_history((1,), 12), "u")
    cache.release_sessions(["u"])  # no batch running: at once
    assert len(cache.histories) == 0 and cache.nbytes == 0


@pytest.mark.slow
def test_smollm2_at_1024_prompt_tokens_samples_what_the_trainer_computes():
    """SmolLM2-135M, 2 prompts x 3 samples of 1,024 tokens: sampler logprobs equal a full forward pass."""
    from aloft.models import load_model, load_tokenizer, resolve_model_path

    path = resolve_model_path("smollm2-135m-instruct")
    tokenizer = load_tokenizer(path)
    vocabulary = [i for i in range(1000, 20000) if i not in set(tokenizer.all_special_ids)]
    rng = random.Random(5)
    prompts = [[rng.choice(vocabulary) for _ in range(1024 - 9 * i)] for i in range(2)]
    batch = [
        _request(p, max_tokens=6, temperature=1.0, seed=3 * i + j)
        for i, p in enumerate(prompts)
        for j in range(3)
    ]
    engine = HFEngine(path, dtype="float32")
    try:
        assert engine.model.config._attn_implementation == SHARED_PREFIX_ATTENTION
        completions = _generate(engine, batch)
        assert engine.stats.prefilled_tokens == sum(len(p) for p in prompts)
    finally:
        engine.close()
    model = load_model(path, dtype=torch.float32).eval()
    for request, completion in zip(batch, completions):
        ids = torch.tensor([request.prompt_ids + completion.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(request.prompt_ids) - 1 : -1].float()
        trainer = (
            torch.log_softmax(logits, -1).gather(1, torch.tensor(completion.token_ids)[:, None]).squeeze(1)
        )
        torch.testing.assert_close(torch.tensor(completion.logprobs), trainer, atol=2e-4, rtol=0)
