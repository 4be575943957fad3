"""What the CPU plugin chose for a model (streams, threads, requests, precision), kept beside the model cache.

Why: the engine needs those figures before its first photo (the pipeline's in-flight slots and the shape
cache's memory estimate come from them), and asking the plugin means compiling a small shape. From a warm
model cache that compile still took 0.12-0.14 s of CPU of a ~0.9 s service start on the 2-core AMD EPYC box
(issue 14: READY <= 1 s warm). The plugin's choice is a function of the box, the OpenVINO version, the
model and the properties asked for, so with all of those in the key a file written by an earlier start
answers exactly what that compile would. Anything unreadable, damaged or keyed otherwise is ignored and the
read-back compile runs again (the engine then rewrites it, temp + rename like every file the service writes).
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from ..fsutil import write_atomic

log = logging.getLogger(__name__)
FORMAT = 1
PREFIX = "edge-anime-plugin-"


def path_for(cache_dir: Path, key: dict[str, Any]) -> Path:
    """One file per key: styles, variants and settings sharing a cache folder never overwrite each other."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir / f"{PREFIX}{digest}.json"


def load(cache_dir: Path | None, key: dict[str, Any]) -> dict[str, Any] | None:
    """The properties an earlier start read back for exactly ``key``, or None (then the read-back compile runs)."""
    if cache_dir is None:
        return None
    path = path_for(cache_dir, key)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("engine: %s is unreadable (%s); asking the plugin again", path, exc)
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("key") != key \
            or not isinstance(data.get("effective"), dict):
        return None
    return dict(data["effective"])


def save(cache_dir: Path | None, key: dict[str, Any], effective: dict[str, Any]) -> None:
    """Keep what the plugin read back for the next start; a folder that refuses costs a compile, not the start."""
    if cache_dir is None:
        return
    body = json.dumps({"format": FORMAT, "key": key, "effective": effective}, indent=1, sort_keys=True) + "\n"
    try:
        write_atomic(path_for(cache_dir, key), body.encode("utf-8"))
    except OSError as exc:
        log.warning("engine: cannot keep the plugin's choice in %s (%s); the next start compiles to read it again",
                    cache_dir, exc)
