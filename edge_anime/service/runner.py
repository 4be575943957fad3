"""`edge-anime run`: the watch-folder service's main loop.

One thread (the main one) owns every decision: it takes ready names from the detector, claims them,
submits jobs, and commits results that the pipeline hands back through a queue (``on_done`` only enqueues,
so it never blocks a pipeline thread and the handler never sees two threads). Signals only set flags that
the loop reads between steps; every wait is a queue or event wait with a short timeout, so a stop or a
watchdog ping is never late.
"""
from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import logging
import os
import queue
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..config import Config, load_config
from ..errors import ConfigError, TransientError, UserError
from ..models import ModelInfo, resolve_model
from ..watch.claim import Claim, WorkerDir, adopt_orphans, load_claim, sweep_names
from ..watch.detect import Detector
from ..watch.folders import Folders, prepare_folders
from ..watch.handler import Handler, Outcome, Verdict
from ..watch.journal import ProcessedList
from .logs import FIELDS_ATTR, setup_logging
from .metrics import Metrics
from .notify import Notifier
from .status import Counts, Status, write_status

log = logging.getLogger("edge_anime.service")

LOOP_WAIT_SECONDS = 0.1          # longest a loop step waits for a file or a result
STATUS_INTERVAL_SECONDS = 1.0    # status file and sd_notify STATUS= refresh
ORPHAN_CHECK_SECONDS = 30.0      # look for dead workers' claims (other boxes on a share) this often
RETRY_BACKLOG_PER_SLOT = 4       # claims waiting for a retry, per in-flight slot, before intake pauses
CLOSE_GRACE_SECONDS = 5.0        # after the drain: how long closing the pipeline may take


class Service:
    """The watch-folder service; ``run()`` returns the exit status."""

    def __init__(self, config_path: Path | None, *, notifier: Notifier | None = None) -> None:
        self.config_path = config_path
        self.notifier = notifier or Notifier()
        self._stop = threading.Event()
        self._reload_requested = False
        self._results: queue.Queue[Any] = queue.Queue()
        self._in_flight: dict[str, Claim] = {}
        self._retries: list[tuple[float, int, Claim]] = []
        self._seq = itertools.count()
        self._requeue: deque[Claim] = deque()
        self.counts = Counts()
        self.metrics = Metrics()
        self._last: dict[str, Any] | None = None
        self._next_status = 0.0
        self._next_watchdog = 0.0
        self._next_orphans = 0.0
        self._state = "starting"
        self._started = time.time()

    # --- start ---------------------------------------------------------------------------------------
    def run(self) -> int:
        self._install_signals()
        config = load_config(self.config_path)
        self.config_path = config.source
        self.log_form = setup_logging(log_format=config.service.log_format, level=config.service.log_level)
        self.folders = Folders.from_config(config.watch)
        prepare_folders(self.folders)
        worker_id = config.watch.worker_id
        if worker_id == "auto":
            worker_id = f"{socket.gethostname()}-{os.getpid()}"
        self.worker = WorkerDir(self.folders.work, worker_id)
        self.worker.acquire()
        try:
            return self._serve(config)
        finally:
            self.worker.release()

    def _serve(self, config: Config) -> int:
        self.config = config
        with self._startup_watchdog():  # a cold compile on a slow box can outlast WatchdogSec
            self.model, self.engine = self._load_engine(config)
        self.pipeline = self._new_pipeline(config)
        self.journal = ProcessedList(self.folders.work) if config.watch.after_success == "keep" else None
        self.handler = Handler(config=config, folders=self.folders, worker=self.worker, style=self.model.style,
                               model_hash=self.model.bin_sha256, journal=self.journal)
        self.detector = self._new_detector(config)
        if config.service.metrics.enabled:
            metrics = config.service.metrics
            try:
                self.metrics.serve(host=metrics.host, port=metrics.port)
            except OSError as exc:
                raise ConfigError(f"service.metrics: cannot listen on {metrics.host}:{metrics.port}: "
                                  f"{exc.strerror}; choose another port or disable metrics") from None
        self._recover_at_start()
        self.detector.start()
        self._state = "ready"
        log.info("ready: worker %s, model %s, inbox %s (%s), outbox %s, logs %s", self.worker.worker_id,
                 self.model.name, self.folders.inbox, self.detector.mode, self.folders.outbox, self.log_form)
        self.notifier.send(READY=1, STATUS=self._status_line(), MAINPID=os.getpid())
        try:
            self._loop()
        finally:
            self.detector.stop()
        return self._shutdown()

    @contextlib.contextmanager
    def _startup_watchdog(self) -> Iterator[None]:
        """Keep systemd's watchdog fed while the main loop cannot (model compile at start)."""
        interval = self.notifier.watchdog_interval_s
        if not interval:
            yield
            return
        done = threading.Event()

        def ping() -> None:
            while not done.wait(interval):
                self.notifier.send(WATCHDOG=1)

        pinger = threading.Thread(target=ping, name="edge-anime-watchdog", daemon=True)
        pinger.start()
        try:
            yield
        finally:
            done.set()
            pinger.join()

    def _install_signals(self) -> None:
        def stop(signum: int, _frame: object) -> None:
            self._stop.set()

        def reload(signum: int, _frame: object) -> None:
            self._reload_requested = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGHUP, reload)

    def _load_engine(self, config: Config) -> tuple[ModelInfo, Any]:
        from ..engine import Engine

        model = resolve_model(config.model.path, search_dirs=list(config.model.dirs))
        return model, Engine(model, config.device)  # Engine turns OpenVINO's errors into ModelError

    def _new_pipeline(self, config: Config) -> Any:
        from ..pipeline import Pipeline

        pipeline = Pipeline(self.engine, config, on_done=self._results.put)
        self._limit = pipeline.max_in_flight  # the pipeline resolves "auto"; one rule, one place
        return pipeline

    def _new_detector(self, config: Config) -> Detector:
        skip = None
        if self.journal is not None:
            journal = self.journal
            skip = journal.contains
        return Detector(self.folders.inbox, config.watch, skip=skip)

    def _recover_at_start(self) -> None:
        adopted = adopt_orphans(self.worker)
        swept = sweep_names(self.folders.work)
        if swept:
            log.info("recovery: released %d output name reservation(s) no claim held", swept)
        claims = list(self.worker.claims())
        if claims:
            log.info("recovery: %d claim(s) left in work/ (%d from dead workers)", len(claims), len(adopted))
        for claim in claims:
            self._recover(claim)

    def _recover(self, claim: Claim) -> None:
        self.counts.recovered += 1
        try:
            decision = self.handler.recover(claim)
        except OSError as exc:  # nothing else ever looks at this worker's work/: retry it, with backoff
            log.error("recovery of %s failed: %s; retrying later", json.dumps(claim.rel), exc)
            decision = self._transient(claim, exc, stage="recover")
        if isinstance(decision, Verdict):
            self._account(claim, decision, result=None)
        else:
            self._requeue.append(claim)

    # --- the loop ------------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            self._housekeeping()
            self._take_results(block=False)
            if self._reload_requested:
                self._reload_requested = False
                self._reload()
                continue
            if len(self._in_flight) >= self._limit:
                self._take_results(block=True)
                continue
            # Many claims waiting for a retry (a full disk): stop taking new files until they clear.
            intake = len(self._retries) < self._limit * RETRY_BACKLOG_PER_SLOT
            claim = self._next_claim(intake=intake)
            if claim is not None:
                self._start(claim)
            elif not intake:
                self._take_results(block=True)  # the loop's wait while nothing is due

    def _next_claim(self, *, intake: bool) -> Claim | None:
        """Recovered claims first, then due retries, then (with ``intake``) a new file from the inbox."""
        if self._requeue:
            return self._requeue.popleft()
        if self._retries and self._retries[0][0] <= time.monotonic():
            return heapq.heappop(self._retries)[2]
        if not intake:
            return None
        rel = self.detector.get(timeout=LOOP_WAIT_SECONDS)
        if rel is None:
            return None
        try:
            return self.worker.claim(rel, self.folders.inbox)
        except OSError as exc:
            log.warning("cannot take %s: %s", json.dumps(rel), exc)
            return None

    def _start(self, claim: Claim) -> None:
        from ..pipeline import Job

        try:
            decision = self.handler.recover(claim) if claim.dst is not None else self.handler.prepare(claim)
        except OSError as exc:  # the outbox or done/ unusable for now: keep the claim, try again later
            decision = self._transient(claim, exc, stage="prepare")
        if isinstance(decision, Verdict):
            self._account(claim, decision, result=None)
            return
        self._in_flight[claim.token] = claim
        self.pipeline.submit(Job(src=claim.path, dst=decision, tag=claim))

    def _take_results(self, *, block: bool) -> None:
        try:
            result = self._results.get(timeout=LOOP_WAIT_SECONDS) if block else self._results.get_nowait()
        except queue.Empty:
            return
        while True:
            self._commit(result)
            try:
                result = self._results.get_nowait()
            except queue.Empty:
                return

    def _commit(self, result: Any) -> None:
        claim: Claim = result.job.tag
        self._in_flight.pop(claim.token, None)
        try:
            verdict = self.handler.finish(claim, result.error)
        except OSError as exc:
            log.error("commit of %s failed: %s; retrying later", json.dumps(claim.rel), exc)
            verdict = self._transient(claim, exc, stage="commit")
        self._account(claim, verdict, result=result)

    def _transient(self, claim: Claim, exc: OSError, *, stage: str) -> Verdict:
        """An OSError around a job takes the handler's transient path: it counts as an attempt, backs off,
        and ends in failed/ after watch.retry.max_attempts, so an unusable outbox never retries forever."""
        try:
            return self.handler.finish(claim, TransientError(str(exc), stage=stage))
        except OSError as again:  # work/ or failed/ unusable too: keep the claim, wait the longest
            return Verdict(Outcome.RETRY, reason=str(again), stage=stage,
                           delay_s=self.config.watch.retry.max_seconds)

    def _account(self, claim: Claim, verdict: Verdict, *, result: Any) -> None:
        """Counters, metrics and the one log line per image."""
        timings = dict(getattr(result, "timings_s", None) or {})
        fields: dict[str, Any] = {"file": claim.rel, "result": verdict.outcome.value}
        if verdict.outcome is Outcome.DONE:
            self.counts.processed += 1
            self.metrics.processed.inc()
            self.metrics.observe(timings)
            fields.update(output=str(verdict.where), in_size=getattr(result, "in_size", None),
                          out_size=getattr(result, "out_size", None), timings_s=timings)
            log.info("done %s %s -> %s %s%s", json.dumps(claim.rel), _size(fields["in_size"]),
                     json.dumps(verdict.where.name if verdict.where else ""), _size(fields["out_size"]),
                     _timings(timings) if result is not None else " (recovered: output was complete)",
                     extra={FIELDS_ATTR: fields})
        elif verdict.outcome is Outcome.FAILED:
            self.counts.failed += 1
            self.metrics.failed.labels(stage=verdict.stage).inc()
            fields.update(stage=verdict.stage, reason=verdict.reason, moved_to=str(verdict.where))
            log.warning("failed %s at %s: %s", json.dumps(claim.rel), verdict.stage, verdict.reason,
                        extra={FIELDS_ATTR: fields})
        elif verdict.outcome is Outcome.RETRY:
            self.counts.retried += 1
            self.metrics.retries.inc()
            heapq.heappush(self._retries, (time.monotonic() + verdict.delay_s, next(self._seq), claim))
            fields.update(stage=verdict.stage, reason=verdict.reason, attempt=claim.attempts, delay_s=verdict.delay_s)
            log.warning("retry %s in %.1f s (attempt %d of %d) at %s: %s", json.dumps(claim.rel), verdict.delay_s,
                        claim.attempts, self.config.watch.retry.max_attempts, verdict.stage, verdict.reason,
                        extra={FIELDS_ATTR: fields})
        else:
            log.info("left %s in the inbox: %s", json.dumps(claim.rel), verdict.reason, extra={FIELDS_ATTR: fields})
        self._last = {"file": claim.rel, "result": verdict.outcome.value, "time": time.time(),
                      "seconds": round(timings.get("total", 0.0), 4)}

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if self.notifier.watchdog_interval_s and now >= self._next_watchdog:
            self.notifier.send(WATCHDOG=1)
            self._next_watchdog = now + self.notifier.watchdog_interval_s
        if now >= self._next_status:
            self._write_status()
            self._next_status = now + STATUS_INTERVAL_SECONDS
        if now >= self._next_orphans and self._state == "ready":
            if self._next_orphans:
                for folder in adopt_orphans(self.worker):
                    claim = load_claim(folder)
                    if claim is not None:
                        log.info("took over %s from a dead worker", json.dumps(claim.rel))
                        self._recover(claim)
            self._next_orphans = now + ORPHAN_CHECK_SECONDS

    def _status_line(self) -> str:
        self.counts.in_flight = len(self._in_flight)
        self.counts.queued = self.detector.pending() + len(self._requeue) + len(self._retries)
        return f"{self._state}: {self.counts.summary()}"

    def _write_status(self) -> None:
        line = self._status_line()
        self.metrics.queue_depth.set(self.counts.queued)
        self.metrics.in_flight.set(self.counts.in_flight)
        status = Status(state=self._state, worker_id=self.worker.worker_id, model=self.model.name,
                        detector=self.detector.mode, config=str(self.config_path),
                        config_hash=self.handler.config_hash, counts=self.counts, last=self._last,
                        started=self._started)
        try:
            write_status(self.config.status_file(), status)
        except OSError as exc:
            log.warning("status file %s: %s", self.config.status_file(), exc)
        self.notifier.send(STATUS=line)

    # --- reload --------------------------------------------------------------------------------------
    def _reload(self) -> None:
        """SIGHUP: apply a changed config; recompile only when model or device changed. Queued files stay in
        the inbox, in-flight ones finish under the old settings, so nothing is lost."""
        old = self.config
        try:
            new = load_config(self.config_path)
        except UserError as exc:
            log.error("reload: %s; keeping the running config", exc)
            return
        new = self._keep_fixed_watch_keys(old, new)
        self._state = "reloading"
        self.notifier.send(RELOADING=1, STATUS="reloading", MONOTONIC_USEC=time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000)
        try:
            self._apply(old, new)
        except UserError as exc:
            log.error("reload: %s; keeping the running config", exc)
        finally:
            self._state = "ready"
            self.notifier.send(READY=1, STATUS=self._status_line())

    @staticmethod
    def _keep_fixed_watch_keys(old: Config, new: Config) -> Config:
        fixed = ("root", "inbox", "work", "outbox", "done", "failed", "worker_id")
        changed = [k for k in fixed if getattr(old.watch, k) != getattr(new.watch, k)]
        if not changed:
            return new
        log.warning("reload: watch.%s changed; folders and worker_id apply at the next restart",
                    ", watch.".join(changed))
        keep = {k: getattr(old.watch, k) for k in fixed}
        return new.model_copy(update={"watch": new.watch.model_copy(update=keep)})

    def _apply(self, old: Config, new: Config) -> None:
        engine_changed = new.model != old.model or new.device != old.device
        pipeline_changed = engine_changed or any(getattr(new, s) != getattr(old, s)
                                                 for s in ("image", "output", "pipeline"))
        model, engine = (self.model, self.engine)
        if pipeline_changed:
            if not self._wait_in_flight(new.service.drain_timeout_seconds):
                log.warning("reload: jobs still in flight after %.0f s; will try again",
                            new.service.drain_timeout_seconds)
                self._reload_requested = True
                return
            if engine_changed:  # after the drain: a drain timeout must not throw a compiled engine away
                with self._startup_watchdog():  # the loop cannot ping systemd during a compile
                    model, engine = self._load_engine(new)
            self.pipeline.close()
            self.model, self.engine = model, engine
            self.pipeline = self._new_pipeline(new)
        if new.watch != old.watch:
            self.detector.stop()
            if new.watch.after_success == "keep" and self.journal is None:
                self.journal = ProcessedList(self.folders.work)
            self.handler.journal = self.journal
            self.detector = self._new_detector(new)
            self.detector.start()
        if new.service.log_format != old.service.log_format or new.service.log_level != old.service.log_level:
            self.log_form = setup_logging(log_format=new.service.log_format, level=new.service.log_level)
        if new.service.metrics != old.service.metrics:
            log.warning("reload: service.metrics changes apply at the next restart")
        self.handler.update(config=new, style=self.model.style, model_hash=self.model.bin_sha256)
        self.config = new
        log.info("reloaded %s (%s)", self.config_path,
                 "recompiled" if engine_changed else "pipeline rebuilt" if pipeline_changed else "no recompile")

    def _wait_in_flight(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self._in_flight and time.monotonic() < deadline:
            self._housekeeping()
            self._take_results(block=True)
        return not self._in_flight

    # --- stop ----------------------------------------------------------------------------------------
    def _shutdown(self) -> int:
        """Intake has stopped: finish in-flight work within the drain timeout, give waiting claims back."""
        self._state = "stopping"
        self.notifier.send(STOPPING=1, STATUS=self._status_line())
        timeout_s = self.config.service.drain_timeout_seconds
        log.info("stopping: %d in flight, draining for up to %.0f s", len(self._in_flight), timeout_s)
        waiting = list(self._requeue) + [c for _, _, c in self._retries]
        self._requeue.clear()
        self._retries.clear()
        for claim in waiting:  # untouched inputs go back; one whose output exists is committed at next start
            if claim.dst is None or not os.path.exists(claim.dst):
                self.handler.give_back(claim, reason="stopping")
        drained = self._wait_in_flight(timeout_s)
        if not drained:
            log.warning("stopping: %d job(s) did not finish in %.0f s; they stay in %s and the next start "
                        "finishes them (no output is half-written)", len(self._in_flight), timeout_s,
                        self.worker.path)
        closer = threading.Thread(target=self.pipeline.close, name="edge-anime-close", daemon=True)
        closer.start()
        closer.join(CLOSE_GRACE_SECONDS if drained else 0.5)
        self.metrics.close()
        self._state = "stopped"
        self._write_status()
        self.notifier.close()
        log.info("stopped: %s", self.counts.summary())
        if closer.is_alive():  # a pipeline thread stuck in a job: exit anyway, work/ keeps the claim
            logging.shutdown()
            self.worker.release()
            os._exit(0)
        return 0


def _size(size: Any) -> str:
    return f"{size[0]}x{size[1]}" if size else "?"


def _timings(timings: dict[str, float]) -> str:
    if not timings:
        return ""
    parts = " ".join(f"{k}={v * 1000:.0f}ms" for k, v in timings.items() if k != "total")
    return f" in {timings.get('total', sum(timings.values())):.3f} s ({parts})"
