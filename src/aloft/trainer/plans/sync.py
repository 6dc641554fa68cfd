"""The synchronous plan: each step generates with the current policy, updates, then syncs.

    for step in 1..max_steps:
        rows          <- loader.next_batch()                      prompts (cursor is checkpointed)
        groups        <- generator(rows, n)                       trajectories, rewards (engine + envs)
        batch         <- collate(groups)                          [B, P+T] tensors, loss_mask
        old, ref, V   <- policy / reference / critic forward       (skipped when not needed)
        A, returns    <- advantage_estimator(rewards, mask, groups, V)
        policy.update(batch, A); critic.update(batch, returns)    clipped policy loss, value loss
        engine.update_weights(policy weights, version=step)       weight sync
        log metrics; eval every N steps; checkpoint every N steps

(``generate_batch`` is the first two lines, ``update`` the next four, aloft.trainer.learner.)
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from aloft.trainer.plans.base import register_plan

if TYPE_CHECKING:
    from aloft.trainer.trainer import Trainer


@register_plan("sync")
class Synchronous:
    off_policy = False

    async def run(self, trainer: Trainer) -> None:
        while trainer.step < trainer.cfg.trainer.max_steps:
            step = trainer.step + 1
            t0 = time.perf_counter()
            batch = await trainer.generate_batch(step)
            t_generated = time.perf_counter()
            train_metrics = await trainer.update(batch.groups, step)
            t_trained = time.perf_counter()
            sync_metrics = await trainer.sync_weights(version=step, probe=batch.groups)
            t_synced = time.perf_counter()
            timings = {
                "timing/step_s": t_synced - t0,
                "timing/generate_s": t_generated - t0,
                "timing/train_s": t_trained - t_generated,
                "timing/sync_s": t_synced - t_trained,
            }
            await trainer.end_step(step, batch, {**train_metrics, **sync_metrics, **timings})
