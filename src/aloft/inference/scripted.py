"""``ScriptedEngine``: a model-free engine that replies from a script. Torch-free.

On the k-th assistant turn of a conversation it returns the k-th scripted reply (the last one
again once the script runs out), tokenized with the run's tokenizer and closed with the chat
template's end-of-turn token, with logprob 0 per token. It drives real envs through the real
``Generator`` without a model: conformance tests of an env's multi-turn protocol, and env
throughput benchmarks in which the policy costs nothing.

    engine = make_engine("scripted", tokenizer=tok, replies=["<sql>SELECT 1</sql>", "<solution>...</solution>"])
"""

from __future__ import annotations

from typing import Any

from aloft.inference.base import WeightsSource, register_engine
from aloft.types import Completion, GenerationRequest

__all__ = ["ScriptedEngine"]


@register_engine("scripted")
class ScriptedEngine:
    """Replies ``replies[k]`` on the k-th assistant turn (counted in the decoded prompt).

    Args:
        tokenizer: a chat tokenizer (``decode``, ``encode``, ``convert_tokens_to_ids``).
        replies: the script, one reply text per assistant turn.
        turn_marker: the text that opens an assistant turn in the chat template.
        end_token: the token that ends a turn (appended to every reply).
    """

    def __init__(
        self,
        tokenizer: Any,
        replies: list[str],
        *,
        turn_marker: str = "<|im_start|>assistant",
        end_token: str = "<|im_end|>",
    ) -> None:
        if not replies:
            raise ValueError("ScriptedEngine needs at least one reply")
        self.tokenizer = tokenizer
        self.replies = list(replies)
        self.turn_marker = turn_marker
        self.end_id = tokenizer.convert_tokens_to_ids(end_token)
        self._encoded = [self.tokenize(reply) for reply in self.replies]
        self.version = 0

    def tokenize(self, reply: str) -> list[int]:
        """The token ids this engine emits for ``reply`` (end-of-turn token included)."""
        return list(self.tokenizer.encode(reply, add_special_tokens=False)) + [self.end_id]

    async def generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        completions = []
        for request in requests:
            turn = self.tokenizer.decode(request.prompt_ids).count(self.turn_marker) - 1
            ids = self._encoded[min(max(turn, 0), len(self._encoded) - 1)][: request.sampling.max_tokens]
            reason = "stop" if ids and ids[-1] == self.end_id else "length"
            completions.append(
                Completion(
                    token_ids=ids,
                    logprobs=[0.0] * len(ids),
                    finish_reason=reason,
                    policy_version=self.version,
                )
            )
        return completions

    async def update_weights(self, weights: WeightsSource, version: int) -> None:
        self.version = version  # nothing to load: the script is the policy

    async def sleep(self) -> None:
        pass

    async def wake_up(self) -> None:
        pass

    async def pause(self) -> None:
        pass

    async def resume(self) -> None:
        pass

    def close(self) -> None:
        pass
