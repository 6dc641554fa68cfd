"""Answer extraction and math-verify grading for the math envs, with a hard time limit.

Extraction (pure Python): ``extract_boxed`` (the last ``\\boxed{...}``, nested braces allowed) and
``extract_hash_answer`` (the text after the last ``####``, the GSM8K convention).

Grading: ``MathGrader.verify(answer, ground_truth)`` asks ``math_verify`` (``parse`` + ``verify``)
whether the two are mathematically equal. ``math_verify`` guards itself with ``signal.alarm``,
which only works in the main thread, while the generator calls ``env.step`` from worker threads;
and sympy can run for ever on a reply like ``\\boxed{9^{9^{9}}}``. So the check runs in a small pool
of worker processes (``python -m aloft.gym.envs.math_grading``, which imports math_verify once and
calls it with its own timeouts disabled); a check that exceeds ``timeout_s`` kills its worker
(a fresh one is started on demand) and counts as wrong. Integer answers equal to an integer ground
truth are decided in-process without a round trip. The pool is shared by every env in the process
(``default_grader``), safe to use from many threads, and closed at exit.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import re
import select
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GradeResult", "MathGrader", "default_grader", "extract_boxed", "extract_hash_answer"]

_BOXED_START = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOXED_SPACE = re.compile(r"\\boxed +([^\s$]+)")
_HASH_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.MULTILINE)
_INTEGER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)")
MAX_ANSWER_CHARS = 1_000
"""Longer extracted answers are not sent to math_verify (they count as wrong)."""


def extract_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``; also ``\\boxed 5``), nested
    braces allowed, stripped; None if there is none or its braces are unbalanced."""
    last: str | None = None
    for match in _BOXED_START.finditer(text):
        depth, index = 1, match.end()
        while index < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[index], 0)
            index += 1
        if depth == 0:
            last = text[match.end() : index - 1]
    spaced = list(_BOXED_SPACE.finditer(text))
    if spaced and (last is None or spaced[-1].start() > text.rfind("\\boxed{")):
        last = spaced[-1].group(1)
    return last.strip() if last is not None else None


def extract_hash_answer(text: str) -> str | None:
    """The text after the last ``####`` on its line, stripped (GSM8K style); None if absent or empty."""
    matches = _HASH_ANSWER.findall(text)
    return matches[-1].strip() if matches and matches[-1].strip() else None


@dataclass(frozen=True)
class GradeResult:
    correct: bool
    timed_out: bool = False


def _as_integer(text: str) -> int | None:
    cleaned = text.strip().strip("$").strip()
    return int(cleaned.replace(",", "")) if _INTEGER.fullmatch(cleaned) else None


class _Worker:
    """One ``python -m aloft.gym.envs.math_grading`` process speaking JSON lines."""

    def __init__(self, start_timeout_s: float) -> None:
        source_root = str(Path(__file__).resolve().parents[3])
        python_path = os.pathsep.join(filter(None, [source_root, os.environ.get("PYTHONPATH")]))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "aloft.gym.envs.math_grading"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # never read: a full pipe would block the worker
            text=True,
            env={**os.environ, "PYTHONPATH": python_path},
        )
        ready = self._read_line(start_timeout_s)
        if ready != {"ready": True}:
            self.kill()
            error = ready.get("error") if isinstance(ready, dict) else None
            raise RuntimeError(
                f"math grader worker failed to start: {error or 'no answer within the start timeout'}"
            )

    def _read_line(self, timeout_s: float) -> dict | None:
        assert self.process.stdout is not None
        poller = select.poll()  # poll, not select: a busy trainer may hold fds above select's 1024
        poller.register(self.process.stdout, select.POLLIN)
        if not poller.poll(timeout_s * 1000):
            return None
        line = self.process.stdout.readline()
        return json.loads(line) if line else None

    def ask(self, answer: str, ground_truth: str, timeout_s: float) -> bool | None:
        """The verdict, or None on a timeout or a dead worker (the caller then kills it)."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps({"answer": answer, "gold": ground_truth}) + "\n")
            self.process.stdin.flush()
            reply = self._read_line(timeout_s)
        except (OSError, ValueError):
            return None
        return bool(reply["correct"]) if isinstance(reply, dict) and "correct" in reply else None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


class MathGrader:
    """A thread-safe pool of at most ``max_workers`` math_verify worker processes (started lazily)."""

    def __init__(self, max_workers: int = 4, start_timeout_s: float = 120.0) -> None:
        if max_workers < 1:
            raise ValueError(f"MathGrader: max_workers must be >= 1, got {max_workers}")
        self.max_workers = max_workers
        self.start_timeout_s = start_timeout_s
        self._idle: queue.LifoQueue[_Worker] = queue.LifoQueue()
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(max_workers)
        self._workers: set[_Worker] = set()
        self._closed = False

    def verify(self, answer: str, ground_truth: str, timeout_s: float = 5.0) -> GradeResult:
        """Is ``answer`` mathematically equal to ``ground_truth`` (both LaTeX or plain text)?"""
        answer, ground_truth = answer.strip(), str(ground_truth).strip()
        if not answer or len(answer) > MAX_ANSWER_CHARS:
            return GradeResult(False)
        answer_int, truth_int = _as_integer(answer), _as_integer(ground_truth)
        if answer_int is not None and truth_int is not None:
            return GradeResult(answer_int == truth_int)
        with self._slots:
            worker = self._borrow()
            verdict = worker.ask(answer, ground_truth, timeout_s)
            if verdict is None:
                self._discard(worker)
                return GradeResult(False, timed_out=True)
            self._idle.put(worker)
        return GradeResult(verdict)

    def _borrow(self) -> _Worker:
        with self._lock:
            if self._closed:
                raise RuntimeError("MathGrader is closed")
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        worker = _Worker(self.start_timeout_s)
        with self._lock:
            self._workers.add(worker)
        return worker

    def _discard(self, worker: _Worker) -> None:
        with self._lock:
            self._workers.discard(worker)
        worker.kill()

    def close(self) -> None:
        """Stop every worker. Idempotent."""
        with self._lock:
            self._closed = True
            workers, self._workers = list(self._workers), set()
        for worker in workers:
            worker.kill()


_DEFAULT: MathGrader | None = None
_DEFAULT_PID: int | None = None
_DEFAULT_LOCK = threading.Lock()


def default_grader() -> MathGrader:
    """The process-wide grader every math env shares (``ALOFT_MATH_GRADER_WORKERS`` sets its size).

    A forked child gets its own (the parent's worker pipes are not its to use)."""
    global _DEFAULT, _DEFAULT_PID
    with _DEFAULT_LOCK:
        if _DEFAULT is None or _DEFAULT_PID != os.getpid():
            workers = int(os.environ.get("ALOFT_MATH_GRADER_WORKERS", min(4, os.cpu_count() or 1)))
            _DEFAULT, _DEFAULT_PID = MathGrader(max_workers=workers), os.getpid()
            atexit.register(_DEFAULT.close)
        return _DEFAULT


def _serve() -> None:
    """The worker: answer one JSON request per line until stdin closes."""
    try:
        import logging

        from math_verify import parse, verify

        logging.getLogger("math_verify").setLevel(logging.CRITICAL)  # the "timeout disabled" warnings
    except ImportError as error:
        print(
            json.dumps({"error": f"cannot import math_verify ({error}); pip install math-verify"}), flush=True
        )
        return
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            gold = parse(f"${request['gold']}$", parsing_timeout=None)
            if not gold:
                gold = parse(request["gold"], parsing_timeout=None)
            predicted = parse(f"\\boxed{{{request['answer']}}}", parsing_timeout=None)
            correct = bool(gold and predicted and verify(gold, predicted, timeout_seconds=None))
        except Exception:  # math_verify's own errors: a wrong answer, not a dead worker
            correct = False
        print(json.dumps({"correct": correct}), flush=True)


if __name__ == "__main__":
    _serve()
