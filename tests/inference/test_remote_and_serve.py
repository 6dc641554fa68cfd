"""``aloft serve`` (a real uvicorn server on loopback) driven through the ``remote`` engine."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import torch
from fastapi import FastAPI
from safetensors.torch import load_file, save_file
from transformers import AutoTokenizer

from aloft.data import build_dataset, validate_row
from aloft.inference import InferenceEngine, make_engine, registered_engines
from aloft.inference.capture import CaptureStore, load_sessions
from aloft.inference.hf import HFEngine
from aloft.inference.remote import RemoteEngine, RemoteEngineError
from aloft.inference.scripted import ScriptedEngine
from aloft.inference.server import ServerThread, build_app
from aloft.rollout import EpisodeLimits, Generator
from aloft.types import GenerationRequest, SamplingParams

KEY = "sekret"


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def prompt(tokenizer) -> list[int]:
    chat = [{"role": "user", "content": "What is 2+3?"}]
    return list(tokenizer.apply_chat_template(chat, add_generation_prompt=True)["input_ids"])


@pytest.fixture(scope="module")
def local(tiny_model_dir):
    engine = HFEngine(tiny_model_dir)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def served(tiny_model_dir, tokenizer):
    """An hf engine served with an API key; yields (server url, served engine)."""
    engine = HFEngine(tiny_model_dir)
    with ServerThread(build_app(engine, tokenizer, model_name="tiny", api_key=KEY)) as server:
        yield server.url, engine
    engine.close()


@pytest.fixture
def remote(served):
    engine = RemoteEngine([served[0]], api_key=KEY, timeout_s=30)
    yield engine
    engine.close()


def req(prompt_ids, session_id=None, **sampling) -> GenerationRequest:
    return GenerationRequest(
        prompt_ids=list(prompt_ids), sampling=SamplingParams(**sampling), session_id=session_id
    )


def run(engine, requests):
    return asyncio.run(engine.generate(requests))


def test_registry_and_protocol(served):
    assert "remote" in registered_engines()
    engine = make_engine("remote", urls=[served[0]], api_key=KEY)
    assert isinstance(engine, RemoteEngine) and isinstance(engine, InferenceEngine)
    engine.close()


def test_token_out_lengths_max_tokens_and_matching_logprobs(remote, local, prompt):
    (c,) = run(remote, [req(prompt, max_tokens=7, temperature=1.0, seed=3)])
    assert len(c.token_ids) == len(c.logprobs) == 7 and c.finish_reason == "length"
    (ref,) = run(local, [req(prompt, max_tokens=7, temperature=1.0, seed=3)])
    assert c.token_ids == ref.token_ids
    assert max(abs(a - b) for a, b in zip(c.logprobs, ref.logprobs)) <= 1e-4
    assert c.text == ref.text


def test_a_sessions_next_turn_reuses_the_served_engines_cache(tiny_model_dir, tokenizer, prompt):
    """The remote engine's X-Session-Id reaches the served hf engine, whose prefix cache then keeps the
    trajectory: its second turn prefills only the tokens after the first."""
    engine = HFEngine(tiny_model_dir)
    with ServerThread(build_app(engine, tokenizer, model_name="tiny")) as server:
        remote = RemoteEngine([server.url], timeout_s=30)
        try:
            (first,) = asyncio.run(
                remote.generate([req(prompt, session_id="traj-1", max_tokens=6, temperature=0)])
            )
            before = engine.stats.prefilled_tokens
            turn_two = prompt + first.token_ids + [5, 6, 7]
            asyncio.run(remote.generate([req(turn_two, session_id="traj-1", max_tokens=4, temperature=0)]))
            assert (
                engine.stats.prefilled_tokens - before == 1 + 3
            )  # the last sampled token and the observation
            assert engine.prefix_cache.hits == 1
        finally:
            remote.close()
    engine.close()


def test_ended_sessions_free_the_served_engines_cache(tiny_model_dir, tokenizer, prompt, tmp_path):
    """Multi-turn episodes through the remote engine over two ``aloft serve`` on hf engines: when
    each ends, the generator ends its session, the remote engine forgets its pin and tells its server,
    which frees the KV kept for a next turn. ``POST /sessions/end`` covers an n=2 request's per-sample
    sessions; a captured session's posted reward ends it too."""
    engines = [HFEngine(tiny_model_dir), HFEngine(tiny_model_dir)]
    capture = CaptureStore(tmp_path / "capture")
    apps = [build_app(engines[0], tokenizer, capture=capture), build_app(engines[1], tokenizer)]
    with ServerThread(apps[0]) as a, ServerThread(apps[1]) as b:
        remote = RemoteEngine([a.url, b.url], timeout_s=30)
        try:
            gen = Generator(
                remote,
                tokenizer,
                limits=EpisodeLimits(max_turns=3, max_total_tokens=200),
                env_configs={"arithmetic": {"max_turns": 3}},
            )
            rows = [
                validate_row(r, i, "test") for i, r in enumerate(build_dataset("arithmetic", n=4, seed=3))
            ]
            groups = gen.generate_sync(
                rows, n=2, sampling=SamplingParams(max_tokens=8, temperature=1.0), seed=1
            )
            assert sum(t.info["turns"] for g in groups for t in g.trajectories) > 8  # later turns ran
            assert all(e.stats.requests > 0 for e in engines)  # both servers served episodes
            assert sum(e.prefix_cache.hits for e in engines) > 0
            assert [len(e.prefix_cache) for e in engines] == [0, 0] and not remote._sessions

            headers = {"X-Session-Id": "s"}
            body = {"prompt": prompt, "max_tokens": 4, "n": 2, "temperature": 1.0}
            assert httpx.post(f"{b.url}/v1/completions", json=body, headers=headers).status_code == 200
            assert len(engines[1].prefix_cache.histories) == 2  # sessions s/0 and s/1
            ended = httpx.post(f"{b.url}/sessions/end", json={"session_ids": ["s"]})
            assert ended.json() == {"status": "ok", "ended": 1} and len(engines[1].prefix_cache) == 0

            chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
            assert httpx.post(f"{a.url}/sessions/agent-1/v1/chat/completions", json=chat).status_code == 200
            assert len(engines[0].prefix_cache.histories) == 1
            httpx.post(f"{a.url}/sessions/agent-1/reward", json={"reward": 1.0}).raise_for_status()
            assert len(engines[0].prefix_cache) == 0
        finally:
            remote.close()
    for engine in engines:
        engine.close()


def test_http_api_key_and_openai_fields(served, prompt):
    url, _ = served
    assert httpx.get(f"{url}/health").status_code == 200
    assert httpx.get(f"{url}/v1/models").status_code == 401
    body = {"prompt": prompt, "max_tokens": 4, "temperature": 0, "logprobs": 1}
    assert httpx.post(f"{url}/v1/completions", json=body).status_code == 401
    auth = {"Authorization": f"Bearer {KEY}"}
    assert (
        httpx.post(f"{url}/v1/completions", json=body, headers={"Authorization": "Bearer no"}).status_code
        == 401
    )
    models = httpx.get(f"{url}/v1/models", headers=auth).json()
    assert models["data"][0]["id"] == "tiny"
    out = httpx.post(
        f"{url}/v1/completions", json={**body, "n": 2, "return_tokens_as_token_ids": True}, headers=auth
    ).json()
    assert len(out["choices"]) == 2
    choice = out["choices"][0]
    assert choice["logprobs"]["tokens"] == [f"token_id:{t}" for t in choice["token_ids"]]
    assert len(choice["logprobs"]["token_logprobs"]) == 4 and out["usage"]["completion_tokens"] == 8
    text = httpx.post(f"{url}/v1/completions", json={"prompt": "hello", "max_tokens": 3}, headers=auth).json()
    assert len(text["choices"][0]["token_ids"]) == 3
    tools = [
        {
            "type": "function",
            "function": {"name": "add", "description": "add", "parameters": {"type": "object"}},
        }
    ]
    chat = httpx.post(
        f"{url}/v1/chat/completions",
        json={
            "messages": [{"role": "user", "content": "hi"}],
            "tools": tools,
            "max_tokens": 3,
            "logprobs": True,
        },
        headers=auth,
    ).json()
    message = chat["choices"][0]
    assert message["message"]["role"] == "assistant" and len(message["logprobs"]["content"]) == len(
        message["token_ids"]
    )
    assert (
        httpx.post(
            f"{url}/v1/completions", json={"prompt": [10**9], "max_tokens": 2}, headers=auth
        ).status_code
        == 400
    )


def test_update_weights_follows_new_weights(tiny_model_dir, tokenizer, prompt, tmp_path):
    state = load_file(f"{tiny_model_dir}/model.safetensors")
    generator = torch.Generator().manual_seed(0)
    perturbed = {
        k: v + 0.5 * torch.randn(v.shape, generator=generator) if v.dim() == 2 else v
        for k, v in state.items()
    }
    checkpoint = tmp_path / "perturbed.safetensors"
    save_file(perturbed, str(checkpoint))
    served_engine, local = HFEngine(tiny_model_dir), HFEngine(tiny_model_dir)
    with ServerThread(build_app(served_engine, tokenizer)) as server:
        remote = RemoteEngine([server.url])
        greedy = [req(prompt, max_tokens=10, temperature=0)]
        (before,) = run(remote, greedy)
        asyncio.run(remote.update_weights(str(checkpoint), version=1))
        asyncio.run(local.update_weights(str(checkpoint), version=1))
        (after,) = run(remote, greedy)
        (expected,) = run(local, greedy)
        assert remote.version == 1 and after.policy_version == 1
        assert after.token_ids == expected.token_ids and after.token_ids != before.token_ids
        assert max(abs(a - b) for a, b in zip(after.logprobs, expected.logprobs)) <= 1e-4
        # Named tensors go through a temporary safetensors file; back to the original weights.
        asyncio.run(remote.update_weights(state, version=2))
        (restored,) = run(remote, greedy)
        assert restored.token_ids == before.token_ids and restored.policy_version == 2
        asyncio.run(remote.pause())
        asyncio.run(remote.resume())
        remote.close()
    served_engine.close()
    local.close()


def _stub_completion(token_ids):
    return {
        "choices": [
            {
                "index": 0,
                "text": "x",
                "finish_reason": "length",
                "logprobs": {
                    "tokens": [f"token_id:{t}" for t in token_ids],
                    "token_logprobs": [-0.5] * len(token_ids),
                },
            }
        ]
    }


def test_retries_a_503_then_succeeds():
    app, calls = FastAPI(), []

    @app.post("/v1/completions")
    async def completions():
        from fastapi.responses import JSONResponse

        calls.append(1)
        if len(calls) == 1:
            return JSONResponse({"error": "busy"}, status_code=503)
        return _stub_completion([5, 6])

    with ServerThread(app) as server:
        engine = RemoteEngine([server.url], model="stub", backoff_s=0.01)
        (c,) = run(engine, [req([1, 2], max_tokens=2)])
        assert c.token_ids == [5, 6] and c.logprobs == [-0.5, -0.5] and len(calls) == 2
        failing = RemoteEngine([server.url], model="stub", max_retries=0)
        calls.clear()
        with pytest.raises(RemoteEngineError, match="503"):
            run(failing, [req([1, 2], max_tokens=2)])
        engine.close()
        failing.close()


def test_sticky_sessions_over_two_servers(tokenizer):
    engines = [ScriptedEngine(tokenizer, ["hello there"]) for _ in range(2)]
    apps = [build_app(e, tokenizer) for e in engines]
    seen: list[list[str]] = [[], []]
    for index, app in enumerate(apps):

        @app.middleware("http")
        async def record(request, call_next, index=index):
            seen[index].append(request.headers.get("x-session-id"))
            return await call_next(request)

    with ServerThread(apps[0]) as a, ServerThread(apps[1]) as b:
        engine = RemoteEngine([a.url, b.url], model="tiny", max_concurrency=4)
        sessions = [f"traj-{i}" for i in range(6)]

        async def trajectory(session):
            for turn in range(3):
                await engine.generate([req([1, 2, 3 + turn], session_id=session, max_tokens=4)])

        async def main():
            await asyncio.gather(*(trajectory(s) for s in sessions))

        asyncio.run(main())
        pinned = {s: engine._sessions[s] for s in sessions}
        assert set(pinned.values()) == {0, 1}  # both servers used
        counts = [app.state.stats.completions for app in apps]
        expected = [3 * sum(1 for i in pinned.values() if i == k) for k in range(2)]
        assert counts == expected == engine.requests_per_server
        # every turn of a session hit one server, and each server saw whole sessions only
        assert not set(seen[0]) & set(seen[1])
        assert sorted(seen[0] + seen[1]) == sorted(s for s in sessions for _ in range(3))
        engine.close()


def test_aloft_serve_cli_end_to_end(tiny_model_dir, prompt, local, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "aloft.cli", "serve", tiny_model_dir, "--port", str(port), "--api-key", KEY]
        + ["--capture", str(tmp_path / "capture"), "engine.dtype=float32"],  # as the local reference
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stderr.read().decode()[-2000:]
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "aloft serve did not come up"
            time.sleep(0.1)
        engine = RemoteEngine([url], api_key=KEY)
        (c,) = run(engine, [req(prompt, max_tokens=6, seed=5)])
        (ref,) = run(local, [req(prompt, max_tokens=6, seed=5)])
        assert c.token_ids == ref.token_ids
        assert max(abs(a - b) for a, b in zip(c.logprobs, ref.logprobs)) <= 1e-4
        assert engine.model == tiny_model_dir  # the served model name defaults to MODEL
        engine.close()
        # --capture DIR: a session's requests land in DIR/<session>.jsonl with the sampled ids.
        body = {"prompt": prompt, "max_tokens": 5, "logprobs": 1}
        headers = {"Authorization": f"Bearer {KEY}"}
        out = httpx.post(f"{url}/sessions/cli-1/v1/completions", json=body, headers=headers).json()
        (call,) = load_sessions(tmp_path / "capture")["cli-1"]
        assert call.token_ids == out["choices"][0]["token_ids"] and call.prompt_ids == prompt
        assert call.logprobs == out["choices"][0]["logprobs"]["token_logprobs"]
    finally:
        process.terminate()
        process.wait(timeout=20)


def test_generator_over_two_remote_servers_matches_the_local_engine(tiny_model_dir, tokenizer, served, local):
    """Multi-turn rollouts through RemoteEngine equal the in-process ones token for token."""
    from aloft.data import build_dataset, validate_row
    from aloft.rollout import EpisodeLimits, Generator

    rows = [validate_row(r, i, "test") for i, r in enumerate(build_dataset("arithmetic", n=2, seed=3))]
    limits = EpisodeLimits(max_turns=3, max_total_tokens=120)
    configs = {"arithmetic": {"max_turns": 3}}
    sampling = SamplingParams(max_tokens=12, temperature=1.0)
    second = HFEngine(tiny_model_dir)
    with ServerThread(build_app(second, tokenizer)) as other:
        remote = RemoteEngine([served[0], other.url], api_key=KEY, max_concurrency=8)
        got = Generator(remote, tokenizer, limits=limits, env_configs=configs).generate_sync(
            rows, n=2, sampling=sampling, seed=1
        )
        want = Generator(local, tokenizer, limits=limits, env_configs=configs).generate_sync(
            rows, n=2, sampling=sampling, seed=1
        )
        remote.close()
    second.close()
    pairs = [(a, b) for ga, gb in zip(got, want) for a, b in zip(ga.trajectories, gb.trajectories)]
    assert any(b.info["turns"] > 1 for _, b in pairs)
    for a, b in pairs:
        assert a.completion_ids == b.completion_ids and a.loss_mask == b.loss_mask
        assert max(abs(x - y) for x, y in zip(a.sampler_logprobs, b.sampler_logprobs)) <= 1e-4
    assert all(n > 0 for n in remote.requests_per_server)


def test_concurrency_limit_and_timeout():
    app, state = FastAPI(), {"now": 0, "most": 0}

    @app.post("/v1/completions")
    async def completions(body: dict):
        state["now"] += 1
        state["most"] = max(state["most"], state["now"])
        await asyncio.sleep(0.5 if body["prompt"] == [9] else 0.05)
        state["now"] -= 1
        return _stub_completion([7])

    with ServerThread(app) as server:
        engine = RemoteEngine([server.url], model="stub", max_concurrency=2)
        completions = run(engine, [req([1], max_tokens=1) for _ in range(6)])
        assert [c.token_ids for c in completions] == [[7]] * 6
        assert state["most"] == 2
        slow = RemoteEngine([server.url], model="stub", timeout_s=0.1, max_retries=1, backoff_s=0.01)
        with pytest.raises(RemoteEngineError, match="gave up after 2 tries"):
            run(slow, [req([9], max_tokens=1)])
        engine.close()
        slow.close()
