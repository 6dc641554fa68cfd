"""HFEngine on the tiny random model: token-in/token-out behaviour a rollout relies on."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from aloft.inference import InferenceEngine, make_engine, registered_engines
from aloft.inference import hf as hf_module
from aloft.inference.hf import HFEngine
from aloft.inference.prepacked import PrepackedLinear, packed_rows_are_independent, prepacking_supported
from aloft.models import build_tiny_model
from aloft.models.compute_thread import on_compute_thread
from aloft.types import GenerationRequest, SamplingParams

QUESTIONS = ["What is 2+3?", "hi", "Compute the sum of 12 and 99, then tell me the answer please."]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def hf_model(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()


@pytest.fixture(scope="module")
def prompts(tokenizer) -> list[list[int]]:
    """Chat prompts of different lengths (so batches are left-padded)."""
    chats = [[{"role": "user", "content": q}] for q in QUESTIONS]
    return [tokenizer.apply_chat_template(c, add_generation_prompt=True)["input_ids"] for c in chats]


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    """A shared engine for tests that do not change its weights or state."""
    engine = HFEngine(tiny_model_dir)
    yield engine
    engine.close()


def request(prompt_ids, **sampling) -> GenerationRequest:
    return GenerationRequest(prompt_ids=list(prompt_ids), sampling=SamplingParams(**sampling))


def generate(engine, requests):
    return asyncio.run(engine.generate(requests))


def hf_greedy(model, prompt_ids, max_new_tokens):
    out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=max_new_tokens, do_sample=False)
    return out[0, len(prompt_ids) :].tolist()


def test_engine_satisfies_the_protocol_and_the_registry(tiny_model_dir):
    engine = make_engine("hf", model_or_path=tiny_model_dir)
    assert isinstance(engine, HFEngine) and isinstance(engine, InferenceEngine)
    assert engine.version == 0
    engine.close()
    with pytest.raises(ValueError, match="known backends: hf"):
        make_engine("nope")
    assert "hf" in registered_engines()


def test_greedy_is_deterministic_and_matches_hf_generate(engine, hf_model, prompts):
    batch = [request(p, max_tokens=24, temperature=0) for p in prompts]
    first, second = generate(engine, batch), generate(engine, batch)
    for prompt, a, b in zip(prompts, first, second):
        assert a.token_ids == b.token_ids
        assert a.token_ids == hf_greedy(hf_model, prompt, 24)


def test_top_k_one_equals_greedy(engine, prompts):
    greedy = generate(engine, [request(p, max_tokens=16, temperature=0) for p in prompts])
    top1 = generate(
        engine, [request(p, max_tokens=16, temperature=0.8, top_k=1, seed=i) for i, p in enumerate(prompts)]
    )
    assert [c.token_ids for c in top1] == [c.token_ids for c in greedy]


def test_same_seed_gives_same_tokens_whatever_the_batch(engine, prompts):
    target = request(prompts[0], max_tokens=20, temperature=1.0, top_p=0.9, seed=123)
    alone = generate(engine, [target])[0]
    others = [request(p, max_tokens=7 + i, temperature=1.0, seed=i) for i, p in enumerate(prompts[1:])]
    in_batch = generate(engine, [others[0], target, others[1]])[1]
    assert in_batch.token_ids == alone.token_ids
    other_seed = generate(engine, [request(prompts[0], max_tokens=20, temperature=1.0, top_p=0.9, seed=124)])[
        0
    ]
    assert other_seed.token_ids != alone.token_ids  # the seed matters (20 draws from ~384 tokens)


def test_samples_of_one_prompt_share_its_prefill_but_not_their_tokens(engine, prompts):
    group = [request(prompts[2], max_tokens=12, temperature=1.0, seed=s) for s in range(4)]
    together = generate(engine, [*group, request(prompts[0], max_tokens=5, temperature=0)])
    alone = [generate(engine, [r])[0] for r in group]
    assert [c.token_ids for c in together[:4]] == [c.token_ids for c in alone]
    assert len({tuple(c.token_ids) for c in alone}) > 1
    assert (
        together[4].token_ids
        == generate(engine, [request(prompts[0], max_tokens=5, temperature=0)])[0].token_ids
    )


def test_unseeded_requests_are_reproducible_per_engine_seed(tiny_model_dir, prompts):
    def run(seed):
        engine = HFEngine(tiny_model_dir, seed=seed)
        try:
            return [c.token_ids for c in generate(engine, [request(p, max_tokens=12) for p in prompts])]
        finally:
            engine.close()

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_sampler_logprobs_match_a_full_forward_pass(engine, hf_model, prompts):
    temperature = 0.7
    completions = generate(
        engine, [request(p, max_tokens=24, temperature=temperature, seed=5) for p in prompts]
    )
    diffs = []
    for prompt, completion in zip(prompts, completions):
        ids = torch.tensor([prompt + completion.token_ids])
        with torch.no_grad():
            logits = hf_model(ids).logits[0, len(prompt) - 1 : -1].float()  # predicts each completion token
        expected = torch.log_softmax(logits / temperature, dim=-1)
        expected = expected.gather(1, torch.tensor(completion.token_ids)[:, None]).squeeze(1)
        assert len(completion.logprobs) == len(completion.token_ids)
        diffs.append((expected - torch.tensor(completion.logprobs)).abs())
    assert torch.cat(diffs).mean().item() <= 1e-4
    # Scaling by T is visible: at T=1 the same tokens would have clearly different logprobs.
    unscaled = torch.log_softmax(logits, -1).gather(1, torch.tensor(completion.token_ids)[:, None]).squeeze(1)
    assert (unscaled - torch.tensor(completion.logprobs)).abs().mean().item() > 1e-2


def test_stop_token_ids_end_the_completion_and_keep_the_token(engine, prompts):
    reference = generate(engine, [request(prompts[2], max_tokens=16, temperature=0)])[0].token_ids
    stop_token = reference[5]
    end = reference.index(stop_token) + 1
    completion = generate(
        engine, [request(prompts[2], max_tokens=16, temperature=0, stop_token_ids=[stop_token])]
    )[0]
    assert completion.token_ids == reference[:end]
    assert completion.finish_reason == "stop"


def test_generation_config_eos_stops_generation(tiny_model_dir, tokenizer, prompts):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    reference = hf_greedy(model, prompts[1], 16)
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, reference[4]]
    engine = HFEngine(model, tokenizer)
    try:
        completion = generate(engine, [request(prompts[1], max_tokens=16, temperature=0)])[0]
    finally:
        engine.close()
    assert completion.token_ids == reference[: reference.index(reference[4]) + 1]
    assert completion.finish_reason == "stop"


def test_stop_string_ends_after_the_completing_token_and_stays_in_text(engine, tokenizer, prompts):
    reference = generate(engine, [request(prompts[0], max_tokens=24, temperature=0)])[0].token_ids
    full_text = tokenizer.decode(reference, skip_special_tokens=True)
    stop = full_text[10:13]
    # Expected end: the first prefix of the reference whose text contains the stop string.
    end = next(
        n
        for n in range(1, len(reference) + 1)
        if stop in tokenizer.decode(reference[:n], skip_special_tokens=True)
    )
    completion = generate(engine, [request(prompts[0], max_tokens=24, temperature=0, stop=[stop])])[0]
    assert completion.token_ids == reference[:end]
    assert completion.finish_reason == "stop"
    assert stop in completion.text  # kept, not stripped


def test_rows_finish_independently_in_one_batch(engine, prompts):
    completions = generate(
        engine, [request(p, max_tokens=n, temperature=0) for p, n in zip(prompts, (3, 17, 9))]
    )
    assert [len(c.token_ids) for c in completions] == [3, 17, 9]


def test_concurrent_single_request_callers_share_one_batch(tiny_model_dir, prompts):
    engine = HFEngine(tiny_model_dir)

    async def many_callers():
        calls = [engine.generate([request(prompts[i % 3], max_tokens=4, seed=i)]) for i in range(8)]
        return await asyncio.gather(*calls)

    try:
        results = asyncio.run(many_callers())
        assert len(results) == 8 and all(len(r) == 1 for r in results)
        assert engine.stats.batches == 1 and engine.stats.requests == 8
    finally:
        engine.close()


def test_continuous_batching_late_arrivals_join_and_finish_first(tiny_model_dir, prompts):
    engine = HFEngine(tiny_model_dir, max_batch_size=4)
    engine.limits = dataclasses.replace(engine.limits, eos_ids=frozenset())  # rows run their whole budget
    finished: list[str] = []

    async def tagged(tag: str, req: GenerationRequest):
        (completion,) = await engine.generate([req])
        finished.append(tag)
        return completion

    async def scenario():
        early = [
            asyncio.ensure_future(tagged(f"long{i}", request(prompts[0], max_tokens=150, seed=i)))
            for i in range(3)
        ]
        await asyncio.sleep(0.05)
        assert not any(task.done() for task in early)  # the long rows are decoding
        # The cap is 4: one row is free, so the first late request joins the running batch; the
        # second waits for a free row, which the first frees long before any long row ends.
        late = [
            asyncio.ensure_future(tagged(f"short{i}", request(prompts[1], max_tokens=3, seed=i)))
            for i in range(2)
        ]
        return await asyncio.gather(*early, *late)

    try:
        completions = asyncio.run(scenario())
        assert [len(c.token_ids) for c in completions] == [150, 150, 150, 3, 3]
        assert finished[:2] == ["short0", "short1"]  # joined while the long rows ran, and left first
        assert engine.stats.requests == 5 and engine.stats.batches == 3  # admissions: 3 long, then 1, 1
    finally:
        engine.close()


def test_joining_rows_do_not_change_what_a_seed_samples(tiny_model_dir, prompts):
    """A row's tokens depend on its own prompt and seed, not on who joined or left the batch (fp32)."""
    engine = HFEngine(tiny_model_dir, max_batch_size=8)
    reqs = [request(prompts[i % 3], max_tokens=5 + 7 * i, seed=100 + i) for i in range(6)]
    try:
        alone = [generate(engine, [r])[0] for r in reqs]

        async def staggered():
            tasks = []
            for r in reqs:
                tasks.append(asyncio.ensure_future(engine.generate([r])))
                await asyncio.sleep(0.01)  # each arrives while the earlier ones decode
            return [(await t)[0] for t in tasks]

        together = asyncio.run(staggered())
        assert engine.stats.batches > 2  # they really joined a running batch at different times
    finally:
        engine.close()
    assert [c.token_ids for c in together] == [c.token_ids for c in alone]
    for a, b in zip(together, alone):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4


def test_pause_holds_new_batches_until_resume(tiny_model_dir, prompts):
    engine = HFEngine(tiny_model_dir)

    async def scenario():
        await engine.pause()
        task = asyncio.ensure_future(engine.generate([request(prompts[0], max_tokens=4, temperature=0)]))
        await asyncio.sleep(0.2)
        assert not task.done() and engine.stats.batches == 0
        await engine.resume()
        completion = (await asyncio.wait_for(task, timeout=10))[0]
        assert len(completion.token_ids) == 4

    try:
        asyncio.run(scenario())
    finally:
        engine.close()


def test_closing_a_paused_engine_fails_its_queued_request_and_ends_the_batcher(tiny_model_dir, prompts):
    """A request queued behind a pause gets a one-line error on close, and the batcher's task ends
    (it used to wait for the release for good, destroyed pending when its event loop went)."""
    engine = HFEngine(tiny_model_dir)

    async def scenario():
        await engine.pause()
        queued = asyncio.ensure_future(engine.generate([request(prompts[0], max_tokens=4, temperature=0)]))
        await asyncio.sleep(0.1)
        batcher_task = engine._batcher._state.task
        assert batcher_task is not None and not batcher_task.done()  # waiting for the release
        engine.close()
        with pytest.raises(RuntimeError, match="closed while this request was queued"):
            await asyncio.wait_for(queued, timeout=10)
        await asyncio.wait_for(batcher_task, timeout=10)  # ends by itself, not cancelled
        assert not batcher_task.cancelled()

    asyncio.run(scenario())


def test_pause_returns_after_the_batch_in_flight(tiny_model_dir, prompts):
    engine = HFEngine(tiny_model_dir)

    async def scenario():
        running = asyncio.ensure_future(engine.generate([request(prompts[0], max_tokens=200, temperature=0)]))
        await asyncio.sleep(0.05)
        assert not running.done()
        await engine.pause()
        assert engine.stats.batches == 1  # pause returned only after the batch in flight finished
        assert len((await running)[0].token_ids) > 0
        await engine.resume()

    try:
        asyncio.run(scenario())
    finally:
        engine.close()


def test_weight_update_during_a_batch_applies_to_the_next_batch(tiny_model_dir, tmp_path, prompts, engine):
    other = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "other", seed=1))
    greedy = request(prompts[0], max_tokens=200, temperature=0)
    updating = HFEngine(tiny_model_dir)

    async def scenario():
        in_flight = asyncio.ensure_future(updating.generate([greedy]))
        await asyncio.sleep(0.05)
        assert not in_flight.done()
        await updating.update_weights(other.state_dict(), version=1)
        assert updating.stats.batches == 1  # the update waited for the batch, which kept the old weights
        return (await in_flight)[0], (await updating.generate([greedy]))[0]

    try:
        old_weights, new_weights = asyncio.run(scenario())
        reference = generate(engine, [greedy])[0]  # the shared engine keeps the original weights
        assert old_weights.token_ids == reference.token_ids and old_weights.policy_version == 0
        assert new_weights.token_ids != reference.token_ids and new_weights.policy_version == 1
    finally:
        updating.close()


def test_sleep_rejects_generate_until_wake_up(tiny_model_dir, prompts):
    engine = HFEngine(tiny_model_dir)

    async def scenario():
        await engine.sleep()
        with pytest.raises(RuntimeError, match="asleep"):
            await engine.generate([request(prompts[0], max_tokens=2)])
        await engine.wake_up()
        return await engine.generate([request(prompts[0], max_tokens=2)])

    try:
        assert len(asyncio.run(scenario())[0].token_ids) == 2
    finally:
        engine.close()


def test_update_weights_changes_outputs_and_version(tiny_model_dir, tmp_path, prompts):
    other_dir = build_tiny_model(tmp_path / "other", seed=1)
    other = AutoModelForCausalLM.from_pretrained(other_dir)
    greedy = [request(p, max_tokens=12, temperature=0) for p in prompts]
    engine, reference = HFEngine(tiny_model_dir), HFEngine(other_dir)
    try:
        before = generate(engine, greedy)
        asyncio.run(engine.update_weights(other.state_dict().items(), version=3))
        after = generate(engine, greedy)
        assert engine.version == 3 and all(c.policy_version == 3 for c in after)
        assert [c.token_ids for c in after] != [c.token_ids for c in before]
        assert [c.token_ids for c in after] == [c.token_ids for c in generate(reference, greedy)]
        # The path form loads the same weights from a checkpoint directory.
        asyncio.run(engine.update_weights(tiny_model_dir, version=4))
        assert [c.token_ids for c in generate(engine, greedy)] == [c.token_ids for c in before]
    finally:
        engine.close()
        reference.close()


def test_update_weights_tied_embedding_updates_the_output_layer(tiny_model_dir, prompts):
    engine = HFEngine(tiny_model_dir)
    try:
        embedding = engine.model.get_input_embeddings().weight
        asyncio.run(
            engine.update_weights([("model.embed_tokens.weight", torch.zeros_like(embedding))], version=1)
        )
        completion = generate(engine, [request(prompts[0], max_tokens=3, temperature=0.5, seed=0)])[0]
        # All-zero tied embeddings make every logit 0: a uniform distribution over the vocabulary.
        assert completion.logprobs == pytest.approx(
            [-torch.log(torch.tensor(float(embedding.shape[0]))).item()] * 3
        )
    finally:
        engine.close()


def test_update_weights_rejects_unknown_names_without_changing_anything(tiny_model_dir, prompts):
    engine = HFEngine(tiny_model_dir)
    try:
        greedy = [request(prompts[0], max_tokens=8, temperature=0)]
        before = generate(engine, greedy)[0].token_ids
        good = ("model.norm.weight", torch.zeros(64))
        with pytest.raises(KeyError, match="unknown weight name"):
            asyncio.run(
                engine.update_weights([good, ("model.not_a_layer.weight", torch.zeros(3))], version=9)
            )
        with pytest.raises(ValueError, match="shape"):
            asyncio.run(engine.update_weights([("model.norm.weight", torch.zeros(3))], version=9))
        assert engine.version == 0
        assert generate(engine, greedy)[0].token_ids == before
    finally:
        engine.close()


def test_engine_keeps_its_own_copy_of_a_model_object(tiny_model_dir, tokenizer, prompts):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    engine = HFEngine(model, tokenizer)
    try:
        before = generate(engine, [request(prompts[0], max_tokens=8, temperature=0)])[0].token_ids
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(1.0)  # a training step on the original must not leak into the engine
        assert generate(engine, [request(prompts[0], max_tokens=8, temperature=0)])[0].token_ids == before
    finally:
        engine.close()


def test_bfloat16_engine_generates_with_float_logprobs(tiny_model_dir, prompts):
    engine = HFEngine(tiny_model_dir, dtype="bfloat16")
    try:
        assert engine.model.dtype == torch.bfloat16
        completion = generate(engine, [request(prompts[0], max_tokens=6, temperature=0.7, seed=1)])[0]
        assert len(completion.logprobs) == 6 and all(lp <= 0 for lp in completion.logprobs)
    finally:
        engine.close()


def test_auto_dtype_picks_bf16_only_with_native_support(tiny_model_dir):
    from aloft.models import cpu_has_native_bf16

    engine = HFEngine(tiny_model_dir, dtype="auto")
    try:
        assert engine.model.dtype == (torch.bfloat16 if cpu_has_native_bf16() else torch.float32)
    finally:
        engine.close()


def test_bad_requests_fail_with_one_clear_line(engine):
    with pytest.raises(ValueError, match="prompt_ids is empty"):
        generate(engine, [request([], max_tokens=2)])
    with pytest.raises(ValueError, match="outside"):
        generate(engine, [request([1, 10_000], max_tokens=2)])
    with pytest.raises(ValueError, match="context"):
        generate(engine, [request([5] * 512, max_tokens=2)])
    with pytest.raises(ValueError, match="unknown dtype"):
        HFEngine("unused", dtype="float8")


def test_context_limit_ends_generation_with_length(engine):
    completion = generate(engine, [request([5] * 508, max_tokens=50, temperature=0)])[0]
    assert len(completion.token_ids) == 4  # 508 prompt tokens + 4 = max_position_embeddings 512
    assert completion.finish_reason == "length"


def test_empty_request_list_returns_immediately(engine):
    started = time.perf_counter()
    assert generate(engine, []) == []
    assert time.perf_counter() - started < 1.0


def test_bfloat16_engine_prepacks_its_linears_with_identical_outputs(tiny_model_dir, prompts):
    """On CPU the bf16 engine's linears use oneDNN-prepacked weights; the logits are bit-identical."""
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16).eval()
    engine = HFEngine(tiny_model_dir, dtype="bfloat16")
    try:
        packed = [m for m in engine.model.modules() if isinstance(m, PrepackedLinear)]
        if prepacking_supported(plain):
            assert len(packed) == sum(1 for m in plain.modules() if type(m) is torch.nn.Linear)
        with torch.inference_mode():
            ids = torch.tensor([prompts[2]])
            assert torch.equal(engine.model(ids).logits, plain(ids).logits)
    finally:
        engine.close()


def test_float32_engine_prepacks_its_linears_and_a_rows_output_ignores_the_other_rows(
    tiny_model_dir, prompts
):
    """On CPU the float32 engine's linears use oneDNN-prepacked weights where this CPU's packed kernel
    gives a row the same bits in any batch: logits within float rounding of the plain model's, and
    (packed or not) a row's result is the same whatever else is in the batch (identical requests must
    get identical logprobs, in any batch)."""
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    engine = HFEngine(tiny_model_dir, dtype="float32")
    try:
        packed = [m for m in engine.model.modules() if isinstance(m, PrepackedLinear)]
        assert prepacking_supported(plain) == packed_rows_are_independent()
        if prepacking_supported(plain):
            assert len(packed) == sum(1 for m in plain.modules() if type(m) is torch.nn.Linear)
        with torch.inference_mode():
            ids = torch.tensor([prompts[2]])
            expected = plain(ids).logits
            torch.testing.assert_close(engine.model(ids).logits, expected, rtol=1e-5, atol=1e-5)
            linear = next(m for m in engine.model.modules() if isinstance(m, torch.nn.Linear))
            generator = torch.Generator().manual_seed(0)
            row = torch.randn(1, linear.in_features, generator=generator)
            for rows, at in ((1, 0), (7, 3), (32, 31), (33, 32), (64, 5)):
                batch = torch.randn(rows, linear.in_features, generator=generator)
                batch[at] = row[0]
                assert torch.equal(linear(batch)[at], linear(row)[0]), (rows, at)
    finally:
        engine.close()


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_weight_updates_reach_the_prepacked_weights(tiny_model_dir, tmp_path, prompts, dtype):
    other_dir = build_tiny_model(tmp_path / "other", seed=1)
    other = AutoModelForCausalLM.from_pretrained(other_dir)
    greedy = [request(p, max_tokens=12, temperature=0) for p in prompts]
    engine = HFEngine(tiny_model_dir, dtype=dtype)
    reference = HFEngine(other_dir, dtype=dtype)
    try:
        before = generate(engine, greedy)
        asyncio.run(engine.update_weights(other.state_dict().items(), version=1))
        after, expected = generate(engine, greedy), generate(reference, greedy)
        assert (
            [c.token_ids for c in after] == [c.token_ids for c in expected] != [c.token_ids for c in before]
        )
        assert [c.logprobs for c in after] == [c.logprobs for c in expected]
        asyncio.run(engine.update_weights(tiny_model_dir, version=2))  # the checkpoint path repacks too
        assert [c.token_ids for c in generate(engine, greedy)] == [c.token_ids for c in before]
    finally:
        engine.close()
        reference.close()


def test_engine_builds_its_model_on_the_compute_thread(tiny_model_dir, tokenizer, monkeypatch):
    """Loading, copying, casting and prepacking run parallel torch ops; on the caller's thread they would
    start a second OpenMP team, which made decoding 1.75x slower on the 2-core machine."""
    built_on = []

    def recording(*args):
        built_on.append(threading.get_ident())
        return private_model(*args)

    private_model = hf_module._private_model
    monkeypatch.setattr(hf_module, "_private_model", recording)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    engines = [HFEngine(tiny_model_dir, dtype="bfloat16"), HFEngine(model, tokenizer, dtype="bfloat16")]
    for engine in engines:
        engine.close()
    assert built_on == [on_compute_thread(threading.get_ident)] * 2 != [threading.get_ident()] * 2
