"""A real Ray cluster on 127.0.0.1 for the tests: a head node and more nodes, each a `ray start` of its own.

Why by hand and not ``ray.cluster_utils.Cluster``: the tests kill one node's raylet with SIGKILL, as a lost box
would, and need each node's processes apart. Each node is a ``ray start --block`` in a session of its own:
every process of that node (raylet, agents, workers) stays in that session, whatever name it gives itself,
so ``stop()`` kills exactly this cluster's processes; never ``ray stop``, which would end every Ray process
on the machine, another test's cluster included. Every port a node opens is picked free here (Ray's defaults,
10001 for the client server and 52365 for the agent, would clash between two test files running at once).
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from deadlines import scaled

HOST = "127.0.0.1"
START_TIMEOUT_S = scaled(120.0)
PROBE_TIMEOUT_S = scaled(30.0)  # one driver's look at the cluster: a ray.init that hangs is killed and tried again
START_ATTEMPTS = 2  # a cluster that does not come up is stopped and started again once, on new ports


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def ray_executable() -> str:
    """The ``ray`` script of this interpreter's environment (a venv's bin/, not a system one)."""
    found = Path(sys.executable).with_name("ray")
    return str(found) if found.exists() else "ray"


@dataclass
class Node:
    temp_dir: Path
    head: bool
    starter: subprocess.Popen[bytes]  # `ray start --block`, the leader of the node's session

    def processes(self) -> list[psutil.Process]:
        """This node's processes: every process in the session of its ``ray start --block``."""
        found = []
        for proc in psutil.process_iter():
            try:
                if os.getsid(proc.pid) == self.starter.pid:
                    found.append(proc)
            except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
                continue
        return found

    def raylet(self) -> psutil.Process:
        for proc in self.processes():
            try:
                if proc.name() == "raylet":
                    return proc
            except psutil.NoSuchProcess:
                continue
        raise AssertionError(f"no raylet found for the node in {self.temp_dir}")

    def kill(self) -> None:
        """SIGKILL the node's raylet, as a box that lost power or network: its workers die with it."""
        self.raylet().send_signal(signal.SIGKILL)


@dataclass
class RayCluster:
    """``with RayCluster(nodes=2, cpus=1) as cluster:`` -> ``cluster.address`` for ``--ray``."""

    nodes_wanted: int = 1
    cpus: int = 1
    env: dict[str, str] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    address: str = ""
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ea-ray-", dir="/tmp")))

    def _start(self, head: bool) -> Node:
        # Short paths: Ray's unix sockets live under the temp dir and a socket path is limited to 107 bytes.
        temp_dir = self.root / f"n{len(self.nodes)}"
        temp_dir.mkdir()
        args = [ray_executable(), "start", "--block", "--node-ip-address", HOST, "--num-cpus", str(self.cpus),
                "--temp-dir", str(temp_dir), "--disable-usage-stats",
                "--node-manager-port", str(free_port()), "--object-manager-port", str(free_port()),
                "--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
                "--runtime-env-agent-port", str(free_port()), "--metrics-export-port", str(free_port()),
                "--object-store-memory", str(200 * 1024 * 1024)]
        if head:
            self.address = f"{HOST}:{free_port()}"
            args += ["--head", "--port", self.address.rsplit(":", 1)[1], "--include-dashboard", "false",
                     "--ray-client-server-port", str(free_port())]
        else:
            args += ["--address", self.address]
        env = self.client_env()
        log = open(temp_dir / "start.log", "wb")  # noqa: SIM115 - the node's own log, read when it fails
        starter = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
        log.close()
        node = Node(temp_dir, head, starter)
        self.nodes.append(node)
        return node

    def start_log(self, node: Node) -> str:
        return (node.temp_dir / "start.log").read_text(errors="replace")[-3000:]

    def client_env(self) -> dict[str, str]:
        """The environment of a process that joins this cluster (a node, a driver): its own auth token file.
        Ray 2.60 starts clusters with token authentication and keeps the token in ~/.ray/auth_token, which
        every head started on the machine rewrites: two clusters at once (two test files) would lock each
        other's drivers out."""
        token = self.root / "auth_token"
        if not token.exists():  # Ray aborts on an empty or missing token file: it never makes one there itself
            token.write_text(secrets.token_hex(32), encoding="ascii")
            token.chmod(0o600)
        return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
                "RAY_AUTH_TOKEN_PATH": str(token), **self.env}

    def add_node(self) -> Node:
        node = self._start(head=False)
        self.wait_for_nodes(len(self.nodes))
        return node

    def wait_for_nodes(self, count: int, timeout: float = START_TIMEOUT_S) -> None:
        """Until ``count`` nodes are alive in the cluster's own view (``ray status`` would import the world)."""
        script = ("import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False); "
                  "print(sum(1 for n in ray.nodes() if n['Alive']))")
        deadline = time.monotonic() + timeout
        seen = ""
        while time.monotonic() < deadline:
            for node in self.nodes:
                if node.starter.poll() is not None and node.head:
                    raise RuntimeError(f"ray start --head exited {node.starter.returncode}: {self.start_log(node)}")
            left = max(1.0, min(PROBE_TIMEOUT_S, deadline - time.monotonic()))
            try:
                done = subprocess.run([sys.executable, "-c", script, self.address], capture_output=True, text=True,
                                      timeout=left, check=False, env=self.client_env())
            except subprocess.TimeoutExpired:  # ray.init waits on a GCS it cannot reach yet: look again
                seen = f"a driver's ray.init did not return within {left:.0f} s"
                continue
            seen = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:]
            if seen == str(count):
                return
            time.sleep(0.5)
        raise AssertionError(f"the cluster at {self.address} did not reach {count} alive nodes: {seen}")

    def stop(self) -> None:
        """Kill every process of this cluster (its nodes' temp dirs name them) and remove its files."""
        procs = [p for node in reversed(self.nodes) for p in node.processes()]
        for proc in procs:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                continue
        psutil.wait_procs(procs, timeout=10)
        for node in self.nodes:
            node.starter.wait(timeout=scaled(10))
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> RayCluster:
        """Start the cluster; once more on new ports if it does not come up. Why: each port is picked free here
        and bound by Ray a moment later, and another test file's cluster starting at the same time can take
        one in between (seen once in CI: a driver then waited on the head for the whole start timeout)."""
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                self._start(head=True)
                for _ in range(self.nodes_wanted - 1):
                    self._start(head=False)
                self.wait_for_nodes(self.nodes_wanted)
                return self
            except (AssertionError, RuntimeError):
                logs = "\n".join(self.start_log(node) for node in self.nodes)
                self.stop()
                if attempt == START_ATTEMPTS:
                    raise
                print(f"raycluster: attempt {attempt} did not come up; starting again on new ports:\n{logs}",
                      file=sys.stderr)
                self.nodes, self.address = [], ""
                self.root = Path(tempfile.mkdtemp(prefix="ea-ray-", dir="/tmp"))
            except BaseException:
                self.stop()
                raise
        raise AssertionError("unreachable")

    def __exit__(self, *_exc: object) -> None:
        self.stop()
