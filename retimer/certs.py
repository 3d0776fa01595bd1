"""retimer's CA as clients need it: the PEM path, and a bundle of the system's roots plus it.

Pointing a runtime at the CA alone would break every host retimer tunnels untouched (their
real certificates no longer validate), so SDKs and CLIs get the combined bundle.
"""

from __future__ import annotations

import ssl
from pathlib import Path

CA_FILE = "mitmproxy-ca-cert.pem"
BUNDLE_FILE = "retimer-ca-bundle.pem"
_SYSTEM_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",  # Debian, Ubuntu, Arch
    "/etc/pki/tls/certs/ca-bundle.crt",  # Fedora, RHEL
    "/etc/ssl/cert.pem",  # macOS, Alpine
)


def system_bundle() -> Path | None:
    """The system's PEM bundle of trusted roots, or certifi's when none is found."""
    default = ssl.get_default_verify_paths().cafile
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
    ca = (confdir / CA_FILE).read_text()
    system = system_bundle()
    roots = system.read_text() if system else ""
    bundle = confdir / BUNDLE_FILE
    bundle.write_text(roots.rstrip("\n") + "\n" + ca)
    return bundle
