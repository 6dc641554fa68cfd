"""Execution plans: when a run generates, updates and syncs weights (``trainer.plan``).

A plan is a class with one coroutine, ``run(trainer)``, that drives ``trainer.step`` to
``trainer.cfg.trainer.max_steps`` by composing the Trainer's stages (``generate_batch``, ``update``,
``sync_weights``, ``end_step``). The algorithm, the environments and the workers never see it.

- ``sync``: generate, update, sync, one after another (on-policy).
- ``one_step_off``: step n+1's generation overlaps step n's update; one sync per step; every
  sample is exactly one policy version behind (aloft/trainer/plans/one_step_off.py, the worked
  example of writing a plan).
- ``fully_async``: generation keeps producing groups into a buffer while the trainer consumes
  them; admission control bounds staleness; weights update in flight (pause/resume).

A plan that trains on samples from older policies sets ``off_policy = True``; the run then refuses
to start unless ``algorithm.off_policy_correction`` is on. Register your own with
``@register_plan("name")`` and select it with ``trainer.plan=name`` (``trainer.imports`` loads it).
"""

# The built-in plans register themselves.
from aloft.trainer.plans import fully_async, one_step_off, sync  # noqa: F401
from aloft.trainer.plans.base import (
    Batch,
    ExecutionPlan,
    check_plan_params,
    declared_plan_params,
    make_plan,
    register_plan,
    registered_plans,
)

__all__ = [
    "Batch",
    "ExecutionPlan",
    "check_plan_params",
    "declared_plan_params",
    "make_plan",
    "register_plan",
    "registered_plans",
]
