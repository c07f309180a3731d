"""An SFTP server without the ``posix-rename@openssh.com`` extension, for tests: OpenSSH's own sftp-server
behind a filter that removes the extension from the server's VERSION packet and answers its requests with
status 8, ``SSH_FX_OP_UNSUPPORTED`` ("Operation unsupported", as a server that lacks it does).

OpenSSH's sftp-server cannot turn the extension off; sshd runs this file as its SFTP subsystem
(``Subsystem sftp PYTHON THIS_FILE``, see ``tests/sshd.py``, ``start_sshd(sftp_command=...)``), or as its
``ForceCommand`` for an SFTP-only account. Packets: draft-ietf-secsh-filexfer-02 (uint32 length, byte type,
payload); the extension: OpenSSH's PROTOCOL file, section 4.3.
"""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading
from typing import BinaryIO, Optional

EXTENSION = b"posix-rename@openssh.com"
SFTP_SERVERS = ("/usr/lib/openssh/sftp-server", "/usr/libexec/openssh/sftp-server", "/usr/lib/ssh/sftp-server",
                "/usr/libexec/sftp-server")
FXP_VERSION, FXP_STATUS, FXP_EXTENDED = 2, 101, 200
FX_OP_UNSUPPORTED = 8


def sftp_server_path() -> Optional[str]:
    """OpenSSH's sftp-server on this machine, or None."""
    return next((path for path in SFTP_SERVERS if os.access(path, os.X_OK)), None)


def _read_exactly(stream: BinaryIO, nbytes: int) -> bytes:
    data = b""
    while len(data) < nbytes:
        chunk = stream.read(nbytes - len(data))
        if not chunk:
            return b""
        data += chunk
    return data


def read_packet(stream: BinaryIO) -> bytes:
    """One packet (type and payload, without the length), or b"" at the end of the stream."""
    head = _read_exactly(stream, 4)
    return _read_exactly(stream, struct.unpack(">I", head)[0]) if head else b""


def _string(data: bytes, offset: int) -> tuple:
    (nbytes,) = struct.unpack_from(">I", data, offset)
    return data[offset + 4:offset + 4 + nbytes], offset + 4 + nbytes


def _pack_string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def without_extension(packet: bytes) -> bytes:
    """A VERSION packet with the extension's pair removed (others kept)."""
    out, offset = packet[:5], 5
    while offset < len(packet):
        name, offset = _string(packet, offset)
        value, offset = _string(packet, offset)
        if name != EXTENSION:
            out += _pack_string(name) + _pack_string(value)
    return out


def main() -> int:
    server = sftp_server_path()
    if server is None:
        sys.stderr.write("no OpenSSH sftp-server found in %s\n" % (SFTP_SERVERS,))
        return 1
    child = subprocess.Popen([server], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    client_in, client_out = sys.stdin.buffer, sys.stdout.buffer
    lock = threading.Lock()

    def send(packet: bytes) -> None:
        with lock:
            client_out.write(struct.pack(">I", len(packet)) + packet)
            client_out.flush()

    def answers() -> None:
        while True:
            packet = read_packet(child.stdout)
            if not packet:
                return
            send(without_extension(packet) if packet[0] == FXP_VERSION else packet)

    relay = threading.Thread(target=answers, daemon=True)
    relay.start()
    while True:
        packet = read_packet(client_in)
        if not packet:
            break
        if packet[0] == FXP_EXTENDED and _string(packet, 5)[0] == EXTENSION:
            request_id = packet[1:5]
            send(bytes([FXP_STATUS]) + request_id + struct.pack(">I", FX_OP_UNSUPPORTED)
                 + _pack_string(b"Operation unsupported") + _pack_string(b""))
            continue
        child.stdin.write(struct.pack(">I", len(packet)) + packet)
        child.stdin.flush()
    child.stdin.close()
    relay.join(10)
    return child.wait(10)


if __name__ == "__main__":
    sys.exit(main())
