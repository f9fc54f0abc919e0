"""Normal use prints nothing but what it is asked to: no third-party log lines.

Runs in a fresh interpreter so that logging configuration of other tests (and
pytest's capture) cannot hide a line: the child's stderr must be empty.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import logging, warnings
    logging.basicConfig(level=logging.INFO)  # a user who turned logging on sees no noise either
    import jax, numpy as np
    from sklearn.datasets import load_digits
    from privkernels import dp_kip, dp_ntk, fresh_key  # a release's key: no seed warning
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32).reshape(-1, 8, 8)
    for acc in ("pld", "rdp"):
        rel = dict(neighbouring="add-remove", sampling_rate=0.1) if acc == "rdp" else {}
        dp_kip.fit(fresh_key(), x[:500] * 2 - 1, y[:500], epsilon=1.0, n_classes=10,
                   kernel="fc_ntk", epochs=1, batch_size=50, support_per_class=1,
                   progress=False, accountant=acc, **rel)
    dp_ntk.fit(fresh_key(), x[:500], y[:500], epsilon=1.0, n_classes=10,
               iterations=3, batch_size=50, progress=False)
    print("done")
    """
)


def test_short_runs_write_nothing_to_stderr():
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=600,
        env={"JAX_PLATFORMS": "cpu", **__import__("os").environ},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "done"
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert not lines, "\n".join(lines[:20])
