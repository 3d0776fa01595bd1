"""Certificates for the fake servers of the tests: a CA of their own and a leaf for their names,
so clients and retimer can be made to trust exactly that server (and nothing else does)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def make_certs(directory: Path, names: tuple[str, ...], ca_name: str = "retimer test CA"
               ) -> tuple[Path, Path, Path]:
    """A CA and a leaf for `names` in `directory`; returns (ca.pem, cert.pem, key.pem).
    Reuses the files if they are already there (the separate-process mode with a fixed certdir)."""
    paths = directory / "ca.pem", directory / "cert.pem", directory / "key.pem"
    if all(p.exists() for p in paths):
        return paths
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())

    def build(subject: x509.Name, pub: ec.EllipticCurvePublicKey, exts: list) -> x509.Certificate:
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name).public_key(pub)
             .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(1))
             .not_valid_after(now + dt.timedelta(30))
             .add_extension(x509.SubjectKeyIdentifier.from_public_key(pub), critical=False))
        for e, critical in exts:
            b = b.add_extension(e, critical=critical)
        return b.sign(ca_key, hashes.SHA256())

    ca = build(ca_name, ca_key.public_key(), [
        (x509.BasicConstraints(ca=True, path_length=0), True),
        (x509.KeyUsage(False, False, False, False, False, True, True, False, False), True)])
    sans: list[x509.GeneralName] = []
    for n in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            sans.append(x509.DNSName(n))
    leaf = build(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]), key.public_key(), [
        (x509.SubjectAlternativeName(sans), False),
        (x509.BasicConstraints(ca=False, path_length=None), True),
        (x509.KeyUsage(True, False, False, False, False, False, False, False, False), True),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
        (x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), False)])
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths
