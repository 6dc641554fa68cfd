"""``RemoteEngine``: the ``InferenceEngine`` over inference servers (``aloft serve``, vLLM, SGLang, any
OpenAI-compatible one).

Token-in / token-out over ``POST /v1/completions`` (SGLang: its native ``/generate``, see ``server``): the prompt goes as a list of token ids, and the
completion's token ids and logprobs come back from the server (``choice["token_ids"]``, else the
``"token_id:<id>"`` strings of ``logprobs.tokens`` that ``return_tokens_as_token_ids`` asks vLLM for);
the text is never re-tokenized. Each request asks for ``logprobs=1``, ``return_tokens_as_token_ids``,
``return_token_ids``, ``include_stop_str_in_output`` and ``skip_special_tokens=False`` (vLLM names;
other servers ignore what they do not know).

- Load balancing: a request with a ``session_id`` (the generator sets one per trajectory) sticks to
  the server its session first went to, so a multi-turn trajectory stays on one server (and its
  prefix cache); new sessions and session-less requests go to the server with the fewest requests in
  flight. A session whose server is unreachable moves to the next server.
- Retries: connection errors, timeouts, 429 and 5xx are retried ``max_retries`` times with
  exponential backoff (``backoff_s * 2**attempt``, capped at ``max_backoff_s``); other 4xx fail at once.
- ``timeout_s`` bounds each HTTP request; ``max_concurrency`` bounds requests in flight (an
  ``asyncio.Semaphore`` per event loop, shared by all servers).
- Control plane, by ``server`` kind. ``"aloft"`` (``aloft serve``): ``update_weights`` posts the
  checkpoint path to ``/control/update_weights``, ``pause``/``resume`` go to ``/control/pause`` and
  ``/control/resume``. ``"vllm"`` (``vllm serve`` with ``VLLM_SERVER_DEV_MODE=1`` and
  ``--logprobs-mode processed_logprobs``): ``update_weights`` calls the workers' ``reload_weights``
  through ``/collective_rpc`` and then ``/reset_prefix_cache``; ``pause``/``resume`` go to
  ``/pause?mode=keep`` and ``/resume``. ``"sglang"``: requests go to SGLang's native ``/generate``
  (``aloft.inference.sglang_engine``), ``update_weights`` to ``/update_weights_from_disk``,
  ``pause``/``resume`` to ``/pause_generation`` and ``/continue_generation``, and ``sleep``/``wake_up``
  to ``/release_memory_occupation`` and ``/resume_memory_occupation``. ``end_sessions`` goes to
  ``aloft serve``'s ``/sessions/end`` (the others keep no per-session memory). The checkpoint path must be readable by the servers (a shared
  filesystem); named tensors are first saved as a temporary checkpoint directory under
  ``weights_dir`` (default: the system temp dir), removed once every server has loaded it.
  For the other kinds ``sleep``/``wake_up`` are no-ops: the servers own their memory.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import tempfile
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import httpx

from aloft.inference.base import WeightsSource, register_engine
from aloft.inference.sglang_engine import parse_sglang_output, sglang_request
from aloft.types import Completion, GenerationRequest

__all__ = ["RemoteEngine", "RemoteEngineError"]

_FINISH_REASONS = {"stop", "length", "abort"}

_CONTROL: dict[str, dict[str, tuple[str, dict[str, Any] | None]]] = {
    "aloft": {"pause": ("/control/pause", {}), "resume": ("/control/resume", {})},
    # mode=keep: requests in flight freeze and continue after /resume (vLLM's default aborts them).
    "vllm": {"pause": ("/pause?mode=keep", None), "resume": ("/resume", None)},
    # SGLang's native API (requests go to /generate, not /v1/completions).
    "sglang": {"pause": ("/pause_generation", {}), "resume": ("/continue_generation", {})},
}
"""Pause / resume routes of each server kind (weight loading is in ``RemoteEngine._load_on_servers``)."""


class RemoteEngineError(RuntimeError):
    """A server answered with an error that retrying cannot fix, or retries ran out."""


class _LoopClients:
    def __init__(self, loop: asyncio.AbstractEventLoop, timeout_s: float, max_concurrency: int) -> None:
        self.loop = loop
        self.client = httpx.AsyncClient(
            timeout=timeout_s, limits=httpx.Limits(max_connections=max_concurrency)
        )
        self.semaphore = asyncio.Semaphore(max_concurrency)


@register_engine("remote")
class RemoteEngine:
    """Generation on one or more OpenAI-compatible servers.

    Args:
        urls: server base URLs (``http://host:port``; a trailing ``/v1`` is accepted).
        api_key: sent as ``Authorization: Bearer <key>``.
        model: the ``model`` field of requests; by default the first id of the server's ``/v1/models``.
        timeout_s: per HTTP request.
        max_retries: retries after the first try on connection errors, timeouts, 429 and 5xx.
        backoff_s, max_backoff_s: exponential backoff between retries.
        max_concurrency: requests in flight at once, over all servers.
        max_sessions: sticky sessions remembered (least recently used ones are forgotten).
        weights_dir: where named tensors are saved for ``update_weights`` (must be shared with the servers).
        server: the servers' kind: ``"aloft"`` (``aloft serve``), ``"vllm"`` (``vllm serve``), or
            ``"sglang"`` (SGLang's native API: ``/generate`` instead of ``/v1/completions``).
        model_or_path: the served model's directory / name, if known here: a tied weight sent under
            one name is then saved under both (vLLM's reload needs both; ``aloft.inference.tied``).
    """

    def __init__(
        self,
        urls: list[str] | str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        timeout_s: float = 600.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        max_concurrency: int = 256,
        max_sessions: int = 100_000,
        weights_dir: str | None = None,
        server: str = "aloft",
        model_or_path: str | os.PathLike[str] | None = None,
        **_: Any,
    ) -> None:
        if server not in _CONTROL:
            raise ValueError(
                f"RemoteEngine: unknown server kind {server!r}; use one of {', '.join(_CONTROL)}"
            )
        urls = [urls] if isinstance(urls, str) else list(urls)
        if not urls:
            raise ValueError("RemoteEngine needs at least one server URL")
        if max_concurrency < 1:
            raise ValueError(f"RemoteEngine: max_concurrency must be >= 1, got {max_concurrency}")
        self.urls = [_base_url(u) for u in urls]
        self.api_key = api_key
        self.model = model
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_concurrency = max_concurrency
        self.max_sessions = max_sessions
        self.weights_dir = weights_dir
        self.server = server
        self._tied: dict[str, str] = {}
        if isinstance(model_or_path, str | os.PathLike):
            from aloft.inference.tied import tied_aliases
            from aloft.models.loading import resolve_model_path

            self._tied = tied_aliases(resolve_model_path(os.fspath(model_or_path)))
        self.requests_per_server = [0] * len(self.urls)
        """Requests sent to each server (retries included)."""
        self._in_flight = [0] * len(self.urls)
        self._sessions: OrderedDict[str, int] = OrderedDict()
        self._next = 0
        self._version = 0
        self._loops: list[_LoopClients] = []

    # ------------------------------------------------------------------------------------------------
    # InferenceEngine protocol
    # ------------------------------------------------------------------------------------------------

    @property
    def version(self) -> int:
        return self._version

    async def generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        return list(await asyncio.gather(*(self._generate_one(r) for r in requests)))

    async def update_weights(self, weights: WeightsSource, version: int) -> None:
        """Have every server load ``weights`` (a checkpoint path they can read, or named tensors)."""
        if isinstance(weights, str | os.PathLike):
            await self._load_on_servers(os.fspath(weights), version)
        else:
            directory = await asyncio.to_thread(_save_checkpoint_dir, weights, self.weights_dir, self._tied)
            try:
                await self._load_on_servers(directory, version)
            finally:
                shutil.rmtree(directory, ignore_errors=True)
        self._version = version

    async def pause(self) -> None:
        await self._broadcast(*_CONTROL[self.server]["pause"])

    async def resume(self) -> None:
        await self._broadcast(*_CONTROL[self.server]["resume"])

    async def end_sessions(self, session_ids: list[str]) -> None:
        """The sessions made their last request: forget their server pins, and have ``aloft serve``
        free their KV (``POST /sessions/end`` to the server each was pinned to; all servers for one
        no longer pinned). vLLM and SGLang servers need nothing: their KV blocks are a fixed pool
        that finished requests return for reuse."""
        by_server: dict[int, list[str]] = {}
        for session in session_ids:
            index = self._sessions.pop(session, None)
            for target in range(len(self.urls)) if index is None else [index]:
                by_server.setdefault(target, []).append(session)
        if self.server != "aloft":
            return
        await asyncio.gather(
            *(self._post_json(i, "/sessions/end", {"session_ids": ids}) for i, ids in by_server.items())
        )

    async def _load_on_servers(self, path: str, version: int) -> None:
        if self.server == "aloft":
            await self._broadcast("/control/update_weights", {"path": path, "version": version})
            return
        if self.server == "sglang":
            body = {"model_path": path, "weight_version": str(version)}
            for result in await self._broadcast("/update_weights_from_disk", body):
                if not result.get("success", True):
                    raise RemoteEngineError(
                        f"SGLang update_weights_from_disk failed: {result.get('message')}"
                    )
            return
        if os.path.isfile(path):  # vLLM reloads from a directory: give the file one
            with tempfile.TemporaryDirectory(prefix="aloft-weights-", dir=self.weights_dir) as directory:
                os.symlink(os.path.abspath(path), os.path.join(directory, "model.safetensors"))
                await self._load_on_servers(directory, version)
            return
        rpc = {"method": "reload_weights", "kwargs": {"weights_path": path}}
        await self._broadcast("/collective_rpc", rpc)
        await self._broadcast("/reset_prefix_cache", None)

    async def sleep(self) -> None:
        """SGLang servers release their GPU memory (colocated training); other servers: no-op."""
        if self.server == "sglang":
            await self._broadcast("/release_memory_occupation", {})

    async def wake_up(self) -> None:
        if self.server == "sglang":
            await self._broadcast("/resume_memory_occupation", {})

    def close(self) -> None:
        """Close the HTTP clients (those of event loops still open; closed loops took theirs along)."""
        loops, self._loops = self._loops, []
        for entry in loops:
            if entry.loop.is_closed():
                continue
            if entry.loop.is_running():
                entry.loop.call_soon_threadsafe(lambda c=entry.client: asyncio.ensure_future(c.aclose()))
            else:
                entry.loop.run_until_complete(entry.client.aclose())

    # ------------------------------------------------------------------------------------------------
    # Requests
    # ------------------------------------------------------------------------------------------------

    def _clients(self) -> _LoopClients:
        loop = asyncio.get_running_loop()
        self._loops = [e for e in self._loops if not e.loop.is_closed()]
        for entry in self._loops:
            if entry.loop is loop:
                return entry
        entry = _LoopClients(loop, self.timeout_s, self.max_concurrency)
        self._loops.append(entry)
        return entry

    def _headers(self, session_id: str | None = None) -> dict[str, str]:
        headers = {}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        if session_id is not None:
            headers["X-Session-Id"] = session_id
        return headers

    def _pick(self, session_id: str | None) -> int:
        if session_id is not None and session_id in self._sessions:
            self._sessions.move_to_end(session_id)
            return self._sessions[session_id]
        least = min(self._in_flight)
        candidates = [i for i, n in enumerate(self._in_flight) if n == least]
        index = candidates[self._next % len(candidates)]
        self._next += 1
        if session_id is not None:
            self._pin(session_id, index)
        return index

    def _pin(self, session_id: str, index: int) -> None:
        self._sessions[session_id] = index
        self._sessions.move_to_end(session_id)
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)

    async def _model_name(self, index: int) -> str | None:
        if self.model is None:
            try:
                data = await self._post_json(index, "/v1/models", None, method="GET")
            except RemoteEngineError:
                data = {}  # a server without /v1/models: send no model field
            models = data.get("data") or []
            self.model = models[0]["id"] if models else ""
        return self.model or None

    async def _generate_one(self, request: GenerationRequest) -> Completion:
        if self.server == "sglang":
            index = self._pick(request.session_id)
            body = sglang_request(request, request.sampling.seed)
            data = await self._post_json(index, "/generate", body, session_id=request.session_id)
            try:
                return parse_sglang_output(data, self._version)
            except (ValueError, KeyError, TypeError, IndexError) as error:
                raise RemoteEngineError(f"{self.urls[index]}/generate: {error}") from error
        s = request.sampling
        body: dict[str, Any] = {
            "prompt": list(request.prompt_ids),
            "max_tokens": s.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k if s.top_k > 0 else -1,
            "n": 1,
            "logprobs": 1,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
        }
        if s.stop:
            body["stop"] = list(s.stop)
        if s.stop_token_ids:
            body["stop_token_ids"] = list(s.stop_token_ids)
        if s.seed is not None:
            body["seed"] = s.seed
        index = self._pick(request.session_id)
        model = await self._model_name(index)
        if model:
            body["model"] = model
        data = await self._post_json(index, "/v1/completions", body, session_id=request.session_id)
        return _parse_completion(data, self._version)

    async def _post_json(
        self,
        index: int,
        path: str,
        body: dict[str, Any] | None,
        *,
        method: str = "POST",
        session_id: str | None = None,
    ) -> dict[str, Any]:
        """Send with retries; on a connection failure a session moves to the next server."""
        clients = self._clients()
        last_error: Exception | None = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                delay = min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s)
                await asyncio.sleep(delay * (0.5 + random.random() / 2))
            url, sent = self.urls[index] + path, index
            async with clients.semaphore:
                self._in_flight[sent] += 1
                self.requests_per_server[sent] += 1
                try:
                    response = await clients.client.request(
                        method, url, json=body, headers=self._headers(session_id)
                    )
                except httpx.TransportError as error:  # connect / read errors and timeouts
                    last_error = error
                    if session_id is not None and len(self.urls) > 1:
                        index = (index + 1) % len(self.urls)
                        self._pin(session_id, index)
                    continue
                finally:
                    self._in_flight[sent] -= 1
            if response.status_code == 429 or response.status_code >= 500:
                last_error = RemoteEngineError(f"{url}: HTTP {response.status_code}: {response.text[:500]}")
                continue
            if response.status_code >= 400:
                raise RemoteEngineError(f"{url}: HTTP {response.status_code}: {response.text[:500]}")
            return response.json()
        raise RemoteEngineError(
            f"{self.urls[index]}{path}: gave up after {self.max_retries + 1} tries: {last_error!r}"
        ) from last_error

    async def _broadcast(self, path: str, body: dict[str, Any] | None) -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(self._post_json(i, path, body) for i in range(len(self.urls)))))


def _base_url(url: str) -> str:
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def _parse_completion(data: dict[str, Any], version: int) -> Completion:
    choice = data["choices"][0]
    logprobs = choice.get("logprobs") or {}
    token_ids = choice.get("token_ids")
    if token_ids is None:
        tokens = logprobs.get("tokens") or []
        if not all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
            raise RemoteEngineError(
                "the server returned neither token_ids nor token_id:<id> tokens; token-out needs "
                "vLLM's return_tokens_as_token_ids (or aloft serve)"
            )
        token_ids = [int(t.split(":", 1)[1]) for t in tokens]
    token_logprobs = [float(lp) if lp is not None else 0.0 for lp in logprobs.get("token_logprobs") or []]
    if len(token_logprobs) != len(token_ids):
        raise RemoteEngineError(
            f"the server returned {len(token_ids)} token ids but {len(token_logprobs)} logprobs"
        )
    reason = choice.get("finish_reason") or "length"
    return Completion(
        token_ids=[int(t) for t in token_ids],
        logprobs=token_logprobs,
        finish_reason=reason if reason in _FINISH_REASONS else "stop",
        text=choice.get("text") or "",
        policy_version=int(choice.get("policy_version", data.get("policy_version", version))),
    )


def _save_checkpoint_dir(weights: Any, directory: str | None, tied: Mapping[str, str]) -> str:
    """Write named tensors as a temporary checkpoint directory (the caller removes it); returns its path."""
    from safetensors.torch import save_file

    from aloft.inference.tied import with_tied_aliases

    items = weights.items() if isinstance(weights, Mapping) else weights
    # Tied names get separate copies: safetensors refuses two names for one storage.
    tensors = {name: t.detach().cpu().clone() for name, t in with_tied_aliases(items, tied)}
    path = tempfile.mkdtemp(prefix="aloft-weights-", dir=directory)
    save_file(tensors, os.path.join(path, "model.safetensors"))
    return path
