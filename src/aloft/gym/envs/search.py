"""The ``search`` env: Search-R1's protocol for question answering with a search engine.

Each turn the model reasons and then either searches or answers; the first ``<search>`` or
``<answer>`` tag of the turn is its action (a tag left open at the very end counts, for engines
that stop on ``</search>`` and drop it)::

    <think>I need the definition.</think><search>page fault virtual memory</search>
        -> user message "<information>Doc 1(Title: page fault) ...\nDoc 2(...) ...</information>"
    <think>Doc 1 answers it.</think><answer>page fault</answer>
        -> done; reward = exact match of the normalised answer against the ground truth

A turn with neither tag gets a user message saying how to search or answer. The episode ends at the
first answer, or after ``max_turns`` turns (a search on the last allowed turn is not run; the
episode ends unanswered with reward 0).

Reward (on the final turn; earlier turns get 0)::

    reward = score + format_reward * format_ok

``score`` is exact match (``reward: em``, the default) or token F1 (``reward: f1``) of the answer
against the best of the accepted answers, after SQuAD/Search-R1 normalisation (lower case, no
punctuation, no articles a/an/the, single spaces); ``format_ok`` is 1 when the episode ended with an
answer and every turn carried a valid action.

Config (all optional): ``reward`` ("em"), ``max_turns`` (4), ``topk`` (3, documents per search),
``max_doc_chars`` (1000, each document's text is cut there), ``format_reward`` (0.0); the search
backend: ``retrieval_url`` (a Search-R1 retrieval server, e.g. ``aloft.gym.tools.search_server``),
``index_dir`` (a saved ``LocalIndex``) or ``corpus_path`` (a corpus JSONL file, indexed once per
process), first one set wins; ``retrieval_timeout_s`` (30).
Row extras: the accepted answers in ``reward_spec["ground_truth"]`` (a string, a list of strings, or
Search-R1/SkyRL's ``{"target": [...]}``) or else in ``answers`` / ``answer``; ``corpus_path`` or
``index_dir`` (used when the config names no backend; aloft's ``search`` dataset rows carry
``corpus_path``); ``question`` (informational).
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from typing import Any

from aloft.gym.core import Env, StepOutput
from aloft.gym.tools.search import RetrievalClient, SearchBackend, SearchTools, local_index
from aloft.tool_calls import parse_tag_calls
from aloft.types import Message

__all__ = ["SearchEnv", "exact_match", "f1_score", "normalize_answer"]

DEFAULT_CONFIG: dict[str, Any] = {
    "reward": "em",
    "max_turns": 4,
    "topk": 3,
    "max_doc_chars": 1000,
    "format_reward": 0.0,
    "retrieval_url": None,
    "index_dir": None,
    "corpus_path": None,
    "retrieval_timeout_s": 30.0,
}
REWARDS = ("em", "f1")
ACTION_TAGS = ("search", "answer")
INVALID_ACTION_MESSAGE = (
    "My previous action is invalid. If I want to search, I should put the query between <search> and "
    "</search>. If I want to give the final answer, I should put the answer between <answer> and "
    "</answer>. Let me try again."
)
"""Search-R1's reply to a turn without an action (it speaks as the model, by design)."""


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation, as Search-R1 uses it: lower case, drop punctuation and the
    articles a/an/the, collapse whitespace."""
    text = text.lower()
    text = "".join(character for character in text if character not in string.punctuation)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, answers: list[str]) -> float:
    """1.0 if the normalised prediction equals any normalised accepted answer, else 0.0."""
    predicted = normalize_answer(prediction)
    return float(any(predicted == normalize_answer(answer) for answer in answers))


def f1_score(prediction: str, answers: list[str]) -> float:
    """SQuAD token F1 of the prediction against the best accepted answer (0.0 to 1.0)."""
    predicted = normalize_answer(prediction).split()
    best = 0.0
    for answer in answers:
        gold = normalize_answer(answer).split()
        common = sum((Counter(predicted) & Counter(gold)).values())
        if common == 0:
            continue
        precision, recall = common / len(predicted), common / len(gold)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


class SearchEnv(Env):
    """Search-R1 question answering with a ``search`` tool. See the module docstring."""

    def __init__(self, config: dict[str, Any] | None = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__(config, extras)
        unknown = sorted(set(self.config) - set(DEFAULT_CONFIG))
        if unknown:
            raise ValueError(
                f"search env: unknown config keys {unknown}; accepted keys: {sorted(DEFAULT_CONFIG)}"
            )
        settings = {**DEFAULT_CONFIG, **self.config}
        self.reward_kind: str = settings["reward"]
        self.max_turns: int = settings["max_turns"]
        self.topk: int = settings["topk"]
        self.format_reward: float = settings["format_reward"]
        self._check_settings(settings)
        self.answers: list[str] = self._read_answers()
        self.tools = SearchTools(
            self._backend(settings),
            max_topk=max(self.topk, 1),
            max_doc_chars=settings["max_doc_chars"],
            timeout_s=float(settings["retrieval_timeout_s"]) + 5.0,
        )
        self._start_episode()

    def _check_settings(self, settings: dict[str, Any]) -> None:
        if self.reward_kind not in REWARDS:
            raise ValueError(f"search env: reward must be one of {list(REWARDS)}, got {self.reward_kind!r}")
        for name in ("max_turns", "topk"):
            value = settings[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"search env: {name} must be an integer >= 1, got {value!r}")
        value = self.format_reward
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"search env: format_reward must be a finite number, got {value!r}")
        max_doc_chars = settings["max_doc_chars"]
        if max_doc_chars is not None and (not isinstance(max_doc_chars, int) or max_doc_chars < 1):
            raise ValueError(
                f"search env: max_doc_chars must be a positive integer or null, got {max_doc_chars!r}"
            )

    def _backend(self, settings: dict[str, Any]) -> SearchBackend:
        if settings["retrieval_url"]:
            return RetrievalClient(
                settings["retrieval_url"], timeout_s=float(settings["retrieval_timeout_s"])
            )
        for source in (settings, self.extras):
            if source.get("index_dir"):
                return local_index(index_dir=source["index_dir"])
            if source.get("corpus_path"):
                return local_index(corpus_path=source["corpus_path"])
        raise ValueError(
            "search env: no search backend; set retrieval_url, index_dir or corpus_path in the env config "
            "(or give rows a corpus_path column, as aloft's search dataset does)"
        )

    def _read_answers(self) -> list[str]:
        reward_spec = self.extras.get("reward_spec")
        truth = reward_spec.get("ground_truth") if isinstance(reward_spec, dict) else None
        if isinstance(truth, dict):
            truth = truth.get("target")
        if truth is None:
            truth = self.extras.get("answers", self.extras.get("answer"))
        if isinstance(truth, str):
            truth = [truth]
        answers = [str(answer) for answer in truth or [] if isinstance(answer, str | int | float)]
        if not any(normalize_answer(answer) for answer in answers):
            raise ValueError(
                "search env: the row has no ground truth; put the accepted answers in "
                "reward_spec.ground_truth (a string, a list, or {'target': [...]}) or in an 'answer' column"
            )
        return answers

    def _start_episode(self) -> None:
        self._turns = 0
        self._searches = 0
        self._search_errors = 0
        self._invalid_turns = 0
        self._answered = False
        self._em = 0.0
        self._f1 = 0.0
        self._done = False
        self.tools.reset_stats()

    def reset(self, prompt: list[Message]) -> tuple[list[Message], dict[str, Any]]:
        self._start_episode()
        return super().reset(prompt)

    @staticmethod
    def _action(completion: str) -> tuple[str, str] | None:
        calls = parse_tag_calls(completion, ACTION_TAGS) or parse_tag_calls(
            completion, ACTION_TAGS, allow_unclosed=True
        )
        if not calls:
            return None
        return calls[0].name, calls[0].arguments["input"]

    def step(self, action: str) -> StepOutput:
        if self._done:
            raise RuntimeError("search env: step() called after the episode ended; call reset() first")
        self._turns += 1
        last_turn = self._turns >= self.max_turns
        parsed = self._action(action)
        info: dict[str, Any] = {"turn": self._turns, "action": parsed[0] if parsed else "invalid"}

        if parsed is not None and parsed[0] == "answer":
            return self._finish(parsed[1], info)
        if parsed is None:
            self._invalid_turns += 1
            if last_turn:
                return self._finish(None, info)
            return StepOutput([{"role": "user", "content": INVALID_ACTION_MESSAGE}], 0.0, False, info)

        query = parsed[1]
        info["query"] = query
        if last_turn:  # no turn left to read the results in
            return self._finish(None, info)
        result = self.tools.call("search", {"query": query, "topk": self.topk})
        self._searches += 1
        if not result.ok:
            self._search_errors += 1
            info["search_error"] = result.error
        observation = {"role": "user", "content": f"<information>{result.output}</information>"}
        return StepOutput([observation], 0.0, False, info)  # type: ignore[list-item]

    def _finish(self, answer: str | None, info: dict[str, Any]) -> StepOutput:
        self._done = True
        if answer is not None:
            self._answered = True
            self._em = exact_match(answer, self.answers)
            self._f1 = f1_score(answer, self.answers)
        format_ok = self._answered and self._invalid_turns == 0
        score = self._em if self.reward_kind == "em" else self._f1
        reward = score + self.format_reward * format_ok
        info.update(
            {
                "answer": answer,
                "ground_truth": list(self.answers),
                "em": self._em,
                "f1": self._f1,
                "format_ok": format_ok,
            }
        )
        return StepOutput([], float(reward), True, info)

    def metrics(self) -> dict[str, float]:
        """``searches``, ``answered`` (0/1), ``em``, ``f1`` (of the final answer, 0 when none),
        ``turns``, ``invalid_turns`` and ``search_errors`` of the current episode."""
        return {
            "searches": float(self._searches),
            "answered": float(self._answered),
            "em": self._em,
            "f1": self._f1,
            "turns": float(self._turns),
            "invalid_turns": float(self._invalid_turns),
            "search_errors": float(self._search_errors),
        }

    def close(self) -> None:
        self.tools.close()
        super().close()
