"""Operating points on a Linux board: set each frequency domain a run asks for, read back what the kernel set,
and restore the board's own settings afterwards (standard library only, Python >= 3.8).

Two kinds of frequency domain, under a sysfs root (``/sys`` unless ``root`` or ``$PPEXEC_SYSFS_ROOT`` says
otherwise: the tests use a fake tree):

* **cpufreq** (Linux ``Documentation/admin-guide/pm/cpufreq.rst``): one policy per domain,
  ``devices/system/cpu/cpufreq/policyN/`` with ``related_cpus`` (every CPU of the policy), ``affected_cpus`` (the
  online ones), ``scaling_available_frequencies`` (kHz), ``scaling_available_governors``, ``scaling_governor``,
  ``scaling_setspeed`` (used only under the ``userspace`` governor), ``scaling_min_freq``, ``scaling_max_freq``,
  ``scaling_cur_freq`` (kHz) and ``cpuinfo_transition_latency`` (ns). A PU's domain is the one policy that holds
  all of its CPUs (the profile's ``execution.cpus``).
* **devfreq** (Linux ``Documentation/ABI/testing/sysfs-class-devfreq``): ``class/devfreq/<name>/`` with
  ``available_frequencies`` (Hz), ``available_governors``, ``governor``, ``min_freq``, ``max_freq``, ``cur_freq``
  and ``userspace/set_freq`` (under the ``userspace`` governor): GPUs, NPUs. A PU's domain is named by the
  profile's ``execution.devfreq``.

How a frequency is set (:func:`applied`): every domain is found and checked first -- the frequency in its table,
every file it writes writable -- and a refusal (:class:`DvfsRefused`, one line naming the file and what is
needed) changes nothing. Then the saved settings (governor, min, max, setspeed) go to a restore journal
(:func:`journal_path`, written atomically) before the first write; min and max are pinned to the frequency in an
order that keeps min <= max at every step, and where the ``userspace`` governor exists it is selected and the
frequency written to its setspeed file. What the kernel then reports (``scaling_cur_freq`` / ``cur_freq``) is
read back: a write to these files succeeds whatever the kernel does with it (a thermal or QoS cap wins over
max, a request is rounded to the table), so the read-back, not the request, is what ran. On leaving -- normal
exit, exception, ``KeyboardInterrupt``, ``SIGTERM``/``SIGHUP`` (turned into :class:`SystemExit` while the
frequencies are applied, in the main thread) -- the saved values are written back and the journal removed. A
process killed outright leaves its journal: :func:`restore_leftover` (the agent calls it when it starts and when
its stdin closes) writes the saved values back once the process that wrote it is gone.

Caveat (kernel behaviour, ``drivers/cpufreq/cpufreq.c``): reading ``scaling_max_freq`` returns the limit in
force after thermal and QoS requests, so a cap active when the settings are saved is restored as a user limit.
"""
from __future__ import annotations

import contextlib
import errno
import glob
import json
import logging
import os
import signal
import tempfile
import threading
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .errors import PlanError

logger = logging.getLogger(__name__)

__all__ = ["SYSFS_ROOT_ENV", "JOURNAL_ENV", "DvfsRefused", "Domain", "Applied", "find_domain", "plan_targets",
           "applied", "requests_from", "restore_leftover", "journal_path", "match_frequency"]

#: Environment variable naming the sysfs root (default ``/sys``); shared with :mod:`.power`.
SYSFS_ROOT_ENV = "PPEXEC_SYSFS_ROOT"
#: Environment variable naming the restore journal's path (default: :func:`journal_path`).
JOURNAL_ENV = "PPEXEC_DVFS_JOURNAL"
#: Version of the journal document.
JOURNAL_VERSION = 1
#: Largest relative difference between a requested frequency and a table entry that still names that entry: a
#: frequency written in MHz with one decimal (285.7 for devfreq's 285714285 Hz) is within 5e-5 of it, while the
#: closest neighbours of the public OPP tables (Linux ``arch/arm64/boot/dts/amlogic/meson-g12b-a311d.dtsi``,
#: ``rockchip/rk3588-opp.dtsi``) are over 5 % apart (a parapipe choice between the two).
MATCH_RTOL = 1e-3
#: The governor under which a frequency is written directly (Linux cpufreq.rst, sysfs-class-devfreq).
USERSPACE = "userspace"

#: Files of each kind: role -> path relative to the domain's folder.
_FILES = {
    "cpufreq": {"governor": "scaling_governor", "governors": "scaling_available_governors",
                "min": "scaling_min_freq", "max": "scaling_max_freq", "setspeed": "scaling_setspeed",
                "cur": "scaling_cur_freq", "table": "scaling_available_frequencies"},
    "devfreq": {"governor": "governor", "governors": "available_governors", "min": "min_freq",
                "max": "max_freq", "setspeed": "userspace/set_freq", "cur": "cur_freq",
                "table": "available_frequencies"},
}
#: Hz per unit of the files' frequencies (cpufreq: kHz, devfreq: Hz).
_UNIT_HZ = {"cpufreq": 1000, "devfreq": 1}
_NO_DVFS = "run with --no-dvfs (the board's own settings)"


class DvfsRefused(PlanError):
    """A frequency cannot be set: no such domain, a frequency outside its table, a file this process may not
    write, a governor missing, a write the kernel refused. One line; nothing was changed (or everything changed
    was restored)."""


def sysfs_root(root: Optional[str] = None) -> str:
    """The sysfs root: ``root``, else ``$PPEXEC_SYSFS_ROOT``, else ``/sys``."""
    return root or os.environ.get(SYSFS_ROOT_ENV) or "/sys"


def journal_path(path: Optional[str] = None) -> str:
    """Where the restore journal lives: ``path``, else ``$PPEXEC_DVFS_JOURNAL``, else
    ``$XDG_CACHE_HOME/ppexec/dvfs-journal.json`` (``~/.cache`` without ``$XDG_CACHE_HOME``): private to the user
    that changed the frequencies (root on a board)."""
    if path or os.environ.get(JOURNAL_ENV):
        return path or os.environ[JOURNAL_ENV]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "ppexec", "dvfs-journal.json")


def _read(path: str) -> str:
    with open(path) as handle:
        return handle.read().strip()


def _write(path: str, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


def _writable(path: str) -> bool:
    """Whether ``path`` may be written: this process passes the access check AND the file's mode has a write
    bit. sysfs gives a file without a store method mode 0444, and root passes ``os.access`` for any file, so
    the mode bit is what tells root that a write would fail."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return bool(mode & 0o222) and os.access(path, os.W_OK)


def _why_not_writable(path: str) -> str:
    """``"<problem>; <fix>"`` for a file :func:`_writable` refuses."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return "%s cannot be read (%s); %s" % (path, exc.strerror or exc, _NO_DVFS)
    if not st.st_mode & 0o222:
        return "%s is read-only (mode %04o) for every user, root too; %s" % (path, st.st_mode & 0o7777, _NO_DVFS)
    return ("%s is not writable by this user (uid %d; mode %04o, owner uid %d); run the agent as root (or give "
            "this user write access), or %s" % (path, os.geteuid(), st.st_mode & 0o7777, st.st_uid, _NO_DVFS))


def match_frequency(requested_hz: float, available_hz: List[int]) -> Optional[int]:
    """The table entry ``requested_hz`` names (within :data:`MATCH_RTOL`), or None."""
    for hz in available_hz:
        if abs(hz - requested_hz) <= MATCH_RTOL * hz:
            return hz
    return None


def _mhz(hz: float) -> str:
    return ("%.1f" % (hz / 1e6)).rstrip("0").rstrip(".")


class Domain:
    """One frequency domain: a cpufreq policy or a devfreq device.

    Attributes
    ----------
    kind : str
        ``"cpufreq"`` or ``"devfreq"``.
    name : str
        ``policyN`` or the devfreq device's name.
    path : str
        Its sysfs folder.
    available_hz : list of int
        The frequency table, Hz, ascending (empty where the driver has none).
    governors : list of str
        The governors it offers.
    transition_latency_s : float or None
        ``cpuinfo_transition_latency`` in s (cpufreq; None where unknown or for devfreq).
    """

    def __init__(self, kind: str, name: str, path: str):
        self.kind, self.name, self.path = kind, name, path
        self.unit_hz = _UNIT_HZ[kind]
        table = self._read_opt("table") or ""
        self.available_hz = sorted({int(v) * self.unit_hz for v in table.split() if v.isdigit()})
        self.governors = (self._read_opt("governors") or "").split()
        self.transition_latency_s = None  # type: Optional[float]
        if kind == "cpufreq":
            try:
                ns = int(_read(os.path.join(path, "cpuinfo_transition_latency")))
                self.transition_latency_s = ns * 1e-9 if ns >= 0 else None
            except (OSError, ValueError):
                pass

    def __repr__(self) -> str:
        return "Domain(%s %s)" % (self.kind, self.name)

    @property
    def label(self) -> str:
        """``"cpufreq policy4"`` / ``"devfreq ffe40000.gpu"``."""
        return "%s %s" % (self.kind, self.name)

    def file(self, role: str) -> str:
        """Path of the file of ``role`` (governor, governors, min, max, setspeed, cur, table)."""
        return os.path.join(self.path, *_FILES[self.kind][role].split("/"))

    def _read_opt(self, role: str) -> Optional[str]:
        try:
            return _read(self.file(role))
        except OSError:
            return None

    def uses_userspace(self) -> bool:
        """Whether the frequency is set through the ``userspace`` governor: offered, and (cpufreq) its
        ``scaling_setspeed`` file there; else it is pinned with min = max alone. devfreq creates
        ``userspace/set_freq`` only once that governor runs (``drivers/devfreq/governor_userspace.c``)."""
        if USERSPACE not in self.governors:
            return False
        return self.kind == "devfreq" or os.path.exists(self.file("setspeed"))

    def read_hz(self, role: str) -> Optional[int]:
        """The frequency in the file of ``role`` (min, max, cur, setspeed), Hz; None where unreadable or not a
        number (``<unsupported>`` outside the userspace governor)."""
        text = self._read_opt(role)
        try:
            return int(text) * self.unit_hz if text is not None else None
        except ValueError:
            return None

    def save(self) -> Dict[str, str]:
        """The settings to restore: role -> the file's text (governor, min, max; setspeed under userspace)."""
        saved = {}
        for role in ("governor", "min", "max"):
            text = self._read_opt(role)
            if text is None:
                raise DvfsRefused("%s cannot be read; %s" % (self.file(role), _NO_DVFS))
            saved[role] = text
        if saved["governor"] == USERSPACE and os.path.exists(self.file("setspeed")):
            text = self._read_opt("setspeed")
            if text is not None and text.isdigit():
                saved["setspeed"] = text
        return saved

    def to_journal(self, saved: Dict[str, str]) -> Dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "path": self.path, "saved": saved}


def _policies(root: str) -> List[Tuple[str, List[int]]]:
    found = []
    for folder in sorted(glob.glob(os.path.join(root, "devices", "system", "cpu", "cpufreq", "policy*"))):
        try:
            cpus = [int(c) for c in _read(os.path.join(folder, "related_cpus")).split()]
        except (OSError, ValueError):
            continue
        found.append((folder, cpus))
    return found


def find_domain(request: Dict[str, Any], root: Optional[str] = None, pu: str = "?") -> Domain:
    """The domain of one PU's request: ``{"devfreq": name}`` or ``{"cpus": [ids]}``.

    Raises
    ------
    DvfsRefused
        No such devfreq device, no cpufreq on this kernel, CPUs in no policy or in several policies.
    """
    root = sysfs_root(root)
    if request.get("devfreq"):
        name = str(request["devfreq"])
        folder = os.path.join(root, "class", "devfreq", name)
        if not os.path.isdir(folder):
            present = sorted(os.listdir(os.path.join(root, "class", "devfreq"))) \
                if os.path.isdir(os.path.join(root, "class", "devfreq")) else []
            raise DvfsRefused("PU %s: no devfreq device %r under %s (devices: %s); fix execution.devfreq in the "
                              "profile, or %s" % (pu, name, os.path.dirname(folder), ", ".join(present) or "none",
                                             _NO_DVFS))
        return Domain("devfreq", name, folder)
    cpus = request.get("cpus")
    if not cpus:
        raise DvfsRefused("PU %s: has neither execution.cpus nor execution.devfreq, so its frequency domain is "
                          "unknown; name one in the profile, or %s" % (pu, _NO_DVFS))
    policies = _policies(root)
    if not policies:
        raise DvfsRefused("PU %s: no cpufreq policy under %s: this kernel does not let CPU frequencies be set; %s"
                          % (pu, os.path.join(root, "devices", "system", "cpu", "cpufreq"), _NO_DVFS))
    holding = [(folder, related) for folder, related in policies if set(cpus) & set(related)]
    missing = sorted(set(cpus) - set(c for _, related in holding for c in related))
    if missing:
        raise DvfsRefused("PU %s: CPUs %s belong to no cpufreq policy; bind the PU to the CPUs of one cluster, or %s"
                          % (pu, missing, _NO_DVFS))
    if len(holding) > 1:
        spans = "; ".join("%s: CPUs %s" % (os.path.basename(f), sorted(set(cpus) & set(r))) for f, r in holding)
        raise DvfsRefused("PU %s: its CPUs %s span several frequency domains (%s); one PU must lie in one "
                          "cpufreq policy: bind it to one cluster's CPUs, or %s"
                          % (pu, sorted(cpus), spans, _NO_DVFS))
    folder = holding[0][0]
    return Domain("cpufreq", os.path.basename(folder), folder)


class _Target:
    """One domain to set: the PUs that asked for it and the table frequency."""

    def __init__(self, domain: Domain, pus: List[str], requested_hz: float, frequency_hz: int):
        self.domain, self.pus, self.requested_hz, self.frequency_hz = domain, pus, requested_hz, frequency_hz
        self.saved = {}  # type: Dict[str, str]


def plan_targets(requests: Dict[str, Dict[str, Any]], root: Optional[str] = None) -> List[_Target]:
    """Find and check every domain of ``requests`` (``{pu: {"frequency_hz": Hz, "cpus": [...] | "devfreq":
    name}}``) without changing anything.

    Raises
    ------
    DvfsRefused
        A domain not found (:func:`find_domain`), a frequency outside its table (the message lists the table in
        MHz), two PUs of one domain asking different frequencies, a file that cannot be written (naming it and
        whether root is needed), a domain whose table cannot be read.
    """
    by_path = {}  # type: Dict[str, _Target]
    for pu in sorted(requests):
        request = requests[pu]
        try:
            requested = float(request["frequency_hz"])
        except (KeyError, TypeError, ValueError):
            raise DvfsRefused("PU %s: frequency_hz must be a number of Hz, got %r; fix the request"
                              % (pu, request.get("frequency_hz")))
        domain = find_domain(request, root, pu)
        if not domain.available_hz:
            raise DvfsRefused("PU %s: %s lists no available frequencies (%s): the driver has no table (e.g. "
                              "intel_pstate); %s" % (pu, domain.label, domain.file("table"), _NO_DVFS))
        hz = match_frequency(requested, domain.available_hz)
        if hz is None:
            raise DvfsRefused("PU %s: %s MHz is not an operating point of %s; available: %s MHz"
                              % (pu, _mhz(requested), domain.label,
                                 ", ".join(_mhz(f) for f in domain.available_hz)))
        other = by_path.get(domain.path)
        if other is not None:
            if other.frequency_hz != hz:
                raise DvfsRefused("PUs %s and %s share %s but ask %s and %s MHz; give them one frequency"
                                  % (", ".join(other.pus), pu, domain.label, _mhz(other.frequency_hz), _mhz(hz)))
            other.pus.append(pu)
            continue
        roles = ["governor", "min", "max"]
        if domain.uses_userspace() and os.path.exists(domain.file("setspeed")):
            roles.append("setspeed")
        for role in roles:
            if not _writable(domain.file(role)):
                raise DvfsRefused("PU %s: cannot set %s: %s"
                                  % (pu, domain.label, _why_not_writable(domain.file(role))))
        by_path[domain.path] = _Target(domain, [pu], requested, hz)
    return list(by_path.values())


# ------------------------------------------------------------------------------------------------------------
# journal
# ------------------------------------------------------------------------------------------------------------

def _boot_id() -> Optional[str]:
    try:
        return _read("/proc/sys/kernel/random/boot_id")
    except OSError:
        return None


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_journal(doc: Dict[str, Any], path: str) -> None:
    """Write the journal atomically, private to this user (mode 0600, as ``mkstemp`` creates it)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".dvfs-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(doc, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _read_journal(path: str) -> Optional[Dict[str, Any]]:
    """The journal at ``path``, or None when there is none or it is not to be trusted (another owner, writable
    by others, unreadable: then it is left alone and logged)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning("cannot read the DVFS restore journal %s (%s)", path, exc)
        return None
    if not os.path.isfile(path) or os.path.islink(path) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        logger.warning("ignoring the DVFS restore journal %s: not a private file of this user", path)
        return None
    try:
        with open(path) as handle:
            doc = json.load(handle)
    except (OSError, ValueError) as exc:
        logger.warning("the DVFS restore journal %s is unreadable (%s); removing it", path, exc)
        _remove(path)
        return None
    return doc if isinstance(doc, dict) else None


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _restore_domain(kind: str, path: str, saved: Dict[str, str]) -> List[str]:
    """Write ``saved`` back to the domain in ``path``: min and max in an order that keeps min <= max, then the
    governor, then setspeed under userspace. Returns the problems (empty when all was written)."""
    domain = Domain.__new__(Domain)
    domain.kind, domain.name, domain.path, domain.unit_hz = kind, os.path.basename(path), path, _UNIT_HZ[kind]
    problems = []
    order = ["min", "max"]
    try:
        current_max = int(_read(domain.file("max")))
        if int(saved.get("max", current_max)) >= current_max:
            order = ["max", "min"]
    except (OSError, ValueError):
        pass
    for role in order + ["governor", "setspeed"]:
        if role not in saved:
            continue
        try:
            _write(domain.file(role), saved[role])
        except OSError as exc:
            problems.append("%s: %s" % (domain.file(role), exc.strerror or exc))
    return problems


def restore_leftover(path: Optional[str] = None) -> Optional[List[str]]:
    """Restore the settings a killed run left in the journal, then remove the journal.

    A journal written by a process still alive (another run) or by this process is left alone; one from before
    the last boot is removed without writing (a boot resets the settings).

    Returns
    -------
    list of str or None
        The domains restored (their folders), or None when there was nothing to restore.
    """
    path = journal_path(path)
    doc = _read_journal(path)
    if doc is None:
        return None
    pid = doc.get("pid")
    if isinstance(pid, int) and pid != os.getpid() and _pid_alive(pid) and doc.get("boot_id") == _boot_id():
        logger.info("the DVFS journal %s belongs to the live process %d; leaving it", path, pid)
        return None
    if pid == os.getpid():
        return None
    if doc.get("boot_id") != _boot_id():
        logger.info("the DVFS journal %s is from an earlier boot; removing it", path)
        _remove(path)
        return None
    restored = []
    for entry in doc.get("domains", []):
        problems = _restore_domain(entry["kind"], entry["path"], entry["saved"])
        if problems:
            logger.warning("could not restore %s: %s", entry["path"], "; ".join(problems))
        else:
            restored.append(entry["path"])
    _remove(path)
    logger.warning("restored the frequency settings a stopped run left (%s)",
                   ", ".join(restored) or "none could be written")
    return restored


# ------------------------------------------------------------------------------------------------------------
# apply
# ------------------------------------------------------------------------------------------------------------

class Applied:
    """The frequencies in force during an :func:`applied` block, and what the kernel reported."""

    def __init__(self, targets: List[_Target]):
        self.targets = targets
        self.readback_hz = {}  # type: Dict[str, Optional[int]]
        self.end_hz = {}  # type: Dict[str, Optional[int]]
        self.max_hz = {}  # type: Dict[str, Optional[int]]

    def read_back(self, end: bool = False) -> None:
        """Read each domain's current frequency (at the start, or at the end of the run with ``end``)."""
        for t in self.targets:
            into = self.end_hz if end else self.readback_hz
            into[t.domain.path] = t.domain.read_hz("cur")
            if not end:
                self.max_hz[t.domain.path] = t.domain.read_hz("max")

    def report(self) -> Dict[str, Dict[str, Any]]:
        """Per PU: ``requested_hz`` (the table entry set), ``readback_hz`` (what the kernel reported after
        setting it), ``readback_end_hz`` (at the end of the run; None when not read), ``status`` (``"ok"``;
        ``"throttled"``: the kernel ran the domain slower, a thermal or QoS cap; ``"refused"``: it ran another
        frequency or none could be read), ``domain`` (``"cpufreq policy4"``), ``mode`` (``"userspace"`` or
        ``"limits"``: min = max), ``transition_latency_s`` and ``reason`` (why not ``ok``; None when ok)."""
        out = {}
        for t in self.targets:
            key = t.domain.path
            read = [self.readback_hz.get(key)] + ([self.end_hz[key]] if key in self.end_hz else [])
            status, reason = "ok", None
            want = t.frequency_hz
            if any(v is None for v in read):
                status, reason = "refused", "%s could not be read back" % t.domain.file("cur")
            else:
                off = [v for v in read if v is not None and abs(v - want) > MATCH_RTOL * want]
                if off and min(off) < want:
                    cap = self.max_hz.get(key)
                    status = "throttled"
                    reason = "the kernel ran %s at %s MHz, not %s MHz, held by a thermal or QoS cap%s" % (
                        t.domain.label, _mhz(min(off)), _mhz(want),
                        " (max limit read back: %s MHz)" % _mhz(cap) if cap is not None else "")
                elif off:
                    status = "refused"
                    reason = "the kernel ran %s at %s MHz, not %s MHz" % (t.domain.label, _mhz(max(off)),
                                                                      _mhz(want))
            for pu in t.pus:
                out[pu] = {"requested_hz": float(want), "readback_hz": self.readback_hz.get(key),
                           "readback_end_hz": self.end_hz.get(key), "status": status,
                           "domain": t.domain.label, "mode": "userspace" if t.domain.uses_userspace() else "limits",
                           "transition_latency_s": t.domain.transition_latency_s, "reason": reason}
        return out


def _set(domain: Domain, hz: int) -> None:
    """Pin min = max = ``hz`` (keeping min <= max at each step); select userspace and write setspeed where it
    exists. Raises OSError from a write."""
    value = str(hz // domain.unit_hz)
    current_max = domain.read_hz("max")
    order = ("max", "min") if current_max is None or hz >= current_max else ("min", "max")
    if domain.uses_userspace():
        _write(domain.file("governor"), USERSPACE)
    for role in order:
        _write(domain.file(role), value)
    if domain.uses_userspace() and os.path.exists(domain.file("setspeed")):
        _write(domain.file("setspeed"), value)


class _Signals:
    """SIGTERM and SIGHUP raise SystemExit while frequencies are applied (main thread only), so the restore in
    :func:`applied`'s ``finally`` runs."""

    SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s)

    def __init__(self) -> None:
        self.previous = {}  # type: Dict[int, Any]

    def __enter__(self) -> "_Signals":
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                try:
                    self.previous[sig] = signal.signal(sig, self._raise)
                except (OSError, ValueError):
                    pass
        return self

    @staticmethod
    def _raise(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)


def requests_from(frequencies_hz: Dict[str, float], domains: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """``{pu: {"frequency_hz", "cpus" | "devfreq"}}`` from ``plan.json``'s ``frequencies_hz`` and
    ``frequency_domains``.

    Raises
    ------
    DvfsRefused
        A PU with a frequency but no domain.
    """
    out = {}
    for pu, hz in frequencies_hz.items():
        domain = domains.get(pu)
        if not domain:
            raise DvfsRefused("PU %s: plan.json gives a frequency but no frequency_domains entry; re-run "
                              "'parapipe deploy'" % pu)
        request = dict(domain)
        request["frequency_hz"] = hz
        out[pu] = request
    return out


@contextlib.contextmanager
def applied(requests: Dict[str, Dict[str, Any]], root: Optional[str] = None,
            journal: Optional[str] = None) -> Iterator[Applied]:
    """Set the frequencies of ``requests`` for the ``with`` block, and restore the board's settings after it.

    Parameters
    ----------
    requests : dict
        ``{pu: {"frequency_hz": Hz, "cpus": [ids]}}`` or ``{pu: {"frequency_hz": Hz, "devfreq": name}}``; empty:
        nothing is touched (the board's own settings).
    root : str, optional
        Sysfs root (:func:`sysfs_root`).
    journal : str, optional
        Restore journal (:func:`journal_path`).

    Yields
    ------
    Applied
        Read back once set; call :meth:`Applied.read_back` with ``end=True`` at the end of the measured run,
        and :meth:`Applied.report` for the per-PU record.

    Raises
    ------
    DvfsRefused
        Before any change: see :func:`plan_targets`; another live process holds the frequencies (its journal);
        the journal cannot be written. During the change: a write the kernel refused (everything already
        written is restored first).
    """
    if not requests:
        yield Applied([])
        return
    targets = plan_targets(requests, root)
    path = journal_path(journal)
    restore_leftover(path)  # a killed run's settings first: they are the board's own
    if os.path.exists(path):
        doc = _read_journal(path) or {}
        raise DvfsRefused("the frequencies are held by another run (process %s, journal %s); wait for it to end"
                          % (doc.get("pid", "?"), path))
    for t in targets:
        t.saved = t.domain.save()
    doc = {"version": JOURNAL_VERSION, "pid": os.getpid(), "boot_id": _boot_id(),
           "domains": [t.domain.to_journal(t.saved) for t in targets]}
    try:
        _write_journal(doc, path)
    except OSError as exc:
        raise DvfsRefused("cannot write the DVFS restore journal %s (%s); set $%s to a writable file, or %s"
                          % (path, exc.strerror or exc, JOURNAL_ENV, _NO_DVFS))
    state = Applied(targets)
    done = []  # type: List[_Target]
    try:
        with _Signals():
            try:
                for t in targets:
                    done.append(t)
                    _set(t.domain, t.frequency_hz)
                    logger.info("%s set to %s MHz for PU %s", t.domain.label, _mhz(t.frequency_hz),
                                ", ".join(t.pus))
            except OSError as exc:
                where = getattr(exc, "filename", None) or done[-1].domain.path
                hint = " (the governor may not offer this file)" if exc.errno in (errno.EACCES, errno.EINVAL) else ""
                raise DvfsRefused("the kernel refused a write to %s: %s%s; %s"
                                  % (where, exc.strerror or exc, hint, _NO_DVFS))
            state.read_back()
            yield state
    finally:
        problems = []
        for t in reversed(done):
            problems += _restore_domain(t.domain.kind, t.domain.path, t.saved)
        if problems:
            logger.warning("could not restore every frequency setting (%s); the journal %s keeps them",
                           "; ".join(problems), path)
        else:
            _remove(path)
            logger.info("frequency settings restored (%s)", ", ".join(t.domain.label for t in done) or "none")
