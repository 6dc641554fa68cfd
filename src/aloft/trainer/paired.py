"""Two policies on the same eval items, compared item by item (``aloft eval A --compare B``).

Both answered the same questions, so the comparison is paired: what matters is the items one solved
and the other did not. With ``b`` items only B solved and ``c`` only A solved:

- ``gain``: B's share of items solved minus A's, ``(b - c) / n``;
- ``p_value``: the exact McNemar test, a two-sided binomial test of ``b`` successes in ``b + c``
  trials at 1/2 (``scipy.stats.binomtest``); 1 when no item is discordant;
- ``ci_low``, ``ci_high``: a 95% BCa bootstrap interval of the gain, items resampled as pairs
  (``scipy.stats.bootstrap``, fixed seed), [gain, gain] when every item's difference is the same.

An item is solved as pass@1 counts it (``aloft.trainer.evaluation.is_success``: the env's
``correct`` metric, else a reward above 0), or, given ``solved_reward``, when its reward reaches
that. Items whose trajectory failed on either side (``env_error``) are
left out of both and counted in ``excluded``. One sample an item (``--n 1``, greedy by default).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

from aloft.trainer.evaluation import is_success
from aloft.types import TrajectoryGroup

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 10_000


@dataclass(frozen=True)
class PairedComparison:
    items: int
    """Items both sides ran (failed ones excluded)."""
    a_solved: int
    b_solved: int
    only_a: int
    only_b: int
    gain: float
    """B's share solved minus A's."""
    ci_low: float
    ci_high: float
    p_value: float
    """Exact McNemar, two-sided."""
    excluded: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def solved_by_item(groups: list[TrajectoryGroup], solved_reward: float | None) -> dict[int, bool | None]:
    """Row index -> whether its (one) trajectory was solved; None where it failed (``env_error``)."""
    out: dict[int, bool | None] = {}
    for group in groups:
        if len(group.trajectories) != 1:
            raise ValueError(
                f"a paired comparison takes one sample an item; group {group.group_id} has "
                f"{len(group.trajectories)}: use --n 1"
            )
        (trajectory,) = group.trajectories
        if trajectory.failed:
            solved = None
        elif solved_reward is None:
            solved = is_success(trajectory)
        else:
            solved = trajectory.reward >= solved_reward
        out[trajectory.info["row_index"]] = solved
    return out


def compare(
    a: dict[int, bool | None], b: dict[int, bool | None], *, seed: int = 0
) -> tuple[PairedComparison, list[dict[str, Any]]]:
    """The paired comparison of A's and B's outcomes on the same items, and the per-item records
    (``{"row_index", "a", "b"}``, None for a failed side) from which anyone can recompute it."""
    if set(a) != set(b):
        raise ValueError("a paired comparison needs both sides on the same items")
    records = [{"row_index": i, "a": a[i], "b": b[i]} for i in sorted(a)]
    both_ran = [r for r in records if r["a"] is not None and r["b"] is not None]
    if not both_ran:
        raise ValueError("no item ran on both sides: nothing to compare")
    a_solved = np.array([r["a"] for r in both_ran], dtype=float)
    b_solved = np.array([r["b"] for r in both_ran], dtype=float)
    difference = b_solved - a_solved  # [n] in {-1, 0, 1}
    only_b, only_a = int((difference > 0).sum()), int((difference < 0).sum())
    gain = float(difference.mean())
    p_value = stats.binomtest(only_b, only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0
    if np.all(difference == difference[0]):  # no spread to resample: the interval is the point
        low = high = gain
    else:
        interval = stats.bootstrap(
            (difference,),
            np.mean,
            confidence_level=CONFIDENCE,
            n_resamples=BOOTSTRAP_RESAMPLES,
            method="BCa",
            random_state=np.random.default_rng(seed),
        ).confidence_interval
        low, high = float(interval.low), float(interval.high)
    result = PairedComparison(
        items=len(both_ran),
        a_solved=int(a_solved.sum()),
        b_solved=int(b_solved.sum()),
        only_a=only_a,
        only_b=only_b,
        gain=gain,
        ci_low=low,
        ci_high=high,
        p_value=float(p_value),
        excluded=len(records) - len(both_ran),
    )
    return result, records
