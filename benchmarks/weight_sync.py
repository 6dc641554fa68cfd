"""Seconds and GB/s to sync a policy's weights into an inference engine: in-process and across processes.

Run from the repo root::

    python benchmarks/weight_sync.py                       # SmolLM2-135M
    python benchmarks/weight_sync.py --models tiny         # seconds
    python benchmarks/weight_sync.py --bucket-mb 16,64,256 --json out.json

What is timed, best of ``--repeats`` syncs after one warm-up sync, on the same weights:

- ``in-process``: the trainer's float32 model handed to an ``HFEngine`` in the same process
  (``engine.update_weights(named tensors)``: cast to the engine's dtype and copied in place, plus the
  repack of its prepacked linears). GB/s counts the bytes the engine receives (its dtype).
- ``across processes``: a trainer process and an engine process in one torch.distributed gloo group
  on 127.0.0.1 (``aloft.distributed``): ``WeightSender.send`` casts to the engine's dtype and
  broadcasts flat buckets of ``--bucket-mb``; ``WeightReceiver.receive`` gets them. ``transfer`` is the
  receiver's wall time from the manifest to the last bucket (GB/s = bytes on the wire / that), ``total``
  adds ``engine.update_weights`` with the received tensors.
- ``by handle``: the same two processes, as colocated Ray actors sync (``aloft.distributed.handles``):
  the trainer writes its weights once, in the engine's dtype, into a shared-memory buffer and sends
  its handle (a few bytes); the engine maps that buffer. ``transfer`` is the engine's wall time from
  waiting for the handle to holding the mapped weights (the trainer's cast-and-copy included),
  ``total`` adds the load.

The engine's dtype is ``aloft.models.precision.fast_dtype()`` (bf16 on CPUs with native bf16 math)
unless ``--dtype``. After the last sync the engine process checks that its greedy tokens and logprobs
equal those of an engine built from the trainer's weights directly (``ok`` column).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_tables import Table, command_line, write_results

MODELS = ("tiny", "smollm2")
SMOLLM2 = "smollm2-135m-instruct"
TINY_SHAPE = {"hidden_size": 256, "num_layers": 4, "num_heads": 4, "num_kv_heads": 2}
PROMPT = [1, 2, 3, 4, 5, 6, 7, 8]


def unique_weights(model: Any) -> list[tuple[str, Any]]:
    """The model's state dict with tied tensors once (as ``PolicyWorker.named_weights`` sends them)."""
    seen, out = set(), []
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if key not in seen:
            seen.add(key)
            out.append((name, tensor))
    return out


def greedy(engine: Any) -> tuple[list[int], list[float]]:
    from aloft.types import GenerationRequest, SamplingParams

    request = GenerationRequest(prompt_ids=PROMPT, sampling=SamplingParams(max_tokens=8, temperature=0))
    completion = asyncio.run(engine.generate([request]))[0]
    return completion.token_ids, completion.logprobs


def in_process(model_path: str, dtype: str, repeats: int) -> dict[str, Any]:
    import torch

    from aloft.inference.hf import HFEngine
    from aloft.models import load_model
    from aloft.models.compute_thread import on_compute_thread

    trainer = on_compute_thread(load_model, model_path, torch.float32)  # one OpenMP team in this process
    weights = unique_weights(trainer)
    engine = HFEngine(model_path, dtype=dtype)
    nbytes = sum(t.numel() for _, t in weights) * torch.empty((), dtype=engine.dtype).element_size()
    try:
        times = []
        for version in range(repeats + 1):
            started = time.perf_counter()
            asyncio.run(engine.update_weights(weights, version=version + 1))
            times.append(time.perf_counter() - started)
    finally:
        engine.close()
    seconds = min(times[1:])
    return {"mode": "in-process", "bytes": nbytes, "transfer_s": seconds, "total_s": seconds, "ok": True}


def _across(
    rank: int, port: int, model_path: str, dtype: str, bucket_mb: int, repeats: int, out: str, by_handle: bool
) -> None:
    import torch
    import torch.distributed as dist

    from aloft.distributed import (
        SharedWeights,
        WeightReceiver,
        WeightSender,
        init_loopback_group,
        open_weights,
    )
    from aloft.inference.hf import HFEngine
    from aloft.models import load_model

    init_loopback_group(rank, 2, port)
    # The engine process only waits on the wire until the load: one thread, leaving the trainer's
    # casting both cores (two 2-thread OpenMP teams plus gloo's threads would fight over 2 cores).
    if rank == 1:
        torch.set_num_threads(1)
    try:
        if rank == 0:
            trainer = load_model(model_path, dtype=torch.float32)
            sender = WeightSender(dtype=getattr(torch, dtype), bucket_bytes=bucket_mb << 20)
            for _ in range(repeats + 1):
                if by_handle:
                    shared = SharedWeights(unique_weights(trainer), getattr(torch, dtype))
                    dist.broadcast_object_list([shared.handle], src=0)
                    dist.barrier()  # the engine has loaded
                    shared.close()
                else:
                    sender.send(unique_weights(trainer))
            return
        engine = HFEngine(model_path, dtype=dtype)
        runs = []
        for version in range(repeats + 1):
            started = time.perf_counter()
            if by_handle:
                box: list[Any] = [None]
                dist.broadcast_object_list(box, src=0)
                weights = open_weights(box[0])
                transfer, nbytes = time.perf_counter() - started, box[0].nbytes
            else:
                weights, stats = WeightReceiver().receive()
                transfer, nbytes = stats.seconds, stats.bytes
            asyncio.run(engine.update_weights(weights, version=version + 1))
            runs.append((transfer, time.perf_counter() - started, nbytes))
            if by_handle:
                del weights
                dist.barrier()
        reference = HFEngine(model_path, dtype=dtype)  # weights straight from the checkpoint
        ok = greedy(engine) == greedy(reference)
        engine.close()
        reference.close()
        transfer, total, nbytes = min(runs[1:])
        mode = "by handle (shared memory)" if by_handle else f"across processes ({bucket_mb} MiB buckets)"
        result = {"mode": mode, "bytes": nbytes}
        Path(out).write_text(json.dumps(result | {"transfer_s": transfer, "total_s": total, "ok": ok}))
    finally:
        dist.barrier()
        dist.destroy_process_group()


def across_processes(
    model_path: str, dtype: str, bucket_mb: int, repeats: int, by_handle: bool = False
) -> dict[str, Any]:
    """Run ``_across`` as two fresh processes (this file with ``--sync-worker``): trainer and engine."""
    import subprocess

    from aloft.distributed import free_loopback_port

    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        out = handle.name
    job = [free_loopback_port(), model_path, dtype, bucket_mb, repeats, out, by_handle]
    try:
        workers = [
            subprocess.Popen([sys.executable, __file__, "--sync-worker", json.dumps([rank, *job])])
            for rank in (0, 1)
        ]
        codes = [worker.wait(timeout=600) for worker in workers]
        if any(codes):
            raise RuntimeError(f"weight sync workers exited with {codes}")
        return json.loads(Path(out).read_text())
    finally:
        Path(out).unlink(missing_ok=True)


def results_table(results: list[dict[str, Any]]) -> Table:
    """One row per model and sync mode."""
    return Table(
        ["model", "dtype", "mode", "GB", "transfer s", "GB/s", "total s (with load)", "ok"],
        [
            [
                result["model"],
                result["dtype"],
                row["mode"],
                row["bytes"] / 1e9,
                row["transfer_s"],
                row["bytes"] / row["transfer_s"] / 1e9,
                row["total_s"],
                "yes" if row["ok"] else "NO",
            ]
            for result in results
            for row in result["rows"]
        ],
        ["{}", "{}", "{}", "{:.3f}", "{:.3f}", "{:.2f}", "{:.3f}", "{}"],
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default="smollm2", help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument(
        "--dtype", default="auto", choices=("auto", "float32", "bfloat16"), help="engine dtype"
    )
    parser.add_argument("--bucket-mb", default="256", help="comma-separated bucket sizes (MiB) to try")
    parser.add_argument("--repeats", type=int, default=3, help="timed syncs (best counts)")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    parser.add_argument("--sync-worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = set(args.models.split(",")) - set(MODELS)
    if unknown:
        parser.error(f"unknown model(s) {sorted(unknown)}; choose from {', '.join(MODELS)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.sync_worker:
        _across(*json.loads(args.sync_worker))
        return
    import torch

    from aloft.models import build_tiny_model, resolve_model_path
    from aloft.models.precision import fast_dtype

    dtype = str(fast_dtype("cpu")).removeprefix("torch.") if args.dtype == "auto" else args.dtype
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, engine dtype {dtype}", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="aloft-bench-sync-"))
    results = []
    try:
        for name in args.models.split(","):
            path = str(
                build_tiny_model(scratch / "tiny", **TINY_SHAPE)
                if name == "tiny"
                else resolve_model_path(SMOLLM2)
            )
            print(f"{name} ...", end=" ", flush=True)
            started = time.perf_counter()
            rows = [in_process(path, dtype, args.repeats)]
            rows += [across_processes(path, dtype, int(mb), args.repeats) for mb in args.bucket_mb.split(",")]
            rows.append(across_processes(path, dtype, 0, args.repeats, by_handle=True))
            results.append({"model": name, "dtype": dtype, "rows": rows})
            print(f"{time.perf_counter() - started:.0f} s", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    table = results_table(results)
    print()
    print(table)
    print()
    print(
        "GB/s = bytes the engine receives (its dtype) / transfer seconds; target (issue 5): >= 1 GB/s across processes."
    )
    if args.json:
        figures = {"benchmark": "weight_sync", "results": results}
        write_results(args.json, "weight_sync", command_line(__file__, argv), figures, [table])
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
