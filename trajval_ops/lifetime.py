"""Nothing trajval_ops starts outlives the process that started it, whatever kills that process.

A ``kill -9`` of ``dj-process`` gives nobody a chance to clean up, so the guarantees are set up
in advance, in three layers (Linux; elsewhere only the last one applies, without its kernel help):

- :func:`die_with_parent`: a process we start (the probe's training child, a verifier's
  checking child, a Data-Juicer map worker running our operator) asks the kernel to SIGKILL it
  when its parent dies (``PR_SET_PDEATHSIG``).
- :func:`end_group_with_parent`: a process that leads a group of its own (the vLLM child, whose
  engine-core and worker processes share its group) kills that whole group when its parent dies.
- :func:`guard_descendants`: the process running a trajval operator starts a small guardian
  process that records the process tree below it every half second; when the guarded process
  is gone, the guardian SIGKILLs every recorded descendant still alive (same user, same start
  time, so a reused process id is never hit) and what they started. This catches what other
  libraries start on our behalf (``datasets``' worker pool and its manager process, Ray's
  processes, ``multiprocessing``'s resource tracker).

The /proc readers here are the one place that parses process tables.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

#: Seconds between the guardian's looks at the process tree.
GUARD_INTERVAL_S = 0.5
#: Seconds between a parent-death watchdog's checks.
WATCH_INTERVAL_S = 0.5

_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    pgrp: int
    start: int  # start time in clock ticks since boot: with the pid, identifies the process
    uid: int


def process_table() -> dict[int, ProcessInfo]:
    """Every live (non-zombie) process, from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        info = process_info(int(entry.name))
        if info is not None:
            table[info.pid] = info
    return table


def process_info(pid: int) -> ProcessInfo | None:
    """One live process's entry, or None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
    # fields after the parenthesised command: state ppid pgrp session tty tpgid flags ... starttime (22nd)
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return ProcessInfo(pid=pid, ppid=int(fields[1]), pgrp=int(fields[2]), start=int(fields[19]), uid=uid)


def live_processes() -> Iterator[tuple[int, int]]:
    """(pid, process group) of every live (non-zombie) process."""
    for info in process_table().values():
        yield info.pid, info.pgrp


def descendants(root: int, table: dict[int, ProcessInfo]) -> set[int]:
    """Every process below ``root`` in ``table`` (children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
    found, stack = set(), [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


#: Seconds a process group gets to stop by itself before it is signalled.
STOP_GRACE_S = 20.0
#: Seconds between SIGTERM and SIGKILL to a process group.
TERM_GRACE_S = 5.0


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    return [pid for pid, pgrp in live_processes() if pgrp == pgid]


def end_group(pgid: int, exclude: int | None = None, term_grace_s: float = TERM_GRACE_S) -> int:
    """SIGTERM every live process of the group (but ``exclude``), SIGKILL what is left after
    ``term_grace_s``. Returns how many processes had to be signalled."""
    targets = [pid for pid in group_members(pgid) if pid != exclude]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in targets:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + (term_grace_s if sig == signal.SIGTERM else 2.0)
        while time.monotonic() < deadline:
            left = [pid for pid in group_members(pgid) if pid != exclude]
            if not left:
                return len(targets)
            time.sleep(0.1)
        targets = [pid for pid in group_members(pgid) if pid != exclude]
    return len(targets)


def tagged_processes(name: str, value: str) -> list[int]:
    """Live processes of this user whose environment holds ``name=value``: a variable set for a
    child is inherited by everything it starts, however deep."""
    needle = f"{name}={value}".encode()
    uid = os.getuid()
    found = []
    for info in process_table().values():
        if info.uid != uid:
            continue
        try:
            environ = Path(f"/proc/{info.pid}/environ").read_bytes()
        except OSError:
            continue  # exited meanwhile, or not readable
        if needle in environ.split(b"\0"):
            found.append(info.pid)
    return found


def end_tagged(name: str, value: str, timeout_s: float = STOP_GRACE_S) -> int:
    """Wait up to ``timeout_s`` for the processes tagged ``name=value`` to end by themselves, then
    SIGKILL what is left. Returns how many had to be killed."""
    deadline = time.monotonic() + timeout_s
    while tagged_processes(name, value):
        if time.monotonic() >= deadline:
            left = tagged_processes(name, value)
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return len(left)
        time.sleep(0.1)
    return 0


# ----------------------------------------------------------------------------- in a child


def die_with_parent(sig: int = signal.SIGKILL, expected_parent: int | None = None) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux); exit at once
    when the parent is already gone. Call it first thing in a child.

    :param expected_parent: the parent's pid when the caller knows it (captured before a fork):
        a parent that died before this call is then noticed too.
    """
    parent = os.getppid() if expected_parent is None else expected_parent
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)
    if not sys.platform.startswith("linux"):
        _watch_parent(parent, lambda: os._exit(1))


def end_group_with_parent() -> None:
    """In a process group leader: when the parent dies, SIGKILL the whole group (this process
    included). A daemon thread watches; it needs the interpreter to run now and then, which a
    process waiting on sockets and queues does."""
    parent = os.getppid()
    _watch_parent(parent, lambda: os.killpg(os.getpgid(0), signal.SIGKILL))


def _watch_parent(parent: int, action) -> None:
    def watch():
        while os.getppid() == parent:
            time.sleep(WATCH_INTERVAL_S)
        action()

    threading.Thread(target=watch, name="trajval-parent-watch", daemon=True).start()


# ----------------------------------------------------------------------------- the guardian

_guarded_pid: int | None = None


def guard_descendants() -> None:
    """Start the guardian of this process's descendants (once per process; see the module doc)."""
    global _guarded_pid
    if _guarded_pid == os.getpid() or not Path("/proc/self/stat").exists():
        return
    me = process_info(os.getpid())
    subprocess.Popen(
        [sys.executable, "-m", "trajval_ops.lifetime", str(me.pid), str(me.start)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,  # not in the guarded group: a group kill must not take it first
        close_fds=True,
    )
    _guarded_pid = me.pid


def _same(info: ProcessInfo | None, start: int, uid: int) -> bool:
    return info is not None and info.start == start and info.uid == uid


#: Environment variable naming a file where the guardian writes the process ids it guards after
#: each look (one per line, replaced atomically): for diagnosis, and for tests to wait on.
GUARD_REPORT_ENV = "TRAJVAL_GUARD_REPORT"


def run_guardian(pid: int, start: int, interval_s: float = GUARD_INTERVAL_S, report: str | None = None) -> int:
    """Record the descendants of ``pid`` while it lives; when it is gone, SIGKILL them.

    :param report: file to write the recorded process ids to after each look (None: no file).
    :return: how many processes were killed.
    """
    me, uid = os.getpid(), os.getuid()
    known: dict[int, int] = {}  # pid -> start time of every descendant seen
    while _same(process_info(pid), start, uid):
        table = process_table()
        for child in descendants(pid, table) - {me}:
            known[child] = table[child].start
        known = {p: s for p, s in known.items() if _same(table.get(p), s, uid)}
        if report:
            Path(f"{report}.tmp").write_text("".join(f"{p}\n" for p in sorted(known)))
            os.replace(f"{report}.tmp", report)
        time.sleep(interval_s)
    killed = 0
    for _ in range(5):  # what a dying process starts meanwhile is caught on the next round
        table = process_table()
        targets = {p for p, s in known.items() if _same(table.get(p), s, uid)}
        for target in list(targets):
            targets |= {d for d in descendants(target, table) if table[d].uid == uid}
        targets.discard(me)
        if not targets:
            break
        for target in targets:
            known[target] = table[target].start
            try:
                os.kill(target, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    return killed


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C is for the guarded process
    run_guardian(int(sys.argv[1]), int(sys.argv[2]), report=os.environ.get(GUARD_REPORT_ENV))
