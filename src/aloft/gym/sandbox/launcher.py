"""The launcher: the program that builds the sandbox (namespaces, private root, uid, rlimits) and
execs the bootstrap interpreter.

Never imported for its behaviour: ``config._launcher_source`` ships ``_launcher_main``'s source text
to ``python -I -S -c``, so the function must stay self-contained (it imports all it uses inside
itself and uses no name of this package).
"""

from __future__ import annotations


def _launcher_main() -> None:  # pragma: no cover - runs in the sandbox's launcher process
    """Build the sandbox from the config file in argv[1], then execve the bootstrap interpreter.

    Runs as ``python -I -S -c <this source> config.json``, single-threaded, with the host's
    privileges. On any failure it writes ``error <message>`` to the status pipe and exits 125.
    """
    import ctypes
    import json
    import os
    import resource
    import signal
    import sys

    with open(sys.argv[1]) as handle:
        config = json.load(handle)
    status_fd = config["status_fd"]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    libc.unshare.argtypes = [ctypes.c_int]
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    ms_rdonly, ms_nosuid, ms_nodev, ms_noexec, ms_remount, ms_bind, ms_rec, ms_private = (
        1, 2, 4, 8, 32, 4096, 16384, 1 << 18,
    )  # fmt: skip
    pr_set_pdeathsig, pr_set_no_new_privs = 1, 38

    def check(result: int, what: str) -> None:
        if result != 0:
            number = ctypes.get_errno()
            raise OSError(number, f"{what}: {os.strerror(number)}")

    def mount(
        source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
    ) -> None:
        encode = os.fsencode
        check(
            libc.mount(
                encode(source) if source else None,
                encode(target),
                encode(fstype) if fstype else None,
                flags,
                encode(data) if data else None,
            ),
            f"mount {target}",
        )

    def readonly_flags(path: str) -> int:
        # Keep the flags a remount may not clear (inside a user namespace they are locked).
        flags = os.statvfs(path).f_flag
        kept = 0
        for statvfs_flag, mount_flag in (
            (os.ST_NOSUID, ms_nosuid),
            (os.ST_NODEV, ms_nodev),
            (os.ST_NOEXEC, ms_noexec),
        ):
            if flags & statvfs_flag:
                kept |= mount_flag
        for statvfs_flag, mount_flag in (
            (os.ST_NOATIME, 1024),
            (os.ST_NODIRATIME, 2048),
            (os.ST_RELATIME, 1 << 21),
        ):
            if flags & statvfs_flag:
                kept |= mount_flag
        return kept | ms_rdonly | ms_nosuid

    def write_file(path: str, text: str, mode: int, uid: int | None) -> None:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        with open(
            os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w", encoding="utf-8"
        ) as handle:
            handle.write(text)
        if uid is not None:
            os.chown(path, uid, uid)

    def mount_points_under(root: str) -> list[str]:
        points = []
        with open("/proc/self/mountinfo", "rb") as handle:
            for line in handle:
                raw = line.split(b" ")[4]
                point = os.fsdecode(
                    raw.replace(b"\\040", b" ").replace(b"\\011", b"\t").replace(b"\\134", b"\\")
                )
                if point.startswith(root + "/"):
                    points.append(point)
        return points

    def build_root(uid: int) -> None:
        """Mount namespace: a tmpfs root with read-only binds; pivot_root into it."""
        root = config["root"]
        workdir = config["workdir"]
        os.umask(0o022)
        os.makedirs(root, exist_ok=True)
        mount(None, "/", None, ms_rec | ms_private)
        size = len(config["code"].encode()) + (4 << 20)
        mount("tmpfs", root, "tmpfs", ms_nosuid | ms_nodev, f"mode=0755,size={size}")
        for source in config["binds"]:
            target = root + source
            if os.path.isdir(source):
                os.makedirs(target, mode=0o755, exist_ok=True)
            else:
                write_file(target, "", 0o644, None)
            mount(source, target, None, ms_bind | ms_rec)
        for path, target in config["symlinks"]:
            os.symlink(target, root + path)
        os.makedirs(root + "/dev", mode=0o755)
        devices = []
        for name in ("null", "zero", "full", "random", "urandom"):
            write_file(f"{root}/dev/{name}", "", 0o666, None)
            mount(f"/dev/{name}", f"{root}/dev/{name}", None, ms_bind)
            devices.append(f"{root}/dev/{name}")
        for point in mount_points_under(root):
            if point not in devices:
                mount(None, point, None, ms_remount | ms_bind | readonly_flags(point))
        os.makedirs(root + workdir, mode=0o755)
        inodes = 4096 + 2 * len(config["files"])
        mount(
            "tmpfs",
            root + workdir,
            "tmpfs",
            ms_nosuid | ms_nodev,
            f"mode=0700,size={config['disk_bytes']},nr_inodes={inodes},uid={uid},gid={uid}",
        )
        for name, text in config["files"].items():
            write_file(f"{root}{workdir}/{name}", text, 0o644, uid)
            parent = os.path.dirname(name)
            while parent:
                os.chown(f"{root}{workdir}/{parent}", uid, uid)
                parent = os.path.dirname(parent)
        os.symlink(workdir, root + "/tmp")
        write_file(root + "/.aloft/main.py", config["code"], 0o644, None)
        os.chdir(root)
        pivot_root = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine)
        libc.syscall.argtypes = [ctypes.c_long, ctypes.c_char_p, ctypes.c_char_p]
        if pivot_root is not None and libc.syscall(pivot_root, b".", b".") == 0:
            check(libc.umount2(b".", 2), "detach the old root")  # MNT_DETACH
        else:  # e.g. the host root is no mount point: chroot (the code has no capability to leave it)
            os.chroot(".")
        os.chdir("/")
        mount(None, "/", None, ms_remount | ms_rdonly | ms_nosuid | ms_nodev)
        os.chdir(workdir)

    def supervise(child: int) -> None:
        """Outside the new pid namespace: wait for its init and exit the same way."""
        os.close(status_fd)
        _, status = os.waitpid(child, 0)
        if os.WIFEXITED(status):
            os._exit(os.WEXITSTATUS(status))
        number = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        try:
            signal.signal(number, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), number)
        os._exit(128 + number)

    def user_task_count(uid: int) -> int:
        """Tasks (threads included) whose real uid is ``uid``: what RLIMIT_NPROC counts."""
        count = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/status", "rb") as handle:
                    fields = dict(line.split(b":", 1) for line in handle if b":" in line)
            except OSError:
                continue
            if int(fields.get(b"Uid", b"-1 ").split()[0]) == uid:
                count += int(fields.get(b"Threads", b"1").strip() or 1)
        return count

    def drop_privileges(uid: int) -> None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)

    def init(child: int) -> None:
        """pid 1 of the new pid namespace: reap everything; report the code's status; exit (which
        kills whatever is left in the namespace)."""
        while True:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                os._exit(0)
            if pid == child:
                os.write(status_fd, f"exit {status}\n".encode())
                os._exit(0)

    try:
        check(libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0), "PR_SET_PDEATHSIG")
        mode = config["mode"]
        uid = config["uid"]
        # Same-uid modes: RLIMIT_NPROC counts all of the user's tasks, so allow what exists + the quota.
        tasks = 0 if uid is not None else user_task_count(os.getuid()) + 2
        if mode in ("namespaces", "user_namespaces"):
            flags = 0x00020000 | 0x40000000 | 0x20000000 | 0x08000000 | 0x04000000  # NS NET PID IPC UTS
            outer_uid, outer_gid = os.geteuid(), os.getegid()
            if mode == "user_namespaces":
                flags |= 0x10000000  # CLONE_NEWUSER
            check(libc.unshare(flags), "unshare")
            if mode == "user_namespaces":
                with open("/proc/self/setgroups", "w") as handle:
                    handle.write("deny")
                with open("/proc/self/uid_map", "w") as handle:
                    handle.write(f"{outer_uid} {outer_uid} 1")
                with open("/proc/self/gid_map", "w") as handle:
                    handle.write(f"{outer_gid} {outer_gid} 1")
            child = os.fork()
            if child:
                supervise(child)
            check(libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0), "PR_SET_PDEATHSIG")
            build_root(uid if uid is not None else outer_uid)
            if uid is not None:
                drop_privileges(uid)
            tasks += 1  # this init
            os.set_inheritable(status_fd, True)
            child = os.fork()
            if child:
                init(child)
        else:
            workdir = config["workdir"]
            os.mkdir(workdir, 0o700)
            for name, text in config["files"].items():
                write_file(os.path.join(workdir, name), text, 0o644, uid)
            if uid is not None:
                for directory, names, _ in os.walk(workdir):
                    os.chown(directory, uid, uid)
                    for name in names:
                        os.chown(os.path.join(directory, name), uid, uid)
            stage = config["stage"]
            write_file(os.path.join(stage, "main.py"), config["code"], 0o644, None)
            os.chdir(workdir)
            if uid is not None:
                drop_privileges(uid)
        check(libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0), "PR_SET_PDEATHSIG")
        check(libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
        limits = {
            resource.RLIMIT_CPU: (config["cpu_s"], config["cpu_s"] + 1),
            resource.RLIMIT_AS: (config["memory_bytes"],) * 2,
            resource.RLIMIT_NPROC: (tasks + config["max_processes"],) * 2,
            resource.RLIMIT_FSIZE: (config["file_bytes"],) * 2,
            resource.RLIMIT_NOFILE: (config["max_open_files"],) * 2,
            resource.RLIMIT_CORE: (0, 0),
        }
        for which, (soft, hard) in limits.items():
            _, current_hard = resource.getrlimit(which)
            if current_hard != resource.RLIM_INFINITY:
                soft, hard = min(soft, current_hard), min(hard, current_hard)
            resource.setrlimit(which, (soft, hard))
        os.set_inheritable(status_fd, True)
        os.execve(config["python"], config["argv"], config["env"])
    except BaseException as error:  # report anything to the host, then exit
        message = f"error {type(error).__name__}: {error}".replace("\n", " ") + "\n"
        try:
            os.write(status_fd, message.encode("utf-8", "replace"))
        finally:
            os._exit(125)
