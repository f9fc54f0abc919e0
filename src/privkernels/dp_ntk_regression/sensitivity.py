"""Sensitivity of the kernel release and the number of Gaussian samples k (Gu et al.).

Condition 5.3 (Def. 5.1, 5.2): the Gaussian sampling mechanism is
(eps, delta)-DP when ``M <= Delta(k) = min(eps / sqrt(8 k log(1/delta)),
eps / (8 log(1/delta)))``, where ``M`` bounds how much one beta-close neighbour
moves the kernel relative to its smallest eigenvalue ``eta_min``. The paper's
``M = n sigma^2 B^4 beta / eta_min`` gives eq. (1); an exact bound for the drawn
weights is enforced too (the larger M wins).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from privkernels._validation import check_delta, check_epsilon, check_int, check_positive
from privkernels.privacy.accounting import gsm_divisor

__all__ = ["sensitivity_bound", "max_k", "delta_branches", "shift_for_k"]


def _weights_op_norm_sq(weights: Any) -> float:
    """``||S||_op`` with ``S = W^T W / m`` (data-independent), in float64."""
    w = np.asarray(weights, dtype=np.float64)
    m = w.shape[0]
    gram = w @ w.T if w.shape[0] <= w.shape[1] else w.T @ w
    return float(np.linalg.eigvalsh(gram)[-1]) / m


def sensitivity_bound(
    n: int,
    *,
    eta_min: float,
    beta: float = 1e-6,
    weight_std: float = 1.0,
    input_bound: float = 1.0,
    weights: Any = None,
) -> dict[str, float]:
    """Bounds on M (Def. 5.1) for beta-close neighbours; returns a dict.

    * ``"paper"``: ``M = n sigma^2 B^4 beta / eta_min``, the quantity behind eq. (1)
      (Lemma E.15 Part 2, ``sqrt(n) psi / eta_min`` with ``psi = sqrt(n) sigma^2 B^3 beta``,
      constants of the O(.) set to 1 and B^4 as printed in eq. (1)). It rests on the
      continuous kernel plus a concentration step that needs
      ``m = Omega(n d B^2 beta^-2 log(1/delta_2))`` (Condition 5.5), which no practical
      width satisfies.
    * ``"fixed_weights"`` (only when ``weights (m, d)`` are given): an exact bound for
      the discrete kernel with these weights, no probability over w. With
      ``S = W^T W / m``, ``K(x, v) = <x, v> x^T S v`` has gradient norm at most
      ``2 ||S|| B^3`` in x off the diagonal and ``4 ||S|| B^3`` on it (the same steps as
      Lemma E.2/E.3), so ``||K - K'||_F <= 2 ||S|| B^3 beta sqrt(2n + 2)`` =: ``r eta_min``,
      and ``M <= r / (1 - r)`` (``||A^{-1} - I||_F <= ||A - I||_F / (1 - ||A - I||)`` for
      ``A = K^{-1/2} K' K^{-1/2}``). Infinite when ``r >= 1``.
    * ``"used"``: the larger of the two (what `fit` enforces).
    """
    n = check_int(n, "n")
    eta_min = check_positive(eta_min, "eta_min")
    beta = check_positive(beta, "beta")
    sigma = check_positive(weight_std, "weight_std")
    b = check_positive(input_bound, "input_bound")
    out = {"paper": n * sigma**2 * b**4 * beta / eta_min}
    if weights is not None:
        s_norm = _weights_op_norm_sq(weights)
        r = 2.0 * s_norm * b**3 * beta * math.sqrt(2 * n + 2) / eta_min
        out["fixed_weights"] = r / (1.0 - r) if r < 1.0 else math.inf
        out["weights_op_norm"] = s_norm
    out["used"] = max(out["paper"], out.get("fixed_weights", 0.0))
    return out


def delta_branches(epsilon_alpha: float, delta_alpha: float) -> tuple[float, float]:
    return 8.0 * math.log(1.0 / delta_alpha), epsilon_alpha / gsm_divisor(1, delta_alpha)


#: Largest k `_k_from_m` reports: fits draw at most ``2**31 - 1`` samples, so any larger
#: bound is as good as infinite (and stays an exact float).
K_LIMIT = 2.0**62


def _k_from_m(m_bound: float, epsilon_alpha: float, delta_alpha: float) -> float:
    """Largest real k with ``M <= eps / sqrt(8 k log(1/delta))`` (eq. (1) when M is
    the paper's M), capped at `K_LIMIT`; ``-inf`` when even k = 1 violates ``M <= Delta(1)``.

    Computed as ``(eps / M)^2 / (8 log(1/delta))``, never squaring ``M``: a tiny ``M`` (a
    huge ``eta_min``, a tiny ``beta``) allows a huge k rather than underflowing. ``M`` that
    underflowed to 0 stands for a positive value below the smallest float: any k.
    """
    eight_log, delta_at_1 = delta_branches(epsilon_alpha, delta_alpha)
    if not m_bound <= delta_at_1:
        return -math.inf
    ratio = epsilon_alpha / m_bound if m_bound > 0.0 else math.inf
    return min(ratio * ratio / eight_log, K_LIMIT)


def max_k(
    n: int,
    *,
    epsilon_alpha: float,
    delta_alpha: float,
    eta_min: float,
    beta: float = 1e-6,
    weight_std: float = 1.0,
    input_bound: float = 1.0,
    weights: Any = None,
) -> int:
    """Largest number of Gaussian samples k the privacy condition allows.

    ``epsilon_alpha, delta_alpha`` are the budget of the *kernel* release (in
    `fit`: the kernel share of ``split``). ``n`` is the real
    number of training examples, ``eta_min`` the public lower bound on the smallest
    eigenvalue of the sampled matrix, ``weight_std`` = sigma, ``input_bound`` = B.

    Condition 4 of Condition 5.3 is ``M <= Delta(k)`` with (Def. 5.2)
    ``Delta(k) = min(eps / sqrt(8 k log(1/delta)), eps / (8 log(1/delta)))``. Hence

    * k must satisfy ``k <= eps^2 / (8 log(1/delta) M^2)``; with the paper's
      ``M = n sigma^2 B^4 beta / eta_min`` this is exactly eq. (1)
      ``k <= eps^2 eta_min^2 / (8 log(1/delta) n^2 sigma^4 B^8 beta^2)``;
    * and, independently of k, ``M <= eps / (8 log(1/delta))`` (the second branch;
      the paper sidesteps it by taking ``k >= 8 log(1/delta)``, which is possible
      only when eq. (1) allows such a k; when it does not, no k is private).

    With ``weights`` the exact fixed-weights bound of `sensitivity_bound` is
    enforced too (the larger M wins).

    Raises:
      ValueError: when no k >= 1 satisfies the condition; the message says which
        parameter to change and by what factor.
    """
    epsilon_alpha = check_epsilon(epsilon_alpha, "epsilon_alpha")
    delta_alpha = check_delta(delta_alpha, "delta_alpha")
    bounds = sensitivity_bound(
        n,
        eta_min=eta_min,
        beta=beta,
        weight_std=weight_std,
        input_bound=input_bound,
        weights=weights,
    )
    m_used = bounds["used"]
    k_real = _k_from_m(m_used, epsilon_alpha, delta_alpha)
    if k_real >= 1.0:
        return int(math.floor(k_real))
    _, delta_at_1 = delta_branches(epsilon_alpha, delta_alpha)
    factor = m_used / delta_at_1
    which = (
        "paper's eq. (1)"
        if bounds["paper"] >= bounds.get("fixed_weights", 0.0)
        else "fixed-weights"
    )
    raise ValueError(
        f"no number of Gaussian samples k >= 1 is private here: the sensitivity M = {m_used:.4g} "
        f"({which} bound, M = n sigma^2 B^4 beta / eta_min with n={n}, sigma={weight_std}, "
        f"B={input_bound}, beta={beta}, eta_min={eta_min}) exceeds Delta(k=1) = "
        f"eps_alpha / max(sqrt(8 log(1/delta_alpha)), 8 log(1/delta_alpha)) = {delta_at_1:.4g} "
        f"(eps_alpha={epsilon_alpha}, delta_alpha={delta_alpha}); eq. (1) gives k <= "
        f"{max(k_real, 0.0) if math.isfinite(k_real) else 0.0:.3g}. Fix it by a factor of at least "
        f"{factor:.3g}: multiply epsilon (or the kernel share of split) or eta_min by {factor:.3g}, or divide "
        f"beta or n by {factor:.3g}; a public eta_min that holds for every dataset is obtained "
        f"with kernel_shift=s (then eta_min=s is guaranteed)"
    )


def shift_for_k(
    n: int,
    k: int,
    *,
    epsilon_alpha: float,
    delta_alpha: float,
    beta: float = 1e-6,
    weight_std: float = 1.0,
    input_bound: float = 1.0,
) -> float:
    """The kernel shift ``s`` (= ``eta_min``) at which eq. (1) allows exactly ``k`` samples.

    Solves ``n sigma^2 B^4 beta / s = Delta(k)`` (Def. 5.2) for ``s``:
    ``s = n sigma^2 B^4 beta max(sqrt(8 k L), 8 L) / eps_alpha`` with
    ``L = log(1/delta_alpha)``. Every input is public under beta-close (``n``
    is the same for all neighbours), so the shift is data-independent. It grows
    linearly in ``n``, as a ridge whose weight keeps pace with the kernel's
    eigenvalues (which grow with ``n``) does.
    """
    n = check_int(n, "n")
    k = check_int(k, "k")
    epsilon_alpha = check_epsilon(epsilon_alpha, "epsilon_alpha")
    delta_alpha = check_delta(delta_alpha, "delta_alpha")
    denom = gsm_divisor(k, delta_alpha)
    scale = n * weight_std**2 * input_bound**4 * check_positive(beta, "beta")
    return scale * denom / epsilon_alpha
