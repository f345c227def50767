"""Process lifetime: group handling (vLLM's processes), parent-death signals and the guardian,
on plain processes (no vLLM needed)."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from trajval_ops.lifetime import end_group, group_members

# a session leader that starts a grandchild (as vLLM starts its engine core), then waits
_LEADER = textwrap.dedent("""
    import signal, subprocess, sys, time
    if sys.argv[1] == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    print("started", flush=True)
    time.sleep(120)
""")


def _leader(mode: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", _LEADER, mode], stdout=subprocess.PIPE,
                               start_new_session=True, text=True)
    assert process.stdout.readline().strip() == "started"
    return process


def test_group_members_lists_the_leader_and_its_descendants():
    leader = _leader("plain")
    try:
        members = group_members(leader.pid)
        assert leader.pid in members and len(members) == 2
    finally:
        end_group(leader.pid)
        leader.wait(5)


def test_end_group_stops_every_process_of_the_group():
    leader = _leader("plain")
    signalled = end_group(leader.pid, term_grace_s=5)
    leader.wait(5)
    assert signalled == 2
    assert group_members(leader.pid) == []


def test_end_group_kills_what_ignores_sigterm():
    leader = _leader("ignore-term")
    end_group(leader.pid, term_grace_s=0.5)
    leader.wait(5)
    assert group_members(leader.pid) == []
    assert leader.returncode == -signal.SIGKILL  # SIGTERM ignored: the grace ran out, then SIGKILL


def test_end_group_can_spare_the_caller():
    leader = _leader("plain")
    try:
        end_group(leader.pid, exclude=leader.pid, term_grace_s=5)
        assert group_members(leader.pid) == [leader.pid]
        assert leader.poll() is None
    finally:
        end_group(leader.pid)
        leader.wait(5)


def test_an_empty_group_is_a_no_op():
    leader = _leader("plain")
    end_group(leader.pid)
    leader.wait(5)
    assert end_group(leader.pid) == 0


# ----------------------------------------------------------------------------- parent death

# A parent that starts children and grandchildren the way Data-Juicer's stack does (a plain
# fork that never learns of its parent's death, a child of that child), says their pids once both
# exist, then waits to be killed.
_PARENT = textwrap.dedent("""
    import os, subprocess, sys, time
    from trajval_ops import lifetime
    mode = sys.argv[1]
    if mode == "guard":
        lifetime.guard_descendants()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        if mode == "pdeathsig":
            lifetime.die_with_parent()
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        os.write(write_end, f"{grandchild.pid}\\n".encode())
        time.sleep(120)
        os._exit(0)
    grandchild = os.read(read_end, 64).decode().strip()
    print("started", pid, grandchild, flush=True)
    time.sleep(120)
""")


def _family(mode: str, tag: str, report: Path | None = None) -> tuple[subprocess.Popen, int, int]:
    """The parent, its forked child and the child's child (both running when this returns)."""
    env = {**os.environ, "TRAJVAL_TEST_TAG": tag}
    if report is not None:
        env["TRAJVAL_GUARD_REPORT"] = str(report)
    process = subprocess.Popen([sys.executable, "-c", _PARENT, mode], stdout=subprocess.PIPE, text=True, env=env)
    word, child, grandchild = process.stdout.readline().split()
    assert word == "started"
    return process, int(child), int(grandchild)


def _guarded(report: Path) -> set[int]:
    try:
        return {int(line) for line in report.read_text().split()}
    except FileNotFoundError:
        return set()


def test_the_guardian_ends_every_descendant_of_a_killed_process(tmp_path):
    import uuid

    from tests.conftest import live_processes_tagged, tagged_processes_after

    tag = uuid.uuid4().hex
    report = tmp_path / "guarded"
    parent, child, grandchild = _family("guard", tag, report)
    while not {child, grandchild} <= _guarded(report):  # the guardian has recorded both
        assert parent.poll() is None
        time.sleep(0.01)
    assert len(live_processes_tagged(tag)) == 4  # parent, guardian, child, grandchild
    parent.kill()
    parent.wait(5)
    assert tagged_processes_after(tag, 10) == []


def test_without_the_guardian_a_forked_family_outlives_its_parent():
    """The control: the test above can fail (plain forks survive a SIGKILLed parent)."""
    import uuid

    from trajval_ops.lifetime import process_info

    parent, child, grandchild = _family("none", str(uuid.uuid4().hex))
    parent.kill()
    parent.wait(5)  # reaped: its children have been handed to another parent
    try:
        for pid in (child, grandchild):
            info = process_info(pid)
            assert info is not None and info.ppid != parent.pid, pid
    finally:
        for pid in (child, grandchild):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_die_with_parent_takes_the_child_down_with_its_parent():
    import uuid

    from trajval_ops.lifetime import process_info

    parent, child, grandchild = _family("pdeathsig", str(uuid.uuid4().hex))
    parent.kill()
    parent.wait(5)
    try:
        deadline = time.monotonic() + 10
        while process_info(child) is not None:  # the kernel signals it at its parent's death
            assert time.monotonic() < deadline, "the child outlived its parent"
            time.sleep(0.01)
        assert process_info(grandchild) is not None  # its own child (no request) is an orphan
    finally:
        try:
            os.kill(grandchild, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_the_guardian_ignores_processes_of_others_and_reused_ids():
    from trajval_ops import lifetime

    me = lifetime.process_info(os.getpid())
    assert me is not None and me.ppid == os.getppid()
    assert lifetime._same(me, me.start, os.getuid())
    assert not lifetime._same(me, me.start + 1, os.getuid())  # same pid, another process
    assert not lifetime._same(me, me.start, os.getuid() + 1)
    assert not lifetime._same(None, me.start, os.getuid())
