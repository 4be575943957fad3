"""The HTTP service's answers other than 200, shared by the app, the body reader and the connection layer."""
from __future__ import annotations

from ..errors import BYTES_PER_MB

RETRY_AFTER_SECONDS = 2  # what a 503 asks the client to wait: about one picture's time on a busy box


class HttpError(Exception):
    """An answer other than 200: the status, a short reason and the detail a person can act on."""

    def __init__(self, status: int, error: str, detail: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status, self.error, self.detail, self.headers = status, error, detail, headers or {}


__all__ = ["BYTES_PER_MB", "RETRY_AFTER_SECONDS", "HttpError"]
