"""One-step-off pipelining: step n+1's batch is generated while step n's update runs.

A plan written the way a user would extend aloft: the stages are the sync plan's, only their
schedule changes. With generation on its own devices (placement.mode=disaggregated, or a remote
engine) a step costs about max(generate, update) + sync instead of their sum. Each step ends with
one weight sync, after the prefetched generation has finished, so every sample of step n >= 2 comes
from policy version n - 2: exactly one version behind the policy it updates (version n - 1).
Step 1 trains on-policy (no older policy exists).

The prefetched batch goes into each checkpoint, so a resumed run trains on exactly the batch the
killed run would have.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from aloft.trainer.plans.base import register_plan

if TYPE_CHECKING:
    from aloft.trainer.plans.base import Batch
    from aloft.trainer.trainer import Trainer


@register_plan("one_step_off")
class OneStepOff:
    off_policy = True

    async def run(self, trainer: Trainer) -> None:
        last_step = trainer.cfg.trainer.max_steps
        prefetched: Batch | None = trainer.resumed_plan_state
        while trainer.step < last_step:
            step = trainer.step + 1
            t0 = time.perf_counter()
            batch = prefetched if prefetched is not None else await trainer.generate_batch(step)
            t_ready = time.perf_counter()
            # Start step + 1's generation with the weights the engine holds now (version step - 1) ...
            next_batch = asyncio.create_task(trainer.generate_batch(step + 1)) if step < last_step else None
            # ... and update on this step's batch meanwhile.
            train_metrics = await trainer.update(batch.groups, step)
            t_trained = time.perf_counter()
            prefetched = (
                await next_batch if next_batch is not None else None
            )  # all of it from version step - 1
            t_generated = time.perf_counter()
            sync_metrics = await trainer.sync_weights(version=step, probe=batch.groups)
            t_synced = time.perf_counter()
            timings = {
                "timing/step_s": t_synced - t0,
                "timing/wait_s": t_ready - t0,  # waiting for data before the update (step 1 only)
                "timing/train_s": t_trained - t_ready,
                "timing/generate_tail_s": t_generated - t_trained,  # generation that outlasted the update
                "timing/sync_s": t_synced - t_generated,
            }
            await trainer.end_step(
                step, batch, {**train_metrics, **sync_metrics, **timings}, plan_state=prefetched
            )
