"""Energy of a run from the board's power sensor, sampled while the pipeline runs (standard library only).

A profile's ``power_sensor`` (``parapipe/soc/pipeline.py``; carried in ``plan.json``) names one of:

* ``powercap``: Linux powercap energy counters ``<zone>/energy_uj`` (Intel/AMD RAPL), µJ, wrapping at
  ``<zone>/max_energy_range_uj`` (Linux ``Documentation/power/powercap/powercap.rst``). Zones nest: a package
  zone ``intel-rapl:0`` contains its sub-zones (``intel-rapl:0:0`` core, ``intel-rapl:0:1`` uncore/dram), and
  the platform zone ``psys`` (a top-level zone of its own, e.g. ``intel-rapl:1``) contains every package.
  Without ``paths`` the meter reads ``psys`` alone where a zone of that name exists (it covers the packages and
  the rest of the platform), else the top-level ``package-N`` zones of the ``intel-rapl`` control type summed
  (one per socket, disjoint); never a sub-zone, and never the ``intel-rapl-mmio`` zones, which report the same
  package through another interface. Given ``paths`` that nest (a zone and its sub-zone, psys and a package),
  only the outer zone is read and the result says so.
* ``hwmon``: ``hwmon*/energy*_input`` counters (µJ) or, where a chip has none, ``hwmon*/power*_input`` (µW),
  integrated over the samples (Linux ``Documentation/hwmon/sysfs-interface.rst``).
* ``ina3221``: a Jetson's rail monitors, in the layouts of the last three Jetson Linux generations, summed over
  the ``rails`` (labels; default the board's input rail ``VDD_IN``/``POM_5V_IN``/``5V_IN``/``VIN`` where a device
  has one, else the INA238-family input monitor's channels, else every labelled channel):

  - JetPack 5 and 6 (Jetson Linux R35/R36, kernel 5.10/5.15): the mainline hwmon driver, devices ``hwmon*`` with
    ``name`` = ``ina3221`` under ``class/hwmon`` (also ``bus/i2c/drivers/ina3221/*/hwmon/hwmon*``); channel N is
    ``inN_label``, bus voltage ``inN_input`` (mV) × current ``currN_input`` (mA) (Linux
    ``Documentation/hwmon/ina3221.rst``). Channels without a current file (``in7``, the sum of shunt voltages)
    are not rails.
  - JetPack 7 (Jetson Linux R38, Jetson Thor): besides the INA3221s, an INA238-family hwmon device (``name``
    ``ina238``/``ina237``/``ina228``) measures the module input; it reports ``powerN_input`` in µW directly
    (Linux ``Documentation/hwmon/ina238.rst``), labelled by ``powerN_label`` or ``inN_label`` where the device
    tree gives one, else named ``<chip>:<N>`` (e.g. ``ina238:1``).
  - JetPack 4 (Jetson Linux R32, kernel 4.9): NVIDIA's IIO driver ``ina3221x``, devices
    ``bus/i2c/drivers/ina3221x/<bus>-<addr>/iio:device<K>``; channel N is ``rail_name_N``, power
    ``in_powerN_input`` (mW), or voltage ``in_voltageN_input`` (mV) × current ``in_currentN_input`` (mA)
    (NVIDIA L4T R32 Development Guide, "Power Management", "Jetson ... Power Monitor"; the same file names in
    the open tools jetson_stats ``jtop/core/power.py`` and alumet ``plugins/nvidia-jetson/src/ina/old.rs``).
* ``command``: a program that prints the current power in watts (the first number of its output).

Paths are relative to the sysfs root, ``/sys`` unless ``$PPEXEC_SYSFS_ROOT`` or ``root`` says otherwise (the
tests point it at a fake tree), or absolute. Counters are read at the start, the end and every poll interval;
powers are sampled every poll interval and integrated with the trapezoidal rule.

What :meth:`PowerMeter.stop` returns is an :class:`EnergyResult`: an energy, or ``None`` with the reason it is
unknown; a sensor that cannot be read (permission denied, no file, a failing command), a counter without its
wrap range, a wrap that cannot be counted, or an implausible reading never stops the run. Checks:

* **Wraps.** A counter drop adds the range once. The poll interval is at most the time the counter takes to
  cover half its range at :data:`DEFAULT_MAX_POWER_W` (or the spec's ``max_power_w``), so one wrap at most
  falls between two reads; a read that comes later than the full range's time (a stalled thread) cannot tell
  how many wraps it missed, and the energy is unknown.
* **Plausibility.** A power (sampled, or a counter's increase over the time between two reads, allowing one
  sensor update) above the maximum is refused as implausible, with the value (e.g. 4.29 MW: a 32-bit counter
  misread as a jump of 2^32 µJ).
* **Window.** A measuring window shorter than two sensor updates (:data:`RAPL_UPDATE_S`, a hwmon device's
  ``update_interval``, the poll interval of a sampled sensor) is flagged in :attr:`EnergyResult.warnings`.

One module (about 580 lines) because every sensor kind shares one meter lifecycle (start, poll, stop), one
result type and the same unknown/implausible/short-window rules; the board side ships it as one file.
"""
from __future__ import annotations

import errno
import glob
import logging
import os
import re
import subprocess
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .errors import plan_error

__all__ = ["SYSFS_ROOT_ENV", "sysfs_root", "why_unreadable", "SensorUnavailable", "EnergyResult", "PowerMeter",
           "detect_sensor"]

logger = logging.getLogger(__name__)

#: Environment variable naming the sysfs root (default ``/sys``).
SYSFS_ROOT_ENV = "PPEXEC_SYSFS_ROOT"
#: Largest plausible power of one sensor, W, unless the spec gives ``max_power_w``: twice the highest package
#: power of current x86 server processors (500 W TDP: AMD EPYC 9965, Intel Xeon 6980P product specifications);
#: also far above any Jetson module (Jetson AGX Thor's module power is at most 130 W, NVIDIA Jetson Thor data
#: sheet). A counter that wraps at 2^32 µJ misread as a jump reads 4.29 kJ, kW to MW over a poll: refused.
DEFAULT_MAX_POWER_W = 1000.0
#: Update period of RAPL energy counters, s: about 1 ms (Hähnel, Döbel, Völp, Härtig, "Measuring energy
#: consumption for short code paths using RAPL", ACM SIGMETRICS Performance Evaluation Review 40(3), 2012;
#: re-measure by reading ``energy_uj`` in a tight loop and timing its changes).
RAPL_UPDATE_S = 1e-3
#: A window shorter than this many sensor updates is flagged.
MIN_WINDOW_UPDATES = 2
#: Poll so that a counter covers at most this fraction of its range between two reads at the maximum power.
WRAP_POLL_FRACTION = 0.5
#: Board input rail labels, by Jetson generation (NVIDIA Jetson Linux Developer Guides, "Platform Power and
#: Performance": VDD_IN on TX1/TX2/Orin, POM_5V_IN on Nano, 5V_IN on Xavier NX; VIN on Thor's INA238).
INPUT_RAILS = ("VDD_IN", "POM_5V_IN", "5V_IN", "VIN")
#: hwmon chip names read as Jetson rail monitors (``name`` file of the hwmon device).
RAIL_CHIPS = ("ina3221", "ina238", "ina237", "ina228")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def sysfs_root(root: Optional[str] = None) -> str:
    """The sysfs root: ``root``, else ``$PPEXEC_SYSFS_ROOT``, else ``/sys``."""
    return root or os.environ.get(SYSFS_ROOT_ENV) or "/sys"


def _read_text(path: str) -> str:
    with open(path) as handle:
        return handle.read().strip()


def _read_number(path: str) -> float:
    text = _read_text(path)
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        raise ValueError("%s holds %r, not a number" % (path, text[:40]))


def _resolve(root: str, paths: List[str]) -> List[str]:
    return [p if os.path.isabs(p) else os.path.join(root, p) for p in paths]


def why_unreadable(exc: BaseException) -> str:
    """The reason a sensor read failed, in words: ``permission denied (<file>)``, ``no sensor file (<file>)``,
    or the error's own text (a value that is not a number, a command that fails)."""
    name = getattr(exc, "filename", None)
    where = " (%s)" % name if name else ""
    if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied%s: the sensor is readable by root only; run as root or grant read access" \
               % where
    if isinstance(exc, OSError) and exc.errno == errno.ENOENT:
        return "no sensor file%s" % where
    if isinstance(exc, subprocess.CalledProcessError):
        return "the power command exited with status %s" % exc.returncode
    if isinstance(exc, subprocess.TimeoutExpired):
        return "the power command did not answer within %.3g s" % exc.timeout
    if isinstance(exc, OSError):
        return "%s%s" % (exc.strerror or exc, where)
    return str(exc)


class SensorUnavailable(Exception):
    """The sensor gives no energy for this run; the message is the reason (a user-facing phrase)."""


class EnergyResult(object):
    """What a measurement gave.

    Attributes
    ----------
    energy_j : float or None
        Energy over the window, J; None when unknown.
    unknown : str or None
        Why the energy is unknown (None when it is known).
    warnings : list of str
        Caveats of a known energy (a window shorter than two sensor updates; nested zones left out).
    window_s : float
        The measuring window, s.
    """

    def __init__(self, energy_j: Optional[float], unknown: Optional[str] = None,
                 warnings: Optional[List[str]] = None, window_s: float = 0.0):
        self.energy_j, self.unknown = energy_j, unknown
        self.warnings = list(warnings or [])
        self.window_s = window_s

    def __repr__(self) -> str:
        return "EnergyResult(energy_j=%r, unknown=%r, warnings=%r, window_s=%r)" % (
            self.energy_j, self.unknown, self.warnings, self.window_s)


class _Counter(object):
    """An energy counter file (µJ) with its wrap range (µJ; None: a drop cannot be told from a reset)."""

    def __init__(self, path: str, range_uj: Optional[float], max_power_w: float, update_s: float):
        self.path, self.range_uj, self.max_power_w, self.update_s = path, range_uj, max_power_w, update_s
        self.last = 0.0
        self.last_t = 0.0
        self.total_uj = 0.0
        self.problem = None  # type: Optional[str]

    def reset(self, now: float) -> None:
        self.last, self.last_t = _read_number(self.path), now
        self.total_uj, self.problem = 0.0, None

    def read(self, now: float) -> None:
        value = _read_number(self.path)
        dt = max(now - self.last_t, 0.0)
        step = value - self.last
        if self.range_uj is not None and self.max_power_w * dt * 1e6 >= self.range_uj:
            self.problem = self.problem or (
                "%s was read %.3g s after the previous read, longer than the %.3g s its %.4g J range lasts at "
                "%.4g W: the wraps in between cannot be counted" % (
                    self.path, dt, self.range_uj * 1e-6 / self.max_power_w, self.range_uj * 1e-6,
                    self.max_power_w))
        if step < 0:
            if self.range_uj is None:
                self.problem = self.problem or (
                    "%s went backwards (from %d to %d µJ) and gives no wrap range: a wrap cannot be told from "
                    "a reset" % (self.path, self.last, value))
                step = 0.0
            else:
                step += self.range_uj
        allowed_uj = self.max_power_w * (dt + self.update_s) * 1e6
        if step > allowed_uj:
            self.problem = self.problem or (
                "implausible: %s rose by %.4g J in %.3g s (%s, above the plausible %.4g W)" % (
                    self.path, step * 1e-6, dt, _watts_text(step * 1e-6 / max(dt, self.update_s)),
                    self.max_power_w))
        self.total_uj += step
        self.last, self.last_t = value, now


def _watts_text(watts: float) -> str:
    for scale, unit in ((1e6, "MW"), (1e3, "kW")):
        if abs(watts) >= scale:
            return "%.3g %s" % (watts / scale, unit)
    return "%.3g W" % watts


def _zone_name(zone: str) -> str:
    try:
        return _read_text(os.path.join(zone, "name"))
    except (OSError, ValueError):
        return ""


def _powercap_zones(root: str) -> Tuple[List[str], List[str]]:
    """The zone folders to read by default, and notes on what was left out (module docstring)."""
    base = os.path.join(root, "class", "powercap")
    top = sorted(z for z in glob.glob(os.path.join(base, "*")) if re.match(r"^[^:]+:\d+$", os.path.basename(z)))
    if not top:
        return [], []
    kinds = sorted({os.path.basename(z).split(":")[0] for z in top})
    kind = "intel-rapl" if "intel-rapl" in kinds else kinds[0]
    same = [z for z in top if os.path.basename(z).split(":")[0] == kind]
    notes = []
    if len(kinds) > 1:
        notes.append("read the %s zones only (%s report the same domains through another interface)"
                     % (kind, ", ".join(k for k in kinds if k != kind)))
    psys = [z for z in same if _zone_name(z) == "psys"]
    if psys:
        others = [os.path.basename(z) for z in same if z not in psys]
        if others:
            notes.append("read psys only: it contains %s" % ", ".join(others))
        return psys, notes
    packages = [z for z in same if _zone_name(z).startswith("package")]
    return packages or same, notes


def _outer_only(paths: List[str]) -> Tuple[List[str], List[str]]:
    """Drop counters nested in another given one (a sub-zone of a given zone; a package next to psys)."""
    zones = {p: os.path.dirname(p) for p in paths}
    names = {p: os.path.basename(z) for p, z in zones.items()}
    has_psys = any(_zone_name(z) == "psys" for z in zones.values())
    keep, notes = [], []
    for p in paths:
        name = names[p]
        parent = next((names[q] for q in paths if q != p and name.startswith(names[q] + ":")), None)
        if parent is not None:
            notes.append("left out %s: it is a sub-zone of %s, which counts it already" % (name, parent))
        elif has_psys and _zone_name(zones[p]) != "psys" and re.match(r"^[^:]+:\d+$", name):
            notes.append("left out %s: psys contains it" % name)
        else:
            keep.append(p)
    return keep, notes


def _hwmon_update_s(folder: str) -> Optional[float]:
    """A hwmon device's ``update_interval`` (ms in sysfs), s; None where it has none."""
    try:
        return _read_number(os.path.join(folder, "update_interval")) * 1e-3
    except (OSError, ValueError):
        return None


class _Rail(object):
    """One power channel: ``power_file`` × ``scale`` W, or ``volt_file`` (mV) × ``curr_file`` (mA)."""

    def __init__(self, label: str, power_file: Optional[str] = None, scale: float = 1.0,
                 volt_file: str = "", curr_file: str = ""):
        self.label, self.power_file, self.scale = label, power_file, scale
        self.volt_file, self.curr_file = volt_file, curr_file

    def watts(self) -> float:
        if self.power_file is not None:
            return _read_number(self.power_file) * self.scale
        return _read_number(self.volt_file) * _read_number(self.curr_file) * 1e-6  # mV · mA = µW


def _label(folder: str, *names: str) -> Optional[str]:
    for name in names:
        path = os.path.join(folder, name)
        if os.path.exists(path):
            return _read_text(path)
    return None


def _hwmon_rails(dev: str) -> List[_Rail]:
    """The rails of one hwmon rail monitor (JetPack 5/6 INA3221, JetPack 7 INA238)."""
    chip = _label(dev, "name") or os.path.basename(dev)
    rails = []
    numbers = sorted({int(m.group(2)) for f in os.listdir(dev)
                      for m in [re.match(r"^(power|curr)(\d+)_input$", f)] if m})
    for n in numbers:
        label = _label(dev, "power%d_label" % n, "in%d_label" % n) or "%s:%d" % (chip, n)
        power = os.path.join(dev, "power%d_input" % n)
        volt, curr = os.path.join(dev, "in%d_input" % n), os.path.join(dev, "curr%d_input" % n)
        if os.path.exists(power):
            rails.append(_Rail(label, power_file=power, scale=1e-6))  # µW
        elif os.path.exists(volt) and os.path.exists(curr) and os.path.exists(os.path.join(dev, "in%d_label" % n)):
            # a labelled channel: INA3221's curr4_input (sum of currents) pairs with no bus voltage (in4_input
            # is channel 1's shunt voltage, µV) and has no label
            rails.append(_Rail(label, volt_file=volt, curr_file=curr))
    return rails


def _iio_rails(dev: str) -> List[_Rail]:
    """The rails of one JetPack 4 ``ina3221x`` IIO device."""
    rails = []
    for label_file in sorted(glob.glob(os.path.join(dev, "rail_name_*"))):
        n = label_file.rsplit("_", 1)[1]
        power = os.path.join(dev, "in_power%s_input" % n)
        volt, curr = os.path.join(dev, "in_voltage%s_input" % n), os.path.join(dev, "in_current%s_input" % n)
        label = _read_text(label_file)
        if os.path.exists(power):
            rails.append(_Rail(label, power_file=power, scale=1e-3))  # mW
        elif os.path.exists(volt) and os.path.exists(curr):
            rails.append(_Rail(label, volt_file=volt, curr_file=curr))
    return rails


def _rail_devices(root: str) -> List[str]:
    hwmon = [d for d in sorted(glob.glob(os.path.join(root, "class", "hwmon", "hwmon*")))
             if (_label(d, "name") or "") in RAIL_CHIPS]
    iio = sorted(glob.glob(os.path.join(root, "bus", "i2c", "drivers", "ina3221x", "*", "iio:device*")))
    return hwmon + iio


def _jetson_rails(root: str, paths: List[str], wanted: List[str]) -> Tuple[List[_Rail], Optional[float]]:
    """The chosen rails, and the slowest device ``update_interval`` (s; None where none gives one)."""
    devices = _resolve(root, paths) if paths else _rail_devices(root)
    found, updates = [], []
    for dev in devices:
        legacy = bool(glob.glob(os.path.join(dev, "rail_name_*")))
        rails = _iio_rails(dev) if legacy else _hwmon_rails(dev)
        found.extend(rails)
        update = _hwmon_update_s(dev)
        if rails and update is not None:
            updates.append(update)
    labels = [r.label for r in found]
    if not wanted:  # the board's input rail; else the INA238-family input monitor (Thor); else every rail
        inputs = [r for r in INPUT_RAILS if r in labels]
        whole = [r.label for r in found if r.power_file is not None and r.scale == 1e-6]
        wanted = inputs[:1] or whole or labels
    missing = [r for r in wanted if r not in labels]
    if missing:
        raise SensorUnavailable("no rail %s (the board has %s)" % (", ".join(missing), ", ".join(labels) or "none"))
    chosen = [r for r in found if r.label in wanted]
    return chosen, (max(updates) if updates else None)


def _command_watts(command: List[str], timeout_s: float) -> float:
    out = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=timeout_s,
                         check=True).stdout.decode("utf-8", "replace")
    match = _NUMBER.search(out)
    if match is None:
        raise ValueError("the power command printed no number: %r" % out[:80])
    return float(match.group(0))


_READ_ERRORS = (OSError, ValueError, subprocess.SubprocessError)


class PowerMeter(object):
    """Energy drawn between :meth:`start` and :meth:`stop`, from the sensor ``spec`` (module docstring).

    Parameters
    ----------
    spec : dict
        ``{"kind", "paths", "rails", "command", "interval_s", "max_power_w"?}`` (``plan.json``
        ``power_sensor``); ``interval_s`` the requested poll interval (s, default 0.1; shortened for counters
        whose range would otherwise wrap more than once between polls), ``max_power_w`` the largest plausible
        power (W, default :data:`DEFAULT_MAX_POWER_W`).
    root : str, optional
        Sysfs root (:func:`sysfs_root`).
    clock : callable, optional
        Monotonic seconds (default :func:`time.monotonic`; tests pass a fake clock).

    Attributes
    ----------
    unknown : str or None
        Set on construction when the sensor cannot be used (permission denied, no sensor found, no wrap range,
        a failing command); the run goes on and :meth:`stop` reports the energy unknown with this reason.
    interval_s : float
        The poll interval used, s.
    update_s : float
        The sensor's update period, s (for the window check).

    Raises
    ------
    PlanError
        On construction, only for a spec that is wrong whatever the board: an unknown kind, a ``command``
        kind without a program, or a ``max_power_w`` that is not a positive number.
    """

    def __init__(self, spec: Dict[str, Any], root: Optional[str] = None,
                 clock: Callable[[], float] = time.monotonic):
        self.kind = str(spec.get("kind"))
        self.interval_s = float(spec.get("interval_s") or 0.1)
        try:
            self.max_power_w = float(spec.get("max_power_w") or DEFAULT_MAX_POWER_W)
        except (TypeError, ValueError):
            self.max_power_w = -1.0
        if not self.max_power_w > 0:
            raise plan_error("power_sensor", "max_power_w", "must be a positive number of watts, got %r"
                             % spec.get("max_power_w"), "give the largest plausible power, e.g. 200")
        self.root = sysfs_root(root)
        self.clock = clock
        paths, rails = list(spec.get("paths") or []), list(spec.get("rails") or [])
        self.command = list(spec.get("command") or [])
        if self.kind not in ("powercap", "hwmon", "ina3221", "command") or (self.kind == "command"
                                                                           and not self.command):
            raise plan_error("power_sensor", "kind", "unknown kind %r (or command without a program)"
                             % self.kind, "use powercap, hwmon, ina3221 or command")
        self.counters = []  # type: List[_Counter]
        self.power_files = []  # type: List[str]
        self.rails = []  # type: List[_Rail]
        self.samples = []  # type: List[Tuple[float, float]]
        self.notes = []  # type: List[str]
        self.unknown = None  # type: Optional[str]
        self.update_s = self.interval_s
        self._failure = None  # type: Optional[str]
        self._problem = None  # type: Optional[str]
        self._t0 = self._last_t = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None  # type: Optional[threading.Thread]
        try:
            self._discover(paths, rails)
            if not (self.counters or self.power_files or self.rails or self.command):
                raise SensorUnavailable("no %s sensor found under %s" % (self.kind, self.root))
            self.watts()  # read once now: a sensor that cannot be read is known before the run
            for counter in self.counters:
                _read_number(counter.path)
        except SensorUnavailable as exc:
            self.unknown = str(exc)
        except _READ_ERRORS as exc:
            self.unknown = why_unreadable(exc)
        if self.unknown is not None:
            logger.info("power sensor %s: energy will be unknown: %s", self.kind, self.unknown)

    def _discover(self, paths: List[str], rails: List[str]) -> None:
        if self.kind == "powercap":
            if paths:
                files, self.notes = _outer_only(_resolve(self.root, paths))
            else:
                zones, self.notes = _powercap_zones(self.root)
                files = [os.path.join(z, "energy_uj") for z in zones]
            for p in files:
                wrap = os.path.join(os.path.dirname(p), "max_energy_range_uj")
                if not os.path.exists(wrap):
                    raise SensorUnavailable("%s has no max_energy_range_uj next to it: a wrap of the counter "
                                            "cannot be told from a reset" % p)
                self.counters.append(_Counter(p, _read_number(wrap), self.max_power_w, RAPL_UPDATE_S))
            self.update_s = RAPL_UPDATE_S
        elif self.kind == "hwmon":
            found = (_resolve(self.root, paths) if paths else
                     sorted(glob.glob(os.path.join(self.root, "class", "hwmon", "hwmon*", "energy*_input")))
                     or sorted(glob.glob(os.path.join(self.root, "class", "hwmon", "hwmon*", "power*_input"))))
            updates = [u for u in (_hwmon_update_s(os.path.dirname(p)) for p in found) if u is not None]
            update = max(updates) if updates else None
            self.counters = [_Counter(p, None, self.max_power_w, update or RAPL_UPDATE_S)
                             for p in found if os.path.basename(p).startswith("energy")]
            self.power_files = [p for p in found if not os.path.basename(p).startswith("energy")]
            self.update_s = max(update or 0.0, self.interval_s if self.power_files else 0.0) or self.interval_s
        elif self.kind == "ina3221":
            self.rails, update = _jetson_rails(self.root, paths, rails)
            self.update_s = max(update or 0.0, self.interval_s)
        ranges = [c.range_uj for c in self.counters if c.range_uj]
        if ranges:  # poll so that a counter covers at most half its range between two reads
            self.interval_s = min(self.interval_s, WRAP_POLL_FRACTION * min(ranges) * 1e-6 / self.max_power_w)

    def watts(self) -> float:
        """Current power of the sampled sources, W (0 for a counter-only sensor).

        Raises
        ------
        OSError, ValueError, subprocess.SubprocessError
            A source cannot be read (see :func:`why_unreadable`).
        """
        total = sum(_read_number(p) * 1e-6 for p in self.power_files)  # µW
        total += sum(rail.watts() for rail in self.rails)
        if self.command:
            total += _command_watts(self.command, max(5.0, 10 * self.interval_s))
        return total

    def _sample(self) -> None:
        with self._lock:
            self._sample_locked()

    def _sample_locked(self) -> None:
        now = self.clock()
        self._last_t = now
        for counter in self.counters:
            counter.read(now)
            if counter.problem and not self._problem:
                self._problem = counter.problem
        if self.power_files or self.rails or self.command:
            watts = self.watts()
            if watts > self.max_power_w and not self._problem:
                self._problem = "implausible: the sensor read %s (above the plausible %.4g W)" % (
                    _watts_text(watts), self.max_power_w)
            self.samples.append((now, watts))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self.clock() - self._last_t < 0.5 * self.interval_s:
                continue  # woken early (or a clock that stands still): no sample
            try:
                self._sample()
            except _READ_ERRORS as exc:  # a missed sample: the integral bridges it, a counter's next read too
                self._failure = why_unreadable(exc)

    def start(self) -> "PowerMeter":
        """Take the first reading and start sampling in a daemon thread (nothing when the sensor is unusable)."""
        self.samples, self._problem, self._failure = [], None, None
        if self.unknown is not None:
            self._t0 = self.clock()
            return self
        try:
            self._t0 = self._last_t = self.clock()
            for counter in self.counters:
                counter.reset(self._t0)
            if self.power_files or self.rails or self.command:
                self.samples.append((self._t0, self.watts()))
        except _READ_ERRORS as exc:
            self._failure = why_unreadable(exc)
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="ppexec-power", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> EnergyResult:
        """Stop sampling; the energy since :meth:`start` (:class:`EnergyResult`; never raises for a sensor)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        window_s = max(self.clock() - self._t0, 0.0)
        if self.unknown is not None:
            return EnergyResult(None, self.unknown, window_s=window_s)
        try:
            self._sample()
        except _READ_ERRORS as exc:
            return EnergyResult(None, why_unreadable(exc), window_s=window_s)
        if self._problem:
            return EnergyResult(None, self._problem, window_s=window_s)
        if not self.counters and len(self.samples) < 2:
            return EnergyResult(None, self._failure or "fewer than two power samples", window_s=window_s)
        energy = sum(c.total_uj for c in self.counters) * 1e-6
        for (t0, p0), (t1, p1) in zip(self.samples, self.samples[1:]):
            energy += 0.5 * (p0 + p1) * (t1 - t0)
        if window_s > 0 and energy / window_s > self.max_power_w:
            return EnergyResult(None, "implausible: %.4g J in %.3g s is %s (above the plausible %.4g W)" % (
                energy, window_s, _watts_text(energy / window_s), self.max_power_w), window_s=window_s)
        warnings = list(self.notes)
        if window_s < MIN_WINDOW_UPDATES * self.update_s:
            warnings.append("short window: %.3g s is less than %d sensor updates (one every %.3g s); the energy "
                            "is coarse, run more frames" % (window_s, MIN_WINDOW_UPDATES, self.update_s))
        return EnergyResult(energy, None, warnings, window_s)


def detect_sensor(root: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """The first readable whole-package or whole-board sensor of this machine, as a ``power_sensor`` dict: RAPL
    (powercap) or a Jetson's rail monitors; None when there is none or it cannot be read (logged; energies then
    stay estimates). Other hwmon chips measure one device (a GPU, a core) and are only used when a profile
    names them."""
    for kind in ("powercap", "ina3221"):
        meter = PowerMeter({"kind": kind}, root)
        if meter.unknown is None:
            return {"kind": kind, "paths": [], "rails": [], "command": [], "interval_s": 0.1}
        if not meter.unknown.startswith("no %s sensor found" % kind):
            logger.info("power sensor %s found but not used: %s", kind, meter.unknown)
    return None
