"""``aloft tinker-serve``: the Tinker API (the wire protocol of the official ``tinker`` SDK 0.38) over
aloft's own training pieces, so a loop written against Tinker runs on this machine unchanged.

Routes are under ``/api/v1``. Session calls (``client/config``, ``create_session``, heartbeats,
telemetry) answer at once; operations (``create_model``, ``forward_backward``, ``optim_step``, ...)
are accepted with a ``request_id`` and run on aloft's compute thread in the order they arrived,
their results fetched with ``retrieve_future`` (see ``aloft.tinker.futures``). ``forward_backward``
requests and results are protobuf (``aloft.tinker.wire``); everything else is JSON.

Errors use the SDK's classes: a request that cannot be served is HTTP 400 (``BadRequestError``), an
unknown session, client or future 404 (``NotFoundError``), a wrong API key 401
(``AuthenticationError``), and an operation that fails after it was accepted a failed future
(``RequestFailedError``, category ``user`` when the request was at fault).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from aloft.models.compute_thread import compute_executor
from aloft.tinker.checkpoints import CheckpointStore, check_name
from aloft.tinker.errors import TinkerNotFoundError, TinkerUserError
from aloft.tinker.futures import HOLD_S, FutureTable
from aloft.tinker.losses import check_loss_inputs
from aloft.tinker.sampling import Sampler, SamplingHost, decode_sample_request
from aloft.tinker.training import AdamParams, LoraSpec, TrainingClientState, TrainingHost
from aloft.tinker.wire import decode_forward_backward, encode_forward_backward_output

PROTOBUF = "application/x-protobuf"
BASE_SAMPLER = "base"
"""The sampler of the base model itself (``create_sampling_client(base_model=...)``)."""


@dataclass(kw_only=True)
class Session:
    session_id: str
    last_seen: float = field(default_factory=time.monotonic)
    model_ids: set[str] = field(default_factory=set)


class TinkerService:
    """The state behind the routes: sessions, the training host and the futures table."""

    def __init__(
        self,
        model: str,
        *,
        checkpoint_dir: str | Path = "tinker-checkpoints",
        max_length: int = 4096,
        hold_s: float = HOLD_S,
        api_key: str | None = None,
        session_timeout_s: float = 300.0,
    ) -> None:
        self.model = model
        self.session_timeout_s = session_timeout_s
        self.ended: dict[str, str] = {}  # session id -> why it ended
        self.checkpoints = CheckpointStore(checkpoint_dir)
        self.api_key = api_key
        self.host = TrainingHost(model, max_length=max_length)
        self.sampling = SamplingHost(self.host.path)
        self.sampling.add(Sampler(sampler_id=BASE_SAMPLER, adapters=None))
        self.futures = FutureTable(hold_s=hold_s)
        self.sessions: dict[str, Session] = {}
        self._session_ids = itertools.count(1)

    def session(self, session_id: str) -> Session:
        """The live session (its lease renewed), or NotFound saying why it is gone."""
        self.expire_sessions()
        if session_id in self.ended:
            raise TinkerNotFoundError(
                f"session {session_id!r} ended ({self.ended[session_id]}); start a new ServiceClient"
            )
        if session_id not in self.sessions:
            raise TinkerNotFoundError(
                f"no session {session_id!r} on this server (create one with a new ServiceClient)"
            )
        session = self.sessions[session_id]
        session.last_seen = time.monotonic()
        return session

    def client(self, model_id: str) -> TrainingClientState:
        """A training client of a live session (renewing the session's lease)."""
        self.session(model_id.split(":train:")[0])
        return self.host.client(model_id)

    def expire_sessions(self) -> None:
        """End every session not heard from for ``session_timeout_s`` (a dead client's lease)."""
        horizon = time.monotonic() - self.session_timeout_s
        for session in [s for s in self.sessions.values() if s.last_seen < horizon]:
            self.end_session(session.session_id, f"no request or heartbeat for {self.session_timeout_s:g} s")

    def end_session(self, session_id: str, why: str) -> None:
        """Free a session's training clients and samplers (on the compute thread, after the work
        already queued for them); other sessions' clients are untouched."""
        session = self.sessions.pop(session_id)
        self.ended[session_id] = why
        samplers = [key for key in self.sampling.samplers if key.startswith(f"{session_id}:")]

        def free() -> None:
            for model_id in session.model_ids:
                if model_id in self.host.clients:
                    self.host.remove(model_id)
            for key in samplers:
                self.sampling.samplers.pop(key, None)

        compute_executor().submit(free)

    def sampler(self, body: dict[str, Any]) -> Sampler:
        """The sampler an ``asample`` names: its sampling session, a saved path, or the base model."""
        if body.get("sampling_session_id"):
            sampler_id = str(body["sampling_session_id"])
            if ":sample:" in sampler_id:  # a session's sampler: renews that session's lease
                self.session(sampler_id.split(":sample:")[0])
        elif body.get("model_path"):
            sampler_id = self.sampler_by_path(str(body["model_path"])).sampler_id
        else:
            self.check_base_model(body.get("base_model"))
            sampler_id = BASE_SAMPLER
        if sampler_id not in self.sampling.samplers:
            raise TinkerNotFoundError(f"no sampler {sampler_id!r} on this server")
        return self.sampling.samplers[sampler_id]

    def sampler_by_path(self, path: str) -> Sampler:
        for sampler in self.sampling.samplers.values():
            if sampler.model_path == path:
                return sampler
        raise TinkerNotFoundError(
            f"no sampler weights at {path!r} on this server (save_weights_for_sampler makes them)"
        )

    def check_base_model(self, base_model: str | None) -> None:
        if base_model is not None and base_model not in (self.model, self.host.path):
            raise TinkerUserError(
                f"base model {base_model!r} is not served here; this server serves {self.model!r} "
                f"(start another with `aloft tinker-serve {base_model}`)"
            )


def _number(body: dict[str, Any], key: str) -> int:
    value = body.get(key)
    if not isinstance(value, int):
        raise TinkerUserError(f"request needs an integer {key!r}")
    return value


def create_app(service: TinkerService) -> FastAPI:
    app = FastAPI(title="aloft tinker-serve")

    @app.exception_handler(TinkerUserError)
    async def _bad_request(request: Request, error: TinkerUserError) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=400)

    @app.exception_handler(TinkerNotFoundError)
    async def _not_found(request: Request, error: TinkerNotFoundError) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=404)

    @app.exception_handler(ValueError)
    @app.exception_handler(TypeError)
    @app.exception_handler(KeyError)
    async def _malformed(request: Request, error: Exception) -> JSONResponse:
        # A body of the wrong shape (a string where a number goes, a missing field): the client's
        # error, 400, never a 500 the SDK would retry.
        return JSONResponse({"detail": f"malformed {request.url.path} request: {error!r}"}, status_code=400)

    @app.middleware("http")
    async def _authenticate(request: Request, call_next: Any) -> Response:
        if service.api_key is not None and request.headers.get("x-api-key") != service.api_key:
            return JSONResponse(
                {"detail": "wrong or missing API key (X-API-Key / TINKER_API_KEY)"}, status_code=401
            )
        return await call_next(request)

    async def _json(request: Request) -> dict[str, Any]:
        try:
            body = await request.json()
        except ValueError:
            raise TinkerUserError("request body is not JSON") from None
        if not isinstance(body, dict):
            raise TinkerUserError("request body must be a JSON object")
        return body

    def _future(request_id: str, model_id: str | None = None) -> dict[str, Any]:
        return {"request_id": request_id, **({"model_id": model_id} if model_id else {})}

    # --- session and configuration --------------------------------------------------------------

    @app.post("/api/v1/client/config")
    async def client_config() -> dict[str, Any]:
        # No cap on datums per forward_backward request (the SDK still splits bodies over ~5 MB; the
        # parts' gradients add up like one call's), and no zstd compression of the body.
        return {"pjwt_auth_enabled": False, "proto_compress_fwdbwd": False, "fwdbwd_max_chunk_len": 1 << 20}

    @app.post("/api/v1/client/dynamic_config")
    async def dynamic_config() -> dict[str, Any]:
        return {}

    @app.post("/api/v1/create_session")
    async def create_session(request: Request) -> dict[str, Any]:
        await _json(request)
        session_id = f"session-{next(service._session_ids)}"
        service.sessions[session_id] = Session(session_id=session_id)
        return {"session_id": session_id}

    @app.post("/api/v1/session_heartbeat")
    async def heartbeat(request: Request) -> Response:
        session_id = str((await _json(request)).get("session_id"))
        service.expire_sessions()
        if session_id in service.ended:  # 410: the SDK stops heartbeating
            return JSONResponse(
                {"detail": f"session {session_id!r} ended ({service.ended[session_id]})"}, status_code=410
            )
        service.session(session_id)
        return JSONResponse({"type": "session_heartbeat"})

    @app.post("/api/v1/telemetry")
    async def telemetry() -> dict[str, Any]:
        return {"status": "accepted"}

    @app.post("/api/v1/sessions/{session_id}/finish")
    async def finish_session(session_id: str) -> dict[str, Any]:
        service.session(session_id)
        service.end_session(session_id, "finished by its client")
        return {}

    @app.get("/api/v1/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok"}

    @app.get("/api/v1/get_server_capabilities")
    async def capabilities() -> dict[str, Any]:
        return {
            "supported_models": [
                {
                    "model_name": service.model,
                    "max_context_length": service.host.max_length,
                    "trainable": True,
                }
            ]
        }

    # --- training ---------------------------------------------------------------------------

    @app.post("/api/v1/create_model")
    async def create_model(request: Request) -> dict[str, Any]:
        body = await _json(request)
        session = service.session(str(body.get("session_id")))
        service.check_base_model(body.get("base_model"))
        lora = body.get("lora_config") or {}
        spec = LoraSpec(
            rank=int(lora.get("rank", 32)),
            train_attn=bool(lora.get("train_attn", True)),
            train_mlp=bool(lora.get("train_mlp", True)),
            train_unembed=bool(lora.get("train_unembed", True)),
            seed=lora.get("seed"),
        )
        model_id = f"{session.session_id}:train:{_number(body, 'model_seq_id')}"
        if model_id in service.host.clients:
            raise TinkerUserError(f"training client {model_id!r} already exists")
        spec.target_modules()  # refuse an empty LoRA now, not in the future

        def work() -> dict[str, Any]:
            service.host.create(model_id, spec)
            session.model_ids.add(model_id)
            return {"model_id": model_id, "type": "create_model"}

        return _future(service.futures.submit(work), model_id)

    @app.post("/api/v1/get_info")
    async def get_info(request: Request) -> dict[str, Any]:
        model_id = str((await _json(request)).get("model_id"))
        state = service.client(model_id)
        return {
            "model_id": model_id,
            "model_data": {"model_name": service.model, "tokenizer_id": service.host.path},
            "is_lora": True,
            "lora_rank": state.spec.rank,
            "model_name": service.model,
            "type": "get_info",
        }

    @app.post("/api/v1/unload_model")
    async def unload_model(request: Request) -> dict[str, Any]:
        model_id = str((await _json(request)).get("model_id"))
        service.client(model_id)

        def work() -> dict[str, Any]:
            service.host.remove(model_id)
            return {"model_id": model_id, "type": "unload_model"}

        return _future(service.futures.submit(work), model_id)

    @app.post("/api/v1/forward_backward")
    async def forward_backward(request: Request) -> dict[str, Any]:
        if PROTOBUF not in request.headers.get("content-type", ""):
            raise TinkerUserError(f"forward_backward takes a {PROTOBUF} body (tinker SDK >= 0.38)")
        call = decode_forward_backward(await request.body())
        service.client(call.model_id)
        # An unknown loss, a missing input or an over-long datum is refused before it queues.
        check_loss_inputs(call.loss_fn, [datum.inputs for datum in call.data])
        service.host.check_lengths(call.data)

        def work() -> bytes:
            outputs, metrics = service.host.forward_backward(
                call.model_id, call.data, call.loss_fn, call.loss_fn_config, forward_only=call.forward_only
            )
            return encode_forward_backward_output(outputs, metrics)

        return _future(service.futures.submit(work), call.model_id)

    @app.post("/api/v1/optim_step")
    async def optim_step(request: Request) -> dict[str, Any]:
        body = await _json(request)
        model_id = str(body.get("model_id"))
        service.client(model_id)
        adam = body.get("adam_params")
        if adam is None:
            raise TinkerUserError("optim_step needs adam_params; aloft serves the Adam optimizer only")
        fields = AdamParams.__dataclass_fields__
        params = AdamParams(**{key: float(value) for key, value in adam.items() if key in fields})

        def work() -> dict[str, Any]:
            return {"metrics": service.host.optim_step(model_id, params)}

        return _future(service.futures.submit(work), model_id)

    # --- state ------------------------------------------------------------------------------

    @app.post("/api/v1/save_weights")
    async def save_weights(request: Request) -> dict[str, Any]:
        body = await _json(request)
        model_id = str(body.get("model_id"))
        service.client(model_id)
        path = service.checkpoints.uri(model_id, "weights", check_name(body.get("path")))
        overwrite = bool(body.get("overwrite", False))
        if service.checkpoints.directory(path, exists=False).exists() and not overwrite:
            raise TinkerUserError(
                f"a checkpoint {path!r} exists; save under another name or pass overwrite=True"
            )

        def work() -> dict[str, Any]:
            # Checked here, on the compute thread, not at submission: a forward_backward accepted
            # earlier may not have run yet. Checked before the write, so a refusal leaves no directory.
            service.host.check_no_pending_gradients(model_id)
            service.checkpoints.write(path, lambda d: service.host.save_state(model_id, d), overwrite=True)
            return {"path": path, "type": "save_weights"}

        return _future(service.futures.submit(work), model_id)

    @app.post("/api/v1/load_weights")
    async def load_weights(request: Request) -> dict[str, Any]:
        body = await _json(request)
        path = str(body.get("path"))
        directory = service.checkpoints.directory(path, "weights")
        with_optimizer = bool(body.get("optimizer", False))
        if body.get("model_id"):  # load_state into an existing client
            model_id = str(body["model_id"])
            service.client(model_id)
            session = None
        else:  # create_training_client_from_state[_with_optimizer]: a new client, then the load
            session = service.session(str(body.get("session_id")))
            service.check_base_model(body.get("base_model"))
            model_id = f"{session.session_id}:train:{_number(body, 'model_seq_id')}"
            if model_id in service.host.clients:
                raise TinkerUserError(f"training client {model_id!r} already exists")

        def work() -> dict[str, Any]:
            if session is not None:
                service.host.create(model_id, service.host.saved_spec(directory))
                session.model_ids.add(model_id)
            service.host.load_state(model_id, directory, optimizer=with_optimizer)
            return {"path": path, "model_id": model_id, "type": "load_weights"}

        return _future(service.futures.submit(work), model_id)

    @app.post("/api/v1/weights_info")
    async def weights_info(request: Request) -> dict[str, Any]:
        directory = service.checkpoints.directory(str((await _json(request)).get("tinker_path")), "weights")
        spec = service.host.saved_spec(directory)
        return {
            "base_model": service.model,
            "is_lora": True,
            "lora_rank": spec.rank,
            "train_unembed": spec.train_unembed,
            "train_mlp": spec.train_mlp,
            "train_attn": spec.train_attn,
        }

    # --- sampling ---------------------------------------------------------------------------

    @app.post("/api/v1/save_weights_for_sampler")
    async def save_weights_for_sampler(request: Request) -> dict[str, Any]:
        body = await _json(request)
        model_id = str(body.get("model_id"))
        service.client(model_id)
        session_id = model_id.split(":train:")[0]
        name = body.get("path")
        if name is not None:
            check_name(name)

        if name is None:  # save_weights_and_get_sampling_client: an unnamed sampler
            sampler_id = f"{session_id}:sample:{_number(body, 'sampling_session_seq_id')}"

        def work() -> dict[str, Any]:
            adapters = service.host.adapters(model_id)
            if name is None:
                service.sampling.add(Sampler(sampler_id=sampler_id, adapters=adapters))
                return {"sampling_session_id": sampler_id, "type": "save_weights_for_sampler"}
            path = service.checkpoints.uri(model_id, "sampler_weights", str(name))
            service.checkpoints.write(path, adapters.save_peft, overwrite=True)
            service.sampling.add(Sampler(sampler_id=path, adapters=adapters, model_path=path))
            return {"path": path, "type": "save_weights_for_sampler"}

        return _future(service.futures.submit(work), model_id)

    @app.post("/api/v1/create_sampling_session")
    async def create_sampling_session(request: Request) -> dict[str, Any]:
        body = await _json(request)
        session = service.session(str(body.get("session_id")))
        sampler_id = f"{session.session_id}:sample:{_number(body, 'sampling_session_seq_id')}"
        if body.get("model_path"):
            saved = service.sampler_by_path(str(body["model_path"]))
            service.sampling.add(
                Sampler(sampler_id=sampler_id, adapters=saved.adapters, model_path=saved.model_path)
            )
        else:
            service.check_base_model(body.get("base_model"))
            service.sampling.add(Sampler(sampler_id=sampler_id, adapters=None))
        return {"sampling_session_id": sampler_id}

    @app.get("/api/v1/samplers/{sampler_id}")
    async def get_sampler(sampler_id: str) -> dict[str, Any]:
        sampler = service.sampler({"sampling_session_id": sampler_id})
        return {
            "sampler_id": sampler_id,
            "base_model": service.model,
            **({"model_path": sampler.model_path} if sampler.model_path else {}),
        }

    @app.post("/api/v1/asample")
    async def asample(request: Request) -> dict[str, Any]:
        body = await _json(request)
        sampler = service.sampler(body)
        call = decode_sample_request(body, service.host.max_length)
        request_id = service.futures.submit_async(lambda: service.sampling.sample(sampler, call))
        return {
            "request_id": request_id,
            "sample_sequence_ids": [f"{request_id}:{i}" for i in range(call.num_samples)],
        }

    # --- futures ----------------------------------------------------------------------------

    @app.post("/api/v1/retrieve_future")
    async def retrieve_future(request: Request) -> Response:
        request_id = str((await _json(request)).get("request_id"))
        outcome = await service.futures.retrieve(request_id)
        if outcome is None:
            return JSONResponse({"type": "try_again", "request_id": request_id, "queue_state": "active"})
        if outcome.error is not None:
            return JSONResponse({"error": outcome.error, "category": outcome.category})
        if outcome.proto is not None:
            return Response(outcome.proto, media_type=PROTOBUF)
        return JSONResponse(outcome.json)

    return app


def serve(
    model: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8001,
    checkpoint_dir: str = "tinker-checkpoints",
    max_length: int = 4096,
    api_key: str | None = None,
    session_timeout_s: float = 300.0,
) -> None:
    """Run the Tinker server until interrupted (loads ``model`` first, so a bad name fails at once)."""
    import uvicorn

    service = TinkerService(
        model,
        checkpoint_dir=checkpoint_dir,
        max_length=max_length,
        api_key=api_key,
        session_timeout_s=session_timeout_s,
    )
    # Warnings only: the SDK long-polls retrieve_future; an access line per poll buries the rest.
    uvicorn.run(create_app(service), host=host, port=port, log_level="warning")
