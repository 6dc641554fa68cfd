"""The Generator: drives env <-> engine for many trajectories at once, token-in/token-out.

One trajectory (``_run_episode``)::

    env = make(row.env_class); messages = env.reset(row.prompt)
    prompt_ids = tokenize(chat_template(messages, add_generation_prompt))      # once
    repeat up to max_turns:
        completion = engine.generate(prompt_ids + completion_ids)              # token ids in
        append completion.token_ids   (loss_mask 1, sampler logprobs)         # token ids out
        out = env.step(completion.text); reward on this turn's last token
        if out.done: stop
        append tokenize(observations) (loss_mask 0, logprobs 0)               # tokenized once

Every trajectory is its own coroutine, so a batch of prompts x samples is in flight together and
the engine batches their requests; env calls run in threads so a slow tool never blocks the loop.
An env or engine call that raises ends that trajectory with status ``env_error`` (``info["error"]``
and ``info["error_source"]``: ``"env"`` or ``"engine"``), never the run; the trainer leaves such
trajectories out of the loss and stops the run when too many fail (``trainer.max_error_share``).
So does an env call (construction, ``reset``, ``step``) that runs past ``env_timeout_s``: it is
abandoned on its daemon thread and can hold neither the next step nor the run's exit
(``aloft.rollout.env_calls``).

An env that is an ``AgentEnv`` (``env=agent``) is played by an external program instead of the loop
above: it calls a capturing OpenAI-compatible server on this engine, and its session becomes the
trajectory, or one per fork (``aloft.rollout.agents``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from aloft.gym import Env, make
from aloft.gym.agent import AgentEnv
from aloft.inference.base import InferenceEngine, end_sessions
from aloft.rollout.agents import AgentSessions
from aloft.rollout.env_calls import EnvCallTimeout, EnvThreads
from aloft.seeds import mix_seed
from aloft.types import (
    Completion,
    GenerationRequest,
    Message,
    RolloutStatus,
    SamplingParams,
    Trajectory,
    TrajectoryGroup,
)

T = TypeVar("T")
logger = logging.getLogger(__name__)


class PromptRow(Protocol):
    """What the generator needs of a dataset row (``aloft.data.DatasetRow`` fits)."""

    prompt: list[Message]
    env_class: str | None
    extras: dict[str, Any]
    index: int


class ChatTokenizer(Protocol):
    """The slice of an HF tokenizer the generator uses."""

    eos_token_id: int | None

    def apply_chat_template(self, conversation: list[Any], **kwargs: Any) -> Any: ...
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


@dataclass
class ChatFormatter:
    """Renders prompts and observations with the tokenizer's chat template, tokenizing each once.

    Observations are the template's rendering of the new messages *after* a finished assistant turn,
    including the header that opens the next assistant turn. If the policy's turn did not end with
    the end-of-turn token (length limit, stop string), the template's closing tokens are appended
    as part of the observation (loss_mask 0): the policy is never trained on tokens it did not emit.
    """

    tokenizer: ChatTokenizer
    _turn_close: list[int] = field(default_factory=list, init=False)
    _base_ids: list[int] = field(default_factory=list, init=False)
    _base: list[Message] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self._base = [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "U"},
            {"role": "assistant", "content": "A"},
        ]
        self._base_ids = self._encode(self._render(self._base, add_generation_prompt=False))
        # Tokens the template puts after an assistant message's content: end-of-turn (+ newline).
        a_text = self._render(self._base, add_generation_prompt=False)
        tail = a_text[a_text.rindex("A") + 1 :]
        self._turn_close = self._encode(tail)

    def _render(self, messages: list[Message], add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt
        )

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def prompt_ids(self, messages: list[Message]) -> list[int]:
        return self._encode(self._render(messages, add_generation_prompt=True))

    def observation_ids(self, observations: list[Message], last_policy_ids: list[int]) -> list[int]:
        """Tokens that close the policy's turn (if it did not) and present ``observations``."""
        full = self._encode(self._render([*self._base, *observations], add_generation_prompt=True))
        assert full[: len(self._base_ids)] == self._base_ids, "chat template is not prefix-stable"
        new = full[len(self._base_ids) :]
        close = self._turn_close
        # How much of the closing sequence the policy already emitted (usually the EOS token).
        emitted = 0
        for k in range(len(close), 0, -1):
            if last_policy_ids[-k:] == close[:k]:
                emitted = k
                break
        return close[emitted:] + new


@dataclass(kw_only=True)
class EpisodeLimits:
    max_turns: int = 1
    """Most policy turns in one trajectory."""
    max_total_tokens: int = 1024
    """Token budget for the whole completion (policy turns plus observations)."""


class Generator:
    """Produces ``TrajectoryGroup`` s for dataset rows with any engine and any registered env."""

    def __init__(
        self,
        engine: InferenceEngine,
        tokenizer: ChatTokenizer,
        *,
        limits: EpisodeLimits,
        env_configs: dict[str, dict[str, Any]] | None = None,
        default_env_config: dict[str, Any] | None = None,
        default_env: str | None = None,
        env_factory: Callable[..., Env] = make,
        lockstep: bool = False,
        env_threads: int = 64,
        env_timeout_s: float | None = 300.0,
    ) -> None:
        """``env_threads``: at most this many env calls (construction, reset, step) run at once,
        each on a thread off the event loop. They mostly wait (tools, databases, sandboxes, HTTP),
        so far more than the cores keeps that many trajectories' tool calls in flight.
        ``env_timeout_s``: the most one such call may take before its trajectory fails as
        ``env_error`` (None: no limit). Agent programs (``env=agent``) keep their own limits."""
        self.engine = engine
        self.env_threads = EnvThreads(env_threads)
        self.env_timeout_s = env_timeout_s
        self.lockstep = lockstep
        """Submit each turn's requests of all live episodes together, in episode order, so the engine
        sees the same batches on every run (bit-exact reruns; costs the overlap of envs and engine)."""
        self.tokenizer = tokenizer
        self.chat = ChatFormatter(tokenizer)
        self.limits = limits
        self.env_configs = env_configs or {}
        self.default_env_config = default_env_config
        self.default_env = default_env
        self.env_factory = env_factory

    async def _in_env_thread(self, fn: Callable[..., T], *args: Any) -> T:
        """A blocking call off the loop with no deadline (an agent program's play and score)."""
        return await self.env_threads.run(fn, *args, timeout_s=None, what=getattr(fn, "__name__", "call"))

    async def _end_session(self, session_id: str) -> None:
        try:
            await end_sessions(self.engine, [session_id])
        except Exception as exc:  # memory comes back by eviction anyway; the trajectory stands
            logger.warning("engine could not end session %s: %r", session_id, exc)

    async def _env_call(self, fn: Callable[..., T], *args: Any, what: str) -> T:
        """An env call off the loop, failing with ``EnvCallTimeout`` past ``env_timeout_s``."""
        return await self.env_threads.run(fn, *args, timeout_s=self.env_timeout_s, what=what)

    def generate_sync(self, rows: Sequence[PromptRow], **kwargs: Any) -> list[TrajectoryGroup]:
        return asyncio.run(self.generate(rows, **kwargs))

    async def generate(
        self,
        rows: Sequence[PromptRow],
        *,
        n: int,
        sampling: SamplingParams,
        seed: int,
        group_prefix: str = "g",
    ) -> list[TrajectoryGroup]:
        """``n`` trajectories for every row, all in flight at once.

        ``seed`` fixes sampling: sample ``j`` of row ``i`` at turn ``t`` uses a seed derived from
        (seed, i, j, t), so the draws do not depend on batching or timing. The logits may still
        differ in the last bits with a batch's composition (padding, shapes); ``lockstep`` makes
        the batches themselves repeat, for bit-exact reruns.
        """
        submit = _Lockstep(self.engine, len(rows) * n) if self.lockstep else None
        agents = AgentSessions(self.engine, self.tokenizer)  # its server starts with the first agent episode
        tasks = []
        for i, row in enumerate(rows):
            for j in range(n):
                episode = self._run_episode(
                    row,
                    f"{group_prefix}{i}",
                    sampling,
                    seed=mix_seed(seed, i, j),
                    submit=submit,
                    index=i * n + j,
                    agents=agents,
                )
                tasks.append(episode if submit is None else submit.leave_when_done(episode))
        try:
            episodes = await asyncio.gather(*tasks)
        finally:
            await agents.stop()
        groups = []
        for i in range(len(rows)):
            # An agent session that forked is several trajectories (aloft.inference.capture).
            pieces = [t for episode in episodes[i * n : (i + 1) * n] for t in episode]
            groups.append(TrajectoryGroup(group_id=f"{group_prefix}{i}", trajectories=pieces))
        return groups

    async def _run_episode(
        self,
        row: PromptRow,
        group_id: str,
        sampling: SamplingParams,
        seed: int,
        submit: _Lockstep | None = None,
        index: int = 0,
        agents: AgentSessions | None = None,
    ) -> list[Trajectory]:
        env_class = row.env_class or self.default_env
        if env_class is None:
            raise ValueError(f"row {row.index} has no env_class and no default env: set env.name=ENV_ID")
        t_start = time.perf_counter()
        env_seconds = 0.0
        prompt_ids: list[int] = []
        completion_ids: list[int] = []
        loss_mask: list[int] = []
        logprobs: list[float] = []
        rewards: list[float] = []
        observation_spans: list[list[int]] = []
        status = RolloutStatus.LENGTH
        error: str | None = None
        policy_version = self.engine.version
        segments: list[list[int]] = []
        segment_versions: list[int] = []
        turns = 0
        env: Env | None = None
        failing = "env"  # which side an exception comes from: "env" or "engine"
        played: list[Trajectory] = []
        env_hung = False
        session_id = f"{group_id}/{seed}"  # the engine keeps this trajectory's KV for its next turn
        try:
            env = await self._env_call(
                self.env_factory,
                env_class,
                self.env_configs.get(env_class, self.default_env_config),
                row.extras,
                what="construction",
            )
            messages, _ = await self._env_call(env.reset, list(row.prompt), what="reset")
            prompt_ids = self.chat.prompt_ids(messages)
            if isinstance(env, AgentEnv):  # an external program plays the episode (env=agent)
                if submit is not None or agents is None:
                    raise ValueError("env agent cannot run in lockstep: set trainer.deterministic=false")
                played = await agents.run(
                    env,
                    messages,
                    group_id=group_id,
                    session=f"{group_id}.{index}.{secrets.token_hex(8)}",  # not guessable by another episode
                    sampling=sampling,
                    seed=seed,
                    max_turns=self.limits.max_turns,
                    max_total_tokens=self.limits.max_total_tokens,
                    in_thread=self._in_env_thread,
                )
                turns = sum(t.info["turns"] for t in played)
                status = played[-1].status
            else:
                for turn in range(self.limits.max_turns):
                    budget = self.limits.max_total_tokens - len(completion_ids)
                    if budget <= 0:
                        status = RolloutStatus.LENGTH
                        break
                    request = GenerationRequest(
                        prompt_ids=prompt_ids + completion_ids,
                        sampling=replace(
                            sampling, max_tokens=min(sampling.max_tokens, budget), seed=mix_seed(seed, turn)
                        ),
                        session_id=session_id,
                    )
                    failing = "engine"
                    if submit is not None:
                        completion = await submit.generate(index, request)
                    else:
                        (completion,) = await self.engine.generate([request])
                    failing = "env"
                    if turn == 0:
                        policy_version = completion.policy_version
                    # Weights may change between turns (in-flight updates): each turn is a segment.
                    segments.append([len(completion_ids), len(completion_ids) + len(completion.token_ids)])
                    segment_versions.append(completion.policy_version)
                    turns += 1
                    completion_ids += completion.token_ids
                    loss_mask += [1] * len(completion.token_ids)
                    logprobs += completion.logprobs
                    rewards += [0.0] * len(completion.token_ids)
                    if completion.finish_reason == "abort":
                        status = RolloutStatus.ABORTED
                        break
                    text = completion.text or self.tokenizer.decode(
                        completion.token_ids, skip_special_tokens=True
                    )
                    t_env = time.perf_counter()
                    out = await self._env_call(env.step, text, what="step")
                    env_seconds += time.perf_counter() - t_env
                    if rewards:
                        rewards[-1] += float(out.reward)
                    if out.done:
                        status = (
                            RolloutStatus.STOP if completion.finish_reason == "stop" else RolloutStatus.LENGTH
                        )
                        break
                    obs_ids = self.chat.observation_ids(out.observations, completion.token_ids)
                    start = len(completion_ids)
                    completion_ids += obs_ids
                    loss_mask += [0] * len(obs_ids)
                    logprobs += [0.0] * len(obs_ids)
                    rewards += [0.0] * len(obs_ids)
                    observation_spans.append([start, len(completion_ids)])
                else:
                    status = RolloutStatus.LENGTH  # turn limit reached without the env saying done
        except Exception as exc:  # fails this trajectory, not the run; the trainer never trains on it
            logger.warning("%s failed on row %s (env %s): %r", failing, row.index, env_class, exc)
            status = RolloutStatus.ENV_ERROR
            error = f"{failing}: {exc!r}"
            rewards = [0.0] * len(completion_ids)
            env_hung = isinstance(exc, EnvCallTimeout)
        finally:
            if segments:  # the episode is over: its last turn's KV serves no next turn
                await self._end_session(session_id)
            metrics = {}
            if env is not None and env_hung:  # its state is unknown and close may hang too: off the loop
                threading.Thread(target=_close_quietly, args=(env, env_class), daemon=True).start()
            elif env is not None:
                try:
                    metrics = {k: float(v) for k, v in env.metrics().items()}
                    env.close()
                except Exception as exc:
                    logger.warning("env %s close/metrics failed: %r", env_class, exc)
        info: dict[str, Any] = {
            "row_index": row.index,
            "env_class": env_class,
            "turns": turns,
            "observation_spans": observation_spans,
            "segments": segments,
            "segment_versions": segment_versions,
            "seconds": time.perf_counter() - t_start,
            "env_seconds": env_seconds,
        }
        if error:
            info["error"] = error
            info["error_source"] = failing
        elif played:
            for piece in played:
                piece.metrics = {**metrics, "forks": float(piece.info["forks"])}
                piece.info = {**info, **piece.info}
            return played
        return [
            Trajectory(
                prompt_ids=prompt_ids,
                completion_ids=completion_ids,
                loss_mask=loss_mask,
                sampler_logprobs=logprobs,
                rewards=rewards,
                status=status,
                group_id=group_id,
                policy_version=policy_version,
                metrics=metrics,
                info=info,
            )
        ]


def _close_quietly(env: Env, env_class: str) -> None:
    """Close an env whose call was abandoned (it may free what the hung call waits on)."""
    try:
        env.close()
    except Exception as exc:
        logger.warning("env %s close after a timeout failed: %r", env_class, exc)


class _Lockstep:
    """Gathers one request from every live episode, then sends them to the engine as one call.

    An engine's batches then hold the same rows in the same order on every run, whatever the
    timing of env threads, so floating-point results (which depend on a batch's padding and shape)
    repeat exactly. Episodes that finish leave the count of live ones.
    """

    def __init__(self, engine: InferenceEngine, live: int) -> None:
        self.engine = engine
        self.live = live
        self.waiting: dict[int, tuple[GenerationRequest, asyncio.Future[Completion]]] = {}

    async def generate(self, index: int, request: GenerationRequest) -> Completion:
        future: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
        self.waiting[index] = (request, future)
        self._flush_if_all_waiting()
        return await future

    async def leave_when_done(self, episode: Awaitable[Trajectory]) -> Trajectory:
        try:
            return await episode
        finally:
            self.live -= 1
            self._flush_if_all_waiting()

    def _flush_if_all_waiting(self) -> None:
        if not self.waiting or len(self.waiting) < self.live:
            return
        batch = sorted(self.waiting.items())
        self.waiting = {}
        call = asyncio.ensure_future(self.engine.generate([request for _, (request, _) in batch]))

        def deliver(done: asyncio.Future[list[Completion]]) -> None:
            for position, (_, (_, future)) in enumerate(batch):
                if future.done():
                    continue
                if done.cancelled():
                    future.cancel()
                elif done.exception() is not None:
                    future.set_exception(done.exception())
                else:
                    future.set_result(done.result()[position])

        call.add_done_callback(deliver)
