"""Training strategies: how a worker's model is placed across processes and how a batch is divided.

A strategy answers four questions for ``PolicyWorker`` (and any worker built the same way):

- ``wrap(model)``: the model to train (FSDP2 shards it; a single process keeps it whole);
- ``assign(micro_batches, tokens)``: which micro-batches this rank runs, each with a loss scale;
- ``reduce_metrics(totals)``: per-rank metric sums into the whole batch's;
- ``full_state_dict(model)``: every weight in full (for weight sync, export and checkpoints).

Every rank of a data-parallel strategy receives the same batch and the same mini-batches (the
loss normalizer counts the whole mini-batch), runs only its share of the micro-batches, and the
gradient reduction sums the ranks' gradients, so the update equals the single-process one.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn

from aloft.distributed.group import group_device


class Strategy(Protocol):
    rank: int
    world_size: int
    places_parameters: bool
    """True: ``wrap`` puts the parameters where they belong itself (FSDP2 with CPU offload keeps
    them in CPU memory); False: the worker moves the model to its device first."""
    sequence_parallel: bool
    """True: the strategy computes a micro-batch's logprobs itself (``logprobs_and_entropy``), as
    ``aloft.training.ulysses.Ulysses`` does; the worker's own forward is not used."""

    def wrap(self, model: nn.Module) -> nn.Module: ...

    def assign(self, micro_batches: list[list[int]], tokens: list[int]) -> list[tuple[list[int], float]]: ...

    def reduce_metrics(self, totals: dict[str, float]) -> dict[str, float]: ...

    def before_step(self, model: nn.Module) -> None: ...

    def build_optimizer(self, model: nn.Module, settings: Any) -> tuple[Any, Any] | None: ...

    def backward(self, loss: torch.Tensor, last: bool) -> None: ...

    def step(self) -> float | None: ...

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]: ...

    def load_full_state_dict(self, model: nn.Module, state: dict[str, torch.Tensor]) -> None: ...

    def optim_state_dict(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict: ...

    def load_optim_state_dict(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict
    ) -> None: ...


class SingleProcess:
    """The whole model in this process; every micro-batch runs here."""

    rank, world_size = 0, 1
    sequence_parallel = False
    places_parameters = False

    def wrap(self, model: nn.Module) -> nn.Module:
        return model

    def assign(self, micro_batches: list[list[int]], tokens: list[int]) -> list[tuple[list[int], float]]:
        return [(rows, 1.0) for rows in micro_batches]

    def reduce_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        return totals

    def before_step(self, model: nn.Module) -> None:
        pass

    def build_optimizer(self, model: nn.Module, settings: Any) -> tuple[Any, Any] | None:
        """``(optimizer, scheduler)`` when the strategy owns them; None: the worker's AdamW."""
        return None

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        """Backward of one micro-batch's loss (``last``: the last before the optimizer step)."""
        loss.backward()

    def step(self) -> float | None:
        """The optimizer step when the strategy owns it (returns the grad norm); None: the worker's."""
        return None

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        return model.state_dict()

    def load_full_state_dict(self, model: nn.Module, state: dict[str, torch.Tensor]) -> None:
        model.load_state_dict(state)

    def optim_state_dict(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
        return optimizer.state_dict()

    def load_optim_state_dict(self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
        optimizer.load_state_dict(state)


def balance_micro_batches(tokens: list[int], world_size: int) -> list[list[int]]:
    """Micro-batch indices per rank, token-balanced (longest first onto the least-loaded rank).

    Every rank gets the same number of micro-batches where possible; FSDP needs equal counts (each
    forward is a collective), so ``FSDP2.assign`` pads the shorter lists.
    """
    loads = [0] * world_size
    counts = [0] * world_size
    per_rank: list[list[int]] = [[] for _ in range(world_size)]
    quota = -(-len(tokens) // world_size)
    for index in sorted(range(len(tokens)), key=lambda i: -tokens[i]):
        rank = min((r for r in range(world_size) if counts[r] < quota), key=lambda r: (loads[r], r))
        per_rank[rank].append(index)
        loads[rank] += tokens[index]
        counts[rank] += 1
    return [sorted(indices) for indices in per_rank]


class FSDP2(SingleProcess):
    """Data parallel with FSDP2 (``fully_shard`` per decoder layer, then the root) over a process group.

    Gradients are summed across ranks (divide factor 1): each rank's loss already carries the whole
    mini-batch's normalizer, so the sum is the single-process gradient. ``mixed_precision``: bf16
    parameters in forward/backward with float32 gradient reduction and float32 master weights.
    ``cpu_offload``: sharded parameters, gradients and optimizer state stay in CPU memory, each
    layer's moved to ``device`` (a GPU) for its compute. ``device``: where the ranks compute (the
    device mesh's type; default: where the model's parameters are).
    """

    def __init__(
        self,
        group: dist.ProcessGroup | None = None,
        *,
        mixed_precision: bool = False,
        cpu_offload: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        if not dist.is_initialized():
            raise RuntimeError(
                "FSDP2 needs a torch.distributed process group: call aloft.distributed.init_loopback_group "
                "(one machine) or torch.distributed.init_process_group first"
            )
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.mixed_precision = mixed_precision
        self.sequence_parallel = False
        self.device = torch.device(device) if device is not None else None
        if cpu_offload and (self.device is None or self.device.type == "cpu"):
            raise ValueError(
                "FSDP2 cpu_offload keeps GPU ranks' state in CPU memory: pass a GPU device (the run's "
                "trainer.device), or leave cpu_offload off on the CPU"
            )
        self.cpu_offload = cpu_offload
        self.places_parameters = cpu_offload

    def wrap(self, model: nn.Module) -> nn.Module:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard

        device = self.device.type if self.device is not None else next(model.parameters()).device.type
        mesh = init_device_mesh(device, (self.world_size,))
        policy = (
            MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if self.mixed_precision
            else MixedPrecisionPolicy()
        )
        # Offloaded, the model arrives in CPU memory and its shards stay there.
        options: dict[str, Any] = {"mesh": mesh, "mp_policy": policy}
        if self.cpu_offload:
            options["offload_policy"] = CPUOffloadPolicy()
        for layer in _decoder_layers(model):
            fully_shard(layer, **options)
        fully_shard(model, **options)
        # Sum, do not average (see the class docstring), on every sharded module (each reduces its
        # own gradients); a plain SUM, since gloo has no PREMUL_SUM.
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(1.0)
                module.set_force_sum_reduction_for_comms(True)
        return model

    def assign(self, micro_batches: list[list[int]], tokens: list[int]) -> list[tuple[list[int], float]]:
        mine = balance_micro_batches(tokens, self.world_size)
        most = max(len(indices) for indices in mine)
        assigned = [(micro_batches[i], 1.0) for i in mine[self.rank]]
        # Ranks with fewer micro-batches repeat one at loss scale 0: every forward is a collective.
        filler = micro_batches[mine[self.rank][0]] if mine[self.rank] else micro_batches[0]
        return assigned + [(filler, 0.0)] * (most - len(assigned))

    def reduce_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        return sum_over_group(totals, self.group)

    def before_step(self, model: nn.Module) -> None:
        pass  # FSDP reduced the gradients during the backward

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """Every weight in full on every rank (a collective: all ranks call it)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))

    def load_full_state_dict(self, model: nn.Module, state: dict[str, torch.Tensor]) -> None:
        """Load full weights (every rank passes the same ``state``; each keeps its shard)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True))

    def optim_state_dict(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
        """The optimizer state in full, keyed by parameter name (a collective)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        return get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))

    def load_optim_state_dict(self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

        set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))


def sum_over_group(totals: dict[str, float], group: dist.ProcessGroup | None) -> dict[str, float]:
    """Every rank's ``totals`` summed (the same keys on every rank; a collective)."""
    keys = sorted(totals)
    values = torch.tensor([totals[k] for k in keys], dtype=torch.float64, device=group_device(group))
    dist.all_reduce(values, group=group)
    return dict(zip(keys, values.tolist()))


def _decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated transformer blocks of an HF causal LM (``model.model.layers`` for Llama-style models)."""
    for module in model.modules():
        layers = getattr(module, "layers", None)
        if isinstance(layers, nn.ModuleList) and len(layers) > 0:
            return list(layers)
    raise ValueError(
        f"FSDP2: found no decoder layers (an nn.ModuleList named 'layers') in {type(model).__name__}"
    )


class DeepSpeedZeRO(SingleProcess):
    """Data parallel with DeepSpeed ZeRO (stage 1, 2 or 3) over the process group.

    DeepSpeed owns the optimizer (its AdamW with ``torch_adam``), gradient clipping and the step;
    the learning-rate schedule is the worker's. ZeRO averages gradients over the ranks, so each
    rank's loss is scaled by the world size to make the update the single-process sum (as FSDP2's
    summed reduction does).
    """

    def __init__(self, stage: int = 3) -> None:
        if not dist.is_initialized():
            raise RuntimeError(
                "DeepSpeedZeRO needs a torch.distributed process group (see aloft.distributed)"
            )
        if stage not in (1, 2, 3):
            raise ValueError(f"DeepSpeed ZeRO stage must be 1, 2 or 3, got {stage}")
        self.stage = stage
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.sequence_parallel = False
        self.places_parameters = False
        self.engine: Any = None

    def assign(self, micro_batches: list[list[int]], tokens: list[int]) -> list[tuple[list[int], float]]:
        assigned = FSDP2.assign(self, micro_batches, tokens)  # type: ignore[arg-type]
        # DeepSpeed counts micro-steps: this many backward + step pairs make one optimizer step.
        self.engine.set_train_batch_size(len(assigned) * self.world_size)
        return assigned

    def reduce_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        return sum_over_group(totals, None)

    def build_optimizer(self, model: nn.Module, settings: Any) -> tuple[Any, Any]:
        import deepspeed

        from aloft.training.optim import lr_factor

        config = {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,
            "gradient_clipping": settings.max_grad_norm,
            "zero_optimization": {"stage": self.stage},
            "optimizer": {
                "type": "AdamW",
                "params": {
                    "lr": settings.lr,
                    "betas": list(settings.betas),
                    "weight_decay": settings.weight_decay,
                    "torch_adam": True,
                },
            },
        }
        schedule = lr_factor(settings)
        self.engine, optimizer, _, scheduler = deepspeed.initialize(
            model=model,
            model_parameters=[p for p in model.parameters() if p.requires_grad],
            config=config,
            lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, schedule),
        )
        return optimizer, scheduler

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        self.engine.backward(loss * self.world_size, scale_wrt_gas=False)
        # The worker calls the model, not engine.forward, which is where DeepSpeed closes a
        # micro-step (ZeRO-3 counts it there and would overwrite, not add, the next gradients).
        clear = getattr(self.engine.optimizer, "clear_backward_seen_flag", None)
        if clear is not None:
            clear()
        if not last:
            self.engine.step()  # a micro-step: DeepSpeed accumulates and waits for the last

    def step(self) -> float:
        self.engine.step()
        return float(self.engine.get_global_grad_norm())

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(model.parameters()), enabled=self.stage == 3):
            return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}

    def load_full_state_dict(self, model: nn.Module, state: dict[str, torch.Tensor]) -> None:
        import deepspeed

        # ZeRO-3: gather, let rank 0 write the weights, re-partition them from rank 0 on exit.
        with deepspeed.zero.GatheredParameters(
            list(model.parameters()), modifier_rank=0, enabled=self.stage == 3
        ):
            model.load_state_dict(state, strict=True)

    def optim_state_dict(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
        """Every rank's ZeRO partition (moments and fp32 master weights), collected on rank 0 in
        DeepSpeed's own format: a list with one optimizer state dict per rank (a collective)."""
        partitions: list[Any] | None = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(self.engine.optimizer.state_dict(), partitions, dst=0)
        return {"zero_stage": self.stage, "partitions": partitions}

    def load_optim_state_dict(self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
        partitions = state["partitions"]
        if state.get("zero_stage") != self.stage or len(partitions) != self.world_size:
            raise ValueError(
                f"this checkpoint's optimizer state is ZeRO-{state.get('zero_stage')} over {len(partitions)} "
                f"ranks; the run has ZeRO-{self.stage} over {self.world_size}: resume with the same "
                "trainer.zero_stage and trainer.num_processes"
            )
        self.engine.optimizer.load_state_dict(
            partitions, load_optimizer_states=True, load_from_fp32_weights=True
        )
