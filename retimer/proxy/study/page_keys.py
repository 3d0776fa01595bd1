"""The hosted study page's keys: the secret that signs participants' cookies and the admin
view's token, the same on every instance of a study (so a cookie one signs another accepts,
and one token opens every admin view), kept in the confdir unless the environment gives them.
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import os
import secrets
from pathlib import Path

from retimer.study.design import StudyError

__all__ = ["ADMIN_ENV", "ADMIN_FILE", "SECRET_ENV", "SECRET_FILE", "admin_token", "kept_secret"]

SECRET_ENV = "RETIMER_STUDY_SECRET"
SECRET_FILE = "study-page-secret"
ADMIN_ENV = "RETIMER_STUDY_ADMIN_TOKEN"
ADMIN_FILE = "study-admin-token"


def kept_secret(confdir: str, env: str, name: str) -> bytes:
    """A key from the environment variable `env`, else a random one kept in the confdir's file
    `name` (made once, atomically, so instances sharing a confdir agree)."""
    if value := os.environ.get(env, ""):
        if len(value) < 16:
            raise StudyError(f"{env}: expected at least 16 characters")
        return value.encode("utf-8")
    folder = Path(confdir).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if not path.exists():
        tmp = folder / f".{name}.{os.getpid()}"
        tmp.write_text(secrets.token_urlsafe(32))
        tmp.chmod(0o600)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)  # the first instance's key wins
        tmp.unlink()
    data = path.read_bytes().strip()
    if len(data) < 16:
        raise StudyError(f"{path}: the key is too short; remove the file")
    return data


def admin_token(secret: bytes, study: str, confdir: str) -> bytes:
    """The admin view's token: `RETIMER_STUDY_ADMIN_TOKEN`, else one derived from the study's
    page secret and name, so every instance that accepts the study's cookies (the same secret)
    takes the same token; written to the confdir's `study-admin-token` for the researcher."""
    if value := os.environ.get(ADMIN_ENV, ""):
        if len(value) < 16:
            raise StudyError(f"{ADMIN_ENV}: expected at least 16 characters")
        return value.encode("utf-8")
    digest = hmac.new(secret, b"retimer study admin token\0" + study.encode("utf-8"), "sha256")
    token = base64.urlsafe_b64encode(digest.digest()[:24])
    folder = Path(confdir).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ADMIN_FILE
    if not path.exists() or path.read_bytes().strip() != token:
        tmp = path.with_name(f".{ADMIN_FILE}.{os.getpid()}")
        tmp.write_bytes(token + b"\n")
        tmp.chmod(0o600)
        tmp.replace(path)
    return token
