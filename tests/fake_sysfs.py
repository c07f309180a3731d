"""A fake sysfs tree of frequency domains for the DVFS tests: cpufreq policies and one devfreq device, in the
layout of Linux ``Documentation/admin-guide/pm/cpufreq.rst`` and ``Documentation/ABI/testing/sysfs-class-devfreq``.

Plain files stand for the kernel's attributes; the "kernel" is a symlink: each domain's current-frequency file
(``scaling_cur_freq`` / ``cur_freq``) points at its setspeed file (a domain with the userspace governor) or its
``scaling_max_freq`` (one without), so reading it back gives what the kernel would run after a write.
:func:`cap` replaces it with a plain file (a thermal cap: the kernel runs lower than asked).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

#: The A311D's two CPU clusters (Linux ``arch/arm64/boot/dts/amlogic/meson-g12b-a311d.dtsi``), kHz, and the
#: Mali-G52's table (``meson-g12-common.dtsi``), Hz.
A53_KHZ = (1000000, 1200000, 1398000, 1512000, 1608000, 1704000, 1800000)
A73_KHZ = (1200000, 1398000, 1512000, 1608000, 1704000, 1800000, 1908000, 2016000, 2108000, 2208000)
GPU_HZ = (125000000, 250000000, 285714285, 400000000, 500000000, 666666666, 800000000)
GPU = "ffe40000.gpu"


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def build(root: Path, policies: Optional[Dict[int, Tuple[Sequence[int], Sequence[int]]]] = None,
          devfreq: Optional[Dict[str, Sequence[int]]] = None, userspace: bool = True,
          governor: str = "schedutil") -> Path:
    """Write the tree under ``root`` and return it.

    ``policies``: ``{N: (cpus, table kHz)}`` (default policy0 = CPUs 0-1 with the A53 table, policy2 = CPUs 2-5
    with the A73 table); ``devfreq``: ``{name: table Hz}`` (default the Mali-G52); ``userspace``: whether the
    userspace governor is offered (else frequencies are pinned with min = max).
    """
    policies = policies if policies is not None else {0: ((0, 1), A53_KHZ), 2: ((2, 3, 4, 5), A73_KHZ)}
    devfreq = devfreq if devfreq is not None else {GPU: GPU_HZ}
    governors = ("userspace " if userspace else "") + "performance powersave " + governor
    for n, (cpus, table) in policies.items():
        d = root / "devices/system/cpu/cpufreq" / f"policy{n}"
        ids = " ".join(map(str, cpus))
        for name, text in (("related_cpus", ids), ("affected_cpus", ids),
                           ("scaling_available_frequencies", " ".join(map(str, table))),
                           ("scaling_available_governors", governors), ("scaling_governor", governor),
                           ("scaling_min_freq", str(min(table))), ("scaling_max_freq", str(max(table))),
                           ("cpuinfo_transition_latency", "40000")):
            _put(d / name, text)
        if userspace:
            _put(d / "scaling_setspeed", "<unsupported>")
        os.symlink("scaling_setspeed" if userspace else "scaling_max_freq", d / "scaling_cur_freq")
    for name, table in devfreq.items():
        d = root / "class/devfreq" / name
        for fname, text in (("available_frequencies", " ".join(map(str, table))),
                            ("available_governors", ("userspace " if userspace else "") + "performance "
                             "simple_ondemand"), ("governor", "simple_ondemand"),
                            ("min_freq", str(min(table))), ("max_freq", str(max(table)))):
            _put(d / fname, text)
        if userspace:
            _put(d / "userspace" / "set_freq", str(max(table)))
        os.symlink("userspace/set_freq" if userspace else "max_freq", d / "cur_freq")
    return root


def cap(root: Path, domain: str, value: int) -> None:
    """A thermal cap: the domain's current-frequency file (``domain`` relative to ``root``) reads ``value``
    whatever is written."""
    d = root / domain
    cur = d / ("scaling_cur_freq" if (d / "scaling_governor").exists() else "cur_freq")
    cur.unlink()
    _put(cur, str(value))


def snapshot(root: Path) -> Dict[str, str]:
    """Every plain file's text (stripped) under ``root`` (symlinks left out), by relative path."""
    out = {}
    for path in sorted(Path(root).rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[path.relative_to(root).as_posix()] = path.read_text().strip()  # sysfs ignores the newline
    return out


def read_only(root: Path, rels: Iterable[str]) -> List[Path]:
    """Make these files mode 0444: read-only for every user, root too (see ``ppexec.dvfs._writable``)."""
    paths = [Path(root) / rel for rel in rels]
    for p in paths:
        p.chmod(0o444)
    return paths
