"""Failed trajectories never reach the loss, and never pass quietly.

A trajectory fails when its env or the engine raised (status ``env_error``, see
aloft.rollout.generator): a typo in ``env.config``, a missing database, a dead retrieval server, an
engine error, a prompt longer than the context. That is not the policy's doing, so it is never a
reward: the trainer removes failed samples from their groups before advantages are computed
(aloft.algorithms.drop_failed_trajectories; the learner skips any that reach it), counts them
(``error_metrics``) and stops the run, with the first error in one line, when a step's share of
failures passes ``trainer.max_error_share`` (``check_error_share``). The policy's own bad output (bad
format, wrong answer, a tool call its code made time out) stays a reward, as the env says.
"""

from __future__ import annotations

from collections import Counter

from aloft.types import Trajectory

ERROR_SOURCES = ("env", "engine")
"""Where a failure came from (``Trajectory.info["error_source"]``)."""


class TooManyFailures(RuntimeError):
    """A step's share of failed trajectories passed ``trainer.max_error_share``; the message is one
    line naming the count, the first error and the fix."""


def error_metrics(trajectories: list[Trajectory]) -> dict[str, float]:
    """``rollout/error_share`` (failed / all) and its split by source, ``rollout/error_share/<source>``."""
    if not trajectories:
        return {}
    sources = Counter(t.info.get("error_source", "env") for t in trajectories if t.failed)
    out = {"rollout/error_share": sum(sources.values()) / len(trajectories)}
    for source in ERROR_SOURCES:
        out[f"rollout/error_share/{source}"] = sources.get(source, 0) / len(trajectories)
    return out


def check_error_share(
    failed: list[Trajectory], generated: int, what: str, max_share: float, where: str = ""
) -> None:
    """Raise ``TooManyFailures`` when more than ``max_share`` of the ``generated`` trajectories of
    ``what`` (``"step 3"``, ``"the eval at step 3"``) failed, or all did. ``where``: where the user can
    read them (the rollouts file)."""
    if failed and (len(failed) > max_share * generated or len(failed) == generated):
        raise TooManyFailures(failure_message(failed, generated, what, max_share, where))


def failure_message(failed: list[Trajectory], total: int, what: str, max_share: float, where: str) -> str:
    """One line: how many failed, by source, against the limit; the first failure's row, env and
    error; where they all are; and the fix."""
    first = failed[0]
    sources = Counter(t.info.get("error_source", "env") for t in failed)
    by_source = ", ".join(f"{source} {count}" for source, count in sorted(sources.items()))
    error = " ".join(str(first.info.get("error", "unknown error")).split())  # one line
    row = first.info.get("row_index", "?")
    env = first.info.get("env_class", "?")
    seen = f"; every failure is in {where}" if where else ""
    return (
        f"{what}: {len(failed)} of {total} trajectories failed ({by_source}), over "
        f"trainer.max_error_share={max_share:g}; the first (row {row}, env {env}): {error}{seen}; "
        f"fix the env or engine, or raise trainer.max_error_share to train past failures"
    )
