"""``batch --ray``: the items as a Ray Data job, each actor one Stylizer (compiled once, the model cache per node).

Files are listed on the driver and read on the workers, so inputs and outputs must be on a filesystem every
node mounts at the same path (docs/scale.md). Ray Data restarts an actor whose process or node dies and redoes
its batch (its actor pools default to ``max_restarts=-1`` and ``max_task_retries=-1``; actors are spread over
the nodes, ``DataContext.scheduling_strategy`` "SPREAD"); the batch's done outputs are skipped on
the retry (``work.stylize_items``) and a half-written one was only ever a temp file, which the command removes
at the end. Each actor takes two batches at once (``max_concurrent_calls_per_actor``), so its pipeline never
drains between batches: the Stylizer is thread-safe and bounds its own in-flight work.

Ray is imported here only: the base install never needs it (the ``ray`` extra).
"""
from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import UserError
from ..rayaddress import DEFAULT_PORT, RAY_INSTALL_HINT, init_kwargs, unreachable
from ..runtime.host import HUGE_PAGES_TUNABLE, usable_cores
from .plan import Item
from .work import Outcome, stylize_items

if TYPE_CHECKING:
    from ..config import Config
    from ..core.stylizer import Stylizer

log = logging.getLogger(__name__)
CALLS_PER_ACTOR = 2  # batches an actor runs at once, so its pipeline is fed across a batch's end


class StylizeActor:
    """One per node by default: holds a Stylizer for the whole job (Ray Data builds it once per actor)."""

    def __init__(self, config: Config, style: str, cpus: float) -> None:
        from ..core.stylizer import Stylizer

        self.style = style
        self.stylizer: Stylizer = Stylizer(within_reservation(config, cpus))

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, list[Any]]:
        items = [Item(str(src), str(dst)) for src, dst in zip(batch["src"], batch["dst"])]
        rows = [outcome.row() for outcome in stylize_items(self.stylizer, items, style=self.style)]
        return {key: [row[key] for row in rows] for key in rows[0]} if rows else {}


def within_reservation(config: Config, cpus: float, host_cpus: int | None = None) -> Config:
    """``config`` with the engine's threads bounded by the CPUs Ray reserved for the actor, when the config
    leaves them to the plugin (``device.inference_num_threads: auto``) and the reservation is less than the
    host's cores. Ray's reservation is bookkeeping, OpenVINO sees every core: two actors of one CPU on a 2-core
    node (or two nodes on one box) would each run the plugin's two streams on both cores, four streams fighting
    over two. An actor that holds its whole node (the default) keeps the plugin's own choice."""
    host = host_cpus if host_cpus is not None else usable_cores()  # the affinity mask, not the machine
    threads = max(1, int(cpus))
    if config.device.inference_num_threads != "auto" or threads >= host:
        return config
    device = config.device.model_copy(update={"inference_num_threads": threads})
    return config.model_copy(update={"device": device})


def pool_size(config: Config, nodes: Sequence[dict[str, Any]]) -> tuple[int, float]:
    """(actors, CPUs each) from ``ray.batch`` and the alive nodes: auto is one actor per node with CPUs,
    each reserving the smallest such node's CPUs, so no node gets two while another gets none."""
    cpus = [float(node.get("Resources", {}).get("CPU", 0)) for node in nodes if node.get("Alive")]
    cpus = [c for c in cpus if c > 0]
    if not cpus:
        raise UserError("batch --ray: the cluster has no node with CPUs")
    section = config.ray.batch
    actors = len(cpus) if section.actors == "auto" else int(section.actors)
    actor_cpus = min(cpus) if section.actor_cpus == "auto" else float(section.actor_cpus)
    return actors, actor_cpus


def actor_environment() -> dict[str, Any] | None:
    """The huge-page tunable the command re-executed itself with (``cli.entry``), for the actors too: glibc
    reads it at process start only, and Ray starts the actor processes, not this one. None when the driver
    runs without it (opted out, or the box's THP setting makes it moot)."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    return {"env_vars": {"GLIBC_TUNABLES": tunables}} if HUGE_PAGES_TUNABLE in tunables else None


def last_line(exc: BaseException) -> str:
    """The line of a Ray error that says what went wrong: Ray wraps the worker's traceback in its message,
    and the cause is the last line of it."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def check_reachable(address: str) -> None:
    """Fail at once, naming the address, when nothing listens there (``rayaddress`` says why it matters)."""
    try:
        why = unreachable(address)
    except ValueError:
        raise UserError(f"--ray {address}: expected HOST:PORT of the Ray head (port {DEFAULT_PORT} by default), "
                        "or 'local'") from None
    if why is not None:
        raise UserError(f"--ray {address}: cannot reach the Ray head there ({why}); is "
                        "`ray start --head` running on that box and the port open? (docs/scale.md)")


def run_on_ray(address: str, config: Config, items: Sequence[Item], *, style: str,
               on_outcome: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Every item's outcome, in the order they finished; ``address`` "local" starts Ray on this box."""
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise UserError(f"batch --ray needs the ray extra ({exc.name} is missing): {RAY_INSTALL_HINT}") from None
    check_reachable(address)
    if address != "local" and ":" not in address:
        address = f"{address}:{DEFAULT_PORT}"
    try:
        ray.init(**init_kwargs(address), logging_level=logging.WARNING, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UserError(f"--ray {address}: cannot join the Ray cluster: {exc}") from None
    try:
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False  # the command draws its own, counting this job's outcomes
        logging.getLogger("ray.data").setLevel(logging.WARNING)  # per-dataset INFO lines say nothing to a user
        actors, actor_cpus = pool_size(config, ray.nodes())  # type: ignore[no-untyped-call]
        batch_size = config.ray.batch.batch_size
        log.info("batch: %d inputs on Ray at %s: %d actor(s) of %g CPU, batches of %d", len(items), address,
                 actors, actor_cpus, batch_size)
        dataset = ray.data.from_items([item.row() for item in items],
                                      override_num_blocks=max(1, math.ceil(len(items) / batch_size)))
        stylized = dataset.map_batches(
            StylizeActor, fn_constructor_kwargs={"config": config, "style": style, "cpus": actor_cpus},
            batch_size=batch_size, batch_format="numpy", num_cpus=actor_cpus, runtime_env=actor_environment(),
            compute=ray.data.ActorPoolStrategy(min_size=1, max_size=actors, initial_size=actors,
                                               max_concurrent_calls_per_actor=CALLS_PER_ACTOR,
                                               enable_true_multi_threading=True))
        outcomes: dict[str, Outcome] = {}
        try:
            for row in stylized.iter_rows():
                outcome = Outcome.from_row(row)
                if outcome.src in outcomes:  # a batch redone after its node was lost: the first report stands
                    continue
                outcomes[outcome.src] = outcome
                if on_outcome is not None:
                    on_outcome(outcome)
        except Exception as exc:  # noqa: BLE001 - Ray's error types vary by release; every one ends the job
            # An actor that cannot start (a style missing on one node) or the head lost: what finished is
            # kept and counted, the rest is reported as unfinished, and a re-run picks it up.
            log.error("batch: the Ray job broke off after %d of %d inputs: %s", len(outcomes), len(items),
                      last_line(exc))
        return list(outcomes.values())
    finally:
        ray.shutdown()
