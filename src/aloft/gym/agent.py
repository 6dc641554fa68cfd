"""``env=agent``: an episode played by an external agent program against the policy's endpoint.

The program is any harness that talks to "an OpenAI-compatible endpoint" and knows nothing of
aloft or token ids. For each episode the generator opens a session on a capturing ``aloft serve``
that runs on the trainer's own engine, starts the program with the endpoint in the environment
the official ``openai`` SDK reads, waits for it to exit and trains on exactly the tokens its
requests sampled (``aloft.inference.capture``). The program sees::

    OPENAI_BASE_URL      http://127.0.0.1:<port>/sessions/<session>/v1   (the session is in the URL)
    OPENAI_API_KEY       a key made for this run
    ALOFT_SESSION_ID     the session; or send it as the X-Session-Id header to ALOFT_BASE_URL
    ALOFT_BASE_URL       http://127.0.0.1:<port>/v1
    ALOFT_TASK_FILE      a JSON file {"prompt": [messages], "extras": {row fields}}
    ALOFT_REWARD_FILE    where the program may write its reward (a number)
    ALOFT_REWARD_URL     where it may POST {"reward": x} instead
    stdin                the task's last user message

Config (``env.config``): ``command`` (a list, or a string split like a shell would; a first word
``python`` is this interpreter), ``reward`` (``verifier``, the default: the env ``verifier``, built with
``verifier_config`` and the row's extras, judges the last reply (or the program's stdout with
``verifier_input: stdout``); ``file``; ``http``; ``exit``: 1.0 for exit status 0, else 0.0),
``timeout_s`` (300), ``env`` (extra environment variables), ``cwd``.

Failures are loud, never a reward of 0: a program that cannot start, runs past ``timeout_s``, exits
non-zero (unless ``reward: exit``), makes no request, or leaves no reward fails its episode
(``env_error``, with the program's stderr tail). A session stopped by the run's turn or token budget
is the policy's doing: status ``length``, reward from the harness if it gave one, else 0.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aloft.gym.core import Env, StepOutput, make
from aloft.types import InfrastructureError, Message

__all__ = ["AgentEndpoint", "AgentEnv", "AgentRun", "ProgramAgentEnv"]

REWARD_SOURCES = ("verifier", "file", "http", "exit")


@dataclass(frozen=True)
class AgentEndpoint:
    """Where one episode's program reaches the policy."""

    base_url: str
    """The session's base URL (``.../sessions/<session>/v1``)."""
    plain_url: str
    """The server's ``.../v1`` (the session then goes in the ``X-Session-Id`` header)."""
    api_key: str
    session: str
    reward_url: str
    model: str


@dataclass
class AgentRun:
    """How the program ended."""

    exit_code: int
    stdout: str
    stderr: str
    file_reward: float | None = None


class AgentEnv(Env):
    """An env whose episode is played by something that calls the endpoint itself. The generator
    calls ``play`` (in an env thread) instead of the ``step`` loop, then ``score``."""

    def step(self, action: str) -> StepOutput:
        raise NotImplementedError(
            f"{type(self).__name__} is played by its agent program, not step by step: run it through "
            "aloft's Generator (env=agent)"
        )

    @abstractmethod
    def play(self, endpoint: AgentEndpoint, prompt: list[Message]) -> AgentRun:
        """Run one episode against ``endpoint``; blocking. Raises ``InfrastructureError`` when the
        episode could not be played."""

    @abstractmethod
    def score(self, run: AgentRun, reply: str, posted: float | None, truncated: bool) -> float:
        """The episode's reward, from ``run`` (exit status, reward file), the last ``reply`` the
        policy gave, a ``posted`` reward; raises ``InfrastructureError`` when there is none."""


class ProgramAgentEnv(AgentEnv):
    """An agent that is a program run once per episode (see the module docstring)."""

    def __init__(self, config: dict[str, Any] | None = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__(config, extras)
        command = self.config.get("command")
        if not command:
            raise ValueError(
                "env agent needs env.config.command: the agent program to run, e.g. "
                "[python, -m, aloft.gym.agents.calculator]"
            )
        self.command = shlex.split(command) if isinstance(command, str) else [str(part) for part in command]
        if self.command[0] == "python":
            self.command[0] = sys.executable
        self.reward_source = self.config.get("reward", "verifier")
        if self.reward_source not in REWARD_SOURCES:
            raise ValueError(f"env agent: reward must be one of {REWARD_SOURCES}, got {self.reward_source!r}")
        if self.reward_source == "verifier" and not self.config.get("verifier"):
            raise ValueError(
                "env agent with reward=verifier needs env.config.verifier: an env id that "
                "judges the final reply (e.g. arithmetic), or set reward to file, http or exit"
            )
        self.timeout_s = float(self.config.get("timeout_s", 300))
        self._metrics: dict[str, float] = {}
        self._prompt: list[Message] = []
        self._process: subprocess.Popen[bytes] | None = None

    def play(self, endpoint: AgentEndpoint, prompt: list[Message]) -> AgentRun:
        self._prompt = prompt
        with tempfile.TemporaryDirectory(prefix="aloft-agent-") as scratch:
            files = Path(scratch)
            (files / "task.json").write_text(
                json.dumps({"prompt": prompt, "extras": self.extras}, default=str)
            )
            (files / "stdin").write_text(
                _text(next((m for m in reversed(prompt) if m.get("role") == "user"), {}))
            )
            environment = {
                **os.environ,
                **{str(k): str(v) for k, v in (self.config.get("env") or {}).items()},
                "OPENAI_BASE_URL": endpoint.base_url,
                "OPENAI_API_KEY": endpoint.api_key,
                "OPENAI_MODEL": endpoint.model,
                "ALOFT_SESSION_ID": endpoint.session,
                "ALOFT_BASE_URL": endpoint.plain_url,
                "ALOFT_TASK_FILE": str(files / "task.json"),
                "ALOFT_REWARD_FILE": str(files / "reward"),
                "ALOFT_REWARD_URL": endpoint.reward_url,
                # The endpoint is on loopback: a proxy set for the machine must not carry it.
                "NO_PROXY": ",".join(filter(None, ["127.0.0.1,localhost", os.environ.get("NO_PROXY")])),
            }
            environment["no_proxy"] = environment["NO_PROXY"]
            # Files, not pipes: a child the program leaves behind cannot hold the episode open.
            with (
                open(files / "stdin") as stdin,
                open(files / "stdout", "w+") as out,
                open(files / "stderr", "w+") as err,
            ):
                try:
                    process = subprocess.Popen(
                        self.command,
                        stdin=stdin,
                        stdout=out,
                        stderr=err,
                        env=environment,
                        cwd=self.config.get("cwd"),
                        start_new_session=True,  # its own process group, ended with it
                    )
                except OSError as error:
                    raise InfrastructureError(
                        f"agent program {self.command[0]!r} could not start: {error}"
                    ) from error
                self._process = process
                try:
                    exit_code = process.wait(timeout=self.timeout_s)
                except subprocess.TimeoutExpired:
                    exit_code = None
                finally:
                    _end_group(process)
                    self._process = None
            stdout, stderr = (
                (files / "stdout").read_text(errors="replace"),
                (files / "stderr").read_text(errors="replace"),
            )
            if exit_code is None:
                raise InfrastructureError(
                    f"agent program ran past env.config.timeout_s={self.timeout_s:g}s and was killed: "
                    f"{_tail(stderr) or 'no stderr'}"
                )
            run = AgentRun(exit_code=exit_code, stdout=stdout, stderr=stderr)
            if (files / "reward").exists():
                text = (files / "reward").read_text().strip()
                try:
                    run.file_reward = float(text)
                except ValueError:
                    run.file_reward = math.nan
                if not math.isfinite(run.file_reward):
                    raise InfrastructureError(
                        f"agent program wrote {text[:40]!r} to ALOFT_REWARD_FILE: expected a finite number"
                    )
        return run

    def score(self, run: AgentRun, reply: str, posted: float | None, truncated: bool) -> float:
        self._metrics = {"exit_nonzero": float(run.exit_code != 0)}
        if self.reward_source == "exit":
            return 1.0 if run.exit_code == 0 else 0.0
        if run.exit_code != 0 and not truncated:
            raise InfrastructureError(
                f"agent program exited with status {run.exit_code}: {_tail(run.stderr) or 'no stderr'}"
            )
        if self.reward_source == "verifier":
            judged = reply if self.config.get("verifier_input", "reply") == "reply" else run.stdout
            return self._verify(judged)
        reward = run.file_reward if self.reward_source == "file" else posted
        if reward is None:
            if truncated:
                return 0.0
            where = "wrote no ALOFT_REWARD_FILE" if self.reward_source == "file" else "posted no reward"
            raise InfrastructureError(f"agent program {where} (env.config.reward={self.reward_source})")
        return float(reward)

    def _verify(self, reply: str) -> float:
        with make(self.config["verifier"], self.config.get("verifier_config"), self.extras) as verifier:
            verifier.reset(list(self._prompt))
            out = verifier.step(reply)
            self._metrics.update(verifier.metrics())
        return float(out.reward)

    def metrics(self) -> dict[str, float]:
        return dict(self._metrics)

    def close(self) -> None:
        """Ends a program still running (the generator closes its envs when a ``generate`` call is
        cancelled, e.g. a run stopped mid-step)."""
        process = self._process
        if process is not None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        super().close()


def _end_group(process: subprocess.Popen[bytes]) -> None:
    """Kill what is left of the program's process group (a timeout, or children it left behind)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _text(message: Message) -> str:
    """A message's text; OpenAI content parts joined."""
    content = message.get("content") or ""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])
