"""Linear layers with oneDNN-prepacked weights, for the hf engine on CPU.

``torch.nn.functional.linear`` hands the weight to oneDNN (bfloat16) or MKL (float32) in PyTorch's
plain layout, and the library repacks it into its blocked layout on every call. Packing once, when
the engine builds or reloads its weights, is what ``torch.compile``'s CPU "freezing" pass does to a
frozen graph; here it is done eagerly, module by module, so the engine keeps its eager forward and
variable shapes. Measured gains:

- bfloat16 on the 2-core Xeon (AMX): a decode step's linears about 1.6x faster ([32, 576] x
  [576, 1536]: 84 -> 53 us), outputs bit-identical to ``F.linear``'s.
- float32 on the 2-core AVX2 EPYC: SmolLM2's decode at 32 rows went from 83 to 120 tokens/s (a
  step streams every weight from memory, and MKL's small-M product repacked each one as it went; a
  step's 211 linears alone ran 1.42x faster in a microbenchmark). Outputs differ from ``F.linear``'s by float rounding only (up to
  2e-6 on unit-scale products); they do not depend on the other rows of the batch.

Only the engine's private inference copy is converted; the ``weight`` parameter stays (state dict,
weight updates, tied embeddings), so the engine holds its weights twice, and ``repack`` refreshes
the packed copy after weights change.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from aloft.models.precision import cpu_flags

_BATCH_HINT = 32
"""Rows oneDNN is told to expect when choosing the packed layout (any row count works)."""


def prepacking_supported(model: nn.Module) -> bool:
    """Whether ``prepack_linears`` applies: a float32 or bfloat16 model on CPU with oneDNN's packed
    linear available (float32: where a row's result ignores the other rows, see
    ``packed_rows_are_independent``; bfloat16: on a CPU whose oneDNN has a packed bf16 layout)."""
    parameter = next(model.parameters(), None)
    if not (
        parameter is not None
        and parameter.device.type == "cpu"
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    ):
        return False
    if parameter.dtype == torch.float32:
        return packed_rows_are_independent()
    # oneDNN's bf16 reorder refuses CPUs without these (e.g. an AVX2-only EPYC).
    return parameter.dtype == torch.bfloat16 and (
        "avx_ne_convert" in cpu_flags() or {"avx512bw", "avx512vl", "avx512dq"} <= cpu_flags()
    )


ROW_COUNTS_CHECKED = (1, 7, 32, 33, 64)
"""Batch sizes at which ``packed_rows_are_independent`` places a row (around the packing hint)."""


@functools.cache
def packed_rows_are_independent() -> bool:
    """Whether this CPU's packed float32 linear gives a row the same bits whatever rows surround it.

    The engine promises that identical requests get identical logprobs in any batch. oneDNN picks
    its kernel by CPU and row count, and a kernel whose sums run in another order for some row
    counts would break that promise; float32 prepacking is used only where a quick check of one row
    inside batches of ``ROW_COUNTS_CHECKED`` rows finds the same bits every time (it did on the
    2-core AVX2 EPYC).
    """
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(512, 256, generator=generator)  # wide enough for the blocked kernels
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, _BATCH_HINT)
    row = torch.randn(1, 256, generator=generator)
    alone = torch.ops.mkldnn._linear_pointwise(row, packed, None, "none", [], "")[0]
    for rows in ROW_COUNTS_CHECKED:
        batch = torch.randn(rows, 256, generator=generator)
        batch[rows // 2] = row[0]
        out = torch.ops.mkldnn._linear_pointwise(batch, packed, None, "none", [], "")
        if not torch.equal(out[rows // 2], alone):
            return False
    return True


class PrepackedLinear(nn.Linear):
    """An ``nn.Linear`` whose forward uses a oneDNN-packed copy of its weight (refresh it with ``repack``)."""

    def repack(self) -> None:
        self._packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), _BATCH_HINT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and self.weight.requires_grad:  # packed weights carry no autograd
            return super().forward(x)
        return torch.ops.mkldnn._linear_pointwise(x, self._packed, self.bias, "none", [], "")


def prepack_linears(model: nn.Module) -> int:
    """Turn every plain ``nn.Linear`` of ``model`` into a ``PrepackedLinear`` in place; returns how many."""
    converted = 0
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = PrepackedLinear  # same parameters and state dict, another forward
            module.repack()
            converted += 1
    return converted


def repack_linears(model: nn.Module) -> None:
    """Refresh the packed weights after the model's parameters changed (weight updates)."""
    for module in model.modules():
        if isinstance(module, PrepackedLinear):
            module.repack()
