"""The bootstrap: the first code of the sandboxed interpreter. It installs seccomp and the audit
hook, says "ready" and runs the model's ``main.py`` as ``__main__``.

Never imported for its behaviour: ``config._bootstrap_source`` ships ``_bootstrap_main``'s source
text to ``python -c``, so the function must stay self-contained (it imports all it uses inside
itself and uses no name of this package).
"""

from __future__ import annotations


def _bootstrap_main() -> None:  # pragma: no cover - runs inside the sandbox
    """Install seccomp and the audit hook, say "ready", then run ``main.py`` as ``__main__``.

    Runs as ``python -s -P -B -u [-S] -c <this source> aloft-sandbox:<run id> <json config>``.
    """
    import json
    import os
    import sys

    config = json.loads(sys.argv[2])
    status_fd = config["status_fd"]
    try:
        with open(config["code_path"], encoding="utf-8") as handle:
            source = handle.read()
        if config["seccomp"]:
            import ctypes
            import struct

            program = bytearray.fromhex(config["seccomp"])
            for index in config["seccomp_pid_slots"]:
                struct.pack_into("<I", program, index * 8 + 4, os.getpid())

            class SockFprog(ctypes.Structure):
                _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl.argtypes = [
                ctypes.c_int,
                ctypes.c_ulong,
                ctypes.c_ulong,
                ctypes.c_ulong,
                ctypes.c_ulong,
            ]
            buffer = ctypes.create_string_buffer(bytes(program), len(program))
            fprog = SockFprog(len(program) // 8, ctypes.addressof(buffer))
            if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
                raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")
            if libc.prctl(22, 2, ctypes.addressof(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
                raise OSError(ctypes.get_errno(), f"seccomp: {os.strerror(ctypes.get_errno())}")
            del libc, buffer, fprog, SockFprog
            for name in [name for name in sys.modules if name == "_ctypes" or name.split(".")[0] == "ctypes"]:
                del sys.modules[name]
        import builtins
        import linecache
        import traceback
        import types

        if not hasattr(builtins, "exit"):  # -S skips site, which defines exit() and quit()

            class Quitter:
                def __init__(self, name: str) -> None:
                    self.name = name

                def __repr__(self) -> str:
                    return f"Use {self.name}() or Ctrl-D (i.e. EOF) to exit"

                def __call__(self, code: object = None) -> None:
                    raise SystemExit(code)

            builtins.exit, builtins.quit = Quitter("exit"), Quitter("quit")

        if config["audit_hook"]:
            workdir = os.path.realpath(config["workdir"])
            write_roots = (workdir, "/dev/null")
            read_roots = tuple(config["read_roots"])
            allow_subprocesses = config["allow_subprocesses"]
            block_ctypes = config["block_ctypes"]
            own_pid = os.getpid()
            realpath, fsdecode = os.path.realpath, os.fsdecode
            write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
            process_events = frozenset(
                ("os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty")
                + ("subprocess.Popen", "os.startfile", "pty.spawn")
            )
            write_events = frozenset(
                ("os.mkdir", "os.remove", "os.rename", "os.rmdir", "os.symlink", "os.link", "os.truncate")
                + ("os.chmod", "os.chown", "os.utime", "os.chflags", "os.lchflags", "os.setxattr")
                + ("os.removexattr", "shutil.rmtree", "shutil.copyfile", "shutil.copymode", "shutil.copystat")
                + (
                    "shutil.copytree",
                    "shutil.move",
                    "shutil.chown",
                    "shutil.make_archive",
                    "shutil.unpack_archive",
                )
            )

            def inside(path: object, roots: tuple) -> bool:
                if isinstance(path, int) or path is None:
                    return True
                if not isinstance(path, str | bytes | os.PathLike):
                    return True
                resolved = realpath(fsdecode(path))
                return any(resolved == root or resolved.startswith(root.rstrip("/") + "/") for root in roots)

            def hook(event: str, args: tuple) -> None:
                if event == "open":
                    path, mode, flags = (tuple(args) + (None, None, None))[:3]
                    writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                        isinstance(flags, int) and flags & write_flags
                    )
                    if writing and not inside(path, write_roots):
                        raise PermissionError(
                            f"sandbox: writing {path!r} is not allowed (only under {workdir})"
                        )
                    if not writing and not inside(path, read_roots):
                        raise PermissionError(f"sandbox: reading {path!r} is not allowed")
                elif event.startswith("socket."):
                    raise PermissionError("sandbox: network access is disabled")
                elif block_ctypes and event.startswith("ctypes."):
                    raise PermissionError("sandbox: ctypes is disabled")
                elif event in process_events and not allow_subprocesses:
                    raise PermissionError("sandbox: starting processes is disabled")
                elif (
                    event in ("os.kill", "os.killpg")
                    and not allow_subprocesses
                    and args[0] not in (0, own_pid)
                ):
                    raise PermissionError("sandbox: signalling other processes is disabled")
                elif event in write_events:
                    for path in args:
                        if isinstance(path, str | bytes | os.PathLike) and not inside(path, write_roots):
                            raise PermissionError(
                                f"sandbox: changing {path!r} is not allowed (only under {workdir})"
                            )
                elif event in ("os.listdir", "os.scandir") and args and not inside(args[0], read_roots):
                    raise PermissionError(f"sandbox: listing {args[0]!r} is not allowed")

            sys.addaudithook(hook)
    except BaseException as error:  # report anything to the host, then exit
        os.write(status_fd, f"error bootstrap: {type(error).__name__}: {error}\n".encode("utf-8", "replace"))
        os._exit(125)

    os.write(status_fd, b"ready\n")
    os.close(status_fd)
    main = types.ModuleType("__main__")
    main.__file__ = "main.py"
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.argv = ["main.py"]
    sys.path.insert(0, config["workdir"])
    linecache.cache["main.py"] = (len(source), None, source.splitlines(True), "main.py")
    try:
        exec(compile(source, "main.py", "exec"), main.__dict__)
    except SystemExit:
        raise
    except BaseException as error:
        # Print it as Python would, without the frames of this bootstrap (its audit hook included).
        report = traceback.TracebackException.from_exception(error)
        pending = [report]
        while pending:
            part = pending.pop()
            part.stack = traceback.StackSummary.from_list(
                [frame for frame in part.stack if frame.filename != "<aloft-sandbox>"]
            )
            pending += [chained for chained in (part.__cause__, part.__context__) if chained is not None]
        sys.stderr.write("".join(report.format()))
        sys.stderr.flush()
        sys.exit(1)
