"""One YAML schema for the whole runtime: defaults, validation and errors that name the key path.

Why pydantic: it gives strict types, defaults and, above all, the location of every error as a key path,
so `device.num_streams: expected an integer >= 1 or "auto", got 'two'` comes for free instead of from a
hand-written walker. Every model forbids unknown keys, so a typo is an error, not a silently ignored line.
Relative paths are resolved against the folder of the config file (or the working folder for defaults).
The folders the runtime writes to (``watch.root``, ``device.cache_dir``, ``model.dirs``) default to
``auto``: where this kind of install keeps them (``locations``); the bundled models folder is always searched
last, so the bundled style resolves whatever ``model.dirs`` says.
"""
from __future__ import annotations

import difflib
import ipaddress
import os
import re
import reprlib
import string
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .errors import ConfigError
from .locations import bundled_config_path, bundled_models_dir, default_locations
from .yamlload import YamlError, load_bounded

ENV_CONFIG = "EDGE_ANIME_CONFIG"
VARIANT_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}")
AUTO = "auto"
WORKER_ID_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")


def is_loopback(host: str) -> bool:
    """True for localhost and 127.0.0.0/8 or ::1: an address only this machine can reach."""
    return host == "localhost" or ipaddress.ip_address(host).is_loopback
# Path keys whose default is the install's own folder (``locations``); "auto" in a file means that default.
_AUTO_PATH_KEYS: dict[str, tuple[str, ...]] = {"model": ("dirs",), "device": ("cache_dir",), "watch": ("root",)}


def _auto_or_int(minimum: int) -> BeforeValidator:
    def check(value: Any) -> Any:
        if value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f'expected an integer >= {minimum} or "auto"')
        return value

    return BeforeValidator(check)


def _auto_or_bool(value: Any) -> Any:
    if value == "auto" or isinstance(value, bool):
        return value
    raise ValueError('expected true, false or "auto"')


def _size_wxh(value: Any) -> Any:
    """`fixed: 512x384` (W x H, as people write screen sizes) -> (512, 384)."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value):
        return tuple(value)
    if isinstance(value, str) and "x" in value.lower():
        parts = value.lower().split("x")
        if len(parts) == 2 and all(p.strip().isdigit() and int(p) > 0 for p in parts):
            return (int(parts[0]), int(parts[1]))
    raise ValueError('expected a size "WxH" such as "512x384"')


def _ip_host(value: str) -> str:
    """Bind addresses are IP literals (or localhost): a name would need DNS at start and could move."""
    if value != "localhost":
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError("expected an IP address such as 127.0.0.1 (or localhost)") from None
    return value


def _variant_name(value: str) -> str:
    """``model.variant``, ``http.live.variant`` and ``video.variant``: auto (or live) or a name a manifest could
    give (checked where the style is resolved: the config cannot know)."""
    if not VARIANT_PATTERN.fullmatch(value):
        raise ValueError('expected "auto" or a variant name such as fp16, int8 or student_int8 (edge-anime '
                         'models list)')
    return value


IpHost = Annotated[str, AfterValidator(_ip_host)]
VariantName = Annotated[str, AfterValidator(_variant_name)]
AutoInt1 = Annotated[int | Literal["auto"], _auto_or_int(1)]
AutoBool = Annotated[bool | Literal["auto"], BeforeValidator(_auto_or_bool)]
SizeWxH = Annotated[tuple[int, int], BeforeValidator(_size_wxh)]
PathField = Annotated[Path, Field(strict=False)]
Seconds = Annotated[float, Field(ge=0)]



# One home for the names several modules need (the CLI's choices, the sweep's axis, the folder checks).
InferencePrecision = Literal["auto", "f32", "bf16", "f16"]
PRECISION_CHOICES: tuple[str, ...] = get_args(InferencePrecision)  # auto, then the plugin's own precisions
WATCH_FOLDERS = ("inbox", "work", "outbox", "done", "failed")  # watch.<name>, each defaulting to <root>/<name>
# The quality a variant of a style must hold to be run (the start-up choice) or swept (tune): its manifest's
# worst photo vs FP32, in dB. The converter holds an INT8 IR to the same floor when it writes one.
QUALITY_FLOOR_DB = 35.0
# A variant made for the booth's frames (``uses: [live]``, a generator distilled from the style's, issue 43) is
# held to its mean PSNR against its teacher on photos at the frames' size: 30 dB is where a side-by-side of a
# live frame shows the same drawing, and frames pass at 10 a second rather than being looked at one by one.
LIVE_QUALITY_FLOOR_DB = 30.0
# ``video.variant: live``: the style's variant made for live frames, as ``http.live.variant: auto`` picks it.
LIVE_VARIANT = "live"

class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ModelSection(_Section):
    path: str = "toon"  # an IR .xml, a model folder, or the name of an installed model
    # More styles served beside model.path (the default), spelled like it; compiled on first use.
    styles: list[str] = Field(default_factory=list)
    dirs: list[PathField] = Field(default_factory=lambda: [default_locations().models])
    # auto: the fastest verified IR of the style, measured on this box (edge_anime.runtime.choice); else its name.
    # Whether the style has that variant is checked where the model is resolved (the config cannot know).
    variant: VariantName = "auto"
    # The style faces are stylized in with image.faces: auto (spelled like path); null: the style of the picture.
    face_style: str | None = None


class DeviceSection(_Section):
    name: Literal["CPU"] = "CPU"
    performance_hint: Literal["LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT"] = "THROUGHPUT"
    num_requests: AutoInt1 = "auto"
    num_streams: AutoInt1 = "auto"
    inference_num_threads: AutoInt1 = "auto"
    enable_cpu_pinning: AutoBool = False  # see configs/default.yaml: pinned streams of several shapes collide
    enable_hyper_threading: AutoBool = "auto"
    scheduling_core_type: Literal["ANY_CORE", "PCORE_ONLY", "ECORE_ONLY"] = "ANY_CORE"
    inference_precision: InferencePrecision = "auto"
    execution_mode: Literal["PERFORMANCE", "ACCURACY"] = "PERFORMANCE"
    cache_dir: PathField | None = Field(default_factory=lambda: default_locations().cache)  # null disables
    shape_policy: Literal["static", "dynamic"] = "static"
    shape_cache_size: int = Field(default=16, ge=1, le=64)  # compiled static shapes kept (LRU)
    shape_cache_mb: int = Field(default=768, ge=64)  # estimated inference memory of the shapes kept, all streams


class ImageSection(_Section):
    resize: Literal["keep", "max_side", "fixed", "center_square", "full"] = "max_side"
    max_side: int = Field(default=1024, ge=16, le=16384)
    fixed: SizeWxH = (512, 512)
    center_square: int = Field(default=512, ge=16, le=16384)
    multiple: int = Field(default=8, ge=4, le=64)
    upscale_to_original: bool = False
    upscale_method: Literal["lanczos", "guided"] = "lanczos"  # guided: imaging.guided, edges from the photo
    tone: Literal["auto", "off"] = "auto"  # auto: the style's manifest (tone:) says; imaging.tone
    palette: Literal["auto", "off"] = "auto"  # auto: the style's manifest (palette:) says; imaging.palette
    ink: Literal["auto", "off"] = "auto"  # auto: the style's manifest (ink:) says; imaging.ink
    tile_px: Annotated[int | Literal["auto"], _auto_or_int(128)] = "auto"  # resize: full; imaging.fullres
    apply_exif_orientation: bool = True
    max_pixels: int = Field(default=60_000_000, ge=1)
    memory_budget_mb: int = Field(default=1024, ge=64)
    over_budget: Literal["downscale", "refuse"] = "downscale"
    faces: Literal["auto", "off"] = "auto"  # auto: every face stylized again at its style's scale; edge_anime.faces
    faces_min_px: int = Field(default=64, ge=16, le=4096)  # smaller faces (box side, picture px) are never restyled
    faces_max: int = Field(default=8, ge=1, le=64)  # at most this many faces a picture, the largest
    portrait: Literal["auto", "off"] = "auto"  # auto: faces drawn as anime portraits (faces.portrait); needs faces
    # portrait: auto draws faces from this size up, and restyles only those the face mesh does not see (faces.restyle)
    portrait_min_px: int = Field(default=24, ge=16, le=4096)

    @field_validator("tone", "palette", "ink", "faces", "portrait", mode="before")
    @classmethod
    def _yaml_off(cls, value: object) -> object:
        """``tone: off`` as a person writes it: YAML 1.1 (PyYAML) reads a bare off as false, and "expected
        'auto' or 'off', got False" for exactly what the comment in the config says to write is a trap."""
        return "off" if value is False else value


class OutputSection(_Section):
    format: Literal["jpeg", "png", "webp", "same"] = "jpeg"
    # 95, not libjpeg's usual 92: a drawn picture's hard edges ring at 92 (configs/default.yaml says what it costs)
    quality: int = Field(default=95, ge=1, le=100)
    name_template: str = "{stem}_{style}.{ext}"
    keep_exif: bool = True
    keep_icc: bool = True  # the output's sRGB profile (imaging.encoder: the pixels are always sRGB)
    strip_gps: bool = True
    strip_maker_notes: bool = True  # the maker's private EXIF block: serial numbers, on phones places and faces

    @field_validator("name_template")
    @classmethod
    def _template_fields(cls, value: str) -> str:
        try:
            value.format(stem="a", style="b", ext="c", name="a.c", n=1)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"unknown placeholder {exc}; use {{stem}}, {{style}}, {{ext}}, {{name}}") from exc
        if "/" in value or "\\" in value:
            raise ValueError("a file name template, not a path: no '/' allowed")
        for _, field, spec, conversion in string.Formatter().parse(value):
            if field is not None and (spec or conversion):
                raise ValueError(f"{{{field}}} takes no format spec or conversion; write the placeholder plainly")
        return value


class PipelineSection(_Section):
    decode_threads: AutoInt1 = "auto"  # auto: pipeline.stage_threads
    encode_threads: AutoInt1 = "auto"
    max_in_flight: AutoInt1 = "auto"  # jobs between submit and done; auto = 2 x infer requests


class RetrySection(_Section):
    initial_seconds: Seconds = 1.0
    max_seconds: Seconds = 60.0
    max_attempts: int = Field(default=10, ge=1)
    # A claim found in flight at this many starts of the service (it died each time: the OOM killer, a
    # decoder's crash) goes to failed/, so one poison pill cannot keep the queue behind it in work/ for good
    max_crashes: int = Field(default=2, ge=1)

    @model_validator(mode="after")
    def _initial_within_max(self) -> RetrySection:
        if self.initial_seconds > self.max_seconds:
            raise ValueError(f"initial_seconds ({self.initial_seconds}) is above max_seconds ({self.max_seconds}); "
                             "expected initial_seconds <= max_seconds")
        return self


class WatchSection(_Section):
    root: PathField = Field(default_factory=lambda: default_locations().state)
    inbox: PathField | None = None  # each defaults to <root>/<name>
    work: PathField | None = None
    outbox: PathField | None = None
    done: PathField | None = None
    failed: PathField | None = None
    detector: Literal["auto", "inotify", "polling"] = "auto"  # polling for NFS/SMB shares
    poll_interval_seconds: Seconds = 1.0
    settle_seconds: Seconds = 2.0
    recursive: bool = False
    ignore_patterns: list[str] = Field(default_factory=lambda: [".*", "*.part", "*.tmp", "*.crdownload", "~$*"])
    extensions: list[str] = Field(
        default_factory=lambda: ["jpg", "jpeg", "png", "webp", "heic", "heif", "avif", "bmp", "tif", "tiff"]
    )
    after_success: Literal["move", "delete", "keep"] = "move"
    worker_id: str = "auto"  # auto = <hostname>-<pid>; a folder name in work/
    retry: RetrySection = RetrySection()

    @field_validator("worker_id")
    @classmethod
    def _one_folder_name(cls, value: str) -> str:
        if value in (".", "..") or not WORKER_ID_PATTERN.fullmatch(value):
            raise ValueError("expected a folder name of letters, digits, '.', '_' or '-' (at most 64), "
                             'or "auto"')
        return value

    @model_validator(mode="after")
    def _polling_needs_settling(self) -> WatchSection:
        if self.detector != "inotify" and self.settle_seconds == 0:
            raise ValueError(f"settle_seconds: 0 with detector {self.detector} takes files that are still being "
                             "written (polling sees no close-write); expected > 0, e.g. 2")
        return self

    def folder(self, name: str) -> Path:
        """The effective path of one of inbox/work/outbox/done/failed."""
        explicit = getattr(self, name)
        return explicit if explicit is not None else self.root / name


class MetricsSection(_Section):
    enabled: bool = False
    host: IpHost = "127.0.0.1"
    port: int = Field(default=9464, ge=1, le=65535)
    # The metrics name no files but show what the box does; another machine reads them only when asked for.
    allow_remote: bool = False

    @model_validator(mode="after")
    def _remote_needs_opt_in(self) -> MetricsSection:
        if not self.allow_remote and not is_loopback(self.host):
            raise ValueError(f"host {self.host} is reachable from other machines; set "
                             "service.metrics.allow_remote: true to serve metrics there, or use 127.0.0.1")
        return self


class ServiceSection(_Section):
    drain_timeout_seconds: Seconds = 30.0
    log_format: Literal["auto", "plain", "json"] = "auto"  # auto: plain without timestamps under journald
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    status_file: PathField | None = None  # default <watch.root>/status.json
    metrics: MetricsSection = MetricsSection()


class LiveSection(_Section):
    """``GET /v1/live``, the booth's mirror (edge_anime/http/live.py): frames in, stylized frames out."""

    max_side: int = Field(default=384, ge=64, le=1024)  # each frame is stylized at this long side
    max_sessions: int = Field(default=4, ge=1, le=64)  # live sessions at once; 503 past it
    idle_seconds: float = Field(default=30.0, gt=0, le=3600)  # a session without a frame this long is closed
    max_frame_mb: float = Field(default=2.0, gt=0, le=64)  # one frame's bytes; the session is closed past it
    quality: int = Field(default=80, ge=1, le=100)  # the answered frames' JPEG quality
    # The style's IR the frames run: auto picks one made for live frames (the manifest's ``uses: [live]``, a
    # lighter generator distilled from the style's) when the style has one that holds LIVE_QUALITY_FLOOR_DB,
    # else what model.variant runs; a name pins that variant (edge-anime models list).
    variant: VariantName = "auto"
    # How the frames' engine spends the cores: LATENCY, one frame on all of them, is what a mirror needs (one
    # session on the 2-vCPU EPYC: 12.7 frames/s, p95 193 ms, against THROUGHPUT's 8.5 and 283 ms); THROUGHPUT
    # answers more frames in all once 4+ sessions share the box (15.4 against 13.8 frames/s). benchmarks/live.py
    performance_hint: Literal["LATENCY", "THROUGHPUT"] = "LATENCY"


class BoothSection(_Section):
    """The booth page (``/booth``): its pictures are kept in memory only, for a guest to fetch by QR code."""

    keep_minutes: float = Field(default=10.0, gt=0, le=1440)
    max_pictures: int = Field(default=100, ge=1, le=10000)  # past it the oldest picture goes first
    # The address a guest's phone opens a picture at (its QR code), e.g. http://kiosk.lan:8080; null: the
    # page's own Host, or this box's network address when the kiosk opened the page on localhost
    public_url: str | None = None

    @field_validator("public_url")
    @classmethod
    def _http_base(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith(("http://", "https://")) or any(c in value for c in " \t\"'<>"):
            raise ValueError("expected an http:// or https:// address such as http://kiosk.lan:8080")
        return value.rstrip("/")


class HttpSection(_Section):
    """`edge-anime serve`: the HTTP API and upload page (edge_anime/http/)."""

    enabled: bool = False  # `edge-anime run` serves HTTP beside the watch folder, on the same compiled style
    host: IpHost = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    max_body_mb: float = Field(default=25.0, gt=0, le=1024)  # 413 above this, checked before reading on
    max_queue: int = Field(default=8, ge=1, le=1024)  # requests waiting for the engine; 503 + Retry-After past it
    request_timeout_seconds: Seconds = 60.0  # 504 past this, the job is left to finish in the background
    auth_token_file: PathField | None = None  # a file holding the Bearer token clients must send
    allow_unauthenticated: bool = False  # the explicit opt-in for a non-loopback host without a token
    # Bytes of request bodies held in memory at once, all requests together; 503 + Retry-After past it: before
    # the body is read when its Content-Length (else http.max_body_mb) does not fit, else as its bytes arrive.
    max_bodies_mb: float = Field(default=200.0, gt=0, le=65536)
    # ... and of one client address (behind a reverse proxy every client is the proxy's: set it to max_bodies_mb)
    max_bodies_per_client_mb: float = Field(default=100.0, gt=0, le=65536)
    # A body must average this rate once the grace has passed, or get a 408 (0: no floor, only the timeout).
    min_upload_kb_per_second: float = Field(default=16.0, ge=0)
    upload_grace_seconds: float = Field(default=5.0, ge=0, le=3600)
    # A connection's request headers must arrive within this, from its opening or the end of the last answer.
    header_timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    # Open connections, and those of one client address; past either the oldest idle one is closed to make
    # room (503 when none is idle).
    max_connections: int = Field(default=512, ge=1, le=65536)
    max_connections_per_client: int = Field(default=256, ge=1, le=65536)
    # Host names the API answers besides IP addresses, localhost and this box's own name ("*": any).
    allowed_hosts: list[str] = Field(default_factory=list)
    live: LiveSection = Field(default_factory=LiveSection)
    booth: BoothSection = Field(default_factory=BoothSection)

    @field_validator("allowed_hosts")
    @classmethod
    def _plain_host_names(cls, value: list[str]) -> list[str]:
        cleaned = [v.strip().lower().rstrip(".") for v in value]
        if any(not v or any(c in v for c in " /:@") for v in cleaned):
            raise ValueError('expected host names without scheme, port or path, such as ["kiosk.lan"], or ["*"]')
        return cleaned

    @model_validator(mode="after")
    def _remote_needs_auth(self) -> HttpSection:
        if not is_loopback(self.host) and self.auth_token_file is None and not self.allow_unauthenticated:
            raise ValueError(f"host {self.host} is reachable from other machines; set http.auth_token_file (a "
                             "Bearer token) or, knowingly, http.allow_unauthenticated: true")
        return self


class VideoSection(_Section):
    """Clips through the same pipeline as photos (edge_anime/video/; needs the ``video`` extra, PyAV)."""

    # Taken by the watch folder and stylize's folders/globs beside watch.extensions; [] turns video off.
    extensions: list[str] = Field(default_factory=lambda: ["mp4", "mov", "m4v", "mkv", "webm"])
    codec: str = "libx264"  # the FFmpeg encoder for the picture (H.264); the output is always .mp4
    crf: int = Field(default=20, ge=0, le=51)  # x264 constant quality: lower is better and larger; 18-23 usual
    preset: Literal["ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow"] = "veryfast"
    max_seconds: float = Field(default=600.0, gt=0)  # longer clips are refused from the header
    max_frames: int = Field(default=30_000, ge=1)  # more frames are refused from the header
    # Flat areas flicker: each frame is normalised on its own. Static pixels (the input did not change)
    # are blended with the previous output: out = (1 - s) * new + s * previous; 0 turns it off.
    temporal_smoothing: float = Field(default=0.6, ge=0.0, lt=1.0)
    # Per-pixel input change (0-255, mean of RGB) under which a pixel counts as static.
    static_threshold: float = Field(default=6.0, gt=0.0, le=255.0)
    # The style's IR the frames run (edge_anime/core/stylizer.py, ``_clip_variant``): auto runs what the pictures
    # run (no second compile); live runs the style's live variant as http.live.variant: auto picks it (toon's
    # student_int8, ~4x the frames, 30-32 dB from its teacher), else the pictures' own; a name pins that variant
    # for clips only (compiled on the first clip of each style). The photos keep model.variant either way.
    variant: VariantName = AUTO

    @field_validator("extensions")
    @classmethod
    def _plain_extensions(cls, value: list[str]) -> list[str]:
        cleaned = [v.lower().lstrip(".") for v in value]
        if any(not v or "/" in v or "." in v for v in cleaned):
            raise ValueError('expected extensions without dots or slashes, such as ["mp4", "mov"]')
        return cleaned


class RayBatchSection(_Section):
    """``edge-anime batch --ray``: the Ray Data job (edge_anime/batch/on_ray.py)."""

    actors: AutoInt1 = "auto"  # actors in the pool; auto = one per alive node
    actor_cpus: AutoInt1 = "auto"  # CPUs each actor reserves; auto = the smallest node's, so one fits a node
    batch_size: int = Field(default=8, ge=1, le=1024)  # inputs per Ray batch: the unit a lost node's work is redone in


class RayServeSection(_Section):
    """``edge-anime serve --ray``: the Ray Serve deployment of the HTTP app (edge_anime/http/on_ray.py)."""

    num_replicas: AutoInt1 = 1  # auto: autoscale between min_replicas and max_replicas
    min_replicas: int = Field(default=1, ge=0, le=1024)
    max_replicas: int = Field(default=4, ge=1, le=1024)
    target_ongoing_requests: float = Field(default=2.0, gt=0)  # per replica, what autoscaling aims at
    replica_cpus: float = Field(default=1.0, gt=0)  # CPUs each replica reserves on its node

    @model_validator(mode="after")
    def _bounds(self) -> RayServeSection:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas {self.min_replicas} is above max_replicas {self.max_replicas}")
        return self


class RaySection(_Section):
    """Past one box: a Ray cluster runs ``batch`` and ``serve`` (the ``ray`` extra; docs/scale.md)."""

    batch: RayBatchSection = RayBatchSection()
    serve: RayServeSection = RayServeSection()


class Config(_Section):
    model: ModelSection = ModelSection()
    device: DeviceSection = DeviceSection()
    image: ImageSection = ImageSection()
    output: OutputSection = OutputSection()
    pipeline: PipelineSection = PipelineSection()
    watch: WatchSection = WatchSection()
    service: ServiceSection = ServiceSection()
    http: HttpSection = HttpSection()
    video: VideoSection = VideoSection()
    ray: RaySection = RaySection()
    source: PathField | None = Field(default=None, exclude=True)  # the file this came from

    def status_file(self) -> Path:
        return self.service.status_file or self.watch.root / "status.json"


# Keys holding paths, resolved against the config file's folder before validation.
_PATH_KEYS: dict[str, tuple[str, ...]] = {
    "model": ("dirs",),
    "device": ("cache_dir",),
    "watch": ("root", *WATCH_FOLDERS),
    "service": ("status_file",),
    "http": ("auth_token_file",),
}


def _anchor(base: Path, value: str) -> str:
    return os.path.normpath(base / os.path.expanduser(value))


def _resolve_paths(raw: dict[str, Any], base: Path) -> None:
    for section, keys in _PATH_KEYS.items():
        values = raw.get(section)
        if not isinstance(values, dict):
            continue
        for key in keys:
            value = values.get(key)
            if isinstance(value, str):
                values[key] = _anchor(base, value)
            elif isinstance(value, list):
                values[key] = [_anchor(base, v) if isinstance(v, str) else v for v in value]
    model = raw.get("model")
    if isinstance(model, dict):
        if isinstance(model.get("path"), str):
            model["path"] = _anchor_model(base, model["path"])
        if isinstance(model.get("styles"), list):
            model["styles"] = [_anchor_model(base, s) if isinstance(s, str) else s for s in model["styles"]]


def _anchor_model(base: Path, spec: str) -> str:
    """A model path (a folder or an .xml) is anchored like any path; a bare name stays a name."""
    path = os.path.expanduser(spec)
    return _anchor(base, path) if "/" in path or path.endswith(".xml") else spec


_REPR = reprlib.Repr()  # keyword arguments only from Python 3.12
_REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict, _REPR.maxlevel = 80, 80, 6, 6, 2


def _short_repr(value: Any) -> str:
    """The offending value as the user wrote it, cut short: a list of thousands must not become the message."""
    return _REPR.repr(value)


SUGGEST_CUTOFF = 0.6  # difflib's default similarity: "qualty" -> "quality", "watchh" -> "watch", not "x" -> "fixed"
# A key of another section must be closer: at 0.6 "watch.retry.tries" would be sent to "service.metrics".
ELSEWHERE_CUTOFF = 0.8


def close_matches(word: str, options: Iterable[str], *, cutoff: float = SUGGEST_CUTOFF) -> list[str]:
    """Up to three of ``options`` closest to a misspelt ``word``, best first. ``difflib.get_close_matches`` from
    the standard library: a typo is a few characters off, and its ratio ranks "qualty" -> "quality" and
    "toonn" -> "toon" first without a dependency."""
    return difflib.get_close_matches(word, sorted(set(options)), n=3, cutoff=cutoff)


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """``"; did you mean 'toon'?"`` for the closest of ``options`` to ``word``, or "" when none is close."""
    close = close_matches(word, options)
    return "; did you mean " + " or ".join(repr(c) for c in close) + "?" if close else ""


def _section_at(path: Sequence[str | int]) -> type[BaseModel] | None:
    """The schema class that holds the keys at ``path`` (``()``: the top level), or None past a plain value."""
    cls: type[BaseModel] = Config
    for part in path:
        field = cls.model_fields.get(str(part))
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        cls = annotation
    return cls


def _key_paths(cls: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every valid key path of the schema below ``cls`` (``image.max_side``, ``watch.retry.max_attempts``)."""
    for name, field in cls.model_fields.items():
        if name == "source" and cls is Config:
            continue
        yield prefix + name
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            yield from _key_paths(field.annotation, f"{prefix}{name}.")


def unknown_key_hint(loc: Sequence[str | int]) -> str:
    """What an unknown key most likely meant: a key of the same section (``image.max_sid`` -> ``max_side``),
    else a key of that name in another section (``image.qualty`` -> ``output.quality``); "" when nothing is
    close. The key paths come from the schema itself, so the hint can never name a key that does not exist."""
    *parent, word = [str(p) for p in loc]
    section = _section_at(parent)
    here = [n for n in section.model_fields if not (section is Config and n == "source")] if section else []
    close = close_matches(word, here)
    if close:
        return f"; did you mean {'.'.join([*parent, close[0]])}?"
    elsewhere = {path: path.rsplit(".", 1)[-1] for path in _key_paths(Config)}
    close = close_matches(word, elsewhere.values(), cutoff=ELSEWHERE_CUTOFF)
    if close:
        paths = [p for p, leaf in elsewhere.items() if leaf == close[0]]
        return "; did you mean " + " or ".join(paths) + "?"
    return ""


def format_validation_error(exc: ValidationError, *, source: Path | None = None) -> str:
    """One line per problem: `key.path: what was expected, got <value>`; an unknown key also gets the closest
    valid key (``unknown_key_hint``)."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith(("function-", "literal[", "int", "bool")))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            hint = unknown_key_hint([p for p in err["loc"] if not isinstance(p, int)])
            lines.append(f"{loc}: unknown key{hint} (check the spelling against configs/default.yaml)")
            continue
        if err["type"] == "literal_error" or msg.startswith("Input should be "):
            msg = "expected " + msg.removeprefix("Input should be ")
        if isinstance(err["input"], dict):  # a rule across keys: the message names them and their values
            lines.append(f"{loc}: {msg}")
            continue
        lines.append(f"{loc}: {msg}, got {_short_repr(err['input'])}")
    # A union reports each branch; keep each key's first message only.
    seen: set[str] = set()
    unique = []
    for line in lines:
        key = line.split(":")[0]
        if key not in seen:
            seen.add(key)
            unique.append(line)
    prefix = f"{source}: " if source else ""
    return "\n".join(prefix + ln for ln in unique)


def parse_config(raw: Any, *, base_dir: Path, source: Path | None = None) -> Config:
    """Validate an already-loaded YAML document; ``base_dir`` anchors relative paths."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source or 'config'}: expected a mapping of sections, got {type(raw).__name__}")
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    _drop_auto_paths(raw)
    _resolve_paths(raw, base_dir)
    if "source" in raw:
        raise ConfigError(f"{source or 'config'}: source: unknown key")
    try:
        config = Config.model_validate({**raw, "source": source})
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source=source)) from None
    return _with_bundled_models(_anchor_defaults(config, base_dir))


def _drop_auto_paths(raw: dict[str, Any]) -> None:
    """``auto`` for a folder key means the schema's default: removing the key lets the default apply."""
    for section, keys in _AUTO_PATH_KEYS.items():
        values = raw.get(section)
        if isinstance(values, dict):
            for key in keys:
                if values.get(key) == AUTO:
                    del values[key]


def _with_bundled_models(config: Config) -> Config:
    """``model.dirs`` plus the bundled models folder, last: the effective search list every command uses."""
    bundled = bundled_models_dir()
    if any(_same_dir(d, bundled) for d in config.model.dirs):
        return config
    model = config.model.model_copy(update={"dirs": [*config.model.dirs, bundled]})
    return config.model_copy(update={"model": model})


def _same_dir(a: Path, b: Path) -> bool:
    return os.path.normpath(a) == os.path.normpath(b)


def _anchor_defaults(config: Config, base_dir: Path) -> Config:
    """Defaults such as ``watch.root: var`` are relative too: anchor them like the keys a file sets."""
    updates: dict[str, Any] = {}
    for section, keys in _PATH_KEYS.items():
        current = getattr(config, section)
        changed = {}
        for key in keys:
            value = getattr(current, key)
            if isinstance(value, Path) and not value.is_absolute():
                changed[key] = Path(_anchor(base_dir, str(value)))
        if changed:
            updates[section] = current.model_copy(update=changed)
    return config.model_copy(update=updates) if updates else config


def default_config_path() -> Path:
    """``$EDGE_ANIME_CONFIG`` if set, else the bundled ``configs/default.yaml``."""
    env = os.environ.get(ENV_CONFIG)
    return Path(env) if env else bundled_config_path()


def load_config(path: Path | None = None) -> Config:
    """Read and validate a YAML config; with no path, the bundled default (or ``$EDGE_ANIME_CONFIG``)."""
    path = Path(path) if path is not None else default_config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from None
    try:
        raw = load_bounded(text)
    except YamlError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return parse_config(raw, base_dir=path.resolve().parent, source=path.resolve())


def effective_yaml(config: Config) -> str:
    """The effective config with every default filled in, as YAML (for `config show`)."""
    data = config.model_dump(mode="json", exclude={"source"})
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None)
