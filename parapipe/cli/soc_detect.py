"""``parapipe soc detect``: measure a machine (here or over SSH) and write its profile YAML (the job is
:func:`parapipe.app.profiling.detect_job`)."""
from __future__ import annotations

import argparse

from parapipe.cli.common import StepBars, add_host_options, host_spec, print_measurement

__all__ = ["add_parser", "handle"]


def handle(args: argparse.Namespace) -> int:
    """``parapipe soc detect``: measure a machine and write its profile YAML."""
    from parapipe.app.profiling import detect_job
    from parapipe.measure.trust import MeasureLog

    per_core = True if args.per_core else False if args.per_cluster else None
    record = MeasureLog()
    steps = StepBars()
    steps.status("starting the agent")
    try:
        soc, path, how, found = detect_job(args.out, host_spec(args), args.python, args.name, per_core,
                                    lambda done, total: steps("measuring", done, total), record)
    finally:
        steps.close()
    for line in found:
        print(f"runtime: {line}")
    print(f"PUs: {how}")
    for pu in soc.pus.values():
        ex = pu.execution
        via = (ex.provider if ex.runtime == "onnxruntime" else
               f"{ex.runtime} {ex.runtime_options.get('device', '')}".strip())
        print(f"{pu.name:<10} {pu.kind:<4} {via:<22} cores {pu.cores:<3} peak {pu.peak_flops / 1e9:8.1f} GFLOPS  bandwidth "
              f"{pu.memory_bandwidth_bytes_per_s / 1e9:6.1f} GB/s  overhead {pu.op_overhead_s * 1e6:6.1f} us")
    t = soc.transfers.default
    print(f"transfer (default): alpha {t.alpha_s * 1e6:.1f} us, beta {t.beta_bytes_per_s / 1e9:.2f} GB/s; "
          f"{len(soc.transfers.pairs)} pair(s)")
    print_measurement(record.summary(), None, "detect again at a quieter moment (stop other CPU-bound "
                      "processes)", "timed runs of each micro-benchmark")
    print(f"wrote {path}")
    return 0


def add_parser(sub) -> None:
    """Register ``soc detect`` on the ``parapipe`` sub-command parser ``sub``."""
    s = sub.add_parser("soc", help="SoC profile tools")
    socsub = s.add_subparsers(dest="soc_command", required=True)
    d = socsub.add_parser("detect", help="measure a machine (CPU clusters, GEMM peak, bandwidth, hand-offs) and "
                          "write its profile YAML")
    d.add_argument("--out", required=True, help="profile .yaml to write")
    d.add_argument("--name", default=None, help="profile name (default detected_<hostname>)")
    grouping = d.add_mutually_exclusive_group()
    grouping.add_argument("--per-core", action="store_true", help="one PU per core (default where all cores form "
                          "one cluster: one PU would leave nothing to pipeline)")
    grouping.add_argument("--per-cluster", action="store_true", help="one PU per CPU cluster (default where the "
                          "machine has several, e.g. big.LITTLE)")
    add_host_options(d)
    d.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="no progress bars on stderr")
    d.set_defaults(func=handle)
