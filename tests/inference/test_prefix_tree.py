"""Prompts admitted together that share a beginning prefill it once (``aloft.inference.prefix_tree``),
and sample what a plain prefill samples."""

from __future__ import annotations

import asyncio
import random

import pytest
import torch
from transformers import AutoModelForCausalLM

from aloft.config.schema import EngineConfig
from aloft.inference.hf import HFEngine
from aloft.inference.prefix_cache import CachedSegment, PrefixCache
from aloft.inference.prefix_tree import plan_admission, plan_prefill
from aloft.models import build_tiny_model
from aloft.types import GenerationRequest, SamplingParams


def tokens(length: int, seed: int) -> tuple[int, ...]:
    rng = random.Random(seed)
    return tuple(rng.randrange(10, 200) for _ in range(length))


SYSTEM = tokens(300, seed=1)
SCHEMAS = (tokens(200, seed=2), tokens(150, seed=3))


def sql_like_prompts() -> list[tuple[int, ...]]:
    """A system message all share, a schema per database, then each question (6 on two databases)."""
    return [SYSTEM + SCHEMAS[q % 2] + tokens(10 + 4 * q, seed=100 + q) for q in range(6)]


def test_the_plan_prefills_each_shared_beginning_once():
    prompts = sql_like_prompts()
    plan = plan_prefill(prompts, min_shared=64)
    assert plan.shares
    assert [plan.nodes[n].tokens for n in plan.prompt_nodes] == prompts
    shared = {plan.nodes[n].tokens for n in range(len(plan.nodes)) if n not in plan.prompt_nodes}
    assert shared == {SYSTEM, SYSTEM + SCHEMAS[0], SYSTEM + SCHEMAS[1]}
    questions = sum(10 + 4 * q for q in range(6))
    assert plan.prefilled_tokens == len(SYSTEM) + sum(len(s) for s in SCHEMAS) + questions
    for node in plan.nodes:  # a parent is planned before its child and begins it
        if node.parent is not None:
            parent = plan.nodes[node.parent].tokens
            assert plan.nodes.index(node) > node.parent and node.tokens[: len(parent)] == parent


def test_beginnings_shorter_than_the_threshold_are_prefilled_with_each_prompt():
    prompts = [tokens(40, seed=1) + tokens(30 - i, seed=10 + i) for i in (2, 0, 3, 1)]  # unsorted
    plan = plan_prefill(prompts, min_shared=64)
    assert not plan.shares and plan.prefilled_tokens == sum(len(p) for p in prompts)
    assert [node.tokens for node in plan.nodes] == prompts and plan.prompt_nodes == [0, 1, 2, 3]
    assert not plan_prefill(sql_like_prompts(), min_shared=0).shares


def test_a_prompt_that_begins_another_keeps_its_last_token_as_its_own():
    short = tokens(100, seed=5)
    plan = plan_prefill([short + tokens(20, seed=6), short], min_shared=64)
    leaf = plan.nodes[plan.prompt_nodes[1]]
    assert leaf.tokens == short and len(plan.nodes[leaf.parent].tokens) == len(short) - 1
    assert plan.prefilled_tokens == 99 + 1 + 21  # the shared 99, then each prompt's own


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(
        tmp_path_factory.mktemp("tree") / "llama", hidden_size=64, num_layers=2, max_position_embeddings=1024
    )


def generate(engine: HFEngine, requests: list[GenerationRequest]):
    return asyncio.run(engine.generate(requests))


def test_the_engine_prefills_shared_beginnings_once_and_samples_what_a_plain_prefill_samples(model_dir):
    prompts = sql_like_prompts()
    requests = [
        GenerationRequest(
            prompt_ids=list(p), sampling=SamplingParams(max_tokens=12, temperature=1.0, seed=7 * i + j)
        )
        for i, p in enumerate(prompts)
        for j in range(2)
    ]
    tree, plain = HFEngine(model_dir, min_shared_prefix=64), HFEngine(model_dir, min_shared_prefix=0)
    try:
        ours, theirs = generate(tree, requests), generate(plain, requests)
        assert tree.stats.prefilled_tokens == plan_prefill(prompts).prefilled_tokens
        assert plain.stats.prefilled_tokens == sum(len(p) for p in prompts)
    finally:
        tree.close()
        plain.close()
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    for request, a, b in zip(requests, ours, theirs):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0)
        ids = torch.tensor([request.prompt_ids + a.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(request.prompt_ids) - 1 : -1].float()
        trainer = torch.log_softmax(logits, -1).gather(1, torch.tensor(a.token_ids)[:, None]).squeeze(1)
        torch.testing.assert_close(torch.tensor(a.logprobs), trainer, atol=1e-4, rtol=0)


def test_the_threshold_is_an_engine_setting_and_a_negative_one_is_refused(model_dir):
    assert EngineConfig(min_shared_prefix=0).backend_options()["min_shared_prefix"] == 0
    with pytest.raises(ValueError, match="min_shared_prefix must be >= 0"):
        HFEngine(model_dir, min_shared_prefix=-1)


def test_a_beginning_shared_with_a_known_segment_is_taken_from_it():
    """One prompt admitted alone beside a prompt still decoding (or cached): nothing to prefill of
    what they share."""
    decoding, joining = sql_like_prompts()[0], sql_like_prompts()[2]  # same system message and schema
    plan = plan_prefill([joining], min_shared=64, known=[decoding])
    shared = next(i for i, (a, b) in enumerate(zip(decoding, joining)) if a != b)
    assert shared >= len(SYSTEM) + len(SCHEMAS[0])  # (and any first question tokens they share)
    (leaf,) = plan.prompt_nodes
    root = plan.nodes[plan.nodes[leaf].parent]
    assert root.known == 0 and root.parent is None and len(root.tokens) == shared
    assert plan.prefilled_tokens == len(joining) - shared
    assert not plan_prefill([tokens(90, seed=9)], min_shared=64, known=[decoding]).shares


def test_rows_joining_later_and_the_next_call_take_shared_beginnings_from_the_batch_and_the_cache(model_dir):
    """Six questions through two slots (four join while others decode), then a seventh in a later
    call (its beginning from the prefix cache): the tokens and logprobs of whole prefills."""
    prompts = sql_like_prompts()
    requests = [
        GenerationRequest(
            prompt_ids=list(p), sampling=SamplingParams(max_tokens=6 + 2 * i, temperature=1.0, seed=i)
        )
        for i, p in enumerate(prompts)
    ]
    later = GenerationRequest(
        prompt_ids=list(SYSTEM + SCHEMAS[1] + (7,) + tokens(8, seed=99)),  # 7: in no other question
        sampling=SamplingParams(max_tokens=5, temperature=1.0, seed=3),
    )
    taking = HFEngine(model_dir, max_batch_size=2, min_shared_prefix=64)
    whole = HFEngine(model_dir, max_batch_size=2, min_shared_prefix=0)
    try:
        ours, theirs = generate(taking, requests), generate(whole, requests)
        assert whole.stats.prefilled_tokens == sum(len(p) for p in prompts)
        assert taking.stats.prefilled_tokens < whole.stats.prefilled_tokens / 3
        before, hits, reused = (
            taking.stats.prefilled_tokens,
            taking.prefix_cache.hits,
            taking.prefix_cache.reused_tokens,
        )
        ours.append(generate(taking, [later])[0])
        theirs.append(generate(whole, [later])[0])
        assert taking.stats.prefilled_tokens - before == 9  # the question alone
        assert taking.prefix_cache.hits == hits + 1
        assert taking.prefix_cache.reused_tokens - reused == len(SYSTEM) + len(SCHEMAS[1])
    finally:
        taking.close()
        whole.close()
    for a, b in zip(ours, theirs):
        assert a.token_ids == b.token_ids
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0)


def test_a_cached_segment_a_prompt_takes_from_is_used_last_and_counted():
    """Least recently used goes first: the segment an admission took its beginning from must not."""
    older, newer = sql_like_prompts()[0], sql_like_prompts()[1]  # schema 0, schema 1
    cache = PrefixCache(max_bytes=1 << 30)
    for prompt in (older, newer):
        states = [torch.zeros(1, len(prompt), 2)]
        cache.add_segment(prompt, CachedSegment(keys=states, values=states, logits=torch.zeros(3)))
    joining = SYSTEM + SCHEMAS[0] + (7, 8, 9)
    plan, states = plan_admission([joining], 64, None, cache)
    assert plan.prefilled_tokens == 3 and len(states) == 2
    assert list(cache.segments) == [newer, older]  # the one taken from moved to the end
    assert (cache.hits, cache.reused_tokens) == (1, len(SYSTEM) + len(SCHEMAS[0]))
