"""Process lifetime: group handling (vLLM's processes), parent-death signals and the guardian,
on plain processes (no vLLM needed)."""

import os
import subprocess
import sys
import textwrap
import time

from trajval_ops.lifetime import end_group, group_members, wait_for_group

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
    start = time.monotonic()
    end_group(leader.pid, term_grace_s=0.5)
    leader.wait(5)
    assert group_members(leader.pid) == []
    assert time.monotonic() - start < 5


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


def test_wait_for_group_returns_when_the_group_is_gone_or_times_out():
    leader = _leader("plain")
    try:
        start = time.monotonic()
        assert wait_for_group(leader.pid, timeout_s=0.5) is False
        assert 0.5 <= time.monotonic() - start < 3
    finally:
        end_group(leader.pid)
        leader.wait(5)
    assert wait_for_group(leader.pid, timeout_s=0.5) is True


# ----------------------------------------------------------------------------- parent death

# A parent that starts children and grandchildren the way Data-Juicer's stack does (a plain
# fork that never learns of its parent's death, a child of that child), then waits to be killed.
_PARENT = textwrap.dedent("""
    import os, subprocess, sys, time
    from trajval_ops import lifetime
    mode = sys.argv[1]
    if mode == "guard":
        lifetime.guard_descendants()
    pid = os.fork()
    if pid == 0:
        if mode == "pdeathsig":
            lifetime.die_with_parent()
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # a grandchild
        time.sleep(120)
        os._exit(0)
    time.sleep(1.5)  # the guardian looks every half second
    print("started", flush=True)
    time.sleep(120)
""")


def _family(mode: str, tag: str) -> subprocess.Popen:
    import os

    process = subprocess.Popen([sys.executable, "-c", _PARENT, mode], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "TRAJVAL_TEST_TAG": tag})
    assert process.stdout.readline().strip() == "started"
    return process


def _wait_gone(tag: str, seconds: float) -> list[int]:
    from tests.conftest import tagged_processes_after

    return tagged_processes_after(tag, seconds)


def test_the_guardian_ends_every_descendant_of_a_killed_process():
    import uuid

    from tests.conftest import live_processes_tagged

    tag = uuid.uuid4().hex
    parent = _family("guard", tag)
    assert len(live_processes_tagged(tag)) == 4  # parent, guardian, child, grandchild
    parent.kill()
    parent.wait(5)
    assert _wait_gone(tag, 10) == []


def test_without_the_guardian_a_forked_family_outlives_its_parent():
    """The control: the test above can fail (plain forks survive a SIGKILLed parent)."""
    import os
    import signal as signals
    import uuid

    tag = uuid.uuid4().hex
    parent = _family("none", tag)
    parent.kill()
    parent.wait(5)
    survivors = _wait_gone(tag, 2)
    try:
        assert len(survivors) == 2
    finally:
        for pid in survivors:
            os.kill(pid, signals.SIGKILL)


def test_die_with_parent_takes_the_child_down_with_its_parent():
    import os
    import signal as signals
    import uuid

    tag = uuid.uuid4().hex
    parent = _family("pdeathsig", tag)
    parent.kill()
    parent.wait(5)
    survivors = _wait_gone(tag, 5)
    try:  # the child died with its parent; its own child (no request) is an orphan
        assert len(survivors) == 1
    finally:
        for pid in survivors:
            os.kill(pid, signals.SIGKILL)


def test_the_guardian_ignores_processes_of_others_and_reused_ids():
    from trajval_ops import lifetime

    me = lifetime.process_info(os.getpid())
    assert me is not None and me.ppid == os.getppid()
    assert lifetime._same(me, me.start, os.getuid())
    assert not lifetime._same(me, me.start + 1, os.getuid())  # same pid, another process
    assert not lifetime._same(me, me.start, os.getuid() + 1)
    assert not lifetime._same(None, me.start, os.getuid())
