"""Tinker training clients on aloft: LoRA adapters sharing one base model, each with its own AdamW.

A ``TrainingHost`` holds one base model (loaded once) wrapped by peft; every training client is a
named adapter on it (``create_lora_training_client``), switched in for that client's calls. Gradients
of ``forward_backward`` accumulate on the client's own adapter until its ``optim_step``, so clients
interleave freely. Everything here runs on aloft's compute thread, one call at a time, in the order
the server accepted them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from aloft.models.loading import load_model, load_tokenizer, resolve_model_path
from aloft.tinker.batching import micro_batches, target_logprobs
from aloft.tinker.errors import TinkerNotFoundError, TinkerUserError
from aloft.tinker.losses import token_loss
from aloft.tinker.wire import Datum
from aloft.types import LoraAdapters

ATTENTION_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_MODULES = ("gate_proj", "up_proj", "down_proj")
UNEMBED_MODULES = ("lm_head",)
LORA_ALPHA = 32
"""peft's ``lora_alpha`` for every client (scale ``alpha / rank``)."""


@dataclass(kw_only=True)
class LoraSpec:
    """What ``create_lora_training_client`` asks for."""

    rank: int
    train_attn: bool = True
    train_mlp: bool = True
    train_unembed: bool = True
    seed: int | None = None

    def target_modules(self) -> list[str]:
        modules = [
            *(ATTENTION_MODULES if self.train_attn else ()),
            *(MLP_MODULES if self.train_mlp else ()),
            *(UNEMBED_MODULES if self.train_unembed else ()),
        ]
        if not modules:
            raise TinkerUserError("a LoRA training client needs train_attn, train_mlp or train_unembed")
        return modules


@dataclass(kw_only=True)
class AdamParams:
    """Tinker's ``AdamParams`` (decoupled weight decay; ``grad_clip_norm`` 0 = no clipping)."""

    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0


@dataclass(kw_only=True)
class TrainingClientState:
    model_id: str
    spec: LoraSpec
    optimizer: torch.optim.AdamW
    parameters: list[torch.nn.Parameter]
    steps: int = 0
    pending_backwards: int = 0
    """``forward_backward`` calls whose gradients wait for the next ``optim_step`` (``save_state``
    refuses while any do; ``load_state`` discards them)."""
    extra: dict[str, Any] = field(default_factory=dict)


class TrainingHost:
    """One base model and the LoRA training clients on it."""

    def __init__(self, base_model: str, *, max_length: int = 4096) -> None:
        self.base_model = base_model
        self.path = resolve_model_path(base_model)
        self.tokenizer = load_tokenizer(self.path)
        self.max_length = max_length
        self._base: torch.nn.Module = load_model(self.path)
        self._peft: Any = None  # the PeftModel, made with the first client
        self.clients: dict[str, TrainingClientState] = {}

    # --- clients -----------------------------------------------------------------------------

    def create(self, model_id: str, spec: LoraSpec) -> None:
        from peft import LoraConfig, get_peft_model

        if spec.rank < 1:
            raise TinkerUserError(f"LoRA rank must be >= 1, got {spec.rank}")
        config = LoraConfig(r=spec.rank, lora_alpha=LORA_ALPHA, target_modules=spec.target_modules())
        if spec.seed is not None:
            torch.manual_seed(spec.seed)
        if self._peft is None:
            self._peft = get_peft_model(self._base, config, adapter_name=_adapter(model_id))
        else:
            self._peft.add_adapter(_adapter(model_id), config)
        parameters = [
            parameter
            for name, parameter in self._peft.named_parameters()
            if f".{_adapter(model_id)}." in name
        ]
        optimizer = torch.optim.AdamW(parameters, lr=AdamParams.learning_rate)
        self.clients[model_id] = TrainingClientState(
            model_id=model_id, spec=spec, optimizer=optimizer, parameters=parameters
        )

    def client(self, model_id: str) -> TrainingClientState:
        if model_id not in self.clients:
            raise TinkerNotFoundError(f"no training client {model_id!r} on this server")
        return self.clients[model_id]

    def remove(self, model_id: str) -> None:
        """Drop a client's adapter and optimizer state (``unload_model``, or its session ended)."""
        self.client(model_id)
        self._peft.delete_adapter(_adapter(model_id))
        del self.clients[model_id]

    def _activate(self, model_id: str) -> TrainingClientState:
        state = self.client(model_id)
        self._peft.set_adapter(_adapter(model_id))
        return state

    # --- forward / backward ------------------------------------------------------------------

    def forward_backward(
        self,
        model_id: str,
        data: list[Datum],
        loss_fn: str,
        config: dict[str, float | str],
        *,
        forward_only: bool,
    ) -> tuple[list[dict[str, np.ndarray]], dict[str, float]]:
        """Per-datum outputs (``logprobs`` ``[N]`` of each target token) and ``{"loss:sum": ...}``;
        unless ``forward_only``, the loss's gradient is added to the client's adapter."""
        loss_of = token_loss(loss_fn)
        state = self._activate(model_id)
        self.check_lengths(data)
        self._peft.eval()  # no dropout: a forward gives the logprobs a forward_backward trains on
        outputs: list[dict[str, np.ndarray]] = []
        total = 0.0
        # Micro-batches (aloft.tinker.batching) give the call's loss and gradient exactly. All of them
        # are checked before the first backward, and a loss that refuses a later one puts the
        # gradients back as they were: a refused call adds nothing.
        batches = micro_batches(data, self._base.config.vocab_size)
        grads_before = [None if p.grad is None else p.grad.clone() for p in state.parameters]
        try:
            for batch in batches:
                with torch.set_grad_enabled(not forward_only):
                    logprobs = target_logprobs(self._peft, batch)
                    loss = loss_of(logprobs, batch.inputs, batch.mask, config)
                    if not forward_only:
                        loss.backward()
                total += float(loss.detach())
                outputs.extend(
                    {"logprobs": logprobs[row, :length].detach().float().numpy()}
                    for row, length in enumerate(batch.mask.sum(-1).tolist())
                )
        except Exception:  # a refused input or a failed forward: the call adds nothing
            for parameter, grad in zip(state.parameters, grads_before, strict=True):
                parameter.grad = grad
            raise
        if not forward_only:
            state.pending_backwards += 1
        return outputs, {"loss:sum": total}

    def check_lengths(self, data: list[Datum]) -> int:
        """The longest datum's length; refuses an empty call or a datum over ``max_length``."""
        if not data:
            raise TinkerUserError("forward_backward needs at least one datum")
        longest = max(len(datum.tokens) for datum in data)
        if longest > self.max_length:
            raise TinkerUserError(
                f"a datum has {longest} tokens, over this server's limit of {self.max_length} "
                "(start tinker-serve with a larger --max-length, or shorten the sequence)"
            )
        return longest

    def adapters(self, model_id: str) -> LoraAdapters:
        """A snapshot of the client's adapters, for a sampler (``save_weights_for_sampler``)."""
        self.client(model_id)
        return _adapters_of(self._peft, _adapter(model_id))

    # --- state -------------------------------------------------------------------------------

    def check_no_pending_gradients(self, model_id: str) -> None:
        """Refuse (``TinkerUserError``) while gradients of a ``forward_backward`` wait for the client's
        ``optim_step``: a checkpoint holds weights and AdamW state, not gradients, so saving then would
        silently drop them and a resumed client would step without them."""
        pending = self.client(model_id).pending_backwards
        if pending:
            calls = f"{pending} forward_backward call{'s' if pending > 1 else ''}"
            raise TinkerUserError(
                f"save_state refused: training client {model_id!r} has gradients from {calls} waiting "
                "for optim_step, and a checkpoint holds no gradients; call optim_step first, or drop "
                "them by loading a saved state (create_training_client_from_state_with_optimizer, or "
                "load_state_with_optimizer on this client)"
            )

    def save_state(self, model_id: str, directory: Path) -> None:
        """Write the client's adapter (``adapter.safetensors``), its AdamW state (``optimizer.pt``) and
        its LoRA settings (``state.json``) into ``directory``: what ``load_state`` needs to continue
        bit-identically.

        Refused (``TinkerUserError``, before anything is written) while a ``forward_backward``'s
        gradients wait for ``optim_step``: they are not part of a checkpoint, and dropping them
        silently would make the resumed run differ (``check_no_pending_gradients``)."""
        self.check_no_pending_gradients(model_id)
        state = self.client(model_id)
        own = f".{_adapter(model_id)}."
        tensors = {
            name.replace(own, ".default."): parameter.detach().contiguous()
            for name, parameter in self._peft.named_parameters()
            if own in name
        }
        save_file(tensors, str(directory / "adapter.safetensors"))
        torch.save(state.optimizer.state_dict(), directory / "optimizer.pt")
        meta = {"base_model": self.base_model, "lora": asdict(state.spec), "steps": state.steps}
        (directory / "state.json").write_text(json.dumps(meta, indent=2))

    @staticmethod
    def saved_spec(directory: Path) -> LoraSpec:
        return LoraSpec(**json.loads((directory / "state.json").read_text())["lora"])

    def load_state(self, model_id: str, directory: Path, *, optimizer: bool) -> None:
        """Put a saved adapter (and, with ``optimizer``, its AdamW state) into an existing client of
        the same LoRA settings. Gradients waiting for ``optim_step`` are discarded: they belong to
        the weights being replaced."""
        state = self.client(model_id)
        saved = self.saved_spec(directory)
        if saved != state.spec:
            raise TinkerUserError(
                f"the checkpoint's LoRA settings {asdict(saved)} differ from client {model_id!r}'s "
                f"{asdict(state.spec)}; load it into a new client (create_training_client_from_state)"
            )
        own = f".{_adapter(model_id)}."
        tensors = load_file(str(directory / "adapter.safetensors"))
        with torch.no_grad():
            for name, parameter in self._peft.named_parameters():
                if own in name:
                    parameter.copy_(tensors[name.replace(own, ".default.")])
        if optimizer:
            state.optimizer.load_state_dict(torch.load(directory / "optimizer.pt", weights_only=True))
            state.steps = json.loads((directory / "state.json").read_text())["steps"]
        else:
            state.optimizer.state.clear()
        for parameter in state.parameters:
            parameter.grad = None
        state.pending_backwards = 0

    # --- optimizer ---------------------------------------------------------------------------

    def optim_step(self, model_id: str, params: AdamParams) -> dict[str, float]:
        """One AdamW step on the client's adapter with the gradients accumulated since its last step."""
        state = self.client(model_id)
        for group in state.optimizer.param_groups:
            group.update(
                lr=params.learning_rate,
                betas=(params.beta1, params.beta2),
                eps=params.eps,
                weight_decay=params.weight_decay,
            )
        gradients = [p for p in state.parameters if p.grad is not None]
        norm = float(torch.nn.utils.get_total_norm([p.grad for p in gradients])) if gradients else 0.0
        if params.grad_clip_norm > 0 and gradients:
            torch.nn.utils.clip_grads_with_norm_(gradients, params.grad_clip_norm, torch.tensor(norm))
        state.optimizer.step()
        state.optimizer.zero_grad(set_to_none=True)
        state.steps += 1
        state.pending_backwards = 0
        return {"grad_norm:mean": norm}


def _adapters_of(peft_model: Any, adapter: str) -> LoraAdapters:
    """One adapter's ``(A, B)`` per module under the HF module names, with peft's scale."""
    modules: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    scale = None
    for name, module in peft_model.named_modules():
        lora_a = getattr(module, "lora_A", None)
        if lora_a is not None and adapter in lora_a:
            a, b = lora_a[adapter].weight, module.lora_B[adapter].weight
            modules[name.removeprefix("base_model.model.")] = (a.detach().clone(), b.detach().clone())
            scale = module.scaling[adapter]
    assert scale is not None, f"adapter {adapter} has no LoRA modules"
    return LoraAdapters(scale=float(scale), modules=modules)


def _adapter(model_id: str) -> str:
    """peft adapter names may not hold dots or colons; model ids hold colons."""
    return "client_" + "".join(character if character.isalnum() else "_" for character in model_id)
