"""What the ``parapipe`` commands share: option groups, progress bars, ``--input-shape``, ``--host``, the problem
of ``MODEL``/``--blocks``, and the measured-next-to-predicted table of a run.

Command modules import from here and from the layers below, never from one another. Nothing heavy is imported
at module level (tqdm, the application layer and ppexec are imported where used), so building the parser
stays cheap.
"""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Sequence, Tuple

if TYPE_CHECKING:
    from ppexec.report import RunReport
    from tqdm import tqdm

    from parapipe.app.prepare import Prepared
    from parapipe.cost.problem import MappingProblem
    from parapipe.remote.hostspec import HostSpec
    from parapipe.graph.opgraph import OpGraph
    from parapipe.graph.zoo import LoadedModel
    from parapipe.soc.profile import SoC

__all__ = ["progress_bar", "ProgressBar", "StepBars", "set_quiet", "is_quiet", "show_progress", "print_measurement",
           "parsed_input_shapes", "add_input_options", "print_model_notes", "add_host_options", "host_spec", "pct",
           "problem_for", "print_run_report", "add_run_options", "add_bind_option", "add_board_power_option",
           "BOARD_POWER_HELP", "parse_frequencies"]


#: ``parapipe --quiet``: no progress bars (set by :func:`set_quiet` from ``main``).
_QUIET = {"quiet": False}


def set_quiet(quiet: bool) -> None:
    """Hide (True) or allow (False) progress bars for the rest of the command (``--quiet``)."""
    _QUIET["quiet"] = bool(quiet)


def is_quiet() -> bool:
    """Whether ``--quiet`` was given."""
    return _QUIET["quiet"]


def show_progress() -> bool:
    """Whether progress is drawn: not ``--quiet``, and stderr is a terminal (a log file or pipe stays clean)."""
    return not _QUIET["quiet"] and sys.stderr.isatty()


class _HiddenBar:
    """What :func:`progress_bar` gives when progress is not drawn: the attributes and methods its callers use on
    a tqdm bar, doing nothing (tqdm itself, 10-20 ms to import, is then not loaded)."""

    def __init__(self, total: Optional[int], desc: str) -> None:
        self.total, self.desc, self.n = total, desc, 0

    def refresh(self) -> None:
        """Nothing to draw."""

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        """Nothing to draw."""

    def update(self, n: int = 1) -> None:
        """Count ``n`` more done."""
        self.n += n

    def close(self) -> None:
        """Nothing to close."""


def progress_bar(total: Optional[int], desc: str) -> "tqdm":
    """A tqdm bar on stderr, hidden with ``--quiet`` or when stderr is not a terminal (:func:`show_progress`)."""
    if not show_progress():
        return _HiddenBar(total, desc)  # the part of tqdm's interface used
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, mininterval=0.5,
                disable=not show_progress(), bar_format="{desc} ..." if total is None else None)


class ProgressBar:
    """A progress callback (done, total) drawing a tqdm bar on stderr, created on the first call."""

    def __init__(self, desc: str):
        self.desc: str = desc
        self.bar: Optional["tqdm"] = None

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            self.bar = progress_bar(total, self.desc)
        self.bar.total = total
        self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        """Close the bar, if one was shown."""
        if self.bar is not None:
            self.bar.close()


class StepBars:
    """A :data:`parapipe.measure.trust.StepProgress` callback ``(step, done, total)`` drawing one tqdm bar per
    step on stderr: a new step closes the previous one's bar. :meth:`status` shows a step without a count (a
    line with the step's name and the seconds elapsed, e.g. ``starting the agent``)."""

    def __init__(self) -> None:
        self.step: Optional[str] = None
        self.bar: Optional["tqdm"] = None

    def __call__(self, step: str, done: int, total: int) -> None:
        if step != self.step or self.bar is None:
            self.close()
            self.step, self.bar = step, progress_bar(total, step)
        self.bar.total = total
        self.bar.n = done
        self.bar.refresh()

    def status(self, step: str) -> None:
        """Show ``step`` (no count) until the next step or :meth:`close`."""
        self.close()
        self.step, self.bar = step, progress_bar(None, step)
        self.bar.refresh()

    def close(self) -> None:
        """Close the bar shown, if any."""
        if self.bar is not None:
            self.bar.close()
        self.step, self.bar = None, None


def print_measurement(summary: Mapping[str, object], gap: Optional[float], remedy: str, what: str = "timed runs",
                      warn: Optional[str] = None) -> None:
    """The ``measurement:`` line (spread and load, :func:`parapipe.measure.trust.summary_text`) on stdout and,
    when they are high, the one ``warning:`` line on stderr (``warn`` if given, else
    :func:`parapipe.measure.trust.warning`)."""
    from parapipe.measure.trust import summary_text, warning

    print(summary_text(dict(summary), what))
    line = warn if warn is not None else warning(dict(summary), gap, remedy)
    if line:
        print(f"parapipe: {line}", file=sys.stderr)


def parsed_input_shapes(args: argparse.Namespace) -> Optional[Dict[str, Tuple[int, ...]]]:
    """``--input-shape`` values as ``{name: shape}`` (None when none were given).

    Raises
    ------
    parapipe.errors.InputError
        A value that is not ``NAME:D0xD1x...``.
    """
    from parapipe.graph.inputs import parse_input_shapes

    return parse_input_shapes(getattr(args, "input_shape", None)) or None


def add_input_options(s: argparse.ArgumentParser, feeds: bool = False) -> None:
    """``--input-shape NAME:D0xD1x...`` (repeatable) and, with ``feeds``, ``--feeds FILE.npz``."""
    s.add_argument("--input-shape", action="append", default=None, metavar="NAME:D0xD1x...",
                   help="static shape of a model input with symbolic dims, e.g. images:1x3x640x640 "
                   "(repeatable; a symbolic batch dim defaults to 1, any other symbolic dim must be given)")
    if feeds:
        s.add_argument("--feeds", default=None, metavar="FILE.npz",
                       help="real input values: one array per model input, named like it, of the input's shape "
                       "or with a leading frame axis (default: seeded values valid for the graph)")


def print_model_notes(og: "OpGraph") -> None:
    """The ``note:`` lines of a model: input dims chosen, ops without a FLOP formula, data-dependent shapes."""
    for note in og.input_notes:
        print(f"note: {note}")
    missing = og.ops_without_flop_formula
    if missing:
        print("note: no FLOP formula (counted as 0 FLOPs, costed by the bytes they move): "
              + ", ".join(f"{op} x{n}" for op, n in missing.items()))
    dd = og.data_dependent_ops
    if dd:
        print(f"note: {len(dd)} operator(s) with data-dependent shapes, costed on one sample: "
              + ", ".join(dd[:8]) + (", ..." if len(dd) > 8 else ""))


def add_host_options(s: argparse.ArgumentParser) -> None:
    """--host/--identity/--known-hosts/--trust-new-host/--python/--ssh-timeout of the commands that reach a
    board (read back by :func:`host_spec`)."""
    s.add_argument("--host", default=None, help="user@address[:port] of the board (default: this machine)")
    s.add_argument("--identity", default=None, help="private key file (default: ssh-agent and ~/.ssh/id_*)")
    s.add_argument("--known-hosts", default=None, help="known_hosts file (default ~/.ssh/known_hosts)")
    s.add_argument("--trust-new-host", action="store_true",
                   help="accept a host key not in known_hosts and save it (a changed key is always refused)")
    s.add_argument("--python", default=None, help="Python on the board (default python3; here: this one)")
    s.add_argument("--ssh-timeout", type=float, default=None, metavar="S",
                   help="deadline of connecting and of each short SSH step, s (default 10 s to connect and for "
                   "the host to answer a channel or command request, 60 s a step); a host that stops answering "
                   "fails after it")


def host_spec(args: argparse.Namespace) -> Optional["HostSpec"]:
    """The board of :func:`add_host_options` (``--ssh-timeout`` included), or None without ``--host``.

    Raises
    ------
    parapipe.errors.InputError
        A malformed ``--host`` or ``--ssh-timeout``.
    """
    if not args.host:
        return None
    from parapipe.remote.hostspec import HostSpec

    return HostSpec.parse(args.host, identity=args.identity, known_hosts=args.known_hosts,
                          trust_new_host=args.trust_new_host, timeout_s=args.ssh_timeout)


def pct(value: Optional[float]) -> str:
    """A percentage with one decimal, or ``-`` for None."""
    return "-" if value is None else f"{value:.1f}%"


#: ``--board-power``'s help (``evaluate``, ``optimize``, ``calibrate``, ``import``).
BOARD_POWER_HELP = ("the block table's watts are whole-board readings taken while that PU ran the block (a board "
                    "meter's): the model takes the profile's static power and every PU's idle power off them and adds "
                    "nothing on top (default: each PU's own draw)")


def add_board_power_option(s: argparse.ArgumentParser) -> None:
    """``--board-power`` (read back as ``args.board_power``; meaning: :mod:`parapipe.cost.blocktable`)."""
    s.add_argument("--board-power", action="store_true", help=BOARD_POWER_HELP)


def problem_for(args: argparse.Namespace, input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
                loaded: Optional["LoadedModel"] = None, progress: Optional["StepBars"] = None
                ) -> Tuple["MappingProblem", "SoC", Optional["Prepared"]]:
    """(problem, SoC, Prepared or None) from ``MODEL`` (``loaded``: already loaded) or ``--blocks FILE``, and
    ``--soc``, ``--pus``, ``--max-blocks``, ``--input-shape`` (``input_shapes`` first); ``progress`` follows
    the host's measuring steps.

    ``--board-power`` (``args.board_power``) reads the block table's watts as whole-board readings.

    Raises
    ------
    parapipe.errors.InputError
        Both or neither of ``MODEL`` and ``--blocks``; ``--board-power`` without ``--blocks``; what
        :func:`parapipe.app.prepare.prepare` raises.
    """
    from parapipe.app.prepare import prepare

    board_power = bool(getattr(args, "board_power", False))
    if board_power and not args.blocks:
        from parapipe.errors import input_error

        raise input_error("--board-power", None, "applies to a block table's watts (--blocks FILE)",
                          "give --blocks FILE, or drop --board-power")

    pus = [p.strip() for p in args.pus.split(",")] if getattr(args, "pus", None) else None
    if args.blocks:
        if args.model:
            from parapipe.errors import input_error

            raise input_error("--blocks", None, "give either MODEL or --blocks FILE, not both", "drop one of them")
        from parapipe.app.resolve import resolve_soc
        from parapipe.cost.blocktable import read_block_table

        soc = resolve_soc(args.soc, pus=pus)
        return read_block_table(args.blocks, soc, board_power=board_power), soc, None
    if not args.model:
        from parapipe.errors import input_error

        raise input_error("MODEL", None, "missing", "give a model name/path or --blocks FILE")
    prep = prepare(args.model, args.soc, pus=pus, max_blocks=args.max_blocks,
                   input_shapes=input_shapes or parsed_input_shapes(args), loaded=loaded, progress=progress)
    return prep.problem, prep.soc, prep


def print_run_report(head: str, rep: "RunReport") -> None:
    """The measured-next-to-predicted table of a :class:`ppexec.RunReport`, shared by ``run`` and ``deploy``."""
    def fmt(value: Optional[float], scale: float = 1.0) -> str:
        return f"{value * scale:>10.2f}" if value is not None else f"{'-':>10}"

    print(head)
    print(f"{'':<20} {'measured':>10} {'predicted':>10}")
    print(f"{'throughput/s':<20} {rep.throughput_per_s:>10.2f} {fmt(rep.predicted_throughput_per_s)}")
    print(f"{'latency idle ms':<20} {rep.idle_latency_s * 1e3:>10.2f} {fmt(rep.predicted_latency_s, 1e3)}"
          f"  (one frame at a time, {rep.idle_frames} frames)")
    print(f"{'latency loaded ms':<20} {rep.latency_p50_s * 1e3:>10.2f} {'':>10}  (p50 with the pipeline full; "
          f"p99 {rep.latency_p99_s * 1e3:.2f})")
    predicted_j = rep.predicted.get("energy_j")
    if rep.energy_j is not None:
        print(f"{'energy mJ':<20} {rep.energy_j * 1e3:>10.2f} {fmt(predicted_j, 1e3)}  (measured with the "
              "profile's power sensor)")
        for warning in rep.energy_warnings:
            print(f"{'':<20} {'':>10} {'':>10}  note: {warning}")
    elif rep.energy_unknown:
        print(f"{'energy mJ':<20} {'unknown':>10} {fmt(predicted_j, 1e3)}  (the power sensor gave no energy: "
              f"{rep.energy_unknown})")
    else:
        print(f"{'energy mJ':<20} {'-':>10} {fmt(predicted_j, 1e3)}  (estimate: the profile names no power sensor)")
    if rep.dispatch:
        how = ("each replica took the next frame when free" if rep.dispatch == "pull"
               else "dealt in the predicted shares")
        print(f"replicated stages: {how} (--replica-dispatch {rep.dispatch})")
    print(f"outputs_match: {str(rep.outputs_match).lower()}  (max abs diff {rep.max_abs_diff:.3g}; "
          f"{rep.checked_tensors} handed-over tensors, max relative diff {rep.max_scaled_diff:.3g})")
    below = {pu: p for pu, p in (getattr(rep, "precisions", None) or {}).items() if p != "fp32"}
    if below:  # fp32 runs print as before
        print("precision: " + ", ".join(f"{pu} {p}" for pu, p in below.items()) + " (as the runtimes read it "
              "back; tensors that depend on them checked at that precision's tolerance)")
    if getattr(rep, "spread", None) is not None or getattr(rep, "load", None) is not None:
        from parapipe.measure.trust import run_summary

        print_measurement(run_summary(rep.spread, rep.load), None, "run again at a quieter moment (stop other "
                          "CPU-bound processes), or with more --frames", f"period over windows of the {rep.frames} "
                          "frames")
    frequencies = getattr(rep, "frequencies", None) or {}
    if frequencies:
        def one(pu: str, f: Mapping[str, Any]) -> str:
            if f.get("domain") is None:  # the point's operating point, which this board could not set
                return f"{pu} {f['requested_hz'] / 1e6:g} MHz asked, not set (the board's own settings ran)"
            read = f.get("readback_end_hz") or f.get("readback_hz")
            return (f"{pu} {f['requested_hz'] / 1e6:g} MHz asked, {f'{read / 1e6:g}' if read else '?'} MHz ran "
                    f"({f.get('domain')}, {f.get('status')})")

        restored = any(f.get("domain") is not None for f in frequencies.values())
        print("frequencies: " + ", ".join(one(pu, f) for pu, f in sorted(frequencies.items()))
              + ("; restored after the run" if restored else ""))
    if rep.substituted:
        subs = ", ".join(f"{pu}=CPUs {','.join(map(str, cpus)) or 'unpinned'}"
                         for pu, cpus in rep.substituted.items())
        print(f"substituted: {subs} (CPU provider, or ncnn's CPU device for PU=ncnn:cpu); the prediction is for "
              "the profile's bindings and does not apply to this run")


def print_workload_report(head: str, rep: Any) -> None:
    """The table of a :class:`ppexec.report.WorkloadReport`: one line per model (its throughput, idle and loaded
    latency, each next to its prediction, and its outputs check), then the workload line (workload frames per
    second, period, energy per workload frame), shared by ``run`` and ``deploy`` of a workload point."""
    def fmt(value: Optional[float], scale: float = 1.0) -> str:
        return f"{value * scale:>9.2f}" if value is not None else f"{'-':>9}"

    print(head)
    print(f"{'model':<20} {'rate':>5} {'frames/s':>9} {'predicted':>9} {'idle ms':>9} {'predicted':>9} "
          f"{'p50 ms':>9} {'p99 ms':>9}  outputs")
    for name, r in rep.models.items():
        print(f"{name:<20} {rep.rates.get(name, 1.0):>5g} {r.throughput_per_s:>9.2f} "
              f"{fmt(r.predicted_throughput_per_s)} {r.idle_latency_s * 1e3:>9.2f} {fmt(r.predicted_latency_s, 1e3)} "
              f"{r.latency_p50_s * 1e3:>9.2f} {r.latency_p99_s * 1e3:>9.2f}  "
              f"{'match' if r.outputs_match else 'DIFFER'} (max abs diff {r.max_abs_diff:.3g})")
    pred = rep.predicted
    print(f"{'workload':<20} {'':>5} {rep.throughput_per_s:>9.2f} {fmt(pred.get('throughput_per_s'))}  workload "
          f"frames/s; period {rep.period_s * 1e3:.2f} ms (predicted "
          f"{fmt(pred.get('period_s'), 1e3).strip()} ms), {rep.workload_frames} workload frames")
    if rep.energy_j is not None:
        print(f"{'energy mJ':<20} {'':>5} {rep.energy_j * 1e3:>9.2f} {fmt(pred.get('energy_j'), 1e3)}  per workload "
              "frame, measured with the profile's power sensor")
    else:
        why = f"the power sensor gave no energy: {rep.energy_unknown}" if rep.energy_unknown else \
            "estimate: the profile names no power sensor"
        print(f"{'energy mJ':<20} {'':>5} {'-':>9} {fmt(pred.get('energy_j'), 1e3)}  per workload frame ({why})")
    busy = ", ".join(f"{pu} {b * 1e3:.2f} ms ({rep.pu_utilisation.get(pu, 0.0):.0%})"
                     for pu, b in sorted(rep.pu_busy_s.items()))
    print(f"PU busy per workload frame: {busy}")
    print(f"outputs_match: {str(rep.outputs_match).lower()}  (each model against its own unsplit model)")
    if not pred.get("applies", True):
        print("the prediction does not apply to this run (PUs substituted with --bind, or operating points not set)")


def add_bind_option(s: argparse.ArgumentParser, what: str = "run") -> None:
    """``--bind PU=CPUS`` (repeatable; read back with :func:`parapipe.execution.bindings.parse_binds`): ``what``
    says what the command does with the bound PU (``run``: run it; ``measure``: measure and record it)."""
    tail = ("The report names substituted PUs (their prediction does not apply)" if what == "run" else
            "What is measured, recorded and written is the bound PU's, under the profile's PU names (a board that "
            "is not the profile's: bind every PU it lacks)")
    s.add_argument("--bind", action="append", default=[], metavar="PU=CPUS",
                   help=f"{what} PU on these CPUs (0, 0-3, 0,2) with ONNX Runtime's CPU provider instead of its "
                   f"profile binding; repeatable. PU=ncnn:cpu (or ncnn:cpu@CPUS) runs it through runtime ncnn on "
                   f"ncnn's CPU device instead of its Vulkan GPU. {tail}")


def add_run_options(s: argparse.ArgumentParser) -> None:
    """``--bind``, ``--replica-dispatch``, ``--db``, ``--frequency`` and ``--no-dvfs`` of ``run`` and ``deploy``
    (the last two read back with :func:`parse_frequencies`)."""
    add_bind_option(s)
    s.add_argument("--replica-dispatch", default="pull", metavar="POLICY",
                   help="how a replicated stage's frames reach its replicas: pull (default; each replica takes the "
                   "next frame when it is free, so each gets frames in proportion to its speed as it runs) or "
                   "shares (dealt in the proportions the cost model predicted, the same sequence every run)")
    s.add_argument("--db", default="profile.sqlite", help="profile database whose 'runs' table keeps the run "
                   "(default profile.sqlite, as 'parapipe profile'); '' keeps nothing")
    s.add_argument("--frequency", action="append", default=[], metavar="PU=MHZ",
                   help="run PU at this operating point (MHz, an entry of its cpufreq policy's or devfreq device's "
                   "table; repeatable) instead of those the point states (the default): set for the run, read "
                   "back, and restored after it however the run ends. Needs write access to the board's "
                   "cpufreq/devfreq files (root)")
    s.add_argument("--no-dvfs", action="store_true",
                   help="run at the board's current frequency settings: set no operating point, not even those "
                        "the point states")


def parse_frequencies(args: argparse.Namespace) -> Optional[Dict[str, float]]:
    """``--frequency PU=MHZ`` items as ``{pu: Hz}``; ``{}`` with ``--no-dvfs`` (nothing is set); None when
    neither is given.

    Raises
    ------
    InputError
        An item that is not ``PU=MHZ`` with a positive number, a PU given twice, ``--frequency`` with
        ``--no-dvfs``.
    """
    from parapipe.errors import input_error

    items = getattr(args, "frequency", None) or []
    if getattr(args, "no_dvfs", False):
        if items:
            raise input_error("--no-dvfs", None, "contradicts --frequency", "give one of them")
        return {}
    if not items:
        return None
    out: Dict[str, float] = {}
    for item in items:
        pu, eq, mhz = item.partition("=")
        pu = pu.strip()
        try:
            value = float(mhz)
        except ValueError:
            value = float("nan")
        if not eq or not pu or not value > 0 or value == float("inf"):
            raise input_error("--frequency", None, f"{item!r} is not PU=MHZ", "write e.g. --frequency big=1800")
        if pu in out:
            raise input_error("--frequency", pu, "given twice", "give each PU one frequency")
        out[pu] = value * 1e6
    return out
