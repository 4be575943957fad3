"""`edge-anime run`: the process shell around the watch core (edge_anime/watch/core.py).

The shell owns the process: signals (flags read between steps), sd_notify, the status file, metrics, logs,
reload and shutdown. Every decision about files is the core's. Pictures run through the one ``Stylizer``
(edge_anime/core/stylizer.py), the same object the Python API and the HTTP service use: the default style and the
styles of ``model.styles``, each compiled on first use; a first-level inbox folder named after a style routes
its files to that style (``inputs.InputFilter``). One thread (the main one) calls
``core.step``; the pipeline's threads only hand results to ``core.done``, so the core never sees two threads.
Every wait is a queue or event wait with a short timeout, so a stop or a watchdog ping is never late.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import AUTO, WATCH_FOLDERS, Config, ModelSection, is_loopback, load_config
from ..core.naming import child
from ..errors import ConfigError, UserError
from ..fsutil import TEMP_PREFIX
from ..inputs import InputFilter
from ..logs import setup_logging
from ..preflight import check_paths
from ..ticking import ticking
from ..video import is_clip
from ..watch.claim import Claim, WorkerDir
from ..watch.core import WatchCore, free_bytes, write_probe
from ..watch.detect import Detector, scan
from ..watch.faults import Kind, StyleFault, classify, describe
from ..watch.folders import Folders, check_style_names, prepare_folders
from ..watch.handler import Handler
from ..watch.journal import ProcessedList
from .accounting import Accounting
from .clips import ClipRunner
from .notify import Notifier
from .signals import Flags
from .status_file import Status, write_status

if TYPE_CHECKING:
    from ..core.stylizer import FileResult, Stylizer
    from ..http.server import ServerThread
    from ..http.state import HttpState

log = logging.getLogger("edge_anime.service")

LOOP_WAIT_SECONDS = 0.1          # longest a loop step waits for a file or a result
STATUS_INTERVAL_SECONDS = 1.0    # status file and sd_notify STATUS= refresh
ORPHAN_CHECK_SECONDS = 30.0      # look for dead workers' claims (other boxes on a share) this often
CLOSE_GRACE_SECONDS = 5.0        # after the drain: how long closing the pipeline may take
HELD_COUNT_LIMIT = 10_000        # files counted in a dropped style's folder for its log line
ROOM_SAFETY = 1.25               # a clip's room estimate times this: the encoder's rate varies along a clip
ROOM_MARGIN_BYTES = 1 << 20      # plus this: the container's index, the status file, a photo meanwhile


class WatchService:
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
        self.http: tuple[ServerThread, HttpState] | None = None  # with http.enabled
        self.held: set[str] = set()  # styles a reload stopped serving: their inbox folders are left alone
        # Free bytes in a file's outbox when it was submitted, by claim token (a clip that ran the disk full
        # needs them, ``_file_done``), and the latest (frames done, frames total, bytes written) of the clip in
        # work's temp file, sampled with the status file: the encoder's rate.
        self._free_at_submit: dict[str, int] = {}
        self._clip_sample: dict[str, tuple[int, int, int]] = {}

    # --- start ---------------------------------------------------------------------------------------
    def run(self) -> int:
        config = load_config(self.config_path)
        self.config_path = config.source
        self.log_form = setup_logging(log_format=config.service.log_format, level=config.service.log_level)
        if self.flags.stop.is_set():
            log.info("stopped before start (a signal during start-up)")
            return 0
        check_paths(config)  # what `config check` checks, refused here too (an unwritable folder included)
        check_style_names(config)  # a hidden or look-alike style name would get a folder never read
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
            self.stylizer = self._new_stylizer(config)
        if self.flags.stop.is_set():
            log.info("stopped before serving (a signal during start-up)")
            return 0
        self.journal = ProcessedList(self.folders.work) if config.watch.after_success == "keep" else None
        accept = self._routes(config)
        handler = Handler(config=config, folders=self.folders, worker=self.worker, style=self.stylizer.styles[0],
                          accept=accept, model_hash=self._model_hash, journal=self.journal)
        handler.broken = self.acct.broken  # one dict: what the handler says of a held folder, status and metrics
        self.detector = self._new_detector(config, accept)
        self.core = WatchCore(handler=handler, worker=self.worker, source=self.detector, submit=self._submit,
                              probe=self._probe, events=self.acct, limit=self.stylizer.max_in_flight)
        self.clips = ClipRunner()
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
        log.info("ready: worker %s, style %s, inbox %s (%s), outbox %s, logs %s", self.worker.worker_id,
                 _styles_line(self.stylizer.styles), self.folders.inbox, self.detector.mode, self.folders.outbox,
                 self.log_form)
        self.notifier.send(READY=1, STATUS=self._status_line(), MAINPID=os.getpid())
        try:
            self._loop()
        finally:
            self.detector.stop()
        return self._shutdown()

    def _start_http(self, config: Config) -> tuple[ServerThread, HttpState]:
        """HTTP beside the watch folder, on the same Stylizer (one copy of each compiled style in memory)."""
        try:
            from ..http.app import create_app
            from ..http.server import ServerThread, make_server
        except ImportError as exc:
            raise ConfigError(f"http.enabled: true needs the http extra ({exc.name} is missing): "
                              "pip install 'edge-anime[http]'") from None
        app = create_app(config, stylizer=self.stylizer, registry=self.acct.metrics.registry)  # one /metrics
        thread = ServerThread(make_server(app, config))
        thread.start(where=f"{config.http.host}:{config.http.port}")
        log.info("http: serving http://%s:%d/ beside the watch folder", config.http.host, config.http.port)
        return thread, app.state.service

    @contextlib.contextmanager
    def _startup_watchdog(self) -> Iterator[None]:
        """Keep systemd's watchdog fed while the main loop cannot (model compile at start)."""
        interval = self.notifier.watchdog_interval_s
        if not interval:
            yield
            return
        with ticking(interval, lambda: self.notifier.send(WATCHDOG=1), name="edge-anime-watchdog"):
            yield

    def _new_stylizer(self, config: Config) -> Stylizer:
        """The default style's variant and precision chosen for this box (measured once, then cached) and
        compiled; every style checked (manifest, digests) so a missing one stops the start here (exit 78)."""
        from ..core.stylizer import Stylizer

        return Stylizer(config)

    def _routes(self, config: Config) -> InputFilter:
        """The input rule with the served styles as routes (their inbox and outbox folders made now, so an
        integrator sees where to put files), and the held styles' folders left alone: those dropped by a
        reload and those whose model cannot be compiled (until the next reload)."""
        styles = self.stylizer.styles
        self.held -= set(styles)
        broken = set(self.acct.broken) - {styles[0]}  # the default's folder is the inbox: intake pauses instead
        if config.model.styles:  # one style: the inbox root is its route, no folder to make
            for style in styles:
                for base in (self.folders.inbox, self.folders.outbox):
                    try:
                        child(base, style, what="style folder").mkdir(exist_ok=True)
                    except OSError as exc:
                        raise ConfigError(f"model.styles: cannot create {base / style} ({exc.strerror})") from None
        return InputFilter(config.watch, routes=[s for s in styles if s not in broken], held=self.held | broken,
                           also=config.video.extensions)

    def _model_hash(self, style: str) -> str:
        model = self.stylizer.model_of(style)
        return model.bin_sha256 if model is not None else ""

    def _submit(self, claim: Claim, dst: Path) -> None:
        """Hand a claim to the Stylizer (``submit_file``: a photo to its style's pipeline, a clip to the clip
        lane); the result comes back to the core from a pipeline or clip thread. A style compiled on first
        use compiles here, with systemd's watchdog fed meanwhile, so a broken model is said here."""
        style = claim.style or self.core.handler.style_for(claim.rel)
        # a clip may compile its own variant (video.variant) on the style's first clip
        compiling = style not in self.stylizer.compiled_styles() or (
            self.config.video.variant != AUTO and is_clip(claim.path.name, self.config.video))
        with contextlib.suppress(OSError):
            self._free_at_submit[claim.token] = free_bytes(dst.parent)
        try:
            with self._startup_watchdog() if compiling else contextlib.nullcontext():
                future = self.stylizer.submit_file(claim.path, dst, style=style, name=claim.rel,
                                                   cancel=self.clips.cancel, on_frame=self.clips.on_frame,
                                                   video=self.config.video)
        except UserError as exc:  # the model's fault, not the input's: the input is kept, the style held
            self._free_at_submit.pop(claim.token, None)
            self._style_broken(style, str(exc))
            self.core.done(claim, StyleFault(style, str(exc)))
            return
        future.add_done_callback(lambda done: self._file_done(claim, done.result()))

    def _file_done(self, claim: Claim, result: FileResult) -> None:
        """A file ended (on a pipeline or clip thread): its verdict to the core, unless it is a clip a stop cut
        short (handed back by ``_give_back_clips``). When the disk ran full under a clip, it must not start
        again until its outbox has room for the whole output (``room_for_clip``): restarted at frame 0 on the
        probe's 64 KiB it would fill the disk again, forever."""
        from ..video.job import ClipResult

        free_at_start = self._free_at_submit.pop(claim.token, None)
        sample = self._clip_sample.pop(claim.token, None)
        if not self.clips.ended(claim, result):
            return
        if isinstance(result, ClipResult) and result.error is not None and classify(result.error) is Kind.BOX:
            try:
                input_bytes = os.stat(claim.path).st_size
            except OSError:
                input_bytes = 0
            claim.needs_bytes = room_for_clip(input_bytes=input_bytes, sample=sample, free_at_start=free_at_start)
        self.core.done(claim, result.error, result)

    def _style_broken(self, style: str, reason: str) -> None:
        """A style failed to compile: say so (log, status, metrics) and stop taking its folder's files, so its
        inputs wait untouched; the default style's inbox is the root, so there intake pauses (``_probe``)."""
        if style in self.acct.broken:
            return
        default = style == self.stylizer.styles[0]
        self.acct.style_broken(style, reason, default=default, folder=self.folders.inbox / style)
        if not default:
            self._rewatch(self.config)

    def _rewatch(self, config: Config) -> InputFilter:
        """Routes and held folders changed: a new input rule for the handler and a new detector (a rescan)."""
        accept = self._routes(config)
        self.core.handler.update(config=config, style=self.stylizer.styles[0], accept=accept)
        self.detector.stop()
        self.detector = self._new_detector(config, accept)
        self.core.source = self.detector
        self.detector.start()
        return accept

    def _probe(self) -> None:
        """Can the box write again? The state folders, the outbox and the status file's folder; and while the
        default style cannot be compiled, no (a reload clears that)."""
        default = self.stylizer.styles[0]
        if default in self.acct.broken:
            raise StyleFault(default, self.acct.broken[default])
        write_probe([self.folders.work, self.folders.outbox, self.config.status_file().parent])

    def _new_detector(self, config: Config, accept: InputFilter) -> Detector:
        skip = self.journal.contains if self.journal is not None else None
        return Detector(self.folders.inbox, config.watch, skip=skip, accept=accept)

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
                        model=self.stylizer.model.name, detector=self.detector.mode, config=str(self.config_path),
                        config_hash=self.core.handler.config_hash, counts=self.acct.counts, last=self.acct.last,
                        started=self.acct.started, paused=self.acct.pause_info(self.core.pause),
                        variant=str((self.stylizer.engine.choice or {}).get("summary", "")),
                        styles=self.acct.style_counts(self.stylizer.styles, self.stylizer.compiled_styles()),
                        clip=self._clip_progress(), room=self.acct.room_info(self.core.room_waits))
        self.acct.metrics.clip_progress(status.clip)
        self._sample_clip(status.clip)
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

    def _clip_progress(self) -> dict[str, Any] | None:
        """The clip in work on the Stylizer's clip lane (file, frames_done, frames_total, frames_per_s)."""
        progress = self.stylizer.clip_progress()
        return progress.snapshot() if progress is not None else None

    def _sample_clip(self, progress: dict[str, Any] | None) -> None:
        """The clip in work's encoder rate: frames done and the bytes its temp file holds (``_clip_done``)."""
        if not progress or not progress.get("frames_done"):
            return
        claim = next((c for c in self.core.in_flight.values() if c.rel == progress.get("file")), None)
        if claim is None or claim.dst is None:
            return
        written = _temp_bytes(claim.dst)
        if written:
            self._clip_sample[claim.token] = (int(progress["frames_done"]), int(progress.get("frames_total") or 0),
                                              written)

    # --- reload --------------------------------------------------------------------------------------
    def _reload(self) -> None:
        """SIGHUP: apply a changed config; recompile only when model or device changed. Queued files stay in
        the inbox, in-flight ones finish under the old settings, so nothing is lost."""
        old = self.config
        try:
            new = load_config(self.config_path)
            check_style_names(new)
            from ..core.stylizer import check_clip_variants

            check_clip_variants(new)  # a video.variant a style lacks: said now, not at the next clip
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
        fixed = ("root", *WATCH_FOLDERS, "worker_id")
        changed = [k for k in fixed if getattr(old.watch, k) != getattr(new.watch, k)]
        if not changed:
            return new
        log.warning("reload: watch.%s changed; folders and worker_id apply at the next restart",
                    ", watch.".join(changed))
        keep = {k: getattr(old.watch, k) for k in fixed}
        return new.model_copy(update={"watch": new.watch.model_copy(update=keep)})

    def _apply(self, old: Config, new: Config) -> None:
        """A new Stylizer when the default style, the device or the image/output/pipeline settings changed
        (after the drain, so a drain timeout never throws a compiled model away); when only ``model.styles``
        changed, the running Stylizer adds or drops just those styles. Routes and the detector follow."""
        base_changed = (_without_styles(new) != _without_styles(old)
                        or any(getattr(new, s) != getattr(old, s) for s in ("device", "image", "output", "pipeline")))
        styles_before = set(self.stylizer.styles)
        how = "no recompile"
        if base_changed:
            if not self._wait_in_flight(new.service.drain_timeout_seconds):
                log.warning("reload: jobs still in flight after %s; will try again",
                            _seconds(new.service.drain_timeout_seconds))
                self.flags.reload = True
                return
            recompile = new.model != old.model or new.device != old.device
            with self._startup_watchdog():  # the loop cannot ping systemd during a compile
                stylizer = self._new_stylizer(new) if recompile else self.stylizer.handover(new)
            previous, self.stylizer = self.stylizer, stylizer
            if self.http is not None:
                self.http[1].adopt(stylizer, new)
            previous.close()
            self.core.limit = stylizer.max_in_flight
            how = "recompiled" if recompile else "pipeline rebuilt"
        elif new.model.styles != old.model.styles:
            added, removed = self.stylizer.set_styles(new)
            how = "styles " + ", ".join([f"+{a}" for a in added] + [f"-{r}" for r in removed])
        removed_styles = styles_before - set(self.stylizer.styles)
        self.held |= removed_styles
        retried = self.acct.styles_retried()  # a reload is the operator's word that a model may be fixed now
        if retried:
            log.info("reload: style(s) %s could not be compiled before; tried again on their next file",
                     ", ".join(retried))
        accept = self._routes(new)
        for style in sorted(removed_styles):
            self._say_held(style, accept)
        if new.watch != old.watch or removed_styles or set(self.stylizer.styles) != styles_before or retried:
            self.detector.stop()
            if new.watch.after_success == "keep" and self.journal is None:
                self.journal = ProcessedList(self.folders.work)
            self.core.handler.journal = self.journal
            self.detector = self._new_detector(new, accept)
            self.core.source = self.detector
            self.detector.start()
        if new.service.log_format != old.service.log_format or new.service.log_level != old.service.log_level:
            self.log_form = setup_logging(log_format=new.service.log_format, level=new.service.log_level)
        if new.service.metrics != old.service.metrics:
            log.warning("reload: service.metrics changes apply at the next restart")
        if self.http is not None and new.http != old.http:
            log.warning("reload: http settings apply at the next restart")
        self.core.handler.update(config=new, style=self.stylizer.styles[0], accept=accept)
        self.config = new
        log.info("reloaded %s (%s)", self.config_path, how)

    def _say_held(self, style: str, accept: InputFilter) -> None:
        """One line for a dropped style: its waiting files stay where they are, untouched."""
        folder = self.folders.inbox / style
        waiting = sum(1 for _ in itertools.islice(scan(folder, accept), HELD_COUNT_LIMIT)) if folder.is_dir() else 0
        more = "+" if waiting >= HELD_COUNT_LIMIT else ""
        log.warning("reload: style %s is no longer served; %d%s file(s) waiting in %s stay there untouched until "
                    "it is served again (model.styles)", style, waiting, more, folder)

    def _give_back_clips(self) -> None:
        """Stopping: a clip not finished within the drain timeout is cancelled (its temp file removed) and goes
        back to the inbox untouched, with the clips queued behind it; the next start takes them again."""
        for claim in self.clips.stop(self.stylizer):
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
            (server, _app), self.http = self.http, None
            server.stop(timeout_s)
        self._wait_in_flight(timeout_s)
        self._give_back_clips()
        drained = not self.core.in_flight
        if not drained:
            self.core.forget_running()
            log.warning("stopping: %d job(s) did not finish in %s; they stay in %s and the next start "
                        "finishes them (no output is half-written)", len(self.core.in_flight),
                        _seconds(timeout_s), self.worker.path)
        closer = threading.Thread(target=self.stylizer.close, name="edge-anime-close", daemon=True)
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


def room_for_clip(*, input_bytes: int, sample: tuple[int, int, int] | None, free_at_start: int | None) -> int:
    """Free bytes a clip needs before it starts again after the disk ran full under it, estimated from its size
    and the encoder's rate: with a sample (frames done, frames total, bytes written) the rate times its frames;
    without one (it ran full within a second) the input's size, which an H.264 output at the working size
    seldom exceeds. Never less than it had when it ran full, plus a margin: it did not fit in that."""
    if sample is not None and sample[0] > 0 and sample[1] > 0:
        estimate = sample[2] / sample[0] * sample[1]
    else:
        estimate = float(input_bytes)
    needed = int(estimate * ROOM_SAFETY) + ROOM_MARGIN_BYTES
    if free_at_start is not None:
        needed = max(needed, free_at_start + ROOM_MARGIN_BYTES)
    return needed


def _temp_bytes(dst: Path) -> int:
    """Bytes in the hidden temp file(s) of ``dst`` (``fsutil.temp_path_for``: a prefix, an id, the name)."""
    total = 0
    suffix = f"-{dst.name}"
    try:
        with os.scandir(dst.parent) as entries:
            for entry in entries:
                if entry.name.startswith(TEMP_PREFIX) and entry.name.endswith(suffix):
                    with contextlib.suppress(OSError):
                        total += entry.stat(follow_symlinks=False).st_size
    except OSError:
        return 0
    return total


def _without_styles(config: Config) -> ModelSection:
    """The model section without ``model.styles``: what a change of the style list alone leaves as it was."""
    return config.model.model_copy(update={"styles": []})


def _seconds(value: float) -> str:
    """'0.2 s', '30 s': never 'up to 0 s' for a fraction of a second."""
    return f"{value:g} s"


def _styles_line(styles: tuple[str, ...]) -> str:
    """'toon' or 'toon (default), paprika, hayao' for the ready line."""
    if len(styles) == 1:
        return styles[0]
    return ", ".join([f"{styles[0]} (default)", *styles[1:]])
