"""`edge-anime serve --ray ADDRESS`: the same HTTP app as `edge-anime serve`, as a Ray Serve deployment.

Why the same app and not a port of it: every replica runs ``create_app(config)`` (``serve.ingress`` with a
builder evaluated on the replica), so the ``/v1`` API, its limits, its errors and its metrics are the ones of
one box; Ray Serve only adds the proxy in front and the replicas behind it. Each replica holds one Stylizer,
built by the app's own lifespan (Ray Serve runs it), so replicas are sized like boxes: ``ray.serve.replica_cpus``
CPUs each, ``ray.serve.num_replicas`` of them, or ``auto`` to scale between ``min_replicas`` and
``max_replicas`` on ``target_ongoing_requests``.

What differs from one box, and why:

- A replica counts as started only once its style is compiled: its first health check waits for the app's
  load and fails with the reason when the style cannot be built. So the proxy never routes to a replica that
  would answer 503 "still compiling", the deployment is RUNNING exactly when every replica can stylize, and a
  style that cannot be built fails the deploy (exit 78 with the reason) instead of answering /healthz forever.
- READY=1 goes to systemd once the application is RUNNING; STATUS says how many replicas are up, and the log
  says so again whenever that number changes (a replica lost and replaced by Ray).
- Ray's proxy listens on ``http.host``:``http.port``: on the head node only for a particular address (a
  loopback or a LAN address is one machine's), on every node with a replica for a wildcard (``0.0.0.0``,
  ``::``), each node then answering at its own address. The connection layer of one box (header deadline,
  ``http.max_connections``) is uvicorn's inside `serve` and does not exist in Ray's proxy; everything from the
  request on (Host, token, body, pixels, queue, timeout) is the app's, per replica.
- Every answer carries ``X-Edge-Anime-Replica``: the Ray replica that made it, to tell replicas apart in a
  client's log or a test.
- SIGHUP redeploys with the config file read again (Ray replaces the replicas one by one; the old ones serve
  until the new ones are up); a config that does not validate keeps the running deployment, as on one box.
  ``http.host``/``http.port`` apply only when Serve starts on the cluster.
- SIGTERM/SIGINT delete the application (each replica drains for up to ``service.drain_timeout_seconds``, then
  closes its Stylizer) and shut Serve down when no other application runs on it; the command exits 0.

``ray`` is imported here only, inside the functions, so the base install never imports it.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config import Config, is_loopback
from ..errors import EXIT_TEMPFAIL, UserError
from ..rayaddress import RAY_INSTALL_HINT, init_kwargs, unreachable

if TYPE_CHECKING:
    from starlette.applications import Starlette

# systemd's notify (READY=1, STATUS=...): the command passes its Notifier's send, so this layer needs no service.
Notify = Callable[..., object]

log = logging.getLogger("edge_anime.http")

APP_NAME = "edge-anime"  # the Serve application: one `serve --ray` per cluster (they would share a route)
DEPLOYMENT_NAME = "EdgeAnime"
REPLICA_HEADER = b"x-edge-anime-replica"
STYLE_FAILED = "edge-anime style unavailable: "  # marks the reason in Ray's deploy error (a traceback)
# How often the replica count is read for the log and systemd's STATUS. A lost replica shows as one fewer
# RUNNING only from when Serve's health check sees it (within its 10 s period) until the replacement has compiled
# its style: under 2 s with a warm model cache, so a 2 s poll could miss the loss altogether (CI, stop 59). One
# `serve.status()` is a call to Serve's controller of a few ms.
STATUS_POLL_SECONDS = 0.5
CONSTRUCTOR_RETRIES = 3  # replica starts that may fail in a row before the deploy is failed
EXIT_CLUSTER_UNAVAILABLE = EXIT_TEMPFAIL  # the cluster may be up later; systemd may restart us
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::"})


class ClusterUnavailable(UserError):
    """The Ray cluster cannot be reached, or an edge-anime application already runs on it."""

    exit_status = EXIT_CLUSTER_UNAVAILABLE


class StyleUnavailable(RuntimeError):
    """Raised by a replica's health check when its style cannot be built: Ray fails the replica's start."""


# -- on the replica ------------------------------------------------------------------------------------------
def build_app(config: Config) -> Starlette:
    """The replica's ASGI app: ``create_app(config)``, the one of `edge-anime serve`, plus the replica's name
    on every answer. ``app.state.loaded`` is set once the style is compiled or has failed."""
    from edge_anime.http.app import create_app

    loaded = threading.Event()
    app = create_app(config, on_ready=loaded.set, on_failure=lambda _why: loaded.set())
    app.state.loaded = loaded
    app.add_middleware(ReplicaHeader, replica=_replica_name())
    return app


def _replica_name() -> str:
    """Ray's unique id of this replica (as its logs and `serve status` name it), or "?" outside a replica."""
    from ray import serve

    try:
        return str(serve.get_replica_context().replica_id.unique_id)
    except Exception:  # noqa: BLE001 - only a label: never worth failing a replica's start
        return "?"


async def wait_until_loaded(app: Starlette) -> None:
    """The replica's health check: the first one waits for the style (Ray routes nothing to the replica
    before it passes), every one fails while the style cannot be built, with the app's own reason."""
    loaded: threading.Event = app.state.loaded
    if not loaded.is_set():
        await asyncio.to_thread(loaded.wait)
    failure = app.state.service.failure
    if failure is not None:
        raise StyleUnavailable(f"{STYLE_FAILED}{failure}")


Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class ReplicaHeader:
    """ASGI middleware: ``X-Edge-Anime-Replica`` on every HTTP answer, whoever in the app made it."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], *, replica: str) -> None:
        self.app = app
        self.replica = replica.encode("ascii", "replace")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_named(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (REPLICA_HEADER, self.replica)]}
            await send(message)

        await self.app(scope, receive, send_named)


# -- in Ray's proxy ------------------------------------------------------------------------------------------
ROUTER_PATH = f"{__name__}.SpreadRouter"  # Ray Serve imports the router by its path, then pickles it


def __getattr__(name: str) -> Any:
    """``SpreadRouter``, made on first use: it subclasses Ray's router, and this module imports ray only
    when `serve --ray` runs, never at import (the base install has no ray)."""
    if name == "SpreadRouter":
        return _spread_router()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _spread_router() -> type:
    """Power of two choices over every replica. Why not Ray's default router: it sends a proxy's requests to
    the replicas on its own node until their ``max_ongoing_requests`` are full, and here that is set high so
    the app's own queue limit answers 503 (``_application``): the head node's replica took every request and
    the other nodes' idled. Two replicas picked at random, the one with fewer requests in flight wins."""
    from ray.serve.request_router import FIFOMixin, PendingRequest, RequestRouter, RunningReplica

    class SpreadRouter(FIFOMixin, RequestRouter):
        async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                                  pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
            if len(candidate_replicas) <= 2:
                return [list(candidate_replicas)]
            return [random.sample(candidate_replicas, 2)]

    SpreadRouter.__module__ = __name__
    return SpreadRouter


# -- on the driver -------------------------------------------------------------------------------------------
def _application(config: Config) -> Any:
    """The Serve application: one deployment whose replicas each run ``build_app(config)``."""
    from ray import serve

    def build() -> Starlette:  # a plain function (serve.ingress calls it on the replica); config travels with it
        return build_app(config)

    class EdgeAnime:
        async def check_health(self) -> None:
            await wait_until_loaded(self.app)  # type: ignore[attr-defined] # the ingress wrapper's app

    sizing = config.ray.serve
    if sizing.num_replicas == "auto":
        replicas: dict[str, Any] = {"autoscaling_config": {
            "min_replicas": sizing.min_replicas, "max_replicas": sizing.max_replicas,
            "initial_replicas": max(sizing.min_replicas, 1),
            "target_ongoing_requests": sizing.target_ongoing_requests}}
    else:
        replicas = {"num_replicas": sizing.num_replicas}
    deployment = serve.deployment(
        name=DEPLOYMENT_NAME, ray_actor_options={"num_cpus": sizing.replica_cpus},
        # The app's own admission (503 past max_in_flight + http.max_queue) is the limit, as on one box: Ray
        # never holds a request in its own queue in front of a replica that could answer it.
        max_ongoing_requests=config.http.max_connections,
        request_router_config={"request_router_class": ROUTER_PATH},
        graceful_shutdown_timeout_s=config.service.drain_timeout_seconds,
        max_constructor_retry_count=CONSTRUCTOR_RETRIES, **replicas)(serve.ingress(build)(EdgeAnime))
    return deployment.bind()


def _connect(address: str) -> None:
    """The driver joins the cluster; an address with no cluster behind it is one line, not Ray's traceback."""
    import ray

    _reachable(address)
    logging.getLogger("ray.serve").setLevel(logging.WARNING)  # its INFO lines say "will not be applied" of ours
    try:
        ray.init(**init_kwargs(address), logging_level=logging.WARNING, log_to_driver=False,
                 configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ClusterUnavailable(f"--ray {address}: cannot join the Ray cluster: {exc}; start one with `ray "
                                 "start --head` or give its address (HOST:PORT of the head node)") from None


def _reachable(address: str) -> None:
    """A HOST:PORT that accepts no connection is said at once: ``ray.init`` retries it for minutes."""
    try:
        why = unreachable(address)
    except ValueError:
        return  # not a HOST:PORT: Ray's own lookup and errors
    if why is not None:
        raise ClusterUnavailable(f"--ray {address}: no Ray cluster answers there ({why}); start "
                                 "one with `ray start --head`, or give the HOST:PORT its head printed")


def _start_serve(config: Config) -> bool:
    """Serve on the cluster with its proxy on http.host:http.port; True when this command started it (and so
    may shut it down). An edge-anime application already there is refused: deploying would replace it."""
    from ray import serve

    before = serve.status()
    if APP_NAME in before.applications:
        raise ClusterUnavailable(f"an application {APP_NAME!r} already runs on this Ray cluster (another "
                                 "`edge-anime serve --ray`?); stop it first (SIGTERM), or use another cluster")
    started = not before.proxies and not before.applications
    if not started:
        log.warning("Serve already runs on this cluster: its proxy keeps the address it was started with "
                    "(http.host/http.port of this config apply only when Serve starts)")
    host = config.http.host
    location = "EveryNode" if host in WILDCARD_HOSTS else "HeadOnly"
    serve.start(proxy_location=location, http_options={"host": host, "port": config.http.port})
    return started


@dataclass
class Replicas:
    """How many replicas run and how many are wanted, as `serve status` says."""

    running: int
    wanted: str

    def __str__(self) -> str:
        return f"{self.running} of {self.wanted} replicas running"


def _replicas(config: Config) -> Replicas:
    """The replicas RUNNING now (a lost one is RUNNING again only once Ray replaced it and it compiled)."""
    from ray import serve

    app = serve.status().applications.get(APP_NAME)
    deployment = app.deployments.get(DEPLOYMENT_NAME) if app is not None else None
    running = deployment.replica_states.get("RUNNING", 0) if deployment is not None else 0  # type: ignore[call-overload]
    return Replicas(int(running), _wanted(config))


def _deploy(config: Config) -> Future[None]:
    """``serve.run`` in a thread: it waits until every replica has its style (or the deploy fails), and the
    main thread stays free for SIGTERM meanwhile."""
    from ray import serve

    done: Future[None] = Future()

    def deploy() -> None:
        try:
            serve.run(_application(config), name=APP_NAME, route_prefix="/", blocking=False)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which judges it
            done.set_exception(exc)
        else:
            done.set_result(None)

    threading.Thread(target=deploy, name="edge-anime-deploy", daemon=True).start()
    return done


def _deploy_failure(exc: BaseException) -> UserError:
    """Ray's deploy error as one line: the style's reason when a replica said it (in the deployment's status
    message, a replica's traceback), else Ray's own words."""
    text = f"{exc}\n{_deployment_message()}"
    if STYLE_FAILED in text:
        return UserError(text.split(STYLE_FAILED, 1)[1].splitlines()[0].strip())
    said = str(exc).strip().splitlines()
    return UserError(f"the Ray Serve deployment failed: {said[-1] if said else type(exc).__name__}")


def _deployment_message() -> str:
    """What Serve says of the deployment (the last replica failure), or "" when it cannot say."""
    from ray import serve

    try:
        app = serve.status().applications.get(APP_NAME)
        deployment = app.deployments.get(DEPLOYMENT_NAME) if app is not None else None
        return deployment.message if deployment is not None else ""
    except Exception:  # noqa: BLE001 - only a better message: the failure itself is already known
        return ""


class _Signals:
    """What the handlers asked for; ``wake`` ends the main loop's wait at once."""

    def __init__(self) -> None:
        self.wake = threading.Event()
        self.stop = False
        self.reload = False

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_reload)

    def _on_stop(self, _signum: int, _frame: object) -> None:
        self.stop = True
        self.wake.set()

    def _on_reload(self, _signum: int, _frame: object) -> None:
        self.reload = True
        self.wake.set()


def serve_on_ray(config: Config, *, address: str, reload: Callable[[], Config], notify: Notify) -> int:
    """Deploy the app on the Ray cluster at ``address`` and keep it until SIGTERM/SIGINT; the exit status.
    ``reload`` reads the config again (SIGHUP); ``notify`` tells systemd (READY once every replica serves)."""
    try:
        import ray
        from ray import serve  # noqa: F401 - here, so a missing Serve is said before anything starts
    except ImportError as exc:
        raise UserError(f"serve --ray needs the ray extra ({exc.name} is missing): {RAY_INSTALL_HINT}") from None
    _connect(address)
    signals = _Signals()
    signals.install()  # after ray.init: Ray's core worker sets a SIGTERM handler of its own that aborts
    try:
        owns_serve = _start_serve(config)
        try:
            return _Session(config, address=address, reload=reload, notify=notify).run(signals)
        finally:
            _tear_down(owns_serve)
    finally:
        ray.shutdown()


class _Session:
    """The driver's loop: the deploy (and redeploys) in a thread, the replica count said when it changes."""

    def __init__(self, config: Config, *, address: str, reload: Callable[[], Config], notify: Notify) -> None:
        self.config, self.address, self._reload, self.notify = config, address, reload, notify
        self.where = f"http://{config.http.host}:{config.http.port}/"
        self.deploying: Future[None] | None = None
        self.ready = False
        self.said: Replicas | None = None

    def run(self, signals: _Signals) -> int:
        """Until SIGTERM/SIGINT: 0; a first deploy that fails: its exit status, the reason on stderr."""
        if not is_loopback(self.config.http.host):
            log.warning("serving on %s, reachable from other machines", self.where)
        log.info("deploying %s on the Ray cluster at %s (replicas: %s); each replica compiles its style "
                 "before it serves", APP_NAME, self.address, _wanted(self.config))
        self.deploying = _deploy(self.config)
        while not signals.stop:
            failure = self._deployed()
            if failure is not None:
                print(f"edge-anime serve: error: {failure}", file=sys.stderr)
                return failure.exit_status
            if self.ready:
                self._say_replicas()
            if signals.reload and self.deploying is None:
                signals.reload = False
                self._redeploy()
            signals.wake.wait(STATUS_POLL_SECONDS)
            signals.wake.clear()
        log.info("stopping: deleting %s from the Ray cluster (its replicas drain for up to %g s)", APP_NAME,
                 self.config.service.drain_timeout_seconds)
        return 0

    def _deployed(self) -> UserError | None:
        """A finished deploy: ready after the first; a failed first one is the command's failure, a failed
        redeploy only a log line (Ray keeps what it could not replace)."""
        if self.deploying is None or not self.deploying.done():
            return None
        exc, self.deploying = self.deploying.exception(), None
        if exc is None:
            self.ready = True
            return None
        if not self.ready:
            return _deploy_failure(exc)
        log.error("reload failed: %s", _deploy_failure(exc))
        return None

    def _say_replicas(self) -> None:
        try:
            now = _replicas(self.config)
        except Exception as exc:  # noqa: BLE001 - the head unreachable for a moment: said, and read again later
            log.warning("cannot read the replicas' state from Serve: %s", exc)
            return
        if now == self.said:
            return
        log.info("serving %s on Ray: %s", self.where, now)
        first = {"READY": 1} if self.said is None else {}
        self.notify(**first, STATUS=f"serving {self.where} on Ray: {now}")
        self.said = now

    def _redeploy(self) -> None:
        """SIGHUP: the config read again and deployed; one that does not validate changes nothing."""
        try:
            config = self._reload()
        except UserError as exc:
            log.error("reload failed, still serving the previous config: %s", exc)
            return
        if (config.http.host, config.http.port) != (self.config.http.host, self.config.http.port):
            log.warning("reload: http.host and http.port apply when Serve starts on the cluster, not now")
        log.info("reload: redeploying %s (Ray replaces the replicas one by one)", APP_NAME)
        self.config = config
        self.deploying = _deploy(config)


def _wanted(config: Config) -> str:
    sizing = config.ray.serve
    return (f"{sizing.min_replicas}-{sizing.max_replicas} (autoscaling)" if sizing.num_replicas == "auto"
            else str(sizing.num_replicas))


def _tear_down(owns_serve: bool) -> None:
    """The application deleted (its replicas drain, then close their Stylizers); Serve shut down when this
    command started it and nothing else runs on it."""
    from ray import serve

    with contextlib.suppress(Exception):  # already gone, or the cluster is: nothing left to delete
        serve.delete(APP_NAME, _blocking=True)
    with contextlib.suppress(Exception):  # the cluster gone: nothing left to shut down
        if owns_serve and not serve.status().applications:
            serve.shutdown()  # type: ignore[no-untyped-call] # Ray's own function, unannotated
