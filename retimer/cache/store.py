"""The response cache on disk: DIR/<key[:2]>/<key>.json + <key>.body, written atomically.

The body goes first and the metadata (which names the body's size and sha256) last, each
through a temporary file renamed into place, so a reader sees a whole entry or none; an
entry that fails its checks anyway (a crash, a hand edit, another version) is ignored with a
warning and replaced by the next store. With a size cap the least recently used entries go
first (a hit touches its entry). No mitmproxy and no asyncio here.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from pathlib import Path

from retimer.cache.entry import CacheEntry, CorruptEntry, decode_entry, encode_entry

logger = logging.getLogger("retimer")

_KEY = re.compile(r"[0-9a-f]{64}\Z")


class CacheStore:
    """Entries by key in one directory, optionally capped at `max_bytes` in total."""

    def __init__(self, directory: str | Path, max_bytes: int = 0) -> None:
        self.dir = Path(directory).expanduser()
        self.max_bytes = max_bytes  # 0: no cap
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)  # bodies are conversations
        self._size: int | None = None  # total bytes, counted on first need

    def paths(self, key: str) -> tuple[Path, Path]:
        if not _KEY.match(key):
            raise ValueError(f"not a cache key: {key!r}")
        folder = self.dir / key[:2]
        return folder / f"{key}.json", folder / f"{key}.body"

    def get(self, key: str) -> CacheEntry | None:
        """The entry for `key`, or None when there is none or it cannot be trusted."""
        meta_path, body_path = self.paths(key)
        try:
            meta = meta_path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            logger.warning(f"retimer: cannot read cache entry {meta_path}: {e.strerror}")
            return None
        try:
            body = body_path.read_bytes()
        except OSError as e:
            logger.warning(f"retimer: ignoring cache entry {meta_path}: no body ({e.strerror})")
            return None
        try:
            entry = decode_entry(meta, body)
        except CorruptEntry as e:
            logger.warning(f"retimer: ignoring corrupt cache entry {meta_path}: {e}")
            return None
        try:
            os.utime(meta_path)  # recently used: last to be evicted
        except OSError:
            pass
        return entry

    def put(self, key: str, entry: CacheEntry) -> None:
        """Store `entry` under `key`, replacing any; raises OSError when the disk refuses."""
        meta_path, body_path = self.paths(key)
        meta_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        meta, body = encode_entry(entry)
        old = _size_of(meta_path) + _size_of(body_path)
        _atomic_write(body_path, body)
        _atomic_write(meta_path, meta)
        if self.max_bytes:
            self._size = (self.total_bytes() if self._size is None else self._size)
            self._size += len(meta) + len(body) - old
            if self._size > self.max_bytes:
                self.evict(keep=key)

    def total_bytes(self) -> int:
        return sum(size for _, size, _ in self._scan())

    def evict(self, keep: str = "") -> int:
        """Delete least recently used entries until under the cap; returns how many went."""
        entries = sorted(self._scan(), key=lambda e: e[2])
        total = sum(size for _, size, _ in entries)
        removed = 0
        for key, size, _ in entries:
            if total <= self.max_bytes:
                break
            if key == keep:
                continue
            for path in self.paths(key):
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass
            total -= size
            removed += 1
        self._size = total
        return removed

    def _scan(self) -> list[tuple[str, int, float]]:
        """(key, bytes, last use) of every entry, orphaned bodies included (oldest first)."""
        found: dict[str, tuple[int, float]] = {}
        for path in self.dir.glob("??/*"):
            key, _, ext = path.name.partition(".")
            if ext not in ("json", "body") or not _KEY.match(key):
                continue
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            size, used = found.get(key, (0, 0.0))
            # an orphaned body (no metadata) counts as unused since the epoch: it goes first
            found[key] = (size + st.st_size, max(used, st.st_mtime) if ext == "json" else used)
        return [(k, size, used) for k, (size, used) in found.items()]


def _size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
