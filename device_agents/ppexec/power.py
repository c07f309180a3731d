"""Energy of a run from the board's power sensor, sampled while the pipeline runs (standard library only).

A profile's ``power_sensor`` (``parapipe/soc/pipeline.py``; carried in ``plan.json``) names one of:

* ``powercap``: Linux powercap energy counters ``<zone>/energy_uj`` (Intel/AMD RAPL), µJ, wrapping at
  ``<zone>/max_energy_range_uj`` (Linux ``Documentation/power/powercap/powercap.rst``). Without ``paths``:
  every top-level zone (``intel-rapl:0``, not its sub-zones ``intel-rapl:0:0``, which it already counts).
* ``hwmon``: ``hwmon*/energy*_input`` counters (µJ) or, where a chip has none, ``hwmon*/power*_input`` (µW),
  integrated over the samples (Linux ``Documentation/hwmon/sysfs-interface.rst``).
* ``ina3221``: a Jetson's INA3221 rail monitor through hwmon (device ``name`` = ``ina3221``): power of channel
  N = ``inN_input`` (bus voltage, mV) × ``currN_input`` (mA) (Linux ``Documentation/hwmon/ina3221.rst``), summed
  over the ``rails`` (``inN_label``; default ``VDD_IN``, the board's input rail, where a device has it, else
  every labelled channel).
* ``command``: a program that prints the current power in watts (the first number of its output).

Paths are relative to the sysfs root, ``/sys`` unless ``$PPEXEC_SYSFS_ROOT`` or ``root`` says otherwise (the
tests point it at a fake tree), or absolute. Counters are read at the start, the end and every ``interval_s``
(so that a wrap-around is seen); powers are sampled every ``interval_s`` and integrated with the trapezoidal rule.
"""
from __future__ import annotations

import glob
import os
import re
import subprocess
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from .errors import plan_error

__all__ = ["SYSFS_ROOT_ENV", "sysfs_root", "PowerMeter", "detect_sensor"]

#: Environment variable naming the sysfs root (default ``/sys``).
SYSFS_ROOT_ENV = "PPEXEC_SYSFS_ROOT"
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_FIX = "check the power_sensor section of the SoC profile, or remove it (energies then stay estimates)"


def sysfs_root(root: Optional[str] = None) -> str:
    """The sysfs root: ``root``, else ``$PPEXEC_SYSFS_ROOT``, else ``/sys``."""
    return root or os.environ.get(SYSFS_ROOT_ENV) or "/sys"


def _read_text(path: str) -> str:
    with open(path) as handle:
        return handle.read().strip()


def _read_number(path: str) -> float:
    return float(_read_text(path))


def _resolve(root: str, paths: List[str]) -> List[str]:
    return [p if os.path.isabs(p) else os.path.join(root, p) for p in paths]


class _Counter(object):
    """An energy counter file (µJ) with its wrap range (µJ; None: a drop is taken as a reset)."""

    def __init__(self, path: str, wrap_uj: Optional[float]):
        self.path, self.wrap_uj = path, wrap_uj
        self.last = _read_number(path)
        self.total_uj = 0.0

    def read(self) -> None:
        value = _read_number(self.path)
        if value >= self.last:
            self.total_uj += value - self.last
        else:
            self.total_uj += (self.wrap_uj - self.last + value) if self.wrap_uj else value
        self.last = value


def _powercap(root: str, paths: List[str]) -> List[_Counter]:
    if not paths:
        zones = sorted(z for z in glob.glob(os.path.join(root, "class", "powercap", "*"))
                       if re.match(r"^[^:]+:\d+$", os.path.basename(z)))
        paths = [os.path.join(z, "energy_uj") for z in zones if os.path.exists(os.path.join(z, "energy_uj"))]
    counters = []
    for p in _resolve(root, paths):
        wrap = os.path.join(os.path.dirname(p), "max_energy_range_uj")
        counters.append(_Counter(p, _read_number(wrap) if os.path.exists(wrap) else None))
    return counters


def _hwmon_files(root: str, pattern: str) -> List[str]:
    return sorted(glob.glob(os.path.join(root, "class", "hwmon", "hwmon*", pattern)))


def _ina3221_channels(root: str, paths: List[str], rails: List[str]) -> List[Tuple[str, str]]:
    """``(voltage file, current file)`` of every chosen INA3221 channel."""
    devices = _resolve(root, paths) if paths else [
        d for d in sorted(glob.glob(os.path.join(root, "class", "hwmon", "hwmon*")))
        if os.path.exists(os.path.join(d, "name")) and _read_text(os.path.join(d, "name")) == "ina3221"]
    chosen = []
    for dev in devices:
        labels = {}
        for label_file in sorted(glob.glob(os.path.join(dev, "in*_label"))):
            m = re.match(r"in(\d+)_label$", os.path.basename(label_file))
            if m is None:  # the glob also matches names like "inX_label", which are no INA3221 channel
                continue
            labels[_read_text(label_file)] = m.group(1)
        wanted = list(rails) or (["VDD_IN"] if "VDD_IN" in labels else list(labels))
        for rail in wanted:
            if rail in labels:
                n = labels[rail]
                chosen.append((os.path.join(dev, "in%s_input" % n), os.path.join(dev, "curr%s_input" % n)))
    return chosen


def _command_watts(command: List[str], timeout_s: float) -> float:
    out = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=timeout_s,
                         check=True).stdout.decode("utf-8", "replace")
    match = _NUMBER.search(out)
    if match is None:
        raise ValueError("printed no number: %r" % out[:80])
    return float(match.group(0))


class PowerMeter(object):
    """Energy drawn between :meth:`start` and :meth:`stop`, J, from the sensor ``spec`` (module docstring).

    Parameters
    ----------
    spec : dict
        ``{"kind", "paths", "rails", "command", "interval_s"}`` (``plan.json`` ``power_sensor``).
    root : str, optional
        Sysfs root (:func:`sysfs_root`).

    Raises
    ------
    PlanError
        On construction: an unknown kind, or a sensor that cannot be found or read (no file, permission denied,
        a command that fails or prints no number), naming it.
    """

    def __init__(self, spec: Dict[str, Any], root: Optional[str] = None):
        self.kind = str(spec.get("kind"))
        self.interval_s = float(spec.get("interval_s") or 0.1)
        self.root = sysfs_root(root)
        paths, rails = list(spec.get("paths") or []), list(spec.get("rails") or [])
        self.command = list(spec.get("command") or [])
        self.counters: List[_Counter] = []
        self.power_files: List[str] = []
        self.rails: List[Tuple[str, str]] = []
        self.samples: List[Tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = None  # type: Optional[threading.Thread]
        try:
            if self.kind == "powercap":
                self.counters = _powercap(self.root, paths)
            elif self.kind == "hwmon":
                files = _resolve(self.root, paths) if paths else (_hwmon_files(self.root, "energy*_input")
                                                                  or _hwmon_files(self.root, "power*_input"))
                self.counters = [_Counter(p, None) for p in files if os.path.basename(p).startswith("energy")]
                self.power_files = [p for p in files if not os.path.basename(p).startswith("energy")]
            elif self.kind == "ina3221":
                self.rails = _ina3221_channels(self.root, paths, rails)
            elif self.kind != "command" or not self.command:
                raise plan_error("power_sensor", "kind", "unknown kind %r (or command without a program)"
                                   % self.kind, "use powercap, hwmon, ina3221 or command")
            if not (self.counters or self.power_files or self.rails or self.command):
                raise ValueError("no %s sensor found under %s" % (self.kind, self.root))
            self.watts()  # read once now: a sensor that cannot be read fails before the run
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            raise plan_error("power_sensor", self.kind, "cannot read the sensor (%s)" % exc, _FIX)

    def watts(self) -> float:
        """Current power of the sampled sources, W (0 for a counter-only sensor)."""
        total = sum(_read_number(p) * 1e-6 for p in self.power_files)  # µW
        total += sum(_read_number(v) * _read_number(c) * 1e-6 for v, c in self.rails)  # mV · mA = µW
        if self.command:
            total += _command_watts(self.command, max(5.0, 10 * self.interval_s))
        return total

    def _sample(self) -> None:
        for counter in self.counters:
            counter.read()
        if self.power_files or self.rails or self.command:
            self.samples.append((time.monotonic(), self.watts()))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self._sample()
            except (OSError, ValueError, subprocess.SubprocessError):
                pass  # a missed sample: the integral bridges it

    def start(self) -> "PowerMeter":
        """Take the first reading and start sampling in a daemon thread."""
        for counter in self.counters:
            counter.total_uj = 0.0
        self.samples = []
        self._sample()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="ppexec-power", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> float:
        """Stop sampling; the energy since :meth:`start`, J."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        energy = sum(c.total_uj for c in self.counters) * 1e-6
        for (t0, p0), (t1, p1) in zip(self.samples, self.samples[1:]):
            energy += 0.5 * (p0 + p1) * (t1 - t0)
        return energy


def detect_sensor(root: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """The first readable whole-package or whole-board sensor of this machine, as a ``power_sensor`` dict: RAPL
    (powercap) or a Jetson's INA3221; None when there is none (energies then stay estimates). Other hwmon chips
    measure one device (a GPU, a core) and are only used when a profile names them."""
    for kind in ("powercap", "ina3221"):
        try:
            PowerMeter({"kind": kind}, root)
        except ValueError:
            continue
        return {"kind": kind, "paths": [], "rails": [], "command": [], "interval_s": 0.1}
    return None
