"""Privacy core: accounting, mechanisms, clipping, sampling, reports."""

from __future__ import annotations

from privkernels._lazy import lazy_exports

_EXPORTS = {
    # accounting (dp-accounting)
    "gaussian_sigma": "accounting",
    "gaussian_epsilon": "accounting",
    "dpsgd_noise_multiplier": "accounting",
    "dpsgd_epsilon": "accounting",
    "dpsgd_event": "accounting",
    "dpsgd_record": "accounting",
    # mechanisms
    "gaussian_mechanism": "mechanisms",
    "truncated_laplace": "mechanisms",
    "truncated_laplace_bound": "mechanisms",
    "gaussian_sampling_mechanism": "mechanisms",
    "truncated_laplace_cdf": "mechanisms",
    "gaussian_record": "mechanisms",
    "truncated_laplace_record": "mechanisms",
    "gaussian_sampling_record": "mechanisms",
    # DP-SGD pieces
    "NORM_MARGIN": "clipping",
    "clip_factors": "clipping",
    "masked_clip_factors": "clipping",
    "rounding_error": "clipping",
    "safe_norms": "clipping",
    "rounding_bound": "clipping",
    # noise keys
    "mechanism_key": "keys",
    "fresh_key": "keys",
    "looks_seeded": "keys",
    "SeededKeyWarning": "warnings",
    "clip_per_example": "clipping",
    "noisy_clipped_sum": "dpsgd",
    "per_example_norms": "clipping",
    "PoissonBatch": "sampling",
    "poisson_batch": "sampling",
    "poisson_batches": "sampling",
    "poisson_pad_to": "sampling",
    "PoissonSchedule": "sampling",
    "poisson_schedule": "sampling",
    # the budget accountant (one total over many releases)
    "BudgetAccountant": "accountant",
    "BudgetExceededError": "accountant",
    "Cost": "accountant",
    "default_accountant": "accountant",
    # budgets and releases (the one place noise is drawn and recorded)
    "Budget": "budget",
    "as_budget": "budget",
    "gaussian_release": "release",
    "truncated_laplace_release": "release",
    "gaussian_sampling_release": "release",
    "DPSGDPlan": "dpsgd",
    "dpsgd_plan": "dpsgd",
    # reports
    "MechanismRecord": "report",
    "PrivacyReport": "report",
    "compose": "report",
    "non_private_report": "report",
    "REPLACE_ONE": "report",
    "ADD_REMOVE": "report",
    "BETA_CLOSE": "report",
    "check_neighbouring": "report",
    # warnings
    "PrivacyLeakWarning": "warnings",
    "ProjectionWarning": "warnings",
    "SmallDataWarning": "warnings",
    "SmallSampleWarning": "warnings",
    "warn_privacy_leak": "warnings",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
