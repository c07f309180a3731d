"""``parapipe inspect``: a model's operators, blocks, FLOPs, parameters and parallelism."""
from __future__ import annotations

import argparse
import json

from parapipe.cli.common import add_input_options, parsed_input_shapes, print_model_notes

__all__ = ["add_parser", "handle"]


def handle(args: argparse.Namespace) -> int:
    """``parapipe inspect MODEL``: operators, blocks, FLOPs, parameters, widest parallel section."""
    from parapipe.graph.coarsen import coarsen, widest_parallel_section
    from parapipe.graph.opgraph import import_onnx
    from parapipe.graph.zoo import load_model

    lm = load_model(args.model)
    og = import_onnx(lm.model, name=lm.name, source=str(lm.path or args.model),
                     input_shapes=parsed_input_shapes(args))
    bg = coarsen(og, max_blocks=args.max_blocks or None)
    ops = [og.graph.nodes[n]["op"] for n in og.topo_order]
    info = {
        "model": lm.name, "sha256": lm.sha256, "operators": len(ops), "blocks": len(bg.blocks),
        "flops": sum(o.flops for o in ops), "param_nbytes": sum(o.param_nbytes for o in ops),
        "widest_parallel_section": widest_parallel_section(bg),
        "inputs": og.input_shapes,
        "outputs": {n: list(og.tensors[n].shape) for n in og.outputs},
        "input_dims_chosen": list(og.input_notes), "ops_without_flop_formula": og.ops_without_flop_formula,
        "data_dependent_ops": og.data_dependent_ops,
    }
    if args.json:
        info["block_list"] = [{"name": b.name, "ops": list(b.op_types), "flops": b.flops,
                               "out_nbytes": b.out_nbytes} for b in bg.blocks]
        print(json.dumps(info, indent=1))
        return 0
    print(f"model      {lm.name}  (sha256 {lm.sha256[:16]}…)")
    print(f"operators  {info['operators']}   blocks {info['blocks']}   widest parallel section "
          f"{info['widest_parallel_section']} blocks")
    print(f"FLOPs      {info['flops'] / 1e9:.3f} G   parameters {info['param_nbytes'] / 1e6:.2f} MB")
    print(f"inputs     {info['inputs']}   outputs {info['outputs']}")
    print_model_notes(og)
    if args.verbose_blocks:
        print(f"\n{'block':<40} {'ops':<40} {'MFLOPs':>10} {'out KB':>9}")
        for b in bg.blocks:
            print(f"{_fit(b.name, 40):<40} {_fit('+'.join(b.op_types), 40):<40} {b.flops / 1e6:>10.2f} "
                  f"{b.out_nbytes / 1e3:>9.1f}")
    return 0


def _fit(text: str, width: int) -> str:
    """``text`` if it fits in ``width`` characters, else its start and an ellipsis (``…``), ``width`` in all."""
    return text if len(text) <= width else text[:width - 1] + "…"


def add_parser(sub) -> None:
    """Register ``inspect`` on the ``parapipe`` sub-command parser ``sub``."""
    s = sub.add_parser("inspect", help="operators, blocks, FLOPs, parameters and parallelism of a model")
    s.add_argument("model", help="registry name (see 'parapipe models') or path to an .onnx file")
    s.add_argument("--max-blocks", type=int, default=48,
                   help="coarsen to at most this many blocks, as optimize does (default 48; 0 = no limit)")
    s.add_argument("--blocks", dest="verbose_blocks", action="store_true", help="list every block")
    add_input_options(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=handle)
