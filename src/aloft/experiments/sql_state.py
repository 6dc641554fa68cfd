"""The SkyRL-SQL experiment's state, small enough to commit: saved from ``OUT``, restored into a
fresh ``OUT`` on another machine, so that an experiment spread over sessions survives losing its
disk.

``OUT`` holds gigabytes: merged models (the warm start, each run's export), data files. What a later
machine needs to go on, and what anyone needs to recompute the results, is megabytes:

- ``warm_start/``: the demonstrations, the fit's summary and its LoRA adapters
  (``model/adapter/``); the merged model is rebuilt from the base and those adapters.
- ``runs/<run>/`` and ``study/<run>/``: the run's config, metrics and rollouts; its export's adapters
  (``export/adapter/``, the merged export rebuilt over the run's base); the latest checkpoint of an
  unfinished run, adapters only (``aloft.training.checkpoint.POLICY_ADAPTERS``, converted when the
  run wrote the full state), with its optimizer and trainer state.
- ``evals/``: every eval chunk's outcome records and trajectories.

The data is not kept: ``prepare_data`` writes the same files from the pinned builder on any machine.
JSON lines files over ``GZIP_OVER`` bytes are kept gzipped. A merge over a base rebuilt on another
CPU may differ from the original in a last bit, which resuming accepts
(``aloft.training.lora.same_base``).
"""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from safetensors.torch import load_file

from aloft.training import CheckpointManager
from aloft.training.checkpoint import POLICY_ADAPTERS, POLICY_WEIGHTS, write_directory_atomically
from aloft.training.lora import adapter_entries, base_fingerprint, merge_adapter
from aloft.training.lora_checkpoint import write_adapter_checkpoint

__all__ = ["GZIP_OVER", "restore_state", "save_state"]

GZIP_OVER = 256 * 1024
"""JSON lines files larger than this (bytes) are kept gzipped (``<name>.gz``)."""
_SKIPPED = {"checkpoints", "export", "data", "tensorboard", "model"}
"""What a run or warm-start directory holds that the state does not keep as is (rebuilt, or
kept in a smaller form)."""


def save_state(out: Path, state: Path) -> list[Path]:
    """Write ``out``'s small state into ``state``, replacing what was there (atomically); returns
    the files written. Refuses when ``state`` holds a run or eval that ``out`` lacks (restore it
    first), so that saving never loses one."""
    lost = sorted(set(_kept_names(state)) - set(_kept_names(out)))
    if lost:
        raise ValueError(
            f"--save-state: {state} holds {lost[0]} ({len(lost)} in all) that {out} lacks; restore it first "
            f"(aloft experiment skyrl-sql --out {out} --state {state}) or save into another directory"
        )

    def write(tmp: Path) -> None:
        for directory in _run_dirs(out):
            target = tmp / directory.relative_to(out)
            _copy_small_files(directory, target)
            adapter = directory / ("model" if directory.name == "warm_start" else "export") / "adapter"
            if adapter.is_dir():
                shutil.copytree(adapter, target / adapter.relative_to(directory))
            latest = CheckpointManager(directory / "checkpoints").latest()
            if latest is not None and not adapter.is_dir():
                _save_checkpoint(latest, target / "checkpoints" / latest.name)
        if (out / "evals").is_dir():
            _copy_small_files(out / "evals", tmp / "evals", recursive=True)

    final = write_directory_atomically(state, write)
    return sorted(p for p in final.rglob("*") if p.is_file())


def _kept_names(root: Path) -> list[str]:
    """The runs and evals a state or output directory holds (``runs/<run>``, ``evals/<model>/<set>``)."""
    names = [
        str(p.relative_to(root)) for parent in ("runs", "study") for p in sorted((root / parent).glob("*"))
    ]
    return names + [str(p.relative_to(root)) for p in sorted((root / "evals").glob("*/*"))]


def restore_state(state: Path, out: Path, base_model: str, echo: Any = print) -> list[Path]:
    """Restore into ``out`` what ``state`` holds and ``out`` lacks (an existing file is kept): the
    files as saved (gzipped ones unpacked), the warm start's merged model over ``base_model``, each
    run's export over its own ``model.path``, and each saved checkpoint. Returns the paths
    restored."""
    restored: list[Path] = []
    for source in sorted(p for p in state.rglob("*") if p.is_file()):
        relative = source.relative_to(state)
        if relative.parts[-3:-1] == ("model", "adapter") or "checkpoints" in relative.parts:
            continue  # restored below, with what they belong to
        if "export" in relative.parts and "adapter" in relative.parts:
            continue
        target = out / (relative.with_suffix("") if source.suffix == ".gz" else relative)
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.suffix == ".gz":
            with gzip.open(source, "rb") as f:
                target.write_bytes(f.read())
        else:
            shutil.copyfile(source, target)
        restored.append(target)
    warm_adapter = state / "warm_start" / "model" / "adapter"
    if warm_adapter.is_dir() and not (out / "warm_start" / "model" / "config.json").exists():
        echo(f"[skyrl-sql] state: rebuilding the warm start over {base_model}")
        restored.append(merge_adapter(base_model, warm_adapter, out / "warm_start" / "model"))
    for adapter in sorted(state.glob("**/export/adapter")):
        run = out / adapter.parent.parent.relative_to(state)
        if not (run / "export" / "config.json").exists():
            echo(f"[skyrl-sql] state: rebuilding the export of {run.name}")
            restored.append(merge_adapter(_run_base(run), adapter, run / "export"))
    for checkpoint in sorted(state.glob("**/checkpoints/step_*")):
        target = out / checkpoint.relative_to(state)
        if not target.exists():
            restored.append(write_directory_atomically(target, lambda d, c=checkpoint: _copy_tree(c, d)))
    return restored


def _run_dirs(out: Path) -> Iterator[Path]:
    """The warm start's directory, then every run's (long runs, 0-step runs, study runs)."""
    if (out / "warm_start").is_dir():
        yield out / "warm_start"
    for parent in ("runs", "study"):
        if (out / parent).is_dir():
            yield from sorted(p for p in (out / parent).iterdir() if (p / "config.yaml").exists())


def _copy_small_files(source: Path, target: Path, recursive: bool = False) -> None:
    """Copy ``source``'s files (and, for a run, its ``rollouts/``) into ``target``, gzipping large
    JSON lines files and leaving out ``_SKIPPED`` directories."""
    for path in sorted(source.rglob("*") if recursive else _run_files(source)):
        if not path.is_file() or ".tmp-" in str(path):
            continue
        destination = target / path.relative_to(source)
        destination.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".jsonl" and path.stat().st_size > GZIP_OVER:
            destination = destination.with_name(destination.name + ".gz")
            with path.open("rb") as f, gzip.GzipFile(destination, "wb", mtime=0) as g:
                shutil.copyfileobj(f, g)  # mtime 0: the same file gives the same bytes (git)
        else:
            shutil.copyfile(path, destination)


def _run_files(directory: Path) -> Iterator[Path]:
    for path in directory.iterdir():
        if path.is_file():
            yield path
        elif path.is_dir() and path.name not in _SKIPPED:
            yield from path.rglob("*")


def _save_checkpoint(checkpoint: Path, target: Path) -> None:
    """A checkpoint as the state keeps it: the policy's adapters alone (a full-state LoRA checkpoint
    of an older run converted), the optimizer and the trainer state."""
    target.mkdir(parents=True, exist_ok=True)
    if (checkpoint / POLICY_ADAPTERS).exists():
        shutil.copyfile(checkpoint / POLICY_ADAPTERS, target / POLICY_ADAPTERS)
    else:
        state = load_file(checkpoint / POLICY_WEIGHTS)
        adapters = adapter_entries(state)
        if not adapters:
            raise ValueError(
                f"save_state: {checkpoint} is a full fine-tune's checkpoint (no LoRA adapters), too large "
                "to keep; the experiment's state holds LoRA runs only"
            )
        write_adapter_checkpoint(target / POLICY_ADAPTERS, state, base_fingerprint(state))
    for name in ("policy_optim.pt", "trainer_state.pt"):
        shutil.copyfile(checkpoint / name, target / name)


def _copy_tree(source: Path, target: Path) -> None:
    for path in source.iterdir():
        shutil.copyfile(path, target / path.name)


def _run_base(run: Path) -> str:
    """The model a run trained from (its config's ``model.path``)."""
    import yaml

    return str(yaml.safe_load((run / "config.yaml").read_text())["model"]["path"])
