"""The process-group handling that stops vLLM's processes, on plain processes (no vLLM needed)."""

import subprocess
import sys
import textwrap
import time

from trajval_ops.rollout.vllm_process import end_group, group_members, wait_for_group

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
