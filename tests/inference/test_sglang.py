"""SGLang adapters beyond the shared contract: request fields, control calls, errors.

SGLang has no CPU build; these run against ``tests.inference.sglang_standin`` (SGLang's API over a
real ``HFEngine``): the in-process ``SGLangEngine`` and ``RemoteEngine(server="sglang")`` over a real
loopback HTTP server.
"""

from __future__ import annotations

import asyncio

import pytest
from tests.inference.sglang_standin import StandInRuntime, build_sglang_app
from transformers import AutoModelForCausalLM, AutoTokenizer

from aloft.inference.hf import HFEngine
from aloft.inference.remote import RemoteEngine, RemoteEngineError
from aloft.inference.server import ServerThread
from aloft.inference.sglang_engine import SGLangEngine, parse_sglang_output, sglang_request
from aloft.types import GenerationRequest, SamplingParams


@pytest.fixture(scope="module")
def runtime(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    engine = HFEngine(model, AutoTokenizer.from_pretrained(tiny_model_dir), dtype="float32")
    yield StandInRuntime(engine)
    engine.close()


def req(**sampling) -> GenerationRequest:
    return GenerationRequest(prompt_ids=[5, 6, 7], sampling=SamplingParams(**sampling))


def test_request_body_uses_sglang_names():
    body = sglang_request(
        req(max_tokens=7, temperature=0.5, top_k=0, stop=["\n"], stop_token_ids=[3]), seed=9
    )
    assert body == {
        "input_ids": [5, 6, 7],
        "sampling_params": {
            "max_new_tokens": 7,
            "temperature": 0.5,
            "top_p": 1.0,
            "top_k": -1,
            "skip_special_tokens": False,
            "no_stop_trim": True,
            "stop": ["\n"],
            "stop_token_ids": [3],
            "sampling_seed": 9,
        },
        "return_logprob": True,
    }


def test_output_parsing_checks_consistency():
    good = {
        "text": "ab",
        "output_ids": [4, 5],
        "meta_info": {
            "finish_reason": {"type": "stop", "matched": 5},
            "output_token_logprobs": [[-0.5, 4, "a"], [-1.0, 5, "b"]],
            "weight_version": "3",
        },
    }
    completion = parse_sglang_output(good, version=0)
    assert completion.token_ids == [4, 5] and completion.logprobs == [-0.5, -1.0]
    assert completion.finish_reason == "stop" and completion.policy_version == 3
    with pytest.raises(ValueError, match="disagree"):
        parse_sglang_output({**good, "output_ids": [4, 6]}, version=0)
    with pytest.raises(ValueError, match="return_logprob"):
        parse_sglang_output({"text": "", "meta_info": {}}, version=0)


def test_in_process_engine_versions_sleep_and_weights(runtime, tiny_model_dir):
    engine = SGLangEngine(runtime=runtime)

    async def scenario():
        before = await engine.generate([req(max_tokens=5, temperature=0)])
        await engine.sleep()
        assert runtime.memory_released
        await engine.wake_up()
        await engine.update_weights(tiny_model_dir, version=4)  # the same weights, from disk
        after = await engine.generate([req(max_tokens=5, temperature=0)])
        return before[0], after[0]

    before, after = asyncio.run(scenario())
    assert runtime.calls[:3] == [
        "release_memory_occupation",
        "resume_memory_occupation",
        "update_weights_from_disk",
    ]
    assert after.token_ids == before.token_ids and after.policy_version == 4 == engine.version


def test_remote_sglang_pause_holds_requests_and_sleep_releases_memory(runtime):
    with ServerThread(build_sglang_app(runtime)) as server:
        engine = RemoteEngine([server.url], server="sglang", timeout_s=30)

        async def scenario():
            await engine.pause()
            task = asyncio.ensure_future(engine.generate([req(max_tokens=3, temperature=0)]))
            await asyncio.sleep(0.3)
            held = not task.done()
            await engine.resume()
            (completion,) = await asyncio.wait_for(task, 30)
            await engine.sleep()
            released = runtime.memory_released
            await engine.wake_up()
            return held, completion, released

        held, completion, released = asyncio.run(scenario())
        engine.close()
    assert held and len(completion.token_ids) == 3 and released and not runtime.memory_released


def test_remote_sglang_failed_weight_update_is_an_error(runtime, tmp_path):
    with ServerThread(build_sglang_app(runtime)) as server:
        engine = RemoteEngine([server.url], server="sglang", timeout_s=30, max_retries=0)
        with pytest.raises(RemoteEngineError, match="update_weights_from_disk failed"):
            asyncio.run(engine.update_weights(str(tmp_path / "missing"), version=1))
        engine.close()
    assert engine.version == 0
