"""smartnoise-synth (MST, AIM) on a table encoded by a public `TabularSchema`.

The peers table gives the marginal-based synthesizers the same rows privkernels
sees, with nothing read from the data for preprocessing: every column becomes
one integer-valued attribute of a cardinality fixed by the schema --

* a numeric column (already scaled to ``[0, 1]`` by its public bounds and
  transform): ``bins`` equal-width bins of ``[0, 1]``, sampled back as the bin
  centre, and for a ``nullable`` column one more code for a missing value
  (sampled back as the missing indicator);
* a categorical column (a one-hot block): the category index, one extra code
  for a missing value (all-zero block), sampled back as the one-hot row;
* the label: its class index.

Each attribute gets a ``BinTransformer`` with public bounds, so smartnoise
spends nothing on bounds (``preprocessor_eps=0``) and the whole budget goes to
the synthesizer.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _columns(schema: Any) -> list[tuple[str, int, int, int]]:
    """``(kind, start, stop, card)`` of each encoded column, from the public schema: a
    categorical column's cardinality (levels + missing); a numeric column's codes beyond its
    bins (1 for a nullable column's "missing", else 0)."""
    cols = []
    for c in schema.columns:
        if c.kind == "numeric":
            cols.append(("numeric", c.start, c.stop, 1 if c.nullable else 0))
        else:
            cols.append(("categorical", c.start, c.stop, c.stop - c.start + 1))  # + missing
    return cols


def _to_codes(x: np.ndarray, y: np.ndarray, cols: list, bins: int) -> np.ndarray:
    out = []
    for kind, a, b, card in cols:
        if kind == "numeric":
            v = np.clip(x[:, a], 0.0, 1.0) * bins  # BinTransformer on [0, bins]
            if card:  # nullable: a missing value is one more bin, [bins, bins + 1)
                v = np.where(x[:, a + 1] >= 0.5, bins + 0.5, np.minimum(v, bins - 0.5))
            out.append(v)
        else:
            block = x[:, a:b]
            code = np.where(block.max(1) > 0.5, block.argmax(1), card - 1)
            out.append(code.astype(np.float64) + 0.5)
    out.append(np.asarray(y, np.float64) + 0.5)
    return np.stack(out, 1)


def _from_codes(codes: np.ndarray, cols: list, bins: int, width: int) -> tuple[Any, Any]:
    x = np.zeros((len(codes), width), np.float32)
    for j, (kind, a, _b, card) in enumerate(cols):
        v = codes[:, j].astype(np.float64)
        if kind == "numeric":
            missing = (v >= bins) if card else np.zeros(len(v), bool)
            x[:, a] = np.where(missing, 0.0, np.clip(v / bins, 0.0, 1.0))
            if card:
                x[:, a + 1] = missing
        else:
            idx = np.clip(np.floor(v).astype(int), 0, card - 1)
            rows = np.flatnonzero(idx < card - 1)
            x[rows, a + idx[rows]] = 1.0
    y = np.floor(codes[:, -1].astype(np.float64)).astype(np.int32)
    return x, y


def synthesize(
    method: str,
    train: Any,
    epsilon: float,
    delta: float,
    *,
    seed: int,
    bins: int = 16,
    n: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` synthetic rows in the schema's encoding: ``n`` of them (default as many as
    ``train`` has)."""
    import pandas as pd
    from snsynth import Synthesizer
    from snsynth.transform import BinTransformer, TableTransformer

    cols = _columns(train.schema)
    codes = _to_codes(train.x, train.y, cols, bins)
    cards = [bins + card if k == "numeric" else card for k, _, _, card in cols]
    cards.append(train.n_classes)
    transformer = TableTransformer(
        [BinTransformer(bins=c, lower=0.0, upper=float(c), nullable=False) for c in cards]
    )
    df = pd.DataFrame(codes, columns=[f"c{j}" for j in range(codes.shape[1])])
    np.random.seed(seed)  # smartnoise draws from numpy's global generator
    synth = Synthesizer.create(method, epsilon=float(epsilon), delta=float(delta), verbose=False)
    synth.fit(df, transformer=transformer, preprocessor_eps=0.0)
    rows = len(train.y) if n is None else int(n)
    sample = np.asarray(pd.DataFrame(synth.sample(rows)).values, np.float64)
    return _from_codes(sample, cols, bins, train.x.shape[1])
