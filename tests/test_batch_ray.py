"""`edge-anime batch --ray` on a real two-node Ray cluster on 127.0.0.1 (tests/raycluster.py), one node killed
mid-job with SIGKILL of its raylet: every photo exactly one output, no temp file, and a re-run writes nothing.
"""
from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from deadlines import scaled
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
            deadline = time.monotonic() + scaled(180)
            while time.monotonic() < deadline and proc.poll() is None:
                done = [p for p in out.glob(f"*_{STYLE}.jpg") if not p.name.startswith(TEMP_PREFIX)] \
                    if out.exists() else []
                if len(done) >= 2 and _has_map_worker(cluster, 1):
                    break
                time.sleep(0.05)
            assert proc.poll() is None, f"the job ended before a node could be lost: {proc.communicate()}"
            cluster.nodes[1].kill()
            stdout, stderr = proc.communicate(timeout=scaled(300))
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
        again = subprocess.run(command, capture_output=True, text=True, timeout=scaled(300), check=False,
                               env=cluster.client_env())
        assert again.returncode == EXIT_OK, again.stderr[-3000:]
        assert f"{count} of {count} input(s) already done" in again.stdout
        assert _mtimes(out) == before


def _metrics_listeners_off_loopback(root_pid: int) -> list[str]:
    """Sockets of ``root_pid``'s process tree listening off loopback that answer ``GET /metrics``."""
    import http.client
    import urllib.request

    import psutil

    found: list[str] = []
    try:
        procs = [psutil.Process(root_pid), *psutil.Process(root_pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return found
    for proc in procs:
        try:
            conns = proc.net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for conn in conns:
            if conn.status != psutil.CONN_LISTEN or conn.laddr.ip.startswith("127.") or conn.laddr.ip == "::1":
                continue
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{conn.laddr.port}/metrics", timeout=2) as answer:
                    if b"# HELP" in answer.read(65536):
                        found.append(f"{conn.laddr.ip}:{conn.laddr.port} ({proc.name()})")
            except (OSError, http.client.HTTPException):  # not HTTP (Ray's gRPC and object ports)
                continue
    return found


def test_ray_local_starts_its_own_cluster_and_its_metrics_listen_on_loopback(
        tmp_path: Path, write_config: Callable[..., Path], make_photo: Callable[..., Path]) -> None:
    """Issue 42 items 8 and 12: ``--ray local`` ran ``ray.init(address=None)``, which joins RAY_ADDRESS (or the
    last `ray start` of the box) and so sent the work to other nodes; and the cluster it started served
    Prometheus metrics on 0.0.0.0 without auth. Here RAY_ADDRESS names a port nothing listens on: joining it
    fails, so only a cluster of its own finishes the batch."""
    inbox, out = tmp_path / "in", tmp_path / "out"
    for i in range(12):
        make_photo(f"p{i:02d}.jpg", 384, 288, folder=inbox, seed=i)
    cfg = write_config({"image": {"max_side": 384}, "ray": {"batch": {"batch_size": 1}}})
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{closed.getsockname()[1]}"
    proc = subprocess.Popen([sys.executable, "-m", "edge_anime", "batch", str(inbox), "-o", str(out), "--config",
                             str(cfg), "--ray", "local", "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "RAY_ADDRESS": nobody})
    exposed: set[str] = set()
    try:
        deadline = time.monotonic() + scaled(240)  # reached: the batch is killed (-9)
        while proc.poll() is None and time.monotonic() < deadline:
            exposed.update(_metrics_listeners_off_loopback(proc.pid))
            time.sleep(0.5)  # a look every half second while the cluster lives; the exit ends the loop
    finally:
        if proc.poll() is None:
            proc.kill()
        _, err = proc.communicate(timeout=scaled(60))
    assert proc.returncode == EXIT_OK, err[-3000:]
    assert len([p for p in out.glob(f"*_{STYLE}.jpg") if not p.name.startswith(TEMP_PREFIX)]) == 12
    assert exposed == set(), exposed
