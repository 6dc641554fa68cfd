"""Ray placement: training processes and inference engines as Ray actors (docs/reference/design.md §5).

``RayPlacement(cfg)`` starts (or joins) a Ray cluster, reserves placement groups, and starts one
``LearnerActor`` per training process and ``placement.num_engines`` ``EngineActor``s. The driver
keeps the loop, the prompt loader and the environments, and talks to the actors through two
handles with the same shape as their local counterparts: ``RayEngines`` is an ``InferenceEngine``
(the generator cannot tell it from an embedded engine) and ``RayLearners`` is the trainer's
``Learners``. Only this package imports Ray.
"""

from aloft.placement.cluster import connect
from aloft.placement.ray_run import RayEngines, RayLearners, RayPlacement, connect_for

__all__ = ["RayEngines", "RayLearners", "RayPlacement", "connect", "connect_for"]
