"""Prometheus counters and histograms, served on an optional endpoint (loopback by default).

A registry of our own, not prometheus_client's global one: two services in one test process, or a
reload, never collide on metric names.
"""
from __future__ import annotations

from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)

STAGE_BUCKETS_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.processed = Counter("edge_anime_processed", "Inputs stylized and committed", ["style"],
                                 registry=self.registry)
        self.failed = Counter("edge_anime_failed", "Inputs set aside in failed/", ["stage", "style"],
                              registry=self.registry)
        self.faces = Counter("edge_anime_faces", "Faces restyled on their own (image.faces: auto)", ["style"],
                             registry=self.registry)
        self.retries = Counter("edge_anime_retries", "Transient failures retried", registry=self.registry)
        self.queue_depth = Gauge("edge_anime_queue_depth", "Complete inbox files seen and not yet taken",
                                 registry=self.registry)
        self.in_flight = Gauge("edge_anime_in_flight", "Jobs submitted and not finished", registry=self.registry)
        self.paused = Gauge("edge_anime_intake_paused", "1 while intake is paused by a fault of the box's storage",
                            registry=self.registry)
        self.style_broken = Gauge("edge_anime_style_broken", "1 while the style's model cannot be compiled (its "
                                  "inbox folder held until a reload)", ["style"], registry=self.registry)
        self.waiting_for_room = Gauge("edge_anime_waiting_for_room", "Clips held until their outbox has the room "
                                      "their output needs (the disk ran full under them)", registry=self.registry)
        self.room_needed_bytes = Gauge("edge_anime_room_needed_bytes", "Free bytes the held clips wait for, "
                                       "together (0: none waits)", registry=self.registry)
        self.pauses = Counter("edge_anime_intake_pauses", "Times intake paused for a fault of the box's storage",
                              registry=self.registry)
        self.stage_seconds = Histogram("edge_anime_stage_seconds", "Seconds per pipeline stage per image",
                                       ["stage"], buckets=STAGE_BUCKETS_SECONDS, registry=self.registry)
        self.clip_frames_done = Gauge("edge_anime_clip_frames_done", "Frames done of the clip in work (0: none)",
                                      registry=self.registry)
        self.clip_frames_total = Gauge("edge_anime_clip_frames_total", "Frames of the clip in work (0: none)",
                                       registry=self.registry)
        self.clip_frames_per_second = Gauge("edge_anime_clip_frames_per_second",
                                            "Frames per second of the clip in work (0: none)", registry=self.registry)
        self.clip_frames = Counter("edge_anime_clip_frames_written", "Clip frames stylized and written",
                                   registry=self.registry)
        self._server: Any = None

    def serve(self, *, host: str, port: int) -> None:
        self._server = start_http_server(port, addr=host, registry=self.registry)

    def observe(self, timings_s: dict[str, float]) -> None:
        for stage, seconds in timings_s.items():
            self.stage_seconds.labels(stage=stage).observe(seconds)

    def clip_progress(self, clip: dict[str, Any] | None) -> None:
        """The clip in work (``Stylizer.clip_progress``), or zeros when none is."""
        clip = clip or {}
        self.clip_frames_done.set(clip.get("frames_done", 0))
        self.clip_frames_total.set(clip.get("frames_total", 0))
        self.clip_frames_per_second.set(clip.get("frames_per_s", 0.0))

    def close(self) -> None:
        if self._server is not None:
            server, _thread = self._server
            server.shutdown()
            server.server_close()  # shutdown() only stops the loop; this frees the listening port
            self._server = None
