"""The OpenAI API's shapes for ``aloft serve``: choices, stop strings, tool calls, logprobs, streamed
chunks and errors, built from an engine's ``Completion``s (pure functions, no HTTP).

What a client of the official ``openai`` SDK sees matches OpenAI's API; what RL needs on top travels
in extra fields that SDKs ignore (``token_ids``, ``policy_version``, ``prompt_token_ids``): the token
ids and logprobs always report everything the engine sampled, the stop string's tokens included,
even where ``text`` leaves the stop string out.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from aloft.tool_calls import parse_hermes_calls
from aloft.types import Completion

ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error"}


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error object: ``{"error": {"message", "type", "param", "code"}}``."""
    code = "invalid_api_key" if status == 401 else None
    kind = ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def trim_at_stop(text: str, stops: Sequence[str]) -> str:
    """``text`` up to (not including) the earliest of ``stops`` in it: OpenAI leaves the stop string,
    and anything the engine's last token carried past it, out of the text."""
    cut = min((i for i in (text.find(stop) for stop in stops if stop) if i >= 0), default=len(text))
    return text[:cut]


def choice_text(completion: Completion, tokenizer: Any, stops: Sequence[str], include_stop: bool) -> str:
    text = completion.text or tokenizer.decode(completion.token_ids, skip_special_tokens=True)
    if completion.finish_reason == "stop" and stops and not include_stop:
        text = trim_at_stop(text, stops)
    return text


def tool_calls_in(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """``(content, tool_calls)`` of an assistant reply written in a chat template's tool-call format:
    Hermes/Qwen ``<tool_call>{...}</tool_call>`` blocks, or a reply that is one bare JSON object
    with a ``name`` (Llama 3.x, SmolLM2). ``tool_calls`` in OpenAI's form (``arguments`` a JSON
    string); ``content`` is the text around the calls (None when nothing is left). Malformed calls
    stay in the content, where the caller sees them, never half-parsed into a call."""
    parsed = parse_hermes_calls(text)
    if parsed.calls and parsed.ok:
        content = text
        for call in parsed.calls:
            content = content.replace(call.raw, "")
        calls = [(call.name, call.arguments) for call in parsed.calls]
    else:
        bare = _bare_call(text)
        if bare is None:
            return text, []
        content, calls = "", [bare]
    tool_calls = [
        {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
        }
        for name, arguments in calls
    ]
    return content.strip() or None, tool_calls


def _bare_call(text: str) -> tuple[str, dict[str, Any]] | None:
    try:
        payload = json.loads(text.strip())
    except json.JSONDecodeError:
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
        return None
    arguments = payload.get("arguments", payload.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    return (payload["name"], arguments) if isinstance(arguments, dict) else None


def token_strings(ids: list[int], tokenizer: Any) -> list[str]:
    return [tokenizer.decode([i]) for i in ids]


def completion_logprobs(completion: Completion, tokenizer: Any, as_ids: bool) -> dict[str, Any]:
    """The completions API's ``logprobs`` (only the sampled token's: ``top_logprobs`` holds it)."""
    strings = token_strings(completion.token_ids, tokenizer)
    tokens = [f"token_id:{i}" for i in completion.token_ids] if as_ids else strings
    offsets, offset = [], 0
    for piece in strings:
        offsets.append(offset)
        offset += len(piece)
    return {
        "tokens": tokens,
        "token_logprobs": list(completion.logprobs),
        "top_logprobs": [{t: lp} for t, lp in zip(tokens, completion.logprobs)],
        "text_offset": offsets,
    }


def chat_logprobs(completion: Completion, tokenizer: Any) -> dict[str, Any]:
    """The chat API's ``logprobs``: ``{"content": [{token, logprob, bytes, top_logprobs}]}``."""
    content = []
    for token, logprob in zip(token_strings(completion.token_ids, tokenizer), completion.logprobs):
        entry = {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}
        content.append({**entry, "top_logprobs": [entry]})
    return {"content": content}


def response(
    kind: str,
    choices: list[dict[str, Any]],
    prompts: list[list[int]],
    results: list[tuple[Completion, list[int]]],
    model_name: str,
    version: int,
) -> dict[str, Any]:
    """A whole (not streamed) response around ``choices``."""
    return {
        "id": new_id(kind),
        "object": kind,
        "created": int(time.time()),
        "model": model_name,
        "choices": choices,
        "prompt_token_ids": prompts[0] if len(prompts) == 1 else prompts,
        "policy_version": min((c.policy_version for c, _ in results), default=version),
        "usage": usage(results),
    }


def new_id(kind: str) -> str:
    return f"{'cmpl' if kind == 'text_completion' else 'chatcmpl'}-{uuid.uuid4().hex}"


def usage(results: list[tuple[Completion, list[int]]]) -> dict[str, int]:
    prompt_tokens = sum(len(p) for _, p in results)
    completion_tokens = sum(len(c.token_ids) for c, _ in results)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def text_pieces(token_ids: list[int], tokenizer: Any, text: str) -> list[str]:
    """``text`` cut where each token's decoded text ends (what a stream sends token by token); the
    pieces join to ``text`` exactly (one piece when decoding is not prefix-stable). It decodes every
    prefix, so its cost grows with the square of the length: for streams only."""
    pieces, sent = [], 0
    for k in range(1, len(token_ids) + 1):
        decoded = tokenizer.decode(token_ids[:k], skip_special_tokens=True)
        end = min(len(decoded), len(text))
        if decoded[:end] != text[:end]:
            return [text] if text else []
        if end > sent:
            pieces.append(text[sent:end])
            sent = end
    if sent < len(text):
        pieces.append(text[sent:])
    return pieces


def sse(payload: dict[str, Any] | str) -> str:
    """One server-sent event (``data: ...`` and a blank line)."""
    return f"data: {payload if isinstance(payload, str) else json.dumps(payload)}\n\n"


def stream_events(
    kind: str,
    model_name: str,
    choices: list[dict[str, Any]],
    pieces: list[list[str]],
    results: list[tuple[Completion, list[int]]],
    include_usage: bool,
) -> Iterator[str]:
    """The server-sent events of a streamed response: each choice's text in ``pieces`` (one chunk
    per token), its tool calls and finish reason, the usage when asked, then ``[DONE]``.
    ``choices``: the whole response's choices (``text`` or ``message``), for everything but the text."""
    chat = kind == "chat.completion"
    head = {"id": new_id(kind), "created": int(time.time()), "model": model_name}
    head["object"] = "chat.completion.chunk" if chat else "text_completion"

    def chunk(index: int, body: dict[str, Any], finish: str | None = None) -> str:
        extra = {"finish_reason": finish, "logprobs": None}
        return sse({**head, "choices": [{"index": index, **body, **extra}]})

    for choice, texts in zip(choices, pieces):
        index = choice["index"]
        if chat:
            yield chunk(index, {"delta": {"role": "assistant", "content": ""}})
            for piece in texts:
                yield chunk(index, {"delta": {"content": piece}})
            calls = choice["message"].get("tool_calls") or []
            if calls:
                delta = [{"index": i, **call} for i, call in enumerate(calls)]
                yield chunk(index, {"delta": {"tool_calls": delta}})
            yield chunk(index, {"delta": {}}, choice["finish_reason"])
        else:
            for piece in texts:
                yield chunk(index, {"text": piece})
            yield chunk(index, {"text": ""}, choice["finish_reason"])
    if include_usage:
        yield sse({**head, "choices": [], "usage": usage(results)})
    yield sse("[DONE]")
