"""Host-key policies for paramiko: refuse unknown keys, or trust a new key and save it to known_hosts.

A changed key is never handled here: paramiko raises ``BadHostKeyException`` before any policy runs.
"""
from __future__ import annotations

import base64
import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import paramiko

__all__ = ["RejectPolicy", "TrustAndSavePolicy", "UnknownHostKey", "fingerprint"]

log = logging.getLogger(__name__)


def fingerprint(key: Any) -> str:
    """OpenSSH-style fingerprint ``SHA256:<base64>`` of a public key (as ``ssh-keygen -l`` prints it)."""
    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode("ascii").rstrip("=")
    return f"SHA256:{digest}"


class UnknownHostKey(Exception):
    """Raised by :class:`RejectPolicy` with ``"<key type> <fingerprint>"``; RemoteHost reports it."""


class RejectPolicy(paramiko.MissingHostKeyPolicy):
    """Refuse a host key that is not in known_hosts (raises :class:`UnknownHostKey`)."""

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        """paramiko's hook for a key not in known_hosts: raise :class:`UnknownHostKey`."""
        raise UnknownHostKey(f"{key.get_name()} {fingerprint(key)}")


class TrustAndSavePolicy(paramiko.MissingHostKeyPolicy):
    """Accept a new host key and append it to the known_hosts file atomically (temp file + os.replace)."""

    def __init__(self, path: Path):
        """``path``: the known_hosts file to append to (created with its folder, mode 0600, if missing)."""
        self._path = path

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        """paramiko's hook for a key not in known_hosts: accept it for ``client`` and append
        ``hostname key-type base64`` to the file; raises OSError when the file cannot be written."""
        client.get_host_keys().add(hostname, key.get_name(), key)
        self._path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        old = self._path.read_text() if self._path.exists() else ""
        if old and not old.endswith("\n"):
            old += "\n"
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        fd, tmp = tempfile.mkstemp(prefix=".known_hosts.", dir=self._path.parent)
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(old + line)
            os.chmod(tmp, 0o600)
            os.replace(tmp, self._path)
        except BaseException:
            os.unlink(tmp)
            raise
        log.warning("trusted the new host key of %s (%s %s) and saved it to %s", hostname, key.get_name(),
                    fingerprint(key), self._path)
