"""``write_directory_atomically``: a directory (checkpoint, export, experiment state) is replaced
whole, a failed write leaves nothing behind, and on Linux no moment exists without the directory."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from aloft.training import checkpoint
from aloft.training.checkpoint import CheckpointManager, write_directory_atomically


def write_text(text: str):
    def write(directory: Path) -> None:
        (directory / "weights.txt").write_text(text)

    return write


def test_replaces_an_existing_directory_and_leaves_no_partial(tmp_path):
    final = tmp_path / "export"
    write_directory_atomically(final, write_text("old"))
    write_directory_atomically(final, write_text("new"))
    assert (final / "weights.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_a_write_that_raises_keeps_the_old_directory_and_leaves_nothing(tmp_path):
    final = tmp_path / "step_4"
    write_directory_atomically(final, write_text("old"))

    def fails(directory: Path) -> None:
        (directory / "half.bin").write_bytes(b"\0" * 1024)
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_directory_atomically(final, fails)
    assert (final / "weights.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_4"]


@pytest.mark.skipif(sys.platform != "linux", reason="renameat2's RENAME_EXCHANGE is Linux's")
def test_on_linux_the_directory_exists_at_every_moment_of_a_replace(tmp_path, monkeypatch):
    """Whatever the replace removes, it removes once ``final`` already holds the new files (a kill
    at that moment loses nothing); removing ``final`` first, the old way, fails this."""
    final = tmp_path / "step_8"
    write_directory_atomically(final, write_text("old"))
    seen_at_removal = []
    real_rmtree = checkpoint.shutil.rmtree

    def watching_rmtree(path, *args, **kwargs):
        seen_at_removal.append((final / "weights.txt").read_text() if final.exists() else None)
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint.shutil, "rmtree", watching_rmtree)
    write_directory_atomically(final, write_text("new"))
    assert seen_at_removal == ["new"]
    assert (final / "weights.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_8"]


def test_a_resaved_checkpoint_replaces_the_step_and_keeps_the_newest(tmp_path):
    manager = CheckpointManager(tmp_path, keep=2)
    for step, text in ((2, "a"), (4, "b"), (4, "c"), (6, "d")):
        manager.save(step, write_text(text))
    assert manager.steps() == [4, 6]
    assert (tmp_path / "step_4" / "weights.txt").read_text() == "c"


class RefusingLibc:
    """A libc whose renameat2 fails with ``errno`` (as a sandbox or a file system would answer)."""

    def __init__(self, errno: int) -> None:
        self.errno = errno

    def renameat2(self, *args) -> int:
        import ctypes

        ctypes.set_errno(self.errno)
        return -1


@pytest.mark.parametrize("refusal", ["EINVAL", "ENOSYS", "EPERM", "EXDEV"])
def test_a_swap_the_system_refuses_falls_back_to_two_steps(tmp_path, monkeypatch, refusal):
    import errno

    monkeypatch.setattr(checkpoint, "_libc", lambda: RefusingLibc(getattr(errno, refusal)))
    final = tmp_path / "export"
    write_directory_atomically(final, write_text("old"))
    write_directory_atomically(final, write_text("new"))
    assert (final / "weights.txt").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def test_any_other_swap_error_is_raised_and_keeps_the_old_directory(tmp_path, monkeypatch):
    import errno

    final = tmp_path / "export"
    write_directory_atomically(final, write_text("old"))
    monkeypatch.setattr(checkpoint, "_libc", lambda: RefusingLibc(errno.EIO))
    with pytest.raises(OSError, match="cannot swap"):
        write_directory_atomically(final, write_text("new"))
    assert (final / "weights.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]  # no partial copy left
