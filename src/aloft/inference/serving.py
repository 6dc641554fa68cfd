"""``aloft serve``: load a model into an engine and serve it over HTTP until interrupted."""

from __future__ import annotations

from typing import Any

import uvicorn

from aloft.inference.base import make_engine
from aloft.inference.capture import CaptureStore
from aloft.inference.server import build_app

__all__ = ["serve"]


def serve(
    model: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    dtype: str = "auto",
    api_key: str | None = None,
    backend: str = "hf",
    served_model_name: str | None = None,
    capture_dir: str | None = None,
    **engine_kwargs: Any,
) -> None:
    """Load ``model`` into a ``backend`` engine and serve it (``aloft serve``). With ``capture_dir``
    every request that names a session (``X-Session-Id`` or ``/sessions/<id>/v1``) is appended to
    ``<capture_dir>/<session>.jsonl`` with its exact prompt and sampled ids (``aloft.inference.capture``)."""
    from aloft.models.loading import load_tokenizer

    tokenizer = load_tokenizer(model)
    engine = make_engine(backend, model_or_path=model, tokenizer=tokenizer, dtype=dtype, **engine_kwargs)
    capture = CaptureStore(capture_dir) if capture_dir else None
    app = build_app(
        engine, tokenizer, model_name=served_model_name or model, api_key=api_key, capture=capture
    )
    try:
        uvicorn.run(app, host=host, port=port, log_level="info")
    finally:
        engine.close()
