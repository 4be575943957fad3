"""`edge-anime serve --ray` on a real two-node Ray cluster on 127.0.0.1 (tests/raycluster.py), driven over real
HTTP: two replicas answer `POST /v1/stylize`, one replica's process killed with SIGKILL is survived (and
replaced), and SIGTERM exits 0 and closes the port. Plus the two refusals that need no cluster: a missing ray
and a bad config, both before anything is deployed.

One cluster and one `serve --ray` for the module: a cluster start and a deploy (two replicas compiling on two
shared cores) cost most of the file's time, so the SIGTERM test ends the process the first test used.
"""
from __future__ import annotations

import importlib.util
import io
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import yaml
from deadlines import scaled
from raycluster import RayCluster, free_port

from conftest import synthetic_photo

NEEDS_RAY = pytest.mark.skipif(importlib.util.find_spec("ray") is None or importlib.util.find_spec("starlette") is None,
                               reason="needs the ray and http extras: pip install 'edge-anime[ray,http]'")
FAST_HEALTH = {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3",
               "RAY_health_check_initial_delay_ms": "1000"}
READY_DEADLINE_S = scaled(150.0)  # the deploy: two replicas each compiling the style, on two shared cores
ANSWER_DEADLINE_S = scaled(60.0)
STOP_DEADLINE_S = scaled(60.0)
REPLICA = "x-edge-anime-replica"


def _png(seed: int = 0) -> bytes:
    buffer = io.BytesIO()
    synthetic_photo(64, 64, seed=seed).save(buffer, format="PNG")
    return buffer.getvalue()


@dataclass
class RayServe:
    """`edge-anime serve --ray` as a process of its own, and the cluster it deployed on."""

    proc: subprocess.Popen[bytes]
    log: Path
    url: str
    cluster: RayCluster
    config: Path

    def said(self) -> str:
        return self.log.read_text(errors="replace")

    def stylize(self, seed: int = 0, timeout: float = 30) -> tuple[int, str]:
        """(status, the replica that answered); (0, why) when no HTTP answer came at all."""
        request = urllib.request.Request(self.url + "/v1/stylize", data=_png(seed), method="POST",
                                         headers={"Content-Type": "image/png"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as answer:
                assert answer.read()[:8] != b"", "an empty picture"
                return answer.status, answer.headers.get(REPLICA, "")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get(REPLICA, "") or exc.read()[:200].decode(errors="replace")
        except OSError as exc:
            return 0, repr(exc)

    def wait_until_said(self, text: str, deadline_s: float) -> None:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            assert self.proc.poll() is None, self.said()
            if text in self.said():
                return
            time.sleep(0.2)
        raise AssertionError(f"never said {text!r} within {deadline_s} s:\n{self.said()}")

    def replica_pids(self, node: int) -> list[int]:
        """The Serve replicas' processes on node ``node`` (Ray titles them ``ray::ServeReplica:APP:NAME``)."""
        found = []
        for proc in self.cluster.nodes[node].processes():
            try:
                if " ".join(proc.cmdline()).startswith("ray::ServeReplica:edge-anime:"):
                    found.append(proc.pid)
            except psutil.NoSuchProcess:
                continue
        return found


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, random_ir: Path, ov_cache: Path) -> Iterator[RayServe]:
    """A two-node cluster (one CPU each) and `serve --ray` on it with two replicas of one CPU: one per node."""
    folder = tmp_path_factory.mktemp("serve-ray")
    port = free_port()
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"path": str(random_ir / "model.xml")},
        "device": {"cache_dir": str(ov_cache), "inference_precision": "f32"},
        "image": {"resize": "max_side", "max_side": 64},
        "watch": {"root": str(folder / "watch")},
        "http": {"port": port},
        "service": {"drain_timeout_seconds": 5.0},
        "ray": {"serve": {"num_replicas": 2, "replica_cpus": 1}},
    }), encoding="utf-8")
    with RayCluster(nodes_wanted=2, cpus=1, env=FAST_HEALTH) as cluster:
        log = folder / "serve.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "edge_anime", "serve", "--ray", cluster.address,
                                     "--config", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                    env=cluster.client_env())  # the cluster's own token, as a user's box would
        server = RayServe(proc, log, f"http://127.0.0.1:{port}", cluster, config)
        try:
            server.wait_until_said("2 of 2 replicas running", READY_DEADLINE_S)
            yield server
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


@NEEDS_RAY
@pytest.mark.slow
def test_two_replicas_answer_and_a_killed_one_is_survived(served: RayServe) -> None:
    seen: set[str] = set()
    end = time.monotonic() + ANSWER_DEADLINE_S
    while len(seen) < 2 and time.monotonic() < end:  # the router picks at random: both answer within a few
        status, replica = served.stylize()
        assert status == 200, (status, replica, served.said())
        seen.add(replica)
    assert len(seen) == 2 and "" not in seen, seen

    victims = served.replica_pids(node=1)
    assert len(victims) == 1, victims  # one CPU per node, one CPU per replica: one replica per node
    os.kill(victims[0], signal.SIGKILL)
    after: list[tuple[int, str]] = [served.stylize(seed=i) for i in range(12)]
    answered = [replica for status, replica in after if status == 200]
    # The survivor answers; the killed replica cannot, whatever the router thought of it at first.
    assert len(answered) >= 10, (after, served.said())
    assert len(set(answered) & seen) == 1, (seen, after)
    survivor = (set(answered) & seen).pop()
    # Serve's health check sees the loss within its 10 s period and starts a replacement; it serves once its style
    # is compiled, and the command says both.
    served.wait_until_said("1 of 2 replicas running", scaled(30))
    log_before = served.said()
    end = time.monotonic() + ANSWER_DEADLINE_S
    replaced = ""
    while time.monotonic() < end and not replaced:
        status, replica = served.stylize()
        assert status == 200, (status, replica, served.said())
        replaced = replica if replica not in seen else ""
    assert replaced, f"no replacement replica answered within {ANSWER_DEADLINE_S} s:\n{served.said()}"
    assert replaced != survivor
    end = time.monotonic() + scaled(20)  # said again once the replacement runs
    while served.said().count("2 of 2 replicas running") <= log_before.count("2 of 2 replicas running"):
        assert time.monotonic() < end, served.said()
        time.sleep(0.2)


@NEEDS_RAY
@pytest.mark.slow
def test_sighup_redeploys_the_changed_config_and_a_bad_one_changes_nothing(served: RayServe) -> None:
    good = served.config.read_text(encoding="utf-8")
    data = yaml.safe_load(good)
    data["ray"]["serve"]["num_replicas"] = 1
    served.config.write_text(yaml.safe_dump(data), encoding="utf-8")
    served.proc.send_signal(signal.SIGHUP)
    served.wait_until_said("reload: redeploying edge-anime", scaled(10))
    served.wait_until_said("1 of 1 replicas running", READY_DEADLINE_S)
    assert served.stylize()[0] == 200, served.said()

    served.config.write_text(good.replace("max_side: 64", "max_side: -5"), encoding="utf-8")
    served.proc.send_signal(signal.SIGHUP)
    served.wait_until_said("reload failed, still serving the previous config", scaled(10))
    assert "image.max_side" in served.said().split("reload failed, still serving the previous config")[1]
    statuses = [served.stylize(seed=i)[0] for i in range(3)]
    assert statuses == [200, 200, 200], (statuses, served.said())
    assert served.proc.poll() is None


@NEEDS_RAY
@pytest.mark.slow
def test_sigterm_deletes_the_app_exits_0_and_the_port_closes(served: RayServe) -> None:
    assert served.stylize()[0] == 200
    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(timeout=STOP_DEADLINE_S) == 0, served.said()
    host, port = served.url.removeprefix("http://").rsplit(":", 1)
    end = time.monotonic() + scaled(10)
    while time.monotonic() < end:  # Serve was shut down with the app: its proxy lets go of the port
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
        except OSError:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"{served.url} still accepts connections after serve --ray exited")
    assert "deleting edge-anime" in served.said()


def _bundled_config(tmp_path: Path, **sections: object) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"watch": {"root": str(tmp_path / "watch")}, **sections}), encoding="utf-8")
    return path


def test_a_bad_config_exits_78_before_the_cluster_is_touched(tmp_path: Path) -> None:
    """Validated first: an address with no cluster behind it would exit 75, so 78 means nothing was tried."""
    config = _bundled_config(tmp_path, ray={"serve": {"num_replicas": "two"}})
    done = subprocess.run([sys.executable, "-m", "edge_anime", "serve", "--ray", f"127.0.0.1:{free_port()}",
                           "--config", str(config)], capture_output=True, text=True, timeout=scaled(60), check=False)
    assert done.returncode == 78, done.stderr
    assert "ray.serve.num_replicas" in done.stderr, done.stderr


@NEEDS_RAY
def test_no_cluster_at_the_address_exits_75_at_once(tmp_path: Path) -> None:
    """Said in one line within seconds (ray.init alone would retry for minutes); 75: it may be up later."""
    config = _bundled_config(tmp_path)
    done = subprocess.run([sys.executable, "-m", "edge_anime", "serve", "--ray", f"127.0.0.1:{free_port()}",
                           "--config", str(config)], capture_output=True, text=True, timeout=scaled(60), check=False)
    assert done.returncode == 75, done.stderr
    assert "no Ray cluster answers there" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_without_ray_the_error_names_the_extra(tmp_path: Path) -> None:
    """ray hidden from the import system, as in a base install: one line naming the pip install, exit 78."""
    pytest.importorskip("starlette")
    config = _bundled_config(tmp_path)
    script = ("import sys; sys.modules['ray'] = None; from edge_anime.cli import main; "
              f"sys.exit(main(['serve', '--ray', 'auto', '--config', {str(config)!r}]))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=scaled(60),
                          check=False)
    assert done.returncode == 78, done.stderr
    assert "pip install 'edge-anime[ray]'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
