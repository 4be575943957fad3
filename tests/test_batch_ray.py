"""`edge-anime batch --ray` on a real two-node Ray cluster on 127.0.0.1 (tests/raycluster.py), one node killed
mid-job with SIGKILL of its raylet: every photo exactly one output, no temp file, and a re-run writes nothing.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from raycluster import RayCluster

from edge_anime.errors import EXIT_OK
from edge_anime.fsutil import TEMP_PREFIX

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                       reason="needs the ray extra: pip install 'edge-anime[ray]'"),
]
STYLE = "randgen"
# A lost node is noticed within ~3 s instead of Ray's default ~30 s.
FAST_HEALTH = {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3",
               "RAY_health_check_initial_delay_ms": "1000"}


def _mtimes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}


def _has_map_worker(cluster: RayCluster, index: int) -> bool:
    """Whether node ``index`` runs a Ray Data actor (its process names itself after the map operator)."""
    for proc in cluster.nodes[index].processes():
        try:
            if "MapWorker" in proc.name() or "MapWorker" in " ".join(proc.cmdline()):
                return True
        except Exception:  # noqa: BLE001 - a process that ended meanwhile
            continue
    return False


def test_batch_on_two_nodes_survives_a_lost_node_exactly_once(
        tmp_path: Path, write_config: Callable[..., Path], make_photo: Callable[..., Path]) -> None:
    inbox, out = tmp_path / "in", tmp_path / "out"
    count = 32
    for i in range(count):
        make_photo(f"p{i:02d}.jpg", 384, 288, folder=inbox, seed=i)
    cfg = write_config({"image": {"max_side": 384}, "ray": {"batch": {"batch_size": 2}}})
    with RayCluster(nodes_wanted=2, cpus=1, env=FAST_HEALTH) as cluster:
        command = [sys.executable, "-m", "edge_anime", "batch", str(inbox), "-o", str(out), "--config", str(cfg),
                   "--ray", cluster.address, "-q"]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=cluster.client_env())
        try:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and proc.poll() is None:
                done = [p for p in out.glob(f"*_{STYLE}.jpg") if not p.name.startswith(TEMP_PREFIX)] \
                    if out.exists() else []
                if len(done) >= 2 and _has_map_worker(cluster, 1):
                    break
                time.sleep(0.05)
            assert proc.poll() is None, f"the job ended before a node could be lost: {proc.communicate()}"
            cluster.nodes[1].kill()
            stdout, stderr = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == EXIT_OK, stderr[-3000:]
        assert f"batch: {count} written" in stdout or "already done" in stdout, stdout
        names = sorted(p.name for p in out.iterdir())
        assert names == sorted(f"p{i:02d}_{STYLE}.jpg" for i in range(count)), names
        assert not any(name.startswith(TEMP_PREFIX) for name in names)

        # The same command again, on the node that is left: nothing to do, nothing written.
        before = _mtimes(out)
        again = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False,
                               env=cluster.client_env())
        assert again.returncode == EXIT_OK, again.stderr[-3000:]
        assert f"{count} of {count} input(s) already done" in again.stdout
        assert _mtimes(out) == before
