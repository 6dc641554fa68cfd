"""Agent episodes (``env=agent``): external programs play against a capturing ``aloft serve``.

For one ``Generator.generate`` call the first agent episode starts an OpenAI-compatible server on
127.0.0.1 that runs on the generator's own engine, inside the generator's event loop (so the
programs' requests batch with every other episode's). Each episode::

    session = open(run's sampling, seed, turn and token budgets)         # aloft.inference.capture
    run = env.play(endpoint of session, row.prompt)                      # the program, in a thread
    calls, truncated, posted = close(session)
    reward = env.score(run, last reply, posted, truncated)
    trajectories = session_trajectories(calls, reward)                   # one, or one per fork

The server stops when the ``generate`` call ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
from collections.abc import Iterator
from typing import Any

from aloft.gym.agent import AgentEndpoint, AgentEnv
from aloft.inference.base import InferenceEngine, end_sessions
from aloft.inference.capture import CaptureStore, SessionPolicy, session_trajectories
from aloft.types import InfrastructureError, Message, SamplingParams, Trajectory

__all__ = ["AgentSessions"]

MODEL_NAME = "policy"


class AgentSessions:
    """The capturing server of one ``generate`` call; started by its first agent episode."""

    def __init__(self, engine: InferenceEngine, tokenizer: Any) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.capture = CaptureStore()
        self.api_key = secrets.token_hex(16)
        self.url: str | None = None
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None
        self._starting = asyncio.Lock()

    async def _start(self) -> str:
        async with self._starting:
            if self.url is None:
                import uvicorn

                from aloft.inference.server import build_app

                class _InLoopServer(uvicorn.Server):
                    @contextlib.contextmanager
                    def capture_signals(self) -> Iterator[None]:  # Ctrl-C stays the trainer's
                        yield

                # No /control routes, and only the sessions this run opens: the programs hold its key.
                app = build_app(
                    self.engine,
                    self.tokenizer,
                    model_name=MODEL_NAME,
                    api_key=self.api_key,
                    capture=self.capture,
                    control=False,
                    governed_only=True,
                )
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.bind(("127.0.0.1", 0))
                config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=5)
                self._server = _InLoopServer(config)
                self._task = asyncio.ensure_future(self._server.serve(sockets=[sock]))
                while not self._server.started:
                    if self._task.done():
                        sock.close()
                        self._task.result()
                        raise InfrastructureError("the agent endpoint did not start")
                    await asyncio.sleep(0.005)
                self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        return self.url

    async def stop(self) -> None:
        if self._task is not None:
            self._server.should_exit = True
            await self._task
            self._task = None

    async def run(
        self,
        env: AgentEnv,
        prompt: list[Message],
        *,
        group_id: str,
        session: str,
        sampling: SamplingParams,
        seed: int,
        max_turns: int,
        max_total_tokens: int,
        in_thread: Any,
    ) -> list[Trajectory]:
        """Play one episode; ``in_thread(fn, *args)`` runs blocking env calls off the loop."""
        url = await self._start()
        policy = SessionPolicy(
            sampling=sampling, seed=seed, max_turns=max_turns, max_total_tokens=max_total_tokens
        )
        self.capture.open(session, policy)
        endpoint = AgentEndpoint(
            base_url=f"{url}/sessions/{session}/v1",
            plain_url=f"{url}/v1",
            api_key=self.api_key,
            session=session,
            reward_url=f"{url}/sessions/{session}/reward",
            model=MODEL_NAME,
        )
        try:
            run = await in_thread(env.play, endpoint, prompt)
        finally:
            calls, truncated, posted = self.capture.close(session)
            await end_sessions(self.engine, [session])  # the program is done: free its KV
        if not calls:
            raise InfrastructureError(
                f"agent program made no request to its endpoint (exit status {run.exit_code}): "
                f"{run.stderr.strip()[-300:] or 'no stderr'}"
            )
        reward = await in_thread(env.score, run, calls[-1].text, posted, truncated)
        return session_trajectories(
            calls, group_id=group_id, reward=reward, truncated=truncated, info={"exit_code": run.exit_code}
        )
