"""How a PU's times scale with its operating point, fitted from measurements at several frequencies.

The model (:mod:`parapipe.soc.operating_points`): a block's compute scales with ``1/f``, its memory traffic does
not. Per PU, one share ``μ`` of a block's time at the highest point ``f_max`` is taken as not scaling:

    t(f) = t(f_max) · ((1 − μ) · f_max / f + μ)

With ``r = t(f) / t(f_max)`` and ``s = f_max / f`` this is ``r − 1 = (1 − μ)(s − 1)``, a line through the origin:
least squares gives ``1 − μ = Σ (r − 1)(s − 1) / Σ (s − 1)²``, clipped to ``0 <= μ <= 1``. The samples are the
work (operators or blocks, by signature) measured both at the highest point (or, without a row there, at the
board's own settings) and at another point (``parapipe profile --frequencies``). The errors printed are mean
absolute percentage errors of ``t(f)``: *before* with ``μ = 0`` (time ∝ 1/f), *after* with the fitted ``μ``,
and leave-one-out (each signature predicted by a fit that did not see it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ..profiledb.db import BOARD_FREQUENCY, ProfileDB
from ..soc.operating_points import match_index
from ..soc.profile import SoC

__all__ = ["FrequencyFit", "fit_memory_bound_fraction", "fit_frequency_scaling"]

#: A sample: (signature, seconds at the highest point, seconds at the other point, f_max / f).
Sample = Tuple[str, float, float, float]


@dataclass(frozen=True)
class FrequencyFit:
    """The fitted share of one PU (``memory_bound_fraction``, in [0, 1]) and its errors in percent."""

    pu: str
    memory_bound_fraction: float
    samples: int
    signatures: int
    mape_before_pct: float
    mape_after_pct: float
    mape_loo_pct: Optional[float]


def _share(samples: Sequence[Sample]) -> Optional[float]:
    num = sum((tf / tm - 1.0) * (s - 1.0) for _, tm, tf, s in samples)
    den = sum((s - 1.0) ** 2 for _, _, _, s in samples)
    if den <= 0:
        return None
    return min(1.0, max(0.0, 1.0 - num / den))


def _mape(samples: Sequence[Sample], mu: float) -> float:
    return 100.0 * sum(abs(tm * ((1 - mu) * s + mu) - tf) / tf for _, tm, tf, s in samples) / len(samples)


def fit_memory_bound_fraction(samples: Sequence[Sample]) -> Optional[Tuple[float, float, float, Optional[float]]]:
    """``(μ, MAPE before, MAPE after, MAPE leave-one-out)`` of ``samples`` (module docstring); None when no sample
    is at a lower point than the highest. Leave-one-out leaves out every sample of one signature at a time (None
    with a single signature).

    >>> truth = [("a", 1.0, 1.0 * (0.7 * 2 + 0.3), 2.0), ("b", 2.0, 2.0 * (0.7 * 1.5 + 0.3), 1.5)]
    >>> round(fit_memory_bound_fraction(truth)[0], 6)
    0.3
    """
    usable = [x for x in samples if x[3] > 1.0 and x[1] > 0 and x[2] > 0]
    mu = _share(usable)
    if mu is None:
        return None
    before, after = _mape(usable, 0.0), _mape(usable, mu)
    signatures = sorted({x[0] for x in usable})
    loo: Optional[float] = None
    if len(signatures) > 1:
        errors: List[float] = []
        for sig in signatures:
            rest = [x for x in usable if x[0] != sig]
            m = _share(rest)
            held = [x for x in usable if x[0] == sig]
            errors.extend(abs(tm * ((1 - (m or 0.0)) * s + (m or 0.0)) - tf) / tf for _, tm, tf, s in held)
        loo = 100.0 * sum(errors) / len(errors)
    return mu, before, after, loo


def fit_frequency_scaling(db: ProfileDB, soc: SoC) -> List[FrequencyFit]:
    """Per PU of ``soc`` with operating points and measurements at other points in ``db``, its fitted share.

    Rows at the PU's highest point are the reference where they exist, else the rows at the board's own settings
    (taken as the highest point: the ``performance`` governor's, and what a busy PU runs at under the others).
    """
    out: List[FrequencyFit] = []
    for pu, freqs in sorted(db.frequencies(soc.name).items()):
        ops = soc.pus[pu].operating_points if pu in soc.pus else None
        if ops is None or len(ops) < 2:
            continue
        f_max = ops.max_frequency_hz
        found = match_index(freqs, f_max)
        at_max = None if found is None else freqs[found]
        base_rows = db.all(soc.name, frequency_hz=BOARD_FREQUENCY if at_max is None else at_max)
        base: Dict[Tuple[str, str, int], float] = {(r.kind, r.signature, r.batch): r.median_s
                                                   for r in base_rows if r.pu == pu}
        samples: List[Sample] = []
        for f in freqs:
            if f == at_max:
                continue
            for r in db.all(soc.name, frequency_hz=f):
                ref = base.get((r.kind, r.signature, r.batch)) if r.pu == pu else None
                if ref is not None:
                    samples.append((f"{r.kind}:{r.signature}:{r.batch}", ref, r.median_s, f_max / f))
        got = fit_memory_bound_fraction(samples)
        if got is None:
            continue
        mu, before, after, loo = got
        used = [x for x in samples if x[3] > 1.0]
        out.append(FrequencyFit(pu, mu, len(used), len({x[0] for x in used}), before, after, loo))
    return out
