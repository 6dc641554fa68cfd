"""Capture: what an agent harness did through ``aloft serve``, token for token. Torch-free.

A harness that speaks the OpenAI API knows nothing of token ids; the server does. With a
``CaptureStore`` the server records every request of a session (``X-Session-Id`` header, or the
``/sessions/<id>/v1`` base URL) as a ``CapturedCall``: the exact prompt ids it built and the ids and
logprobs the engine sampled. ``session_trajectories`` turns a session into training data:

    call 1:  prompt P1                      -> sampled A1
    call 2:  prompt P2 = P1 + A1 + O1       -> sampled A2      (O1: tool result, user turn)
    ...
    trajectory: prompt P1, completion A1 O1 A2 ..., loss_mask 1 on A*, 0 on O*

The policy tokens are the sampled ids themselves, never the harness's text re-tokenized. When a
harness re-templates its history so that a prompt does not extend the tokens recorded so far (it
edited a reply, re-serialized a tool call, dropped a turn), the session *forks*: the trajectory so far
is closed and a new one starts from that prompt, so no token the engine did not sample is ever
trained on. Each piece gets the session's reward (``info["fork"]``: its index in the session); in
group statistics the pieces of one session count as one sample (``aloft.trainer.sessions``).

Two things keep forks rare for an ordinary OpenAI tool loop (``messages.append(reply)``): the server
remembers the raw text of every reply it returned in a session and renders a returned assistant
message back from it (``restore_replies``), and templates without tool support get tool calls
written back in the format the server parsed them from (``aloft.inference.chat_messages``).

In training (``env=agent``) each session is opened with a ``SessionPolicy``: the run's sampling
settings replace the harness's (the trainer recomputes logprobs at the run's temperature), the seed is
derived per turn, and the run's turn and token budgets hold; a request past them is refused (400) and
the session counts as truncated.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from aloft.seeds import mix_seed
from aloft.types import Completion, RolloutStatus, SamplingParams, Trajectory

__all__ = [
    "CaptureRefused",
    "CaptureStore",
    "CapturedCall",
    "SessionPolicy",
    "load_sessions",
    "session_trajectories",
]


@dataclass(kw_only=True)
class CapturedCall:
    """One sampled completion of one request: what the engine saw and what it sampled."""

    session: str
    turn: int
    """The request's position in its session (0-based)."""
    endpoint: str
    """``"chat"`` or ``"completions"``."""
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    policy_version: int
    text: str = ""
    """The reply's text as returned to the harness (stop strings removed, tool calls parsed out)."""
    time: float = field(default_factory=time.time)


@dataclass(kw_only=True)
class SessionPolicy:
    """What a training run imposes on a session's requests (``env=agent``)."""

    sampling: SamplingParams
    """The run's sampling: its temperature, top-p and top-k replace the request's, its stop strings
    and stop token ids are added to the request's, its ``max_tokens`` caps each request's."""
    seed: int
    """Turn t samples with ``mix_seed(seed, t)``, as the generator's own episodes do."""
    max_turns: int
    max_total_tokens: int
    """Budget for everything after the first prompt (replies and observations), as in the generator."""


class CaptureRefused(ValueError):
    """A request past its session's turn or token budget (the server answers 400)."""


@dataclass
class _Session:
    policy: SessionPolicy | None = None
    calls: list[CapturedCall] = field(default_factory=list)
    replies: dict[str, str] = field(default_factory=dict)
    """Key of an assistant message the server returned -> the raw text that was sampled."""
    truncated: bool = False
    reward: float | None = None
    turns: int = 0
    """Turns handed out (a turn is reserved when its request starts: concurrent requests and
    retries get their own seeds and count against the turn limit)."""
    sampled: int = 0
    recorded: int = 0


def reply_key(content: str | None, tool_calls: list[dict[str, Any]] | None) -> str:
    """An assistant message's identity, as a harness sends it back: its content and its calls' names
    and argument strings (ids and types are the harness's bookkeeping)."""
    calls = [
        [call.get("function", {}).get("name"), call.get("function", {}).get("arguments")]
        for call in tool_calls or []
    ]
    return json.dumps([content or "", calls], ensure_ascii=False)


class CaptureStore:
    """Sessions recorded by one server; thread-safe. With ``directory`` (``aloft serve --capture
    DIR``), each call is appended to ``<directory>/<session>.jsonl`` as it happens and kept there only
    (memory then holds, per session, the text of the replies it was returned). Each line holds the
    call's whole prompt: exact, at a cost that grows with the square of a session's turns."""

    def __init__(self, directory: str | Path | None = None, max_sessions: int = 10_000) -> None:
        """``max_sessions``: sessions remembered beyond the run's own (``SessionPolicy``) ones; the
        oldest is forgotten first (a server that runs for days keeps a bounded memory)."""
        self.max_sessions = max_sessions
        self.directory = Path(directory) if directory is not None else None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()

    def _session(self, session: str) -> _Session:
        """``session``'s state, made if new; the caller holds the lock."""
        state = self._sessions.get(session)
        if state is None:
            state = self._sessions[session] = _Session()
            if len(self._sessions) > self.max_sessions:
                oldest = next((key for key, old in self._sessions.items() if old.policy is None), None)
                if oldest is not None and oldest != session:
                    del self._sessions[oldest]
        return state

    def open(self, session: str, policy: SessionPolicy | None = None) -> None:
        """Start ``session`` (training opens each episode's before its harness runs)."""
        with self._lock:
            self._sessions[session] = _Session(policy=policy)

    def is_governed(self, session: str | None) -> bool:
        """Whether ``session`` was opened with a ``SessionPolicy`` (a training episode)."""
        with self._lock:
            found = self._sessions.get(session or "")
            return found is not None and found.policy is not None

    def sampling_for(self, session: str, requested: SamplingParams, prompt_len: int) -> SamplingParams:
        """The sampling a request of ``session`` gets: the request's own without a policy, else the
        run's, with the turn's seed and a ``max_tokens`` within the budgets left. Raises
        ``CaptureRefused`` past the turn or token budget (the session is then truncated)."""
        with self._lock:
            state = self._session(session)
            policy = state.policy
            if policy is None:
                return requested
            turn = state.turns
            # Tokens since the first prompt, at least every token sampled so far (a harness that
            # trims or rewrites its history does not win back budget).
            grown = prompt_len - len(state.calls[0].prompt_ids) if state.calls else 0
            room = policy.max_total_tokens - max(grown, state.sampled)
            if turn >= policy.max_turns or room <= 0:
                state.truncated = True
                what = (
                    f"{policy.max_turns} turns"
                    if turn >= policy.max_turns
                    else f"{policy.max_total_tokens} tokens"
                )
                raise CaptureRefused(f"session {session} has used its budget of {what} (generator limits)")
            state.turns += 1
            return replace(
                policy.sampling,
                max_tokens=min(requested.max_tokens, policy.sampling.max_tokens, room),
                stop=[*policy.sampling.stop, *requested.stop],
                stop_token_ids=[*policy.sampling.stop_token_ids, *requested.stop_token_ids],
                seed=mix_seed(policy.seed, turn),
            )

    def record(
        self,
        session: str,
        endpoint: str,
        prompt_ids: list[int],
        completion: Completion,
        text: str,
        raw_text: str,
        key: str | None = None,
    ) -> CapturedCall:
        """Record one sampled completion; ``key`` (``reply_key`` of the message returned) lets a later
        request's copy of that message be rendered from ``raw_text``, exactly as sampled."""
        with self._lock:
            state = self._session(session)
            call = CapturedCall(
                session=session,
                turn=state.recorded,
                endpoint=endpoint,
                prompt_ids=list(prompt_ids),
                token_ids=list(completion.token_ids),
                logprobs=list(completion.logprobs),
                finish_reason=completion.finish_reason,
                policy_version=completion.policy_version,
                text=text,
            )
            state.recorded += 1
            state.sampled += len(call.token_ids)
            # With a directory, a harness's calls live on disk only; a run's own stay for close().
            if state.policy is not None or self.directory is None:
                state.calls.append(call)
            if key is not None:
                state.replies[key] = raw_text
        if self.directory is not None:
            with (self.directory / f"{_file_safe(session)}.jsonl").open("a") as out:
                out.write(json.dumps(asdict(call)) + "\n")
        return call

    def raw_reply(self, session: str | None, key: str) -> str | None:
        """The sampled text of an assistant message this session was returned, if it was."""
        with self._lock:
            found = self._sessions.get(session or "")
            return None if found is None else found.replies.get(key)

    def post_reward(self, session: str, reward: float) -> None:
        if not math.isfinite(reward):
            raise ValueError(f"reward must be a finite number, got {reward}")
        with self._lock:
            self._session(session).reward = float(reward)

    def close(self, session: str) -> tuple[list[CapturedCall], bool, float | None]:
        """End ``session``: its calls, whether it was truncated, and the reward posted for it."""
        with self._lock:
            state = self._sessions.pop(session, None) or _Session()
        return state.calls, state.truncated, state.reward


def _file_safe(session: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in session)


def session_trajectories(
    calls: list[CapturedCall],
    *,
    group_id: str,
    reward: float,
    truncated: bool = False,
    info: dict[str, Any] | None = None,
) -> list[Trajectory]:
    """A session's calls as trajectories: one, or one per fork. Each piece's policy tokens are
    exactly the sampled ids (``loss_mask`` 1), what the harness added between turns is observation
    (``loss_mask`` 0), and ``reward`` sits on each piece's last policy token."""
    if not calls:
        raise ValueError("a session with no calls has no trajectory")
    pieces: list[list[CapturedCall]] = []
    context: list[int] = []
    for call in calls:
        extends = bool(pieces) and call.prompt_ids[: len(context)] == context
        if not extends:
            pieces.append([])
            context = list(call.prompt_ids)
        else:
            context = list(call.prompt_ids)
        pieces[-1].append(call)
        context += call.token_ids
    out = []
    for fork, piece in enumerate(pieces):
        prompt = piece[0].prompt_ids
        completion: list[int] = []
        mask: list[int] = []
        logprobs: list[float] = []
        spans, segments = [], []
        for call in piece:
            observation = call.prompt_ids[len(prompt) + len(completion) :]
            if observation:
                spans.append([len(completion), len(completion) + len(observation)])
                completion += observation
                mask += [0] * len(observation)
                logprobs += [0.0] * len(observation)
            segments.append([len(completion), len(completion) + len(call.token_ids)])
            completion += call.token_ids
            mask += [1] * len(call.token_ids)
            logprobs += call.logprobs
        rewards = [0.0] * len(completion)
        last_policy = max(i for i, m in enumerate(mask) if m) if any(mask) else None
        if last_policy is not None:
            rewards[last_policy] = float(reward)
        last = piece[-1].finish_reason
        status = RolloutStatus.STOP
        if last == "abort":
            status = RolloutStatus.ABORTED
        elif truncated or last == "length":
            status = RolloutStatus.LENGTH
        out.append(
            Trajectory(
                prompt_ids=list(prompt),
                completion_ids=completion,
                loss_mask=mask,
                sampler_logprobs=logprobs,
                rewards=rewards,
                status=status,
                group_id=group_id,
                policy_version=piece[0].policy_version,
                info={
                    **(info or {}),
                    "session": piece[0].session,
                    "fork": fork,
                    "forks": len(pieces) - 1,
                    "turns": len(piece),
                    "observation_spans": spans,
                    "segments": segments,
                    "segment_versions": [call.policy_version for call in piece],
                },
            )
        )
    return out


def load_sessions(directory: str | Path) -> dict[str, list[CapturedCall]]:
    """The sessions ``aloft serve --capture DIR`` wrote: session -> its calls in order."""
    sessions: dict[str, list[CapturedCall]] = {}
    for path in sorted(Path(directory).glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                call = CapturedCall(**json.loads(line))
                sessions.setdefault(call.session, []).append(call)
    for calls in sessions.values():
        calls.sort(key=lambda call: call.turn)
    return sessions
