"""How many torch threads a job should use: the cores it may really run on, shared by its jobs.

torch starts with one thread per core it sees, but a container's CPU quota (cgroup ``cpu.max``)
or a process's CPU affinity can give it fewer cores than the machine has, and several jobs of one
pipeline (``passkt study run --jobs``, ``torchrun`` ranks) share the cores. More threads than
free cores make torch much slower, not faster (on a loaded 2-core machine, two threads
pretrained at a third of the speed of one). So the CLI and the study pipeline set the
thread count from :func:`threads_per_job` unless told otherwise (``--threads``).
"""

from __future__ import annotations

import logging
import math
import os
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """The CPU quota of this process's cgroup in cores (``1.5`` = 150% of a core), or None.

    Reads cgroup v2 ``cpu.max`` ("QUOTA PERIOD" or "max PERIOD") and, failing that, cgroup v1
    ``cpu/cpu.cfs_quota_us`` and ``cpu/cpu.cfs_period_us`` (quota -1: no limit).
    """
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def available_cores(root: Path = CGROUP_ROOT) -> int:
    """Cores this process may use: its CPU affinity, capped by the cgroup quota (at least 1)."""
    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))
    else:  # macOS, Windows
        cores = os.cpu_count() or 1
    limit = cgroup_cpu_limit(root)
    if limit is not None:
        cores = min(cores, max(1, math.floor(limit)))
    return max(1, cores)


def threads_per_job(jobs: int = 1, cores: int | None = None) -> int:
    """Threads for each of ``jobs`` concurrent jobs on ``cores`` (default: available_cores())."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    return max(1, (available_cores() if cores is None else cores) // jobs)


def apply_threads(threads: int | None = None, *, jobs: int = 1) -> int:
    """Make torch use ``threads`` threads (default :func:`threads_per_job`); return the count.

    Before torch is imported this only sets ``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` (which
    torch reads when it starts), so commands that never load torch do not pay for importing it.
    Without ``threads``, a count the user already put in ``OMP_NUM_THREADS`` is kept.
    """
    if threads is not None and not 1 <= threads <= 1024:
        raise ValueError(f"--threads must be in 1..1024, got {threads}")
    if threads is None:
        preset = os.environ.get("OMP_NUM_THREADS", "")
        threads = int(preset) if preset.isdigit() and int(preset) > 0 else threads_per_job(jobs)
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(threads)
    logger.info("torch threads: %d", threads)
    return threads
