"""`aloft serve` through the official `openai` SDK on loopback, as an agent harness that knows
nothing of token ids would use it: SmolLM2 behind a real uvicorn server, and a scripted engine where
a test needs the model to write one exact reply (a tool call)."""

from __future__ import annotations

import json

import openai
import pytest

from aloft.inference.hf import HFEngine
from aloft.inference.scripted import ScriptedEngine
from aloft.inference.server import ServerThread, build_app
from aloft.models import load_tokenizer, resolve_model_path

KEY = "sekret"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(resolve_model_path("smollm2-135m-instruct"))


@pytest.fixture(scope="module")
def client(tokenizer):
    engine = HFEngine("smollm2-135m-instruct", dtype="float32")
    with ServerThread(build_app(engine, tokenizer, model_name="smollm2", api_key=KEY)) as server:
        yield openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)
    engine.close()


def scripted_client(tokenizer, reply: str):
    engine = ScriptedEngine(tokenizer, [reply])
    return ServerThread(build_app(engine, tokenizer, model_name="scripted", api_key=KEY))


def greedy(client, prompt: str, **extra):
    return client.completions.create(model="smollm2", prompt=prompt, max_tokens=12, temperature=0, **extra)


def test_models_and_a_plain_completion(client):
    assert [model.id for model in client.models.list().data] == ["smollm2"]
    out = greedy(client, "The capital of France is")
    choice = out.choices[0]
    assert choice.text and choice.finish_reason in ("stop", "length")
    assert out.usage.completion_tokens == len(choice.model_extra["token_ids"]) > 0


def test_a_stop_string_is_left_out_of_the_text_but_its_tokens_are_reported(client, tokenizer):
    whole = greedy(client, "The sea").choices[0].text
    words = whole.split()
    assert len(words) >= 3, whole
    stop = " " + words[2]  # a string the greedy reply is known to contain
    out = greedy(client, "The sea", stop=[stop]).choices[0]
    assert out.finish_reason == "stop"
    assert out.text == whole[: whole.index(stop)] and stop not in out.text
    sampled = tokenizer.decode(out.model_extra["token_ids"], skip_special_tokens=True)
    assert stop in sampled  # the ids (what training uses) still hold every sampled token
    kept = greedy(client, "The sea", stop=[stop], extra_body={"include_stop_str_in_output": True})
    assert kept.choices[0].text.startswith(out.text + stop)


def test_n_samples_with_logprobs(client):
    out = client.completions.create(
        model="smollm2", prompt="Once upon a time", max_tokens=6, n=2, seed=3, logprobs=1, temperature=1.0
    )
    assert [choice.index for choice in out.choices] == [0, 1]
    for choice in out.choices:
        assert len(choice.logprobs.token_logprobs) == len(choice.model_extra["token_ids"]) == 6
        assert all(lp <= 0 for lp in choice.logprobs.token_logprobs)


def test_chat_and_streams_that_join_to_the_whole_reply(client):
    messages = [{"role": "user", "content": "Name a color."}]
    whole = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=12, temperature=0)
    content = whole.choices[0].message.content
    assert whole.choices[0].message.role == "assistant" and content
    chunks = list(
        client.chat.completions.create(
            model="smollm2",
            messages=messages,
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == content
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1  # token by token
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    text = greedy(client, "The capital of France is").choices[0].text
    streamed = greedy(client, "The capital of France is", stream=True)
    assert "".join(chunk.choices[0].text for chunk in streamed) == text


def test_a_tool_call_the_model_writes_comes_back_as_tool_calls(tokenizer):
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    for reply in (
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',  # SmolLM2's and Llama's bare JSON
        'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    ):
        with scripted_client(tokenizer, reply) as server:
            client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)
            out = client.chat.completions.create(model="scripted", messages=messages, tools=[WEATHER])
            choice = out.choices[0]
            assert choice.finish_reason == "tool_calls"
            (call,) = choice.message.tool_calls
            assert call.type == "function" and call.id.startswith("call_")
            assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {
                "city": "Paris"
            }
            assert choice.message.content == (None if reply.startswith("{") else "Let me look.")
            plain = client.chat.completions.create(
                model="scripted", messages=messages, tools=[WEATHER], tool_choice="none"
            )
            assert plain.choices[0].message.tool_calls is None and plain.choices[0].message.content == reply
            chunks = list(
                client.chat.completions.create(
                    model="scripted", messages=messages, tools=[WEATHER], stream=True
                )
            )
            streamed = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
            assert [tc.function.name for tc in streamed] == ["get_weather"]
            assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_errors_are_the_sdks_exceptions(client, tokenizer):
    base = str(client.base_url)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=base, api_key="wrong", max_retries=0).models.list()
    with pytest.raises(openai.BadRequestError, match="n must be >= 1"):
        client.completions.create(model="smollm2", prompt="hi", max_tokens=2, n=0)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.completions.create(
            model="smollm2", prompt="hi", max_tokens=2, extra_body={"temperature": "hot"}
        )
    with pytest.raises(openai.BadRequestError, match="cannot constrain decoding"):
        client.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=2,
            response_format={"type": "json_object"},
        )
    try:
        client.completions.create(model="smollm2", prompt="hi", max_tokens=2, n=0)
    except openai.BadRequestError as error:
        assert error.body["type"] == "invalid_request_error" and "message" in error.body
