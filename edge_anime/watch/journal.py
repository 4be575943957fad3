"""The processed list for ``watch.after_success: keep``: inputs that stay in the inbox but are done.

One JSON object per line in ``work/processed.jsonl`` (work/ is shared by every worker on the inbox, so all
of them see it). An entry names the file and its size and mtime, so a new file under an old name is
processed again. Entries are appended with O_APPEND (one write per line is atomic for the short lines used
here) and fsynced *before* the input is renamed back into the inbox: whoever sees the file again can find
its entry. Only this mode holds entries in memory; the other modes never read the file.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

JOURNAL_NAME = "processed.jsonl"

Key = tuple[str, int, int]  # rel, size, mtime_ns


class ProcessedList:
    """Append-only list of done inputs kept in the inbox, re-read incrementally (other workers append)."""

    def __init__(self, work: Path) -> None:
        self.path = work / JOURNAL_NAME
        self._seen: set[Key] = set()
        self._offset = 0

    def add(self, rel: str, st: os.stat_result) -> None:
        line = json.dumps({"rel": rel, "size": st.st_size, "mtime_ns": st.st_mtime_ns}) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        self._seen.add((rel, st.st_size, st.st_mtime_ns))

    def contains(self, rel: str, st: os.stat_result) -> bool:
        key = (rel, st.st_size, st.st_mtime_ns)
        if key not in self._seen:
            self._refresh()
        return key in self._seen

    def _refresh(self) -> None:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1  # a line still being appended is read next time
        for line in data[:end].splitlines():
            try:
                item = json.loads(line)
                self._seen.add((item["rel"], int(item["size"]), int(item["mtime_ns"])))
            except (ValueError, KeyError, TypeError):
                continue
        self._offset += end
