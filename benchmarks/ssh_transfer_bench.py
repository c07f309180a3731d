"""SSH file transfer benchmark: SFTP vs the exec-channel fallback (servers without SFTP), on a loopback sshd.

Run from the repository root (about 30 s on a 2-core x86 machine; needs ``/usr/sbin/sshd`` like the tests)::

    python benchmarks/ssh_transfer_bench.py [--mbytes 30] [--repeats 3]

Two loopback OpenSSH servers (``tests/sshd.py``), one with ``Subsystem sftp`` and one without, receive the same
random file through :meth:`parapipe.remote.host.RemoteHost.upload` (atomic; the exec channel also hashes the
copy on the host before renaming it) and send it back with ``download``. Printed: the median rate of
``--repeats`` transfers each way, in MB/s, and the ratio exec channel / SFTP (< 1: the fallback is slower).
Machines here are shared: compare ratios, not absolute figures.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # a checkout, not installed
sys.path.insert(0, os.path.join(ROOT, "tests"))  # the loopback sshd of the tests
from parapipe.remote.host import RemoteHost  # noqa: E402
from parapipe.remote.hostspec import HostSpec  # noqa: E402
from sshd import start_sshd  # noqa: E402


def measure(sftp: bool, local: str, folder: str, repeats: int) -> tuple:
    """Median upload and download rates (MB/s) through a loopback sshd with or without SFTP."""
    server = start_sshd(sftp=sftp)
    try:
        spec = HostSpec.parse(server.host, identity=server.client_key, known_hosts=server.known_hosts)
        nbytes = os.path.getsize(local)
        up, down = [], []
        with RemoteHost(spec) as host:
            kind = host.file_transport
            for i in range(repeats):
                remote = os.path.join(folder, f"copy-{sftp}-{i}")
                start = time.perf_counter()
                host.upload(local, remote)
                up.append(nbytes / 1e6 / (time.perf_counter() - start))
                start = time.perf_counter()
                host.download(remote, os.path.join(folder, "back"))
                down.append(nbytes / 1e6 / (time.perf_counter() - start))
                os.unlink(remote)
        return kind, statistics.median(up), statistics.median(down)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mbytes", type=int, default=30, help="file size, MB (default 30)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="parapipe-ssh-bench-")
    try:
        local = os.path.join(folder, "payload.bin")
        with open(local, "wb") as handle:
            handle.write(os.urandom(args.mbytes * 1_000_000))
        rows = [measure(sftp, local, folder, args.repeats) for sftp in (True, False)]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{'files over':<14} {'upload MB/s':>12} {'download MB/s':>14}")
    for kind, up, down in rows:
        print(f"{kind:<14} {up:>12.1f} {down:>14.1f}")
    (_, sftp_up, sftp_down), (_, exec_up, exec_down) = rows
    print(f"{'exec / SFTP':<14} {exec_up / sftp_up:>12.2f} {exec_down / sftp_down:>14.2f}")


if __name__ == "__main__":
    main()
