import os
import subprocess
import sys

import pytest

from passkt.agents import threads as threads_module
from passkt.agents.threads import apply_threads, available_cores, cgroup_cpu_limit, threads_per_job


def _cgroup(tmp_path, files):
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("files", "limit"),
    [
        ({"cpu.max": "150000 100000\n"}, 1.5),
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu/cpu.cfs_quota_us": "300000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 3.0),
        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),
        ({}, None),
    ],
    ids=["v2-quota", "v2-max", "v1-quota", "v1-unlimited", "none"],
)
def test_cgroup_quota_is_read_in_cores(tmp_path, files, limit):
    assert cgroup_cpu_limit(_cgroup(tmp_path, files)) == limit


def test_the_quota_caps_the_affinity(tmp_path):
    affinity = len(os.sched_getaffinity(0))
    assert available_cores(_cgroup(tmp_path, {})) == affinity
    assert available_cores(_cgroup(tmp_path / "a", {"cpu.max": "50000 100000"})) == 1  # half a core
    many = _cgroup(tmp_path / "b", {"cpu.max": f"{100000 * (affinity + 4)} 100000"})
    assert available_cores(many) == affinity  # a quota above the affinity changes nothing


def test_cores_are_shared_by_the_jobs(monkeypatch):
    assert threads_per_job(1, cores=8) == 8
    assert threads_per_job(3, cores=8) == 2
    assert threads_per_job(16, cores=8) == 1
    monkeypatch.setattr(threads_module, "available_cores", lambda: 6)
    assert threads_per_job(2) == 3
    with pytest.raises(ValueError, match="jobs must be >= 1"):
        threads_per_job(0)


def test_apply_threads_sets_torch_and_the_environment(monkeypatch):
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads_module, "threads_per_job", lambda jobs: 4 // jobs)
    try:
        assert apply_threads(jobs=2) == 2 and torch.get_num_threads() == 2
        assert os.environ["OMP_NUM_THREADS"] == "2"
        assert apply_threads(1) == 1 and torch.get_num_threads() == 1  # the flag wins
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        assert apply_threads() == 3  # the user's own setting is kept
        with pytest.raises(ValueError, match=r"--threads must be in 1\.\.1024"):
            apply_threads(0)
    finally:
        torch.set_num_threads(before)


def test_cli_threads_flag_reaches_torch():
    """``passkt --threads 1 report ...`` in a fresh process: torch starts with one thread (the
    command's own work is replaced, so only the flag is tested)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    script = (
        "import os\n"
        "from passkt.eval import cli\n"
        "def fake(args):\n"
        "    import torch\n"
        "    print(torch.get_num_threads(), os.environ['OMP_NUM_THREADS'])\n"
        "    return 0\n"
        "build = cli.build_parser\n"
        "def patched(plugin=None):\n"
        "    parser = build(plugin)\n"
        "    parser._subparsers._group_actions[0].choices['report'].set_defaults(func=fake)\n"
        "    return parser\n"
        "cli.build_parser = patched\n"
        "raise SystemExit(cli.main(['--threads', '1', 'report', 'x']))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.split() == ["1", "1"]
