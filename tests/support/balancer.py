"""Debian's HAProxy in TCP mode in front of retimer instances, for the load-balancer tests.

The config is the one docs/deployment.md shows: `mode tcp`, round robin, a TCP connect check
on every server. The admin socket tells the tests which servers the checks see as up.
"""

from __future__ import annotations

import base64
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

import pytest

from tests.support.proxy import free_port, stop_process

HAPROXY = "/usr/sbin/haproxy"

CONFIG = """\
global
    maxconn 512
    stats socket {socket} mode 600 level admin

defaults
    mode tcp
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    timeout tunnel 1h
    retries 3
    option redispatch

frontend retimer
    bind 127.0.0.1:{port}
    default_backend retimers

backend retimers
    balance {balance}
{check}{servers}
"""

# the HTTP check (retimer.proxy.health), in place of the plain TCP connect check
HTTP_CHECK = """\
    option httpchk
    http-check send meth GET uri /health ver HTTP/1.1 hdr Host retimer
    http-check expect status 200
    timeout check 1s
"""

SERVER = "    server {name} 127.0.0.1:{port} check inter 200ms fall 2 rise 1"


def haproxy_path() -> str:
    """HAProxy's path. A machine without it fails the test, in CI and out (as a missing browser
    does): a skip would hide that the balancer was never tested. .ci/run installs it."""
    found = HAPROXY if os.access(HAPROXY, os.X_OK) else shutil.which("haproxy")
    if not found:
        pytest.fail("haproxy is not installed: apt-get install haproxy (.ci/run does)")
    return found


class HAProxy:
    """`haproxy -db` with CONFIG, on a free port, balancing over `servers` (name -> port);
    `http_check`: HAProxy's HTTP check on retimer's `GET /health` instead of a TCP connect;
    `balance`: roundrobin or leastconn; `check_auth` (USER:PASS): the HTTP check sends it as
    `Proxy-Authorization`, for instances run with `--proxy-auth`."""

    def __init__(self, tmp: Path, servers: dict[str, int], *, http_check: bool = False,
                 balance: str = "roundrobin", check_auth: str = "") -> None:
        self.binary = haproxy_path()
        tmp.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.socket = tmp / "haproxy.sock"
        self.config = tmp / "haproxy.cfg"
        self.log = tmp / "haproxy.out"
        lines = "\n".join(SERVER.format(name=n, port=p) for n, p in servers.items())
        check = HTTP_CHECK if http_check else ""
        if check_auth:  # instances behind --proxy-auth answer the check only with the credentials
            basic = base64.b64encode(check_auth.encode()).decode()
            check = check.replace("hdr Host retimer", f'hdr Host retimer hdr Proxy-Authorization "Basic {basic}"')
        self.config.write_text(CONFIG.format(socket=self.socket, port=self.port, servers=lines, check=check,
                                             balance=balance))
        self.servers = servers
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> HAProxy:
        """Started, and every server seen up by the health checks."""
        check = subprocess.run([self.binary, "-c", "-f", str(self.config)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen([self.binary, "-db", "-f", str(self.config)],
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.wait_status({name: "UP" for name in self.servers}, timeout)
        return self

    def stop(self) -> None:
        stop_process(self.proc)

    def __enter__(self) -> HAProxy:
        return self.start()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def command(self, line: str) -> str:
        """One command on the admin socket, and its answer."""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(str(self.socket))
            s.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def status(self) -> dict[str, str]:
        """Each server's state as the health checks see it ("UP", "DOWN", ...)."""
        rows = self.command("show stat").lstrip("# ").splitlines()
        header = rows[0].split(",")
        name, kind, state = header.index("svname"), header.index("pxname"), header.index("status")
        found = {}
        for row in rows[1:]:
            cells = row.split(",")
            if len(cells) > state and cells[kind] == "retimers" and cells[name] in self.servers:
                found[cells[name]] = cells[state].split(" ")[0]
        return found

    def wait_status(self, wanted: dict[str, str], timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        seen: dict[str, str] = {}
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"haproxy exited {self.proc.returncode}: {self.log.read_text()}")
            try:
                seen = self.status()
            except OSError:
                seen = {}
            if seen == wanted:
                return
            time.sleep(0.05)
        raise TimeoutError(f"haproxy servers {seen}, wanted {wanted}")


# a hosted study's front end, as docs/studies.md gives it: TLS ended here, HTTP mode with
# http-no-delay (each chunk forwarded at once), only the study's paths, X-Forwarded-Proto for the
# Secure cookie, the participant header stripped; the TCP check (reverse mode has no /health)
STUDY_CONFIG = """\
global
    maxconn 512
    stats socket {socket} mode 600 level admin

defaults
    mode http
    option http-no-delay
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    timeout http-request 10s

frontend study
    bind 127.0.0.1:{port} ssl crt {pem}
    http-request deny deny_status 404 unless {{ path /study }} || {{ path_beg /study/ }}
    http-request set-header X-Forwarded-Proto https
    http-request del-header X-Retimer-Participant
    default_backend retimers

backend retimers
    balance roundrobin
{servers}
"""


def self_signed(folder: Path, host: str = "localhost") -> tuple[Path, Path]:
    """A self-signed certificate for `host`: (HAProxy's PEM, cert and key; the cert alone)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    folder.mkdir(parents=True, exist_ok=True)
    pem, crt = folder / "front.pem", folder / "front.crt"
    pem.write_bytes(cert_pem + key_pem)
    crt.write_bytes(cert_pem)
    return pem, crt


class StudyFront(HAProxy):
    """HAProxy as a hosted study's HTTPS front end (STUDY_CONFIG) over `servers`; `ca` is the
    certificate a client trusts to reach it at `url` (https://localhost:PORT)."""

    def __init__(self, tmp: Path, servers: dict[str, int]) -> None:
        super().__init__(tmp, servers)
        self.pem, self.ca = self_signed(tmp)
        lines = "\n".join(SERVER.format(name=n, port=p) for n, p in servers.items())
        self.config.write_text(STUDY_CONFIG.format(socket=self.socket, port=self.port,
                                                   pem=self.pem, servers=lines))

    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}"
