"""Facts about the box this process runs on, that sizing decisions (threads, the bench's CPU share) need."""
from __future__ import annotations

import os


def usable_cores() -> int:
    """CPUs this process may run on: the affinity mask (taskset, systemd ``CPUAffinity=``, a container's
    cpuset), not the machine's count.

    Why: against the machine's count a service pinned to 2 of 16 cores would size 16-core thread pools and
    report 12 % CPU utilisation while both of its cores are busy.
    """
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1
