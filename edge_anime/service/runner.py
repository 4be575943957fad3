"""`edge-anime run`: the process shell around the watch core (edge_anime/watch/core.py).

The shell owns the process: signals (flags read between steps), sd_notify, the status file, metrics, logs,
reload and shutdown. Every decision about files is the core's. One thread (the main one) calls
``core.step``; the pipeline's threads only hand results to ``core.done``, so the core never sees two threads.
Every wait is a queue or event wait with a short timeout, so a stop or a watchdog ping is never late.
"""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..config import Config, is_loopback, load_config
from ..errors import ConfigError, UserError
from ..models import ModelInfo
from ..naming import UnsafeNameError, check_style
from ..preflight import check_paths
from ..watch.claim import Claim, WorkerDir
from ..watch.core import WatchCore, write_probe
from ..watch.detect import Detector
from ..watch.faults import describe
from ..watch.folders import Folders, prepare_folders
from ..watch.handler import Handler
from ..watch.journal import ProcessedList
from .accounting import Accounting
from .logs import setup_logging
from .notify import Notifier
from .signals import Flags
from .status import Status, write_status

log = logging.getLogger("edge_anime.service")

LOOP_WAIT_SECONDS = 0.1          # longest a loop step waits for a file or a result
STATUS_INTERVAL_SECONDS = 1.0    # status file and sd_notify STATUS= refresh
ORPHAN_CHECK_SECONDS = 30.0      # look for dead workers' claims (other boxes on a share) this often
CLOSE_GRACE_SECONDS = 5.0        # after the drain: how long closing the pipeline may take


class Service:
    """The watch-folder service; ``run()`` returns the exit status."""

    def __init__(self, config_path: Path | None, *, notifier: Notifier | None = None,
                 flags: Flags | None = None) -> None:
        self.config_path = config_path
        self.flags = flags or Flags().install()
        self.notifier = notifier or Notifier()
        self.acct = Accounting()
        self._next_status = 0.0
        self._next_watchdog = 0.0
        self._next_orphans = 0.0
        self._status_error = ""
        self.http: Any = None  # (ServerThread, Stylizer) with http.enabled

    # --- start ---------------------------------------------------------------------------------------
    def run(self) -> int:
        config = load_config(self.config_path)
        self.config_path = config.source
        self.log_form = setup_logging(log_format=config.service.log_format, level=config.service.log_level)
        if self.flags.stop.is_set():
            log.info("stopped before start (a signal during start-up)")
            return 0
        check_paths(config)  # what `config check` checks, refused here too (an unwritable folder included)
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
        _check_names(config, self.model)
        if self.flags.stop.is_set():
            log.info("stopped before serving (a signal during start-up)")
            return 0
        self.journal = ProcessedList(self.folders.work) if config.watch.after_success == "keep" else None
        handler = Handler(config=config, folders=self.folders, worker=self.worker, style=self.model.style,
                          model_hash=self.model.bin_sha256, journal=self.journal)
        self.detector = self._new_detector(config)
        self.core = WatchCore(handler=handler, worker=self.worker, source=self.detector, submit=self._submit,
                              probe=self._probe, events=self.acct, limit=1)
        self.pipeline = self._new_pipeline(config)
        self.clips = self._new_clips()
        if config.service.metrics.enabled:
            metrics = config.service.metrics
            try:
                self.acct.metrics.serve(host=metrics.host, port=metrics.port)
            except OSError as exc:
                raise ConfigError(f"service.metrics: cannot listen on {metrics.host}:{metrics.port}: "
                                  f"{exc.strerror}; choose another port or disable metrics") from None
            if not is_loopback(metrics.host):
                log.warning("metrics: serving on %s:%s, reachable from other machines (service.metrics."
                            "allow_remote: true)", metrics.host, metrics.port)
        self.http = self._start_http(config) if config.http.enabled else None
        self.acct.counts.recovered += self.core.recover_at_start()
        self.detector.start()
        self.acct.state = "ready"
        log.info("ready: worker %s, model %s, inbox %s (%s), outbox %s, logs %s", self.worker.worker_id,
                 self.model.name, self.folders.inbox, self.detector.mode, self.folders.outbox, self.log_form)
        self.notifier.send(READY=1, STATUS=self._status_line(), MAINPID=os.getpid())
        try:
            self._loop()
        finally:
            self.detector.stop()
        return self._shutdown()

    def _start_http(self, config: Config) -> Any:
        """HTTP beside the watch folder, on the same compiled style (one copy of the model in memory)."""
        try:
            from ..http.app import create_app
            from ..http.server import ServerThread, make_server
        except ImportError as exc:
            raise ConfigError(f"http.enabled: true needs the http extra ({exc.name} is missing): "
                              "pip install 'edge-anime[http]'") from None
        from ..stylizer import Stylizer

        stylizer = Stylizer(config, engine=(self.model, self.engine))
        app = create_app(config, stylizer=stylizer, registry=self.acct.metrics.registry)  # one /metrics for both
        thread = ServerThread(make_server(app, config))
        thread.start(where=f"{config.http.host}:{config.http.port}")
        log.info("http: serving http://%s:%d/ beside the watch folder", config.http.host, config.http.port)
        return thread, stylizer

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

    def _load_engine(self, config: Config) -> tuple[ModelInfo, Any]:
        """The style's variant and precision chosen for this box (measured once, then cached), compiled: the
        same choice as stylize and the Python API. Engine turns OpenVINO's errors into ModelError."""
        from ..choice import open_engine

        return open_engine(config)

    def _new_pipeline(self, config: Config) -> Any:
        from ..pipeline import Pipeline

        pipeline = Pipeline(self.engine, config,
                            on_done=lambda result: self.core.done(result.job.tag, result.error, result))
        self.core.limit = pipeline.max_in_flight  # the pipeline resolves "auto"; one rule, one place
        return pipeline

    def _new_clips(self) -> Any:
        """Clips (video.extensions) run one at a time beside the photos, on the shell's current pipeline."""
        from ..video.clips import ClipRunner

        return ClipRunner(pipeline=lambda: self.pipeline, config=lambda: self.config, done=self.core.done)

    def _submit(self, claim: Claim, dst: Path) -> None:
        from ..pipeline import Job
        from ..video import is_clip

        if is_clip(claim.path.name, self.config.video):  # the one dispatch point: a clip is a video job
            self.clips.submit(claim, dst)
            return
        self.pipeline.submit(Job(src=claim.path, dst=dst, tag=claim))

    def _probe(self) -> None:
        """Can the box write again? The state folders, the outbox and the status file's folder."""
        write_probe([self.folders.work, self.folders.outbox, self.config.status_file().parent])

    def _new_detector(self, config: Config) -> Detector:
        skip = self.journal.contains if self.journal is not None else None
        return Detector(self.folders.inbox, config.watch, skip=skip, also=config.video.extensions)

    # --- the loop ------------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self.flags.stop.is_set():
            self._housekeeping()
            if self.flags.reload:
                self.flags.reload = False
                self._reload()
                continue
            self.core.step(LOOP_WAIT_SECONDS)

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if self.notifier.watchdog_interval_s and now >= self._next_watchdog:
            self.notifier.send(WATCHDOG=1)
            self._next_watchdog = now + self.notifier.watchdog_interval_s
        if now >= self._next_status:
            self._write_status()
            self._next_status = now + STATUS_INTERVAL_SECONDS
        if now >= self._next_orphans and self.acct.state == "ready":
            if self._next_orphans:
                for claim in self.core.adopt_orphans():
                    log.info("took over %s from a dead worker", claim.rel)
            self._next_orphans = now + ORPHAN_CHECK_SECONDS

    def _status_line(self) -> str:
        self.acct.counts.in_flight = len(self.core.in_flight)
        self.acct.counts.queued = self.detector.pending() + self.core.waiting()
        return self.acct.status_line(self.core.pause)

    def _write_status(self) -> None:
        line = self._status_line()
        self.acct.update_gauges(self.core.pause)
        status = Status(state=self.acct.shown_state(self.core.pause), worker_id=self.worker.worker_id,
                        model=self.model.name, detector=self.detector.mode, config=str(self.config_path),
                        config_hash=self.core.handler.config_hash, counts=self.acct.counts, last=self.acct.last,
                        started=self.acct.started, paused=self.acct.pause_info(self.core.pause),
                        variant=str((self.engine.choice or {}).get("summary", "")), clip=self.clips.progress())
        self.acct.metrics.clip_progress(status.clip)
        try:
            write_status(self.config.status_file(), status)
        except OSError as exc:
            why = describe(exc)
            if why != self._status_error:  # once per change, not every second of a full disk
                log.warning("status file: %s", why)
                self._status_error = why
            self.core.note_fault(exc)
        else:
            self._status_error = ""
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
        self.acct.state = "reloading"
        self.notifier.send(RELOADING=1, STATUS="reloading",
                           MONOTONIC_USEC=time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000)
        try:
            self._apply(old, new)
        except UserError as exc:
            log.error("reload: %s; keeping the running config", exc)
        finally:
            self.acct.state = "ready"
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
                log.warning("reload: jobs still in flight after %s; will try again",
                            _seconds(new.service.drain_timeout_seconds))
                self.flags.reload = True
                return
            if engine_changed:  # after the drain: a drain timeout must not throw a compiled engine away
                with self._startup_watchdog():  # the loop cannot ping systemd during a compile
                    model, engine = self._load_engine(new)
            _check_names(new, model)
            self.pipeline.close()
            self.model, self.engine = model, engine
            self.pipeline = self._new_pipeline(new)
        if new.watch != old.watch:
            self.detector.stop()
            if new.watch.after_success == "keep" and self.journal is None:
                self.journal = ProcessedList(self.folders.work)
            self.core.handler.journal = self.journal
            self.detector = self._new_detector(new)
            self.core.source = self.detector
            self.detector.start()
        if new.service.log_format != old.service.log_format or new.service.log_level != old.service.log_level:
            self.log_form = setup_logging(log_format=new.service.log_format, level=new.service.log_level)
        if new.service.metrics != old.service.metrics:
            log.warning("reload: service.metrics changes apply at the next restart")
        if self.http is not None and (engine_changed or new.http != old.http):
            log.warning("reload: the HTTP service keeps its style and http settings until the next restart")
        self.core.handler.update(config=new, style=self.model.style, model_hash=self.model.bin_sha256)
        self.config = new
        log.info("reloaded %s (%s)", self.config_path,
                 "recompiled" if engine_changed else "pipeline rebuilt" if pipeline_changed else "no recompile")

    def _give_back_clips(self) -> None:
        """Stopping: a clip not finished within the drain timeout is cancelled (its temp file removed) and goes
        back to the inbox untouched, with the clips queued behind it; the next start takes them again."""
        for claim in self.clips.stop():
            self.core.in_flight.pop(claim.token, None)
            try:
                verdict = self.core.handler.give_back(claim, reason="stopping: the clip was not finished")
            except OSError as exc:  # it stays claimed in work/; the next start recovers it
                log.warning("stopping: %s stays in work/: %s", claim.rel, describe(exc))
                continue
            self.acct.verdict(claim, verdict, None)

    def _wait_in_flight(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.core.in_flight and time.monotonic() < deadline:
            self._housekeeping()
            self.core.take_results(wait_s=LOOP_WAIT_SECONDS)
        return not self.core.in_flight

    # --- stop ----------------------------------------------------------------------------------------
    def _shutdown(self) -> int:
        """Intake has stopped: finish in-flight work within the drain timeout, give waiting claims back."""
        self.acct.state = "stopping"
        self.notifier.send(STOPPING=1, STATUS=self._status_line())
        timeout_s = self.config.service.drain_timeout_seconds
        log.info("stopping: %d in flight, draining for up to %s", len(self.core.in_flight), _seconds(timeout_s))
        self.core.give_back_waiting()
        if self.http is not None:  # requests in flight finish first; the server then stops by itself
            (server, stylizer), self.http = self.http, None
            server.stop(timeout_s)
            stylizer.close()
        self._wait_in_flight(timeout_s)
        self._give_back_clips()
        drained = not self.core.in_flight
        if not drained:
            log.warning("stopping: %d job(s) did not finish in %s; they stay in %s and the next start "
                        "finishes them (no output is half-written)", len(self.core.in_flight),
                        _seconds(timeout_s), self.worker.path)
        closer = threading.Thread(target=self.pipeline.close, name="edge-anime-close", daemon=True)
        closer.start()
        closer.join(CLOSE_GRACE_SECONDS if drained else 0.5)
        self.acct.metrics.close()
        self.acct.state = "stopped"
        self._write_status()
        self.notifier.close()
        log.info("stopped: %s", self.acct.counts.summary())
        if closer.is_alive():  # a pipeline thread stuck in a job: exit anyway, work/ keeps the claim
            logging.shutdown()
            self.worker.release()
            os._exit(0)
        return 0


def _check_names(config: Config, model: ModelInfo) -> None:
    """A model whose ``style`` would put outputs outside the outbox is refused before any file is taken."""
    try:
        check_style(config.output.name_template, model.style)
    except UnsafeNameError as exc:
        raise ConfigError(str(exc)) from None


def _seconds(value: float) -> str:
    """'0.2 s', '30 s': never 'up to 0 s' for a fraction of a second."""
    return f"{value:g} s"
