"""The seccomp filter: a small BPF program assembled on the host, installed by the bootstrap.

``_seccomp_program`` returns it as bytes plus the slots where the bootstrap writes its own pid;
``_seccomp_arch`` says whether this CPU has a syscall table here (x86-64, aarch64).
"""

from __future__ import annotations

import platform
import struct
from typing import Any

from .api import SandboxError

_SECCOMP_RET_KILL_PROCESS = 0x80000000
_SECCOMP_RET_ERRNO = 0x00050000
_SECCOMP_RET_ALLOW = 0x7FFF0000
_EPERM, _ENOSYS = 1, 38
_CLONE_THREAD = 0x00010000
_PID_PLACEHOLDER = 0xFFFFFFFF

# Syscall numbers (from <asm/unistd_64.h> and <asm-generic/unistd.h>) of the two CPUs supported.
_SYSCALL_NUMBERS: dict[str, str] = {
    "x86_64": """
        socket=41 setsid=112 setpgid=109 ptrace=101 process_vm_readv=310 process_vm_writev=311 mount=165
        umount2=166 pivot_root=155 chroot=161 unshare=272 setns=308 open_tree=428 move_mount=429 fsopen=430
        fsconfig=431 fsmount=432 fspick=433 mount_setattr=442 bpf=321 perf_event_open=298 userfaultfd=323
        keyctl=250 add_key=248 request_key=249 io_uring_setup=425 io_uring_enter=426 io_uring_register=427
        kexec_load=246 kexec_file_load=320 init_module=175 finit_module=313 delete_module=176 reboot=169
        swapon=167 swapoff=168 personality=135 name_to_handle_at=303 open_by_handle_at=304 acct=163
        syslog=103 uselib=134 quotactl=179 lookup_dcookie=212 vhangup=153 iopl=172 ioperm=173
        pidfd_open=434 pidfd_send_signal=424 pidfd_getfd=438 tkill=200 fork=57 vfork=58 execve=59
        execveat=322 clone=56 clone3=435 kill=62 tgkill=234 rt_sigqueueinfo=129 rt_tgsigqueueinfo=297
    """,
    "aarch64": """
        socket=198 setsid=157 setpgid=154 ptrace=117 process_vm_readv=270 process_vm_writev=271 mount=40
        umount2=39 pivot_root=41 chroot=51 unshare=97 setns=268 open_tree=428 move_mount=429 fsopen=430
        fsconfig=431 fsmount=432 fspick=433 mount_setattr=442 bpf=280 perf_event_open=241 userfaultfd=282
        keyctl=219 add_key=217 request_key=218 io_uring_setup=425 io_uring_enter=426 io_uring_register=427
        kexec_load=104 kexec_file_load=294 init_module=105 finit_module=273 delete_module=106 reboot=142
        swapon=224 swapoff=225 personality=92 name_to_handle_at=264 open_by_handle_at=265 acct=89
        syslog=116 quotactl=60 lookup_dcookie=18 vhangup=58 pidfd_open=434 pidfd_send_signal=424
        pidfd_getfd=438 tkill=130 execve=221 execveat=281 clone=220 clone3=435 kill=129 tgkill=131
        rt_sigqueueinfo=138 rt_tgsigqueueinfo=240
    """,
}
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_SYSCALL_BIT = {"x86_64": 0x40000000}
_DENIED_SYSCALLS = (
    "socket setsid setpgid ptrace process_vm_readv process_vm_writev mount umount2 pivot_root chroot "
    "unshare setns open_tree move_mount fsopen fsconfig fsmount fspick mount_setattr bpf perf_event_open "
    "userfaultfd keyctl add_key request_key io_uring_setup io_uring_enter io_uring_register kexec_load "
    "kexec_file_load init_module finit_module delete_module reboot swapon swapoff personality "
    "name_to_handle_at open_by_handle_at acct syslog uselib quotactl lookup_dcookie vhangup iopl ioperm "
    "pidfd_open pidfd_send_signal pidfd_getfd tkill"
).split()
"""Refused with EPERM under every policy (the ones a CPU lacks are skipped)."""
_PROCESS_SYSCALLS = ("fork", "vfork", "execve", "execveat")
"""Refused unless ``allow_subprocesses`` (clone is refused too, except for threads)."""
_SIGNAL_SYSCALLS = ("tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")
"""Allowed only with the sandbox's own pid as first argument, where signals must stay inside."""


def _seccomp_arch() -> str | None:
    """``"x86_64"`` or ``"aarch64"`` when this CPU has a syscall table here, else None."""
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    return machine if machine in _SYSCALL_NUMBERS else None


def _seccomp_program(allow_subprocesses: bool, signals_to_self_only: bool) -> tuple[bytes, list[int]]:
    """The filter as bytes (8 per instruction) and the indices whose constant is the sandbox's pid.

    Without ``allow_subprocesses``: fork/vfork/execve refused, clone allowed only for threads.
    ``signals_to_self_only``: kill/tgkill/rt_sigqueueinfo allowed only at its own pid (or kill(0)),
    for the rlimits mode where the code shares a uid (and a pid namespace) with the host.
    clone3 gets ENOSYS (its flags are in memory, out of BPF's reach; libc falls back to clone).
    """
    arch = _seccomp_arch()
    if arch is None:
        raise SandboxError(f"no seccomp syscall table for CPU {platform.machine()!r}")
    numbers = {
        name: int(value) for name, value in (item.split("=") for item in _SYSCALL_NUMBERS[arch].split())
    }
    load, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    arg0 = 16  # offsetof(struct seccomp_data, args[0]); the low 32 bits on little-endian CPUs
    code: list[tuple[Any, ...]] = [(load, 4), (jeq, _AUDIT_ARCH[arch], None, "kill"), (load, 0)]
    if arch in _X32_SYSCALL_BIT:  # x32 ABI syscalls: another numbering, refuse them all
        code.append((jge, _X32_SYSCALL_BIT[arch], "eperm", None))
    refused = _DENIED_SYSCALLS + ([] if allow_subprocesses else list(_PROCESS_SYSCALLS))
    code += [(jeq, numbers[name], "eperm", None) for name in refused if name in numbers]
    code.append((jeq, numbers["clone3"], "enosys", None))
    if not allow_subprocesses:
        code.append((jeq, numbers["clone"], "clone", None))
    if signals_to_self_only:
        code.append((jeq, numbers["kill"], "kill_check", None))
        code += [(jeq, numbers[name], "pid_check", None) for name in _SIGNAL_SYSCALLS]
    code.append((ret, _SECCOMP_RET_ALLOW))
    if not allow_subprocesses:
        code += [("clone",), (load, arg0), (jset, _CLONE_THREAD, "allow", "eperm")]
    if signals_to_self_only:
        code += [("kill_check",), (load, arg0), (jeq, 0, "allow", None)]
        code += [(jeq, _PID_PLACEHOLDER, "allow", "eperm")]
        code += [("pid_check",), (load, arg0), (jeq, _PID_PLACEHOLDER, "allow", "eperm")]
    code += [("allow",), (ret, _SECCOMP_RET_ALLOW)]
    code += [("eperm",), (ret, _SECCOMP_RET_ERRNO | _EPERM)]
    code += [("enosys",), (ret, _SECCOMP_RET_ERRNO | _ENOSYS)]
    code += [("kill",), (ret, _SECCOMP_RET_KILL_PROCESS)]

    labels: dict[str, int] = {}
    instructions = []
    for item in code:
        if len(item) == 1:
            labels[item[0]] = len(instructions)
        else:
            instructions.append(item)
    program = bytearray()
    pid_slots = []
    for index, (opcode, constant, *targets) in enumerate(instructions):
        offsets = []
        for target in targets:
            offset = 0 if target is None else labels[target] - index - 1
            if not 0 <= offset <= 255:
                raise AssertionError(f"seccomp jump out of range at instruction {index}")
            offsets.append(offset)
        jump_true, jump_false = (offsets + [0, 0])[:2]
        if constant == _PID_PLACEHOLDER:
            pid_slots.append(index)
        program += struct.pack("<HBBI", opcode, jump_true, jump_false, constant)
    return bytes(program), pid_slots
