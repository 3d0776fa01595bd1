"""A real PostgreSQL server for the study-state tests: Debian's package, a cluster of its own in a
temporary directory, on a free port, trust authentication on 127.0.0.1 only.

PostgreSQL refuses to run as root, so as root (CI's containers) the cluster belongs to the
`postgres` user the package made, and its commands run through `runuser`. A machine without
PostgreSQL fails the test (scripts/setup-system installs it): a skip would hide the gap.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType

import pytest

from tests.support.proxy import free_port


def bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not found:
        pytest.fail("PostgreSQL is not installed (Debian: apt-get install postgresql; "
                    "scripts/setup-system does it)")
    return Path(found[-1]).parent


class Postgres:
    """`with Postgres() as pg:` a running server; `pg.url` a database of its own."""

    def __init__(self, database: str = "study") -> None:
        self.bin = bin_dir()
        self.port = free_port()
        self.database = database
        self.root = Path(tempfile.mkdtemp(prefix="retimer-pg-"))
        self.root.chmod(0o755)  # the postgres user reaches its data through it
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.as_root = os.geteuid() == 0

    @property
    def url(self) -> str:
        return f"postgresql://retimer@127.0.0.1:{self.port}/{self.database}"

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", "postgres", "--"] if self.as_root else []
        return subprocess.run([*prefix, *argv], capture_output=True, text=True, check=check,
                              timeout=60, cwd=self.root)

    def start(self) -> Postgres:
        if not self.data.exists():
            self.data.mkdir()
            if self.as_root:
                user = pwd.getpwnam("postgres")
                for path in (self.data, self.root):
                    os.chown(path, user.pw_uid, user.pw_gid)
            self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U",
                      "retimer", "-E", "UTF8", "--no-sync")
            fresh = True
        else:
            fresh = False
        # no fsync (the machine does not crash under a test), but every commit's WAL is written
        # before it is acknowledged: `stop("immediate")` kills the server as a crash would, and
        # with synchronous_commit off the last commits before it would be lost
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w",
                  "-t", "30", "-o", f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                  "-c fsync=off -c full_page_writes=off", "start")
        if fresh:
            import psycopg

            with psycopg.connect(f"postgresql://retimer@127.0.0.1:{self.port}/postgres",
                                 autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {self.database}")
        return self

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (`immediate`: as if it went away)."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop",
                  check=False)

    def processes(self) -> list[int]:
        """The server's processes: the postmaster (its pid file's first line) and its children."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True,
                                  text=True, check=False).stdout.split()
        return [postmaster, *map(int, children)]

    def hang(self) -> list[int]:
        """Stop every process of the server (SIGSTOP): connections stay open and nothing
        answers, as with a server that hangs; `resume(...)` the pids returned."""
        pids = self.processes()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        return pids

    @staticmethod
    def resume(pids: list[int]) -> None:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def __enter__(self) -> Postgres:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
