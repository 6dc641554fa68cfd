"""The python sandbox's guarantees, each checked by a real escape attempt (no mocks).

Most attempts run twice: with every layer (what users get) and with the audit hook switched off
(``audit_hook=False``, i.e. what ctypes-style code that gets past the hook meets), so each kernel
layer is shown to hold on its own. Where this host's probed mode cannot give a guarantee, the test
asserts the fallback that ``aloft.gym.sandbox``'s docstring documents instead.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from aloft.gym import sandbox
from aloft.gym.sandbox import (
    SandboxError,
    SandboxLimits,
    SandboxResult,
    run_python,
    sandbox_capabilities,
)

CAPS = sandbox_capabilities()
FAST = SandboxLimits(cpu_s=2, wall_s=5, memory_mb=256)
SYSTEM_PYTHON = "/usr/bin/python3.11"  # Debian's interpreter: usable by any uid (unlike pyenv's under /root)


def attempt(code: str, *, hook: bool = True, limits: SandboxLimits = FAST) -> SandboxResult:
    """Run ``code`` under this host's probed layers; ``hook=False`` leaves out the audit hook."""
    return sandbox._run(textwrap.dedent(code), "", limits, None, audit_hook=hook)


def last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def test_this_host_probes_the_strongest_mode_it_supports():
    assert CAPS.mode in sandbox.MODES
    assert CAPS.summary().startswith(CAPS.mode)
    if (
        os.geteuid() == 0
        and shutil.which("unshare")
        and subprocess.run(["unshare", "-n", "true"]).returncode == 0
    ):
        # Root that may create namespaces: every layer of the docstring's middle column.
        assert (CAPS.mode, CAPS.network_namespace, CAPS.mount_namespace, CAPS.pid_namespace) == (
            "namespaces",
            True,
            True,
            True,
        )
        assert CAPS.separate_uid
    assert CAPS.seccomp == (sandbox._seccomp_arch() is not None)


def test_a_plain_program_runs_with_stdin_files_and_exit_codes():
    result = run_python(
        "import sys, helper\nprint(helper.double(int(sys.stdin.read())))\nexit(3)",
        stdin="21",
        files={"helper.py": "def double(x):\n    return 2 * x\n"},
        limits=FAST,
    )
    assert (result.stdout, result.exit_code, result.killed_reason, result.timed_out) == (
        "42\n",
        3,
        None,
        False,
    )
    assert not result.ok


def test_stdin_is_a_pipe_that_cannot_be_read_twice():
    code = "import os, sys\nprint(sys.stdin.readline().strip())\nos.lseek(0, 0, os.SEEK_SET)"
    result = run_python(code, stdin="token\nrest", limits=FAST)
    assert result.stdout == "token\n" and last_line(result.stderr) == "OSError: [Errno 29] Illegal seek"
    big = run_python("import sys; print(len(sys.stdin.read()))", stdin="x" * 3_000_000, limits=FAST)
    assert big.stdout == "3000000\n"  # more than a pipe buffer: the host feeds it as the code reads
    ignored = run_python("print('done')", stdin="x" * 3_000_000, limits=FAST)
    assert ignored.stdout == "done\n" and ignored.ok  # a program that never reads stdin is fine


def test_tracebacks_name_main_py_and_hide_the_bootstrap():
    result = run_python("def f():\n    raise ValueError('boom')\nf()\n", limits=FAST)
    assert result.exit_code == 1
    assert 'File "main.py", line 2, in f' in result.stderr
    assert "    raise ValueError('boom')" in result.stderr  # the source line is shown
    assert last_line(result.stderr) == "ValueError: boom"
    assert "aloft-sandbox" not in result.stderr
    syntax = run_python("def f(:\n", limits=FAST)
    assert syntax.exit_code == 1 and last_line(syntax.stderr) == "SyntaxError: invalid syntax"


# ---- network --------------------------------------------------------------------------------


@pytest.fixture
def tcp_server():
    """A real TCP server on 127.0.0.1 that records what it receives."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    received: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            with connection:
                received.append(connection.recv(100))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    port = server.getsockname()[1]
    with socket.create_connection(("127.0.0.1", port), timeout=5) as probe:  # the server does work
        probe.sendall(b"host")
    deadline = time.monotonic() + 5
    while received != [b"host"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert received == [b"host"]
    received.clear()
    yield port, received
    stop.set()
    thread.join()
    server.close()


CONNECT = """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(3)
s.connect(("127.0.0.1", {port}))
s.sendall(b"escaped")
print("CONNECTED")
"""


@pytest.mark.parametrize("hook", [True, False], ids=["all-layers", "no-audit-hook"])
def test_network_connect_to_a_local_server_fails(tcp_server, hook):
    port, received = tcp_server
    result = attempt(CONNECT.format(port=port), hook=hook)
    assert "CONNECTED" not in result.stdout and result.exit_code == 1
    if hook:
        assert last_line(result.stderr) == "PermissionError: sandbox: network access is disabled"
    elif CAPS.seccomp:
        assert last_line(result.stderr) == "PermissionError: [Errno 1] Operation not permitted"  # seccomp
    time.sleep(0.2)
    assert received == []


@pytest.mark.skipif(
    not CAPS.network_namespace, reason="no network namespace on this host: covered by seccomp above"
)
def test_the_network_namespace_alone_stops_a_connection(tcp_server):
    port, received = tcp_server
    no_seccomp = sandbox._capabilities_of(CAPS.mode, CAPS.separate_uid, seccomp=False, notes=[])
    result = sandbox._run(CONNECT.format(port=port), "", FAST, None, no_seccomp, audit_hook=False)
    assert "CONNECTED" not in result.stdout
    assert last_line(result.stderr) == "OSError: [Errno 101] Network is unreachable"
    assert received == []


@pytest.mark.skipif(not CAPS.seccomp, reason="no seccomp on this CPU")
def test_raw_socket_syscalls_through_ctypes_are_refused(tcp_server):
    # ctypes gets past any audit hook; the kernel (seccomp) still refuses socket().
    port, received = tcp_server
    code = """
    import ctypes, errno
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.socket(2, 1, 0)
    print(fd, errno.errorcode.get(ctypes.get_errno()))
    """
    result = attempt(code, hook=False)
    assert result.stdout == "-1 EPERM\n"
    assert received == []


# ---- files ----------------------------------------------------------------------------------


@pytest.fixture
def host_files(tmp_path: Path):
    """A world-readable secret and a target file, in a directory anyone may enter."""
    directory = Path(tempfile.mkdtemp(prefix="aloft-test-host-"))
    directory.chmod(0o755)
    secret = directory / "secret.txt"
    secret.write_text("TOP-SECRET-TOKEN")
    secret.chmod(0o644)
    target = directory / "target.txt"
    target.write_text("original")
    target.chmod(0o666)  # even a world-writable file must stay untouched
    yield secret, target
    shutil.rmtree(directory)


@pytest.mark.parametrize("hook", [True, False], ids=["all-layers", "no-audit-hook"])
def test_host_files_cannot_be_read(host_files, hook):
    secret, _ = host_files
    for path in (str(secret), "/etc/shadow", "/root/.bash_history", str(Path(__file__).resolve())):
        result = attempt(f"print(open({path!r}).read())", hook=hook)
        assert result.exit_code == 1 and result.stdout == "", path
        if CAPS.mount_namespace:  # the file is simply not in the private root
            assert "FileNotFoundError" in last_line(result.stderr) or "PermissionError" in last_line(
                result.stderr
            )
    listing = attempt(f"import os; print(os.listdir({str(secret.parent)!r}))", hook=hook)
    assert "secret.txt" not in listing.stdout


@pytest.mark.parametrize("hook", [True, False], ids=["all-layers", "no-audit-hook"])
def test_host_files_cannot_be_written_or_removed(host_files, hook):
    _, target = host_files
    attempts = [
        f"open({str(target)!r}, 'w').write('pwned')",
        f"import os; os.remove({str(target)!r})",
        f"import os; os.rename({str(target)!r}, {str(target) + '.moved'!r})",
        f"import os; os.chmod({str(target)!r}, 0o777)",
        "open('/usr/aloft-pwned', 'w').write('x')",
        "open('/etc/aloft-pwned', 'w').write('x')",
        "import os; os.mkdir('/aloft-pwned')",
    ]
    for code in attempts:
        result = attempt(code + "\nprint('DONE')", hook=hook)
        assert result.exit_code == 1 and "DONE" not in result.stdout, code
    assert target.read_text() == "original"
    assert oct(target.stat().st_mode & 0o777) == oct(0o666)
    assert not Path(str(target) + ".moved").exists()
    assert not Path("/usr/aloft-pwned").exists() and not Path("/etc/aloft-pwned").exists()
    assert not Path("/aloft-pwned").exists()


def test_writing_to_tmp_stays_inside_the_sandbox():
    name = f"/tmp/aloft-sandbox-probe-{os.getpid()}"
    result = attempt(f"open({name!r}, 'w').write('x'); print(open({name!r}).read())")
    if CAPS.mount_namespace:  # /tmp is the sandbox's own tmpfs
        assert result.stdout == "x\n"
    else:  # the hook refuses writes outside the working directory
        assert result.exit_code == 1
    assert not Path(name).exists()


def test_every_run_gets_a_fresh_working_directory_that_is_removed():
    first = attempt(
        "import os; open('state.txt', 'w').write('1'); print(os.getcwd(), sorted(os.listdir('.')))"
    )
    second = attempt("import os; print(os.getcwd(), sorted(os.listdir('.')))")
    cwd = first.stdout.split()[0]
    assert first.stdout == f"{cwd} ['state.txt']\n"
    assert second.stdout.split()[1:] == ["[]"]
    leftovers = [
        name for name in os.listdir(tempfile.gettempdir()) if first.run_id in name or second.run_id in name
    ]
    assert leftovers == []


def test_the_working_directory_has_a_size_limit():
    limits = SandboxLimits(cpu_s=5, wall_s=10, memory_mb=256, disk_mb=4, max_file_mb=16)
    code = """
    chunk = b"x" * (1 << 20)
    written = 0
    try:
        with open("big.bin", "wb") as handle:
            for _ in range(64):
                handle.write(chunk)
                handle.flush()
                written += 1
    except OSError as error:
        print("stopped", written, error.errno)
    """
    result = attempt(code, limits=limits)
    stopped, written, errno_name = result.stdout.split()
    assert stopped == "stopped" and int(written) <= 16
    if CAPS.mount_namespace:
        assert int(written) <= 4 and int(errno_name) == 28  # ENOSPC on the 4 MiB tmpfs
    else:
        assert int(errno_name) == 27  # EFBIG: only RLIMIT_FSIZE bounds a host temp dir


# ---- processes ------------------------------------------------------------------------------


@pytest.mark.parametrize("hook", [True, False], ids=["all-layers", "no-audit-hook"])
def test_spawning_processes_is_refused(hook, tmp_path):
    marker = tmp_path / "spawned"
    attempts = [
        "import os; pid = os.fork(); print('FORKED', pid)",
        "import subprocess; print(subprocess.run(['echo', 'SPAWNED'], capture_output=True).stdout)",
        f"import os; status = os.system('touch {marker}'); print('STATUS', status)",
        "import os; os.execv('/bin/echo', ['echo', 'EXECED'])",
        "import os; os.posix_spawn('/bin/echo', ['echo', 'SPAWNED'], {})",
        "import multiprocessing as m; p = m.Process(target=print, args=('CHILD',)); p.start(); p.join()",
    ]
    for code in attempts:
        result = attempt(code, hook=hook)
        assert not any(word in result.stdout for word in ("FORKED", "SPAWNED", "EXECED", "CHILD")), code
        if hook:
            assert last_line(result.stderr) == "PermissionError: sandbox: starting processes is disabled", (
                code
            )
        elif "os.system" in code:  # glibc's system() reports a failed spawn as exit status 127
            assert result.stdout == f"STATUS {127 << 8}\n"
        else:
            assert "Operation not permitted" in last_line(result.stderr), code
    assert not marker.exists()


def test_threads_still_work():
    code = """
    import threading
    out = []
    threads = [threading.Thread(target=out.append, args=(i,)) for i in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()
    print(sorted(out))
    """
    assert attempt(code).stdout == "[0, 1, 2, 3]\n"


def _processes_of(run_id: str) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if f"aloft-sandbox:{run_id}".encode() in cmdline:
                found.append(entry)
    return found


FORK_BOMB = """
import os, time
reported = False
while True:
    try:
        os.fork()
    except OSError as error:
        if not reported:
            print("fork refused", error.errno, flush=True)
            reported = True
        time.sleep(0.01)
"""


def test_a_fork_bomb_is_refused_by_default():
    result = attempt(FORK_BOMB, hook=False, limits=SandboxLimits(cpu_s=2, wall_s=1, memory_mb=256))
    assert result.stdout.startswith("fork refused 1\n")  # EPERM from seccomp at the first fork
    assert result.stdout.count("fork refused") == 1  # only the one process ever existed
    assert result.killed_reason == "wall_time"
    assert _processes_of(result.run_id) == []


@pytest.mark.skipif(
    not (CAPS.pid_namespace or CAPS.separate_uid), reason="allow_subprocesses is refused here (tested below)"
)
def test_a_fork_bomb_with_subprocesses_allowed_is_bounded_and_cleaned_up():
    limits = SandboxLimits(cpu_s=3, wall_s=1.5, memory_mb=256, max_processes=8, allow_subprocesses=True)
    started = time.monotonic()
    result = attempt(FORK_BOMB, limits=limits)
    assert time.monotonic() - started < 10
    assert result.killed_reason == "wall_time" and result.timed_out
    assert 1 <= result.stdout.count("fork refused 11") <= 8  # EAGAIN: RLIMIT_NPROC held it to 8 tasks
    assert _processes_of(result.run_id) == []  # every forked process is gone
    assert subprocess.run(["true"]).returncode == 0  # the host can still start processes


@pytest.mark.skipif(
    not (CAPS.pid_namespace or CAPS.separate_uid), reason="allow_subprocesses is refused here (tested below)"
)
def test_a_background_child_that_closed_its_output_dies_with_the_run():
    code = """
    import os, time
    if os.fork() == 0:
        os.close(1)
        os.close(2)
        time.sleep(60)
        os._exit(0)
    print("parent done")
    """
    limits = SandboxLimits(cpu_s=2, wall_s=5, memory_mb=256, allow_subprocesses=True)
    result = attempt(code, limits=limits)
    assert result.stdout == "parent done\n" and result.ok and result.elapsed_s < 3
    assert _processes_of(result.run_id) == []


def test_allow_subprocesses_needs_a_layer_that_bounds_processes():
    weakest = sandbox._capabilities_of("rlimits", separate_uid=False, seccomp=CAPS.seccomp, notes=[])
    with pytest.raises(SandboxError, match="allow_subprocesses=True needs a pid namespace or a per-run uid"):
        sandbox._run("print(1)", "", SandboxLimits(allow_subprocesses=True), None, weakest)


def test_the_code_cannot_leave_its_process_group_or_signal_the_host():
    result = attempt("import os; os.setsid(); print('ESCAPED')", hook=False)
    assert "ESCAPED" not in result.stdout and "Operation not permitted" in last_line(result.stderr)
    hooked = attempt(f"import os; os.kill({os.getpid()}, 0); print('SIGNALLED')")
    assert "SIGNALLED" not in hooked.stdout
    assert last_line(hooked.stderr) == "PermissionError: sandbox: signalling other processes is disabled"
    raw = attempt(f"import os; os.kill({os.getpid()}, 0); print('SIGNALLED')", hook=False)
    assert "SIGNALLED" not in raw.stdout  # another pid namespace (no such process) or EPERM


# ---- resources ------------------------------------------------------------------------------


def test_a_memory_bomb_raises_memory_error():
    limits = SandboxLimits(cpu_s=5, wall_s=10, memory_mb=128)
    for code in ("x = bytearray(8 * 1024**3)", "a = []\nwhile True:\n    a.append(bytearray(10**7))"):
        result = attempt(code, limits=limits)
        assert result.exit_code == 1 and result.killed_reason == "memory", code
        assert last_line(result.stderr) == "MemoryError"
    assert attempt("print(len(bytearray(50 * 1024**2)))", limits=limits).stdout == f"{50 * 1024**2}\n"


def test_an_infinite_loop_hits_the_cpu_limit():
    started = time.monotonic()
    result = attempt("while True:\n    pass", limits=SandboxLimits(cpu_s=1, wall_s=20, memory_mb=256))
    assert result.killed_reason == "cpu_time" and result.timed_out
    assert result.exit_code in (-24, -9)  # SIGXCPU, or SIGKILL at the hard limit
    assert time.monotonic() - started < 10


def test_a_sleeping_program_hits_the_wall_time_limit():
    started = time.monotonic()
    result = attempt(
        "import time\nprint('before', flush=True)\ntime.sleep(60)", limits=SandboxLimits(wall_s=1)
    )
    assert result.killed_reason == "wall_time" and result.timed_out and result.exit_code == -9
    assert result.stdout == "before\n"  # output written before the kill is kept
    assert 0.9 <= result.elapsed_s < 5 and time.monotonic() - started < 10


def test_huge_output_is_truncated_and_the_run_stopped():
    limits = SandboxLimits(cpu_s=5, wall_s=10, max_output_bytes=10_000)
    result = attempt("import sys\nwhile True:\n    sys.stdout.write('x' * 1000)", limits=limits)
    assert result.truncated and result.killed_reason == "output_limit"
    assert len(result.stdout) == 10_000 and set(result.stdout) == {"x"}
    errors = attempt("import sys\nfor _ in range(100):\n    sys.stderr.write('e' * 1000)", limits=limits)
    assert errors.truncated and len(errors.stderr) == 10_000


def test_the_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("ALOFT_TEST_SECRET", "hunter2")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter3")
    result = attempt("import os, json; print(json.dumps(dict(os.environ)))")
    environment = json.loads(result.stdout)
    assert "hunter2" not in result.stdout and "hunter3" not in result.stdout
    assert set(environment) <= {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "LC_ALL",
        "PYTHONHASHSEED",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONIOENCODING",
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "LC_CTYPE",  # Python's C-locale coercion may add it
    }
    assert environment["PATH"] == "/usr/local/bin:/usr/bin:/bin"


def test_runs_are_independent_under_concurrency():
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        results = list(
            pool.map(lambda i: run_python(f"print(input() * {i})", stdin="ab", limits=FAST), range(8))
        )
    assert [result.stdout for result in results] == [f"{'ab' * i}\n" for i in range(8)]


def test_bad_arguments_fail_with_clear_messages():
    with pytest.raises(ValueError, match="must be a relative path"):
        run_python("print(1)", files={"../escape.py": "x"})
    with pytest.raises(TypeError, match="code must be a str"):
        run_python(b"print(1)")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"SandboxLimits.wall_s must be a number of seconds"):
        SandboxLimits(wall_s=0)
    with pytest.raises(ValueError, match=r"SandboxLimits.memory_mb must be an integer >= 64"):
        SandboxLimits(memory_mb=8)


# ---- the weaker modes, run for real -----------------------------------------------------------

DRIVER = """
import importlib.util, json, socket, sys
spec = importlib.util.spec_from_file_location("sandbox_under_test", sys.argv[1])
sandbox = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = sandbox
spec.loader.exec_module(sandbox)
secret, target, port = sys.argv[2], sys.argv[3], int(sys.argv[4])
caps = sandbox.sandbox_capabilities()
attempts = {
    "read": f"print(open({secret!r}).read())",
    "shadow": "print(open('/etc/shadow').read())",
    "write": f"open({target!r}, 'w').write('pwned')",
    "connect": f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('CONNECTED')",
    "fork": "import os; os.fork(); print('FORKED')",
    "whoami": "import os; print(os.getuid(), os.getcwd())",
}
report = {"mode": caps.mode, "separate_uid": caps.separate_uid, "seccomp": caps.seccomp, "notes": caps.notes}
for hook in (True, False):
    for name, code in attempts.items():
        result = sandbox._run(code, "", sandbox.SandboxLimits(wall_s=5), None, audit_hook=hook)
        lines = result.stderr.strip().splitlines()
        report[f"{name}/{hook}"] = [result.exit_code, result.stdout, lines[-1] if lines else ""]
print(json.dumps(report))
"""


def _drive(host_files, tcp_server, prefix: list[str], mode: str | None) -> dict:
    secret, target = host_files
    port, received = tcp_server
    environment = {"PATH": "/usr/bin:/bin"} | ({"ALOFT_SANDBOX_MODE": mode} if mode else {})
    completed = subprocess.run(
        [
            *prefix,
            SYSTEM_PYTHON,
            "-I",
            "-S",
            "-c",
            DRIVER,
            sandbox.__file__,
            str(secret),
            str(target),
            str(port),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        cwd="/",
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout)
    if report["mode"] != "rlimits":
        assert target.read_text() == "original"
    assert received == []
    for hook in (True, False):
        assert report[f"connect/{hook}"][0] == 1 and report[f"fork/{hook}"][0] == 1
        assert "CONNECTED" not in report[f"connect/{hook}"][1] and "FORKED" not in report[f"fork/{hook}"][1]
    return report


@pytest.mark.skipif(
    not (os.path.exists(SYSTEM_PYTHON) and shutil.which("setpriv")), reason="needs Debian's python3.11"
)
def test_user_namespaces_mode_for_a_non_root_user(host_files, tcp_server):
    """The whole host side runs as uid 65534 (nobody): the mode non-root hosts get."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to uid 65534; a non-root host runs this mode in the other tests")
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    report = _drive(host_files, tcp_server, prefix, mode=None)
    if report["mode"] == "user_namespaces":
        for hook in (True, False):
            assert report[f"read/{hook}"][0] == 1 and "TOP-SECRET" not in report[f"read/{hook}"][1]
            assert report[f"shadow/{hook}"][0] == 1 and report[f"write/{hook}"][0] == 1
        assert report["whoami/True"][1] == "65534 /sandbox\n"
    else:  # the kernel refuses unprivileged user namespaces: documented rlimits fallback, no per-run uid
        assert report["mode"] == "rlimits" and not report["separate_uid"]
        assert report["read/True"][0] == 1 and "sandbox: reading" in report["read/True"][2]


@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason="needs Debian's python3.11")
def test_rlimits_mode_with_a_per_run_uid(host_files, tcp_server):
    """No namespaces (forced): what a root host without CAP_SYS_ADMIN gets."""
    if os.geteuid() != 0:
        pytest.skip("a per-run uid needs root")
    report = _drive(host_files, tcp_server, [], mode="rlimits")
    assert report["mode"] == "rlimits" and report["separate_uid"]
    uid, cwd = report["whoami/True"][1].split()
    assert int(uid) >= 1 << 20 and cwd.endswith("/work")
    # Documented: the per-run uid's file permissions hold without the hook for files not world-writable
    # or in a directory it cannot enter; here the hook is what refuses the world-readable secret.
    assert "sandbox: reading" in report["read/True"][2]
    assert report["shadow/False"][0] == 1 and "Permission denied" in report["shadow/False"][2]
    assert report["write/True"][0] == 1 and "sandbox: writing" in report["write/True"][2]
    # ... and, as documented, a world-writable host file (the target is 0666) is writable without it.
    assert report["write/False"][0] == 0 and host_files[1].read_text() == "pwned"


def test_rlimits_mode_without_a_per_run_uid_documents_its_weakness(host_files):
    """The weakest mode: seccomp still holds for network and processes; files rest on the hook only."""
    secret, target = host_files
    weakest = sandbox._capabilities_of("rlimits", separate_uid=False, seccomp=CAPS.seccomp, notes=[])
    hooked = sandbox._run(f"print(open({str(secret)!r}).read())", "", FAST, None, weakest)
    assert hooked.exit_code == 1 and "sandbox: reading" in last_line(hooked.stderr)
    hooked_write = sandbox._run(f"open({str(target)!r}, 'w').write('x')", "", FAST, None, weakest)
    assert hooked_write.exit_code == 1 and target.read_text() == "original"
    unhooked = sandbox._run(f"print(open({str(secret)!r}).read())", "", FAST, None, weakest, audit_hook=False)
    assert unhooked.stdout == "TOP-SECRET-TOKEN\n"  # as documented: no kernel layer for files here
    if CAPS.seccomp:
        fork = sandbox._run(
            "import os; os.fork(); print('FORKED')", "", FAST, None, weakest, audit_hook=False
        )
        assert "FORKED" not in fork.stdout
        kill = sandbox._run(
            f"import os; os.kill({os.getpid()}, 0)", "", FAST, None, weakest, audit_hook=False
        )
        assert "Operation not permitted" in last_line(kill.stderr)


def test_the_seccomp_program_is_well_formed():
    if not CAPS.seccomp:
        pytest.skip("no seccomp on this CPU")
    for allow in (False, True):
        for self_only in (False, True):
            program, slots = sandbox._seccomp_program(allow, self_only)
            assert len(program) % 8 == 0 and len(program) // 8 < 256
            assert len(slots) == (2 if self_only else 0)


def test_sandbox_module_imports_only_the_standard_library():
    # It runs as a script under `python -I -S` in the tests above; keep it that way (every module of
    # the package: they import one another relatively).
    modules = sorted(Path(sandbox.__file__).parent.glob("*.py"))
    assert len(modules) > 1
    for module in modules:
        source = module.read_text()
        assert "from aloft" not in source and "import aloft" not in source, module.name
    assert sys.modules["aloft.gym.sandbox"] is sandbox
