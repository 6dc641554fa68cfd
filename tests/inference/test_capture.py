"""Capture: an agent harness written with the official `openai` SDK drives `aloft serve`, and its
session becomes training data token for token (aloft.inference.capture). SmolLM2 behind a real
uvicorn server where the tokens must be sampled; the scripted engine where a test needs one exact
reply (a tool call)."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest

from aloft.inference.capture import CaptureStore, SessionPolicy, load_sessions, session_trajectories
from aloft.inference.hf import HFEngine
from aloft.inference.scripted import ScriptedEngine
from aloft.inference.server import ServerThread, build_app
from aloft.models import load_tokenizer, resolve_model_path
from aloft.types import GenerationRequest, SamplingParams

KEY = "sekret"
CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(resolve_model_path("smollm2-135m-instruct"))


@pytest.fixture(scope="module")
def engine():
    engine = HFEngine("smollm2-135m-instruct", dtype="float32")
    yield engine
    engine.close()


def session_client(url: str, session: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/sessions/{session}/v1", api_key=KEY, max_retries=0)


def policy_tokens(trajectory) -> list[int]:
    return [t for t, m in zip(trajectory.completion_ids, trajectory.loss_mask, strict=True) if m]


def chat(client, messages, **extra):
    return client.chat.completions.create(
        model="smollm2", messages=messages, max_tokens=12, temperature=1.0, seed=3, logprobs=True, **extra
    )


def test_a_multi_turn_harness_is_captured_token_for_token(engine, tokenizer, tmp_path):
    """Three turns through the SDK, each reply appended as it came back: one trajectory whose policy
    tokens are exactly the sampled ids and whose logprobs are the engine's, the user turns masked."""
    store = CaptureStore(tmp_path / "capture")
    with ServerThread(build_app(engine, tokenizer, api_key=KEY, capture=store)) as server:
        client = session_client(server.url, "harness-1")
        messages = [{"role": "user", "content": "Name a color."}]
        sampled, logprobs = [], []
        for follow_up in ("Another one.", "And one more."):
            out = chat(client, messages)
            choice = out.choices[0]
            sampled.append(choice.model_extra["token_ids"])
            logprobs.append([entry.logprob for entry in choice.logprobs.content])
            messages += [choice.message.model_dump(exclude_none=True), {"role": "user", "content": follow_up}]
        last = chat(client, messages).choices[0]
        sampled.append(last.model_extra["token_ids"])
        logprobs.append([entry.logprob for entry in last.logprobs.content])
    # `aloft serve --capture DIR` wrote each call as it happened, and holds none in memory.
    calls = load_sessions(tmp_path / "capture")["harness-1"]
    assert [call.turn for call in calls] == [0, 1, 2] and store.close("harness-1") == ([], False, None)
    assert [call.token_ids for call in calls] == sampled
    (trajectory,) = session_trajectories(calls, group_id="g", reward=1.0)
    assert trajectory.info["forks"] == 0 and trajectory.info["turns"] == 3
    assert policy_tokens(trajectory) == [t for ids in sampled for t in ids]
    assert [lp for lp, m in zip(trajectory.sampler_logprobs, trajectory.loss_mask, strict=True) if m] == [
        lp for turn in logprobs for lp in turn
    ]
    # Each call's prompt is the trajectory up to that turn, token for token.
    whole = trajectory.prompt_ids + trajectory.completion_ids
    for call in calls:
        assert whole[: len(call.prompt_ids)] == call.prompt_ids
    observed = [
        tokenizer.decode(trajectory.completion_ids[s:e]) for s, e in trajectory.info["observation_spans"]
    ]
    assert len(observed) == 2 and "Another one." in observed[0] and "And one more." in observed[1]
    assert trajectory.rewards[max(i for i, m in enumerate(trajectory.loss_mask) if m)] == 1.0
    assert sum(trajectory.rewards) == 1.0


def test_a_harness_that_rewrites_its_history_forks_and_never_trains_on_unsampled_tokens(engine, tokenizer):
    store = CaptureStore()
    with ServerThread(build_app(engine, tokenizer, api_key=KEY, capture=store)) as server:
        client = session_client(server.url, "rewriter")
        messages = [{"role": "user", "content": "Say hello."}]
        first = chat(client, messages).choices[0]
        # The harness keeps its own summary of the reply, not the reply: a re-templated history.
        messages += [
            {"role": "assistant", "content": "(the model greeted)"},
            {"role": "user", "content": "Again."},
        ]
        second = chat(client, messages).choices[0]
    calls, _, _ = store.close("rewriter")
    pieces = session_trajectories(calls, group_id="g", reward=0.5)
    assert len(pieces) == 2 and [p.info["fork"] for p in pieces] == [0, 1]
    assert all(p.info["forks"] == 1 for p in pieces)
    assert policy_tokens(pieces[0]) == first.model_extra["token_ids"]
    assert policy_tokens(pieces[1]) == second.model_extra["token_ids"]
    assert pieces[1].prompt_ids == calls[1].prompt_ids  # the rewritten text is prompt, never trained on
    assert "(the model greeted)" in tokenizer.decode(pieces[1].prompt_ids)
    assert all(p.reward == 0.5 for p in pieces)


def test_an_openai_tool_loop_on_a_template_without_tools_extends_its_session(tokenizer):
    """SmolLM2's template knows neither tools nor tool_calls: the server writes the tools into the
    system message, and the reply it returned (content None, tool_calls) back as the JSON the model
    wrote, so the standard loop works and its second prompt extends the first turn's tokens."""
    call = '{"name": "calculator", "arguments": {"expression": "17 * 3"}}'
    engine = ScriptedEngine(tokenizer, [call, "17 * 3 = 51. The answer is 51."])
    store = CaptureStore()
    with ServerThread(build_app(engine, tokenizer, api_key=KEY, capture=store)) as server:
        client = session_client(server.url, "tools")
        messages = [{"role": "user", "content": "What is 17 * 3?"}]
        reply = client.chat.completions.create(model="m", messages=messages, tools=[CALCULATOR]).choices[0]
        assert reply.finish_reason == "tool_calls" and reply.message.content is None
        (tool_call,) = reply.message.tool_calls
        assert tool_call.function.name == "calculator"
        messages += [
            reply.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": tool_call.id, "content": "51"},
        ]
        final = client.chat.completions.create(model="m", messages=messages, tools=[CALCULATOR]).choices[0]
        assert final.message.content == "17 * 3 = 51. The answer is 51."
    calls, _, _ = store.close("tools")
    first_prompt = tokenizer.decode(calls[0].prompt_ids)
    assert "- calculator(expression: string): Evaluate an arithmetic expression" in first_prompt
    (trajectory,) = session_trajectories(calls, group_id="g", reward=1.0)
    assert policy_tokens(trajectory) == engine.tokenize(call) + engine.tokenize(
        "17 * 3 = 51. The answer is 51."
    )
    (span,) = trajectory.info["observation_spans"]
    assert "51" in tokenizer.decode(trajectory.completion_ids[span[0] : span[1]])


def test_a_training_session_samples_with_the_runs_settings_and_budget(engine, tokenizer):
    """The harness asks for greedy decoding; a governed session samples at the run's temperature with
    the turn's seed (the trainer recomputes logprobs at that temperature), and a request past the
    turn budget is a 400 that marks the session truncated."""
    store = CaptureStore()
    run_sampling = SamplingParams(max_tokens=8, temperature=1.0)
    store.open("episode", SessionPolicy(sampling=run_sampling, seed=11, max_turns=1, max_total_tokens=64))
    with ServerThread(build_app(engine, tokenizer, api_key=KEY, capture=store)) as server:
        client = session_client(server.url, "episode")
        messages = [{"role": "user", "content": "Tell me a story."}]
        out = client.chat.completions.create(model="m", messages=messages, temperature=0, max_tokens=50)
        assert out.usage.completion_tokens <= 8
        messages += [
            out.choices[0].message.model_dump(exclude_none=True),
            {"role": "user", "content": "More."},
        ]
        with pytest.raises(openai.BadRequestError, match="budget of 1 turns"):
            client.chat.completions.create(model="m", messages=messages)
    calls, truncated, _ = store.close("episode")
    assert truncated and len(calls) == 1
    from aloft.seeds import mix_seed

    direct = GenerationRequest(
        prompt_ids=calls[0].prompt_ids,
        sampling=SamplingParams(max_tokens=8, temperature=1.0, seed=mix_seed(11, 0)),
    )
    (expected,) = asyncio.run(engine.generate([direct]))
    assert calls[0].token_ids == expected.token_ids
    (trajectory,) = session_trajectories(calls, group_id="g", reward=0.0, truncated=True)
    assert trajectory.status.value == "length"


def test_rewards_posted_for_a_session_and_unknown_capture_are_errors(tokenizer):
    engine = ScriptedEngine(tokenizer, ["hi"])
    store = CaptureStore()
    with ServerThread(build_app(engine, tokenizer, api_key=KEY, capture=store)) as server:
        import httpx

        headers = {"Authorization": f"Bearer {KEY}"}
        posted = httpx.post(f"{server.url}/sessions/s/reward", json={"reward": 0.75}, headers=headers)
        assert posted.status_code == 200
        for wrong in ("lots", float("nan")):
            bad = httpx.post(
                f"{server.url}/sessions/s/reward",
                content=json.dumps({"reward": wrong}),
                headers={**headers, "Content-Type": "application/json"},
            )
            assert bad.status_code == 400 and "reward" in bad.json()["error"]["message"]
    assert store.close("s")[2] == 0.75
    with ServerThread(build_app(engine, tokenizer, api_key=KEY)) as server:
        response = httpx.post(f"{server.url}/sessions/s/reward", json={"reward": 1}, headers=headers)
        assert response.status_code == 404 and "--capture" in response.json()["error"]["message"]


def test_a_long_running_capture_forgets_its_oldest_sessions_but_never_a_runs_own(tokenizer):
    store = CaptureStore(max_sessions=3)
    store.open("episode", SessionPolicy(sampling=SamplingParams(), seed=0, max_turns=1, max_total_tokens=8))
    for k in range(5):
        store.post_reward(f"harness-{k}", float(k))
    assert store.is_governed("episode")
    remembered = {name for name in (f"harness-{k}" for k in range(5)) if store.close(name)[2] is not None}
    assert remembered == {"harness-3", "harness-4"}
