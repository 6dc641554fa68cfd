"""``aloft serve``: an OpenAI-compatible HTTP server over any ``InferenceEngine`` (FastAPI + uvicorn).

External agents generate rollouts through it, and it is how engines run disaggregated (the ``remote``
engine, ``aloft.inference.remote``, is its client). Needs the ``serve`` extra: ``pip install
'aloft[serve]'`` (fastapi, uvicorn). Binds 127.0.0.1 by default; with ``api_key`` every endpoint but
``/health`` wants ``Authorization: Bearer <key>`` (401 otherwise).

Endpoints:

- ``POST /v1/completions``: ``prompt`` is a string (tokenized without special tokens added) or a
  list of token ids (token-in; a one-element list of either is accepted too). Sampling fields:
  ``max_tokens`` (16), ``temperature`` (1.0; 0 = greedy), ``top_p``, ``top_k`` (0 or -1 = off),
  ``seed``, ``stop`` (string or list; as in OpenAI's API the stop string is left out of ``text``;
  vLLM's ``include_stop_str_in_output=true`` keeps it), ``stop_token_ids``, ``n`` (sample ``i`` uses
  ``seed + i`` when a seed is given), ``logprobs`` (any integer >= 0 turns them on; only the sampled
  token's logprob is reported, so ``top_logprobs`` holds that one entry),
  ``return_tokens_as_token_ids``, ``stream`` (server-sent events, one chunk per token, then
  ``data: [DONE]``; ``stream_options.include_usage`` adds a usage chunk; the chunks are sent once
  the engine has the whole completion, as engines return whole completions), ``response_format``
  (``text`` only: the engines cannot constrain decoding, so JSON modes get a 400 saying so).
  Each choice carries (vLLM conventions where they exist):

  - ``text``, ``index``, ``finish_reason`` (``"stop"``, ``"length"`` or ``"abort"``);
  - ``token_ids``: every generated token id, a stop string's included (always; vLLM's
    ``return_token_ids`` field): with ``logprobs``, exactly what the engine sampled, for training;
  - ``logprobs`` (when requested): ``{"tokens": [...], "token_logprobs": [...], "top_logprobs":
    [{token: logprob}, ...], "text_offset": [...]}``; ``tokens`` are ``"token_id:<id>"`` strings when
    ``return_tokens_as_token_ids`` is true (as in vLLM), else the decoded token strings.
    ``token_logprobs`` are the engine's sampler logprobs (``log_softmax(logits / T)``, before
    top-k/top-p; docs/reference/design.md §3);
  - ``policy_version``: the weights version that produced the tokens (aloft extension; also at the
    top level of the response).

  The response also has ``prompt_token_ids`` (vLLM's field) and ``usage``.
- ``POST /v1/chat/completions``: ``messages`` go through the tokenizer's chat template
  (``add_generation_prompt=True``; ``tools`` passed to the template when given). Same sampling fields;
  ``logprobs: true`` gives the OpenAI chat form ``{"content": [{"token", "logprob", "bytes",
  "top_logprobs"}]}``. With ``tools`` (and ``tool_choice`` not ``"none"``), calls the model wrote in
  its chat template's format (Hermes/Qwen ``<tool_call>{...}</tool_call>``, or a reply that is one
  JSON object with a ``name``, as Llama 3.x and SmolLM2 write them) come back as
  ``message.tool_calls`` with ``finish_reason: "tool_calls"``, and ``content`` is what is left
  (None if nothing). Each choice also has ``token_ids``.
- ``POST /sessions/end`` ``{"session_ids": [...]}``: those sessions (``X-Session-Id``, or the id in
  a ``/sessions/<id>/v1`` base URL; each also covers its samples ``<id>/<k>``) made their last
  request, so the engine frees what it kept for their next turn (the hf engine's KV cache) at once.
  aloft's remote engine sends it when a trajectory ends; a captured session's posted reward ends it
  too. Without it a finished session's KV stays until least-recently-used eviction.
- ``GET /v1/models``, ``GET /health`` (``{"status": "ok", "version": N, "paused": bool}``).
- Errors have OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``: 400 for a bad
  request (a malformed body too, naming the field), 401 for a missing or wrong key, 503 while the
  engine cannot generate (asleep, closed).
- ``POST /control/update_weights`` ``{"path": DIR_OR_SAFETENSORS, "version": N}`` (the path must be
  readable by the server), ``POST /control/pause``, ``POST /control/resume``, ``POST /control/sleep``,
  ``POST /control/wake_up``.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import threading
import time
from typing import Any

import uvicorn
from fastapi import Depends, FastAPI, Header, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from aloft.inference.base import InferenceEngine, end_sessions
from aloft.inference.capture import CaptureStore, reply_key
from aloft.inference.chat_messages import prepare_messages
from aloft.inference.openai_format import (
    chat_logprobs,
    choice_text,
    completion_logprobs,
    error_body,
    response,
    stream_events,
    text_pieces,
    tool_calls_in,
)
from aloft.types import Completion, GenerationRequest, SamplingParams

__all__ = ["ServerThread", "build_app"]


class _Sampling(BaseModel):
    model_config = ConfigDict(extra="allow")  # unknown OpenAI/vLLM fields are ignored, not rejected

    model: str | None = None
    max_tokens: int | None = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    n: int = 1
    include_stop_str_in_output: bool = False
    """vLLM's field: keep the stop string in the text (OpenAI leaves it out; aloft's remote engine asks for it)."""
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None

    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


class CompletionBody(_Sampling):
    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = None
    return_tokens_as_token_ids: bool = False


class ChatBody(_Sampling):
    max_tokens: int | None = None  # OpenAI's chat default: until the model stops or the context ends
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    logprobs: bool = False
    max_completion_tokens: int | None = None


class RewardBody(BaseModel):
    reward: float = Field(allow_inf_nan=False)


class EndSessionsBody(BaseModel):
    session_ids: list[str]


class UpdateWeightsBody(BaseModel):
    path: str
    version: int


class ServerStats:
    """Request counters (tests and load balancing checks read them)."""

    def __init__(self) -> None:
        self.completions = 0
        self.chat_completions = 0


def build_app(
    engine: InferenceEngine,
    tokenizer: Any,
    *,
    model_name: str = "aloft",
    api_key: str | None = None,
    capture: CaptureStore | None = None,
    control: bool = True,
    governed_only: bool = False,
) -> FastAPI:
    """The FastAPI app serving ``engine`` (token ids decoded / chat templated with ``tokenizer``).
    With ``capture``, every request of a session is recorded (``aloft.inference.capture``). The
    server ``env=agent`` gives its programs has no ``/control`` routes (``control=False``) and serves
    only the sessions the run opened (``governed_only``)."""
    app = FastAPI(title="aloft serve", version="1")
    app.state.engine = engine
    app.state.capture = capture
    app.state.stats = stats = ServerStats()
    state = {"paused": False}

    def check_key(request: Request) -> None:
        if api_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(token.strip(), api_key):
            raise HTTPException(
                status_code=401, detail="invalid or missing API key (Authorization: Bearer ...)"
            )

    auth = [Depends(check_key)]

    @app.exception_handler(HTTPException)
    async def _http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse(status_code=exc.status_code, content=error_body(exc.status_code, str(exc.detail)))

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        # OpenAI answers a malformed body with 400 (FastAPI's default is 422), naming the field.
        first = exc.errors()[0] if exc.errors() else {}
        param = ".".join(str(part) for part in first.get("loc", ())[1:]) or None
        message = f"{param}: {first.get('msg', 'invalid request')}" if param else str(first.get("msg", exc))
        return JSONResponse(status_code=400, content=error_body(400, message, param))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "version": engine.version, "paused": state["paused"]}

    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "aloft"}],
        }

    def record(
        session: str | None,
        endpoint: str,
        result: tuple[Completion, list[int]],
        text: str,
        key: str | None = None,
    ) -> None:
        if capture is not None and session is not None:
            completion, prompt = result
            raw = tokenizer.decode(completion.token_ids, skip_special_tokens=True)
            capture.record(session, endpoint, prompt, completion, text, raw, key)

    async def completions(body: CompletionBody, session: str | None) -> Any:
        stats.completions += 1
        _check_response_format(body)
        prompts = _prompt_ids(body.prompt, tokenizer)
        results = await _generate(engine, prompts, body, body.max_tokens, session, capture, governed_only)
        choices, texts = [], []
        for index, (completion, _) in enumerate(results):
            text = choice_text(completion, tokenizer, body.stops(), body.include_stop_str_in_output)
            record(_sample_session(session, len(results), index), "completions", results[index], text)
            choice: dict[str, Any] = {
                "index": index,
                "text": text,
                "finish_reason": completion.finish_reason,
                "token_ids": completion.token_ids,
                "policy_version": completion.policy_version,
                "logprobs": None,
            }
            if body.logprobs is not None:
                choice["logprobs"] = completion_logprobs(
                    completion, tokenizer, body.return_tokens_as_token_ids
                )
            choices.append(choice)
            if body.stream:  # token by token: one decode per token, only when streaming
                texts.append(text_pieces(completion.token_ids, tokenizer, text))
        if body.stream:
            return _stream("text_completion", choices, texts, results, body)
        return response("text_completion", choices, prompts, results, model_name, engine.version)

    async def chat_completions(body: ChatBody, session: str | None) -> Any:
        stats.chat_completions += 1
        _check_response_format(body)
        restore = (lambda key: capture.raw_reply(session, key)) if capture is not None else (lambda key: None)
        messages, tools = prepare_messages(body.messages, body.tools, tokenizer, restore)
        kwargs: dict[str, Any] = {"add_generation_prompt": True, "tokenize": True}
        if tools:
            kwargs["tools"] = tools
        try:
            ids = tokenizer.apply_chat_template(messages, **kwargs)
        except Exception as error:  # a template that rejects the messages is the caller's error
            raise HTTPException(status_code=400, detail=f"chat template failed: {error}") from error
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        prompts = [list(ids)]
        max_tokens = body.max_completion_tokens or body.max_tokens or _room_left(engine, len(ids))
        results = await _generate(engine, prompts, body, max_tokens, session, capture, governed_only)
        parse_tools = bool(body.tools) and body.tool_choice != "none"
        choices, texts = [], []
        for index, (completion, _) in enumerate(results):
            text = choice_text(completion, tokenizer, body.stops(), body.include_stop_str_in_output)
            content, calls = tool_calls_in(text) if parse_tools else (text, [])
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if calls:
                message["tool_calls"] = calls
            choice = {
                "index": index,
                "message": message,
                "finish_reason": "tool_calls" if calls else completion.finish_reason,
                "token_ids": completion.token_ids,
                "policy_version": completion.policy_version,
                "logprobs": chat_logprobs(completion, tokenizer) if body.logprobs else None,
            }
            choices.append(choice)
            key = reply_key(content, calls)
            record(_sample_session(session, len(results), index), "chat", results[index], content or "", key)
            if body.stream:
                pieces = text_pieces(completion.token_ids, tokenizer, text) if not calls else [content or ""]
                texts.append([piece for piece in pieces if piece])
        if body.stream:
            return _stream("chat.completion", choices, texts, results, body)
        return response("chat.completion", choices, prompts, results, model_name, engine.version)

    def _stream(
        kind: str,
        choices: list[dict[str, Any]],
        texts: list[list[str]],
        results: list[tuple[Completion, list[int]]],
        body: _Sampling,
    ) -> StreamingResponse:
        include_usage = bool((body.stream_options or {}).get("include_usage"))
        events = stream_events(kind, model_name, choices, texts, results, include_usage)
        return StreamingResponse(events, media_type="text/event-stream")

    def session_of(
        request: Request, header: str | None = Header(default=None, alias="x-session-id")
    ) -> str | None:
        return request.path_params.get("session") or header

    # Each endpoint under /v1 (session from the X-Session-Id header) and under /sessions/<id>/v1,
    # a base URL that carries the session for harnesses that cannot add a header.
    @app.get("/v1/models", dependencies=auth)
    @app.get("/sessions/{session}/v1/models", dependencies=auth)
    async def _models() -> dict[str, Any]:
        return await models()

    @app.post("/v1/completions", dependencies=auth)
    @app.post("/sessions/{session}/v1/completions", dependencies=auth)
    async def _completions(body: CompletionBody, session_id: str | None = Depends(session_of)) -> Any:
        return await completions(body, session_id)

    @app.post("/v1/chat/completions", dependencies=auth)
    @app.post("/sessions/{session}/v1/chat/completions", dependencies=auth)
    async def _chat(body: ChatBody, session_id: str | None = Depends(session_of)) -> Any:
        return await chat_completions(body, session_id)

    @app.post("/sessions/{session}/reward", dependencies=auth)
    async def post_reward(body: RewardBody, session: str) -> dict[str, Any]:
        if capture is None:
            raise HTTPException(
                status_code=404, detail="this server captures no sessions (aloft serve --capture DIR)"
            )
        capture.post_reward(session, body.reward)
        await end_sessions(engine, [session])  # a reward closes the episode: free its KV
        return {"status": "ok", "session": session, "reward": body.reward}

    @app.post("/sessions/end", dependencies=auth)
    async def _end_sessions(body: EndSessionsBody) -> dict[str, Any]:
        await end_sessions(engine, body.session_ids)
        return {"status": "ok", "ended": len(body.session_ids)}

    if control:
        _control_routes(app, engine, auth, state)
    return app


def _control_routes(app: FastAPI, engine: InferenceEngine, auth: list[Any], state: dict[str, Any]) -> None:
    @app.post("/control/update_weights", dependencies=auth)
    async def update_weights(body: UpdateWeightsBody) -> dict[str, Any]:
        try:
            await engine.update_weights(body.path, body.version)
        except (FileNotFoundError, KeyError, ValueError) as error:
            raise HTTPException(status_code=400, detail=f"update_weights failed: {error}") from error
        return {"status": "ok", "version": engine.version}

    @app.post("/control/pause", dependencies=auth)
    async def pause() -> dict[str, Any]:
        state["paused"] = True
        await engine.pause()
        return {"status": "ok", "paused": True}

    @app.post("/control/resume", dependencies=auth)
    async def resume() -> dict[str, Any]:
        state["paused"] = False
        await engine.resume()
        return {"status": "ok", "paused": False}

    @app.post("/control/sleep", dependencies=auth)
    async def sleep() -> dict[str, Any]:
        await engine.sleep()
        return {"status": "ok"}

    @app.post("/control/wake_up", dependencies=auth)
    async def wake_up() -> dict[str, Any]:
        await engine.wake_up()
        return {"status": "ok"}


def _prompt_ids(prompt: Any, tokenizer: Any) -> list[list[int]]:
    if isinstance(prompt, str):
        prompt = [prompt]
    elif prompt and isinstance(prompt[0], int):
        prompt = [prompt]
    if not prompt:
        raise HTTPException(status_code=400, detail="prompt is empty")
    out = []
    for item in prompt:
        ids = tokenizer.encode(item, add_special_tokens=False) if isinstance(item, str) else list(item)
        if not ids:
            raise HTTPException(status_code=400, detail="prompt has no tokens")
        out.append([int(i) for i in ids])
    return out


def _sample_session(session_id: str | None, count: int, index: int) -> str | None:
    """Each of a request's ``count`` samples (prompts x n) is its own session (``<session>/<index>``)."""
    return None if session_id is None else (session_id if count == 1 else f"{session_id}/{index}")


async def _generate(
    engine: InferenceEngine,
    prompts: list[list[int]],
    body: _Sampling,
    max_tokens: int | None,
    session_id: str | None = None,
    capture: CaptureStore | None = None,
    governed_only: bool = False,
) -> list[tuple[Completion, list[int]]]:
    """``session_id``: the caller's ``X-Session-Id`` (aloft's remote engine sends one per trajectory), so an
    engine may keep a trajectory's KV cache for its next turn; each of ``n`` samples is its own session.
    A training session of ``capture`` gets the run's sampling and budgets instead of the request's."""
    stop = body.stops()
    if body.n < 1:
        raise HTTPException(status_code=400, detail=f"n must be >= 1, got {body.n}")
    governed = capture is not None and capture.is_governed(session_id)
    if governed_only and not governed:
        raise HTTPException(
            status_code=403,
            detail="this endpoint serves its run's agent sessions only: use OPENAI_BASE_URL as given",
        )
    if governed and (body.n != 1 or len(prompts) != 1):
        raise HTTPException(
            status_code=400,
            detail="a training session takes one prompt and n=1 a request (each call is one turn)",
        )
    requests = []
    try:
        for prompt in prompts:
            for i in range(body.n):
                sampling = SamplingParams(
                    max_tokens=max_tokens or 16,
                    temperature=body.temperature,
                    top_p=body.top_p,
                    top_k=max(body.top_k, 0),
                    stop=stop,
                    stop_token_ids=list(body.stop_token_ids or []),
                    seed=None if body.seed is None else body.seed + i,
                )
                session = _sample_session(session_id, len(prompts) * body.n, len(requests))
                if governed:
                    sampling = capture.sampling_for(session, sampling, len(prompt))
                requests.append(GenerationRequest(prompt_ids=prompt, sampling=sampling, session_id=session))
        completions = await engine.generate(requests)
    except ValueError as error:
        raise HTTPException(status_code=400, detail=str(error)) from error
    except RuntimeError as error:
        raise HTTPException(status_code=503, detail=str(error)) from error
    return [(c, r.prompt_ids) for c, r in zip(completions, requests)]


def _room_left(engine: InferenceEngine, prompt_tokens: int) -> int:
    """The tokens left in the engine's context after the prompt (a chat request without a limit)."""
    context = getattr(engine, "max_model_len", None) or getattr(
        getattr(engine, "limits", None), "max_positions", None
    )
    return max(int(context) - prompt_tokens, 1) if context else 4096


def _check_response_format(body: _Sampling) -> None:
    kind = (body.response_format or {}).get("type", "text")
    if kind != "text":
        raise HTTPException(
            status_code=400,
            detail=f"response_format type {kind!r} is not supported: this server's engines cannot constrain "
            "decoding to JSON; ask for JSON in the prompt and parse the text",
        )


class ServerThread:
    """Run an app with uvicorn in a background thread on an already-bound loopback socket.

    with ServerThread(build_app(engine, tok)) as server:
        url = server.url  # e.g. http://127.0.0.1:54321
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.host, self.port = self.sock.getsockname()[:2]
        self.url = f"http://{self.host}:{self.port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"aloft-serve-{self.port}")

    def _run(self) -> None:
        asyncio.run(self.server.serve(sockets=[self.sock]))

    def start(self, timeout_s: float = 10.0) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"aloft serve did not start on {self.url}")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
