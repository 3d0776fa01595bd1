"""retimer's CA as clients need it: the PEM path, and a bundle of the system's roots plus it.

Pointing a runtime at the CA alone would break every host retimer tunnels untouched (their
real certificates no longer validate), so SDKs and CLIs get the combined bundle.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import ssl
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

CA_FILE = "mitmproxy-ca-cert.pem"
BUNDLE_FILE = "retimer-ca-bundle.pem"
MERGED_DIR = "merged"  # a user's own CA files joined with retimer's (merged_bundle)
LOCK_FILE = ".retimer-ca.lock"
_SYSTEM_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",  # Debian, Ubuntu, Arch
    "/etc/pki/tls/certs/ca-bundle.crt",  # Fedora, RHEL
    "/etc/ssl/cert.pem",  # macOS, Alpine
)


def system_bundle() -> Path | None:
    """The system's PEM bundle of trusted roots, or certifi's when none is found. OpenSSL's
    built-in path, not `SSL_CERT_FILE`: that variable is the user's own, which `retimer run`
    merges with retimer's CA rather than taking for the system's."""
    default = ssl.get_default_verify_paths().openssl_cafile
    for candidate in (default, *_SYSTEM_BUNDLES):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    try:
        import certifi

        return Path(certifi.where())
    except ImportError:
        return None


def write_bundle(confdir: Path) -> Path:
    """(Re)write confdir/retimer-ca-bundle.pem = system roots + retimer's CA."""
    system = system_bundle()
    roots = system.read_text() if system else ""
    return _write_pem(confdir / BUNDLE_FILE, roots, (confdir / CA_FILE).read_text())


def merged_bundle(confdir: Path, first: Path) -> Path:
    """A PEM file of `first`'s certificates (a user's own bundle or company CA, which a
    variable such as NODE_EXTRA_CA_CERTS already names) followed by retimer's CA, so a child
    trusts both; named by `first`'s path, in confdir/merged/. OSError if `first` is unreadable."""
    import hashlib

    folder = confdir / MERGED_DIR
    folder.mkdir(mode=0o755, exist_ok=True)
    name = hashlib.sha256(str(first.resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return _write_pem(folder / f"{name}.pem", first.read_text(errors="replace"),
                      (confdir / CA_FILE).read_text())


def _write_pem(path: Path, first: str, ca: str) -> Path:
    # atomically: another instance sharing the confdir may be handing this file to a client
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".bundle-")
    try:
        with os.fdopen(fd, "w") as out:
            out.write((first.rstrip("\n") + "\n" if first.strip() else "") + ca)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


class _Msvcrt(Protocol):
    """What the CA lock uses of Windows' msvcrt (typeshed declares it on win32 only, so it is
    imported by name and typed here)."""

    LK_LOCK: int
    LK_UNLCK: int

    def locking(self, fd: int, mode: int, nbytes: int, /) -> None: ...


@contextlib.contextmanager
def ca_lock(confdir: Path, platform: str = sys.platform) -> Iterator[None]:
    """Held while the CA is checked and made: instances started at once on one empty confdir
    (behind a load balancer) would otherwise each make their own CA, overwriting each other's
    files (mitmproxy checks for the file, then writes four, with no lock).

    Windows has no fcntl: there the lock is msvcrt's on the file's first byte, which waits
    (up to 10 s) as flock does.
    """
    with open(confdir / LOCK_FILE, "a") as handle:
        fd = handle.fileno()
        if platform == "win32":
            msvcrt: _Msvcrt = importlib.import_module("msvcrt")
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
        else:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if platform == "win32":
                os.lseek(fd, 0, os.SEEK_SET)
                msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)


def ensure_ca(confdir: Path, key_size: int = 2048) -> Path:
    """Create retimer's CA in confdir if missing (as the proxy would); return the cert's path.

    The folder is made owner-only (0700) and the files holding the CA's private key 0600: anyone
    who can read that key can mint certificates every client trusting the CA accepts.
    """
    from mitmproxy.certs import CertStore

    confdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    confdir.chmod(0o700)
    with ca_lock(confdir):  # one CA, whichever of several instances comes first
        CertStore.from_store(confdir, "mitmproxy", key_size)
        for secret in ("mitmproxy-ca.pem", "mitmproxy-ca.p12"):
            path = confdir / secret
            if path.exists():
                path.chmod(0o600)
    return confdir / CA_FILE


def spki_hash(cert_pem: Path) -> str:
    """base64(sha256(SubjectPublicKeyInfo DER)): what Chromium's --ignore-certificate-errors-spki-list
    and HPKP-style pins name. Every leaf retimer mints reuses the CA's key, so it matches them all."""
    import base64
    import hashlib

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert = x509.load_pem_x509_certificate(cert_pem.read_bytes())
    der = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return base64.b64encode(hashlib.sha256(der).digest()).decode()
