"""Atomic, retained checkpoints: ``<root>/step_<n>/`` appears whole or not at all.

A checkpoint is written into ``step_<n>.tmp-<pid>/`` and renamed into place only after every file
is flushed, so a run killed mid-write (even with SIGKILL) leaves the previous checkpoint intact and
the partial one is ignored and cleaned up on the next start.
"""

from __future__ import annotations

import ctypes
import errno as _errno
import functools
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

_STEP_DIR = re.compile(r"^step_(\d+)$")

POLICY_WEIGHTS = "policy.safetensors"
"""A checkpoint's policy weights, every one (a full fine-tune)."""
POLICY_ADAPTERS = "policy_adapter.safetensors"
"""A LoRA run's checkpoint of its policy: the adapters alone, with the norms of the frozen base
they train on in the file's metadata (``base_fingerprint``)."""


class CheckpointManager:
    def __init__(self, root: str | Path, keep: int = 2) -> None:
        self.root = Path(root)
        self.keep = max(1, keep)

    def steps(self) -> list[int]:
        """Steps with a complete checkpoint, ascending."""
        if not self.root.is_dir():
            return []
        found = (_STEP_DIR.match(p.name) for p in self.root.iterdir() if p.is_dir())
        return sorted(int(m.group(1)) for m in found if m)

    def latest(self) -> Path | None:
        steps = self.steps()
        return self.root / f"step_{steps[-1]}" if steps else None

    def save(self, step: int, write: Callable[[Path], None]) -> Path:
        """Call ``write(tmp_dir)`` then publish it as ``step_<step>`` and prune old ones."""
        self.root.mkdir(parents=True, exist_ok=True)
        remove_stale_partials(self.root)
        final = write_directory_atomically(self.root / f"step_{step}", write)
        for old in self.steps()[: -self.keep]:
            shutil.rmtree(self.root / f"step_{old}", ignore_errors=True)
        return final


def remove_stale_partials(directory: Path) -> list[Path]:
    """Remove the ``<name>.tmp-<pid>`` entries in ``directory`` that no live process is writing (a
    run killed mid-export or mid-checkpoint leaves one, a full model copy); returns what went."""
    removed = []
    for path in directory.glob("*.tmp-*") if directory.is_dir() else []:
        pid = path.name.rpartition(".tmp-")[2]
        if pid.isdigit() and int(pid) != os.getpid() and _alive(int(pid)):
            continue  # another live process (another rank, a concurrent tool) is writing it
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def write_directory_atomically(final: Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp_dir)`` on a sibling ``<final>.tmp-<pid>`` and put it at ``final`` once every
    file is flushed, replacing an existing ``final``: a reader sees the old directory or the whole
    new one, never a part and (on Linux) never neither. A ``write`` (or a replace) that raises
    leaves nothing behind; a kill mid-write leaves the ``.tmp-`` sibling for the next start to remove."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        write(tmp)
        _fsync_tree(tmp)
        if final.exists():  # re-saving (e.g. a step after a resume): replace it
            _replace_directory(tmp, final)
        else:
            os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(final.parent)
    return final


_RENAME_EXCHANGE = 2
"""``renameat2``'s flag that swaps two paths in one step (Linux 3.15+, glibc 2.28+)."""
_NO_EXCHANGE = frozenset({_errno.EINVAL, _errno.ENOSYS, _errno.ENOTSUP, _errno.EPERM, _errno.EXDEV})
"""What ``renameat2`` answers where it cannot swap: a file system without the flag (EINVAL), an old
kernel (ENOSYS), a sandbox that refuses the call (EPERM), an overlay directory it does not own (EXDEV)."""


def _replace_directory(new: Path, final: Path) -> None:
    """Put the directory ``new`` at ``final``, which exists. Swapped in one step where the OS can, so
    no moment exists without ``final``, and the old copy (now at ``new``) removed after; elsewhere
    ``final`` is removed first and a kill between the two steps leaves only ``new``'s ``.tmp-``."""
    if not _exchange(new, final):
        shutil.rmtree(final)
        os.rename(new, final)
        return
    _fsync_dir(final.parent)  # the swap on disk before the old copy goes
    shutil.rmtree(new, ignore_errors=True)  # the old copy; a kill here leaves a stale .tmp-


def _exchange(a: Path, b: Path) -> bool:
    """Swap the paths ``a`` and ``b`` atomically; False where this OS or file system cannot."""
    renameat2 = getattr(_libc(), "renameat2", None)
    if renameat2 is None:
        return False
    at_cwd = -100  # AT_FDCWD: the paths are taken as given
    done = renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), _RENAME_EXCHANGE)
    if done == 0:
        return True
    errno = ctypes.get_errno()
    if errno in _NO_EXCHANGE:
        return False  # no RENAME_EXCHANGE here: the caller replaces in two steps
    raise OSError(errno, f"cannot swap {a} with {b}: {os.strerror(errno)}")


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if sys.platform != "linux":
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _fsync_tree(path: Path) -> None:
    for dirpath, _, files in os.walk(path):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
