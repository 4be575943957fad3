"""The Bearer token of ``http.auth_token_file``: read once at start, refused there when it could never work.

No Starlette here, so `config check` can apply the same rules as `serve` without the ``http`` extra.

Why each rule: a token file that every user of the box can read (mode 0644, the umask's default) gives
the token to every local account, so it is refused the way ssh refuses such a private key (group-readable
stays allowed: 0640 root:edge-anime is how the unit's user gets to read it). A token with characters outside
printable ASCII can never match: HTTP header values are ISO-8859-1 octets in practice and clients send UTF-8
or refuse to send at all, so such a token would lock every client out without a word; it is refused at start
instead.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import ConfigError

TOKEN_MIN_CHARS = 16
KEY = "http.auth_token_file"
OTHERS_MASK = 0o007  # read, write or execute for every user: the token is no secret then
GROUP_WRITE = 0o020


def mode_problem(mode: int) -> str | None:
    """Why a token file of this ``st_mode`` is refused, or None: readable or writable by others, or writable
    by its group (any of them could read or replace the token)."""
    if mode & OTHERS_MASK or mode & GROUP_WRITE:
        return (f"mode {stat.S_IMODE(mode):04o} lets other users of this box read or change the token; "
                "chmod 600 it (or 640 with the service's group)")
    return None


def token_problem(token: str) -> str | None:
    """Why this token (already stripped) is refused, or None: too short, or a character no client can send
    (outside printable ASCII, or white space inside)."""
    if len(token) < TOKEN_MIN_CHARS:
        return f"the token is {len(token)} characters; expected at least {TOKEN_MIN_CHARS}"
    bad = next((c for c in token if not (c.isascii() and c.isprintable()) or c.isspace()), None)
    if bad is not None:
        return (f"the token holds {bad!r} (U+{ord(bad):04X}); a Bearer token is printable ASCII without spaces "
                "(HTTP headers cannot carry it), e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))'")
    return None


def read_token(path: Path) -> str:
    """The token in ``path``, or ConfigError naming the key, the file and the fix. Opens nothing but a regular
    file (a FIFO named here would block the start)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ConfigError(f"{KEY}: {path}: cannot read it ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{KEY}: {path} is not a regular file; expected a file holding the Bearer token")
    problem, token = mode_problem(st.st_mode), ""
    if problem is None:
        try:
            token = path.read_text(encoding="utf-8").strip()
            problem = token_problem(token)
        except OSError as exc:
            problem = f"cannot read it ({exc.strerror})"
        except UnicodeDecodeError:
            problem = "not UTF-8 text; a Bearer token is printable ASCII"
    if problem is not None:
        raise ConfigError(f"{KEY}: {path}: {problem}")
    return token


__all__ = ["TOKEN_MIN_CHARS", "mode_problem", "read_token", "token_problem"]
