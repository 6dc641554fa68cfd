"""``TrainBatch``: trajectories as padded tensors, with completion-aligned views.

Layout of one row (P = widest prompt, T = longest completion)::

    input_ids:  [pad pad p0 p1 p2 | c0 c1 c2 c3 pad pad]      shape [B, P + T]
                 <- left-padded -->  <-- right-padded -->
    loss_mask, rewards, sampler_logprobs, completion_ids:       shape [B, T]

Because every completion starts at column P, the logits that predict completion token t are at
column P - 1 + t for every row, so one slice serves the whole batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch

from aloft.types import Trajectory


@dataclass(kw_only=True)
class TrainBatch:
    input_ids: torch.Tensor
    """[B, P + T] prompt (left-padded) then completion (right-padded)."""
    attention_mask: torch.Tensor
    """[B, P + T] 1 on real tokens."""
    position_ids: torch.Tensor
    """[B, P + T] positions counted from each row's first real token."""
    loss_mask: torch.Tensor
    """[B, T] float, 1 on policy tokens that are trained on."""
    rewards: torch.Tensor
    """[B, T] float, each turn's reward on its last policy token."""
    sampler_logprobs: torch.Tensor
    """[B, T] float, the engine's logprobs (0 where masked)."""
    group_ids: torch.Tensor
    """[B] long, rows sampled from the same prompt share an id."""
    prompt_width: int
    """P: the column where completions start."""

    def __post_init__(self) -> None:
        b, width = self.input_ids.shape
        t = width - self.prompt_width
        expected = {
            "attention_mask": (b, width),
            "position_ids": (b, width),
            "loss_mask": (b, t),
            "rewards": (b, t),
            "sampler_logprobs": (b, t),
            "group_ids": (b,),
        }
        for name, shape in expected.items():
            got = tuple(getattr(self, name).shape)
            if got != shape:
                raise ValueError(f"TrainBatch.{name} has shape {got}, expected {shape}")

    @property
    def num_rows(self) -> int:
        return self.input_ids.shape[0]

    @property
    def completion_width(self) -> int:
        return self.input_ids.shape[1] - self.prompt_width

    @property
    def completion_ids(self) -> torch.Tensor:
        """[B, T] the completion tokens (what logprobs are computed for)."""
        return self.input_ids[:, self.prompt_width :]

    def to(self, device: torch.device | str) -> TrainBatch:
        """The batch on ``device`` (itself where it is there already)."""
        tensors = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "prompt_width"}
        if all(t.device == torch.device(device) for t in tensors.values()):
            return self
        return TrainBatch(**{k: v.to(device) for k, v in tensors.items()}, prompt_width=self.prompt_width)

    def select(self, rows: torch.Tensor | Sequence[int]) -> TrainBatch:
        """The sub-batch of ``rows``, with padding columns nobody in it needs trimmed away."""
        idx = torch.as_tensor(rows, dtype=torch.long, device=self.input_ids.device)
        picked = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "prompt_width"}
        picked = {k: v[idx] for k, v in picked.items()}
        mask = picked["attention_mask"]
        p = self.prompt_width
        lead = int((mask[:, :p].sum(0) == 0).long().cumprod(0).sum())  # all-pad prompt columns
        tail_real = mask[:, p:].sum(0) > 0
        t = int(tail_real.nonzero().max()) + 1 if tail_real.any() else 1
        for k in ("input_ids", "attention_mask", "position_ids"):
            picked[k] = picked[k][:, lead : p + t]
        for k in ("loss_mask", "rewards", "sampler_logprobs"):
            picked[k] = picked[k][:, :t]
        return TrainBatch(**picked, prompt_width=p - lead)


def collate(trajectories: Sequence[Trajectory], pad_token_id: int, group_index: dict[str, int]) -> TrainBatch:
    """Stack trajectories into a ``TrainBatch`` (see the module docstring for the layout)."""
    if not trajectories:
        raise ValueError("collate needs at least one trajectory")
    b = len(trajectories)
    p = max(len(t.prompt_ids) for t in trajectories)
    t_len = max(max(len(t.completion_ids) for t in trajectories), 1)
    input_ids = torch.full((b, p + t_len), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((b, p + t_len), dtype=torch.long)
    loss_mask = torch.zeros((b, t_len))
    rewards = torch.zeros((b, t_len))
    sampler_logprobs = torch.zeros((b, t_len))
    for i, traj in enumerate(trajectories):
        n_p, n_c = len(traj.prompt_ids), len(traj.completion_ids)
        input_ids[i, p - n_p : p] = torch.tensor(traj.prompt_ids, dtype=torch.long)
        input_ids[i, p : p + n_c] = torch.tensor(traj.completion_ids, dtype=torch.long)
        attention_mask[i, p - n_p : p + n_c] = 1
        loss_mask[i, :n_c] = torch.tensor(traj.loss_mask, dtype=torch.float32)
        rewards[i, :n_c] = torch.tensor(traj.rewards, dtype=torch.float32)
        sampler_logprobs[i, :n_c] = torch.tensor(traj.sampler_logprobs, dtype=torch.float32)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    group_ids = torch.tensor([group_index[t.group_id] for t in trajectories], dtype=torch.long)
    return TrainBatch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        loss_mask=loss_mask,
        rewards=rewards,
        sampler_logprobs=sampler_logprobs,
        group_ids=group_ids,
        prompt_width=p,
    )


def split_rows(num_rows: int, size: int) -> list[list[int]]:
    """Consecutive row index chunks of at most ``size``."""
    return [list(range(s, min(s + size, num_rows))) for s in range(0, num_rows, size)]
