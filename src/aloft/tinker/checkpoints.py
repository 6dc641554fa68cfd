"""``tinker://`` paths as directories of the server's checkpoint root.

``tinker://<model_id>/<kind>/<name>`` (the SDK's format: exactly three parts, ``kind`` one of
``weights`` for ``save_state`` and ``sampler_weights`` for ``save_weights_for_sampler``) is the
directory ``<root>/<model_id>/<kind>/<name>/``. A checkpoint is written into a sibling and renamed
into place (``aloft.training.checkpoint.write_directory_atomically``), so a path either names a whole
checkpoint or nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aloft.tinker.errors import TinkerNotFoundError, TinkerUserError
from aloft.training.checkpoint import write_directory_atomically

SCHEME = "tinker://"
KINDS = ("weights", "sampler_weights")


def check_name(name: object) -> str:
    """A checkpoint name: non-empty, no ``/`` (it is one part of the path), not ``.`` or ``..``."""
    if not isinstance(name, str) or not name or "/" in name or name in (".", "..") or ".tmp-" in name:
        raise TinkerUserError(f"a checkpoint name must be a non-empty string without '/', got {name!r}")
    return name


class CheckpointStore:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def uri(self, model_id: str, kind: str, name: str) -> str:
        assert kind in KINDS
        return f"{SCHEME}{model_id}/{kind}/{check_name(name)}"

    def directory(self, uri: str, kind: str | None = None, *, exists: bool = True) -> Path:
        """The directory of ``uri``; refuses a malformed path (or another ``kind``) and, with
        ``exists``, one that names no checkpoint."""
        parts = uri.removeprefix(SCHEME).split("/") if uri.startswith(SCHEME) else []
        if len(parts) != 3 or parts[1] not in KINDS or not parts[0] or parts[0] in (".", ".."):
            raise TinkerUserError(
                f"{uri!r} is not a tinker://<model_id>/<weights|sampler_weights>/<name> path"
            )
        if kind is not None and parts[1] != kind:
            raise TinkerUserError(f"{uri!r} holds {parts[1]}; this call needs {kind} (a save_state path)")
        directory = self.root / parts[0] / parts[1] / check_name(parts[2])
        if exists and not directory.is_dir():
            raise TinkerNotFoundError(f"no checkpoint at {uri!r} on this server")
        return directory

    def write(self, uri: str, write: Callable[[Path], None], *, overwrite: bool) -> None:
        directory = self.directory(uri, exists=False)
        if directory.exists() and not overwrite:
            raise TinkerUserError(
                f"a checkpoint {uri!r} exists; save under another name or pass overwrite=True"
            )
        write_directory_atomically(directory, write)
