"""DP-SGD as a value: calibrate once, add noise in the compiled step, record after.

A `DPSGDPlan` is the Poisson-subsampled Gaussian mechanism of Abadi et
al. (2016) composed over ``steps`` steps, calibrated for a
`Budget` under a neighbouring relation
(`privkernels.privacy.accounting`). The noise of a step is the optax
transformation `dpsgd_noise` (the one place DP-SGD noise is drawn), applied to
the clipped sum (DP-KIP Alg. 1 step 7); the method's ``fit`` calls
`DPSGDPlan.record` with the steps actually taken.
The sampler must be `privkernels.privacy.poisson_batch` at
``plan.sampling_rate`` (never truncated): that is what the accountant assumes.
`noisy_clipped_sum` is one such step on a masked batch of clipped contributions
(the audit's DP-SGD step), through the same transform.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from privkernels._validation import check_int, check_key, check_positive
from privkernels.privacy.accounting import (
    check_relation,
    check_sampling_rate,
    dpsgd_epsilon,
    dpsgd_event,
    dpsgd_noise_multiplier,
    dpsgd_record,
)
from privkernels.privacy.budget import Budget
from privkernels.privacy.clipping import check_clip_norm, leading_size, masked_sum
from privkernels.privacy.keys import fold_digest, params_digest
from privkernels.privacy.report import MechanismRecord

__all__ = ["DPSGDNoiseState", "DPSGDPlan", "dpsgd_noise", "dpsgd_plan", "noisy_clipped_sum"]

#: Folded into a state's key to give the next state's key (never a key that drew noise).
NEXT_KEY_TAG = 0x4E455854


class DPSGDNoiseState(NamedTuple):
    """State of `dpsgd_noise`: ``key``, the PRNG key of the next draw.

    A caller that derives one key per step (DP-KIP: `privkernels.dp_kip.train.step_keys`)
    builds ``DPSGDNoiseState(step_key)`` for each step; otherwise ``update`` returns
    the state of the next step, ``fold_in(key, NEXT_KEY_TAG)``.
    """

    key: jax.Array


def dpsgd_noise(
    noise_std: Any, digest: Any, key: jax.Array | None = None
) -> optax.GradientTransformation:
    """The Gaussian noise of a DP-SGD step as an optax ``GradientTransformation``.

    ``update(summed, state, params=None)`` returns ``(summed + N(0, noise_std^2 I),
    next_state)`` per leaf: the noisy sum ``g~ = sum_i clip(g_i) + N(0, sigma^2 C^2 I)``
    of DP-KIP Alg. 1 step 7 (Abadi et al. 2016, "add noise"), with ``noise_std =
    sigma C``. ``summed`` must already be the clipped sum (sensitivity ``C``): the
    transformation neither clips nor averages. Leaf ``j`` of ``n`` draws from
    ``split(fold_digest(state.key, digest), n)[j]``, so the noise is bound to the
    mechanism's parameters (`privkernels.privacy.keys`): two plans never share a draw
    from one key. This is the one place DP-SGD noise is drawn.

    Args:
      noise_std: ``sigma * C``, a Python float or a traced float32 scalar (a compiled step
        that takes it as an argument serves every budget).
      digest: the plan's parameter digest `DPSGDPlan.digest`: two uint32 words, Python
        ints or a traced ``(2,)`` uint32 array.
      key: the key ``init`` puts in the state (optional: a caller may build
        `DPSGDNoiseState` itself).

    Returns:
      ``optax.GradientTransformation(init, update)``; ``update`` returns float32 leaves of
      the shapes of ``summed`` (whatever their dtype: float32 leaves keep their bits).
    """

    _check_noise_args(noise_std, digest)

    def init(params: Any) -> DPSGDNoiseState:
        del params
        if key is None:
            raise ValueError("dpsgd_noise(...).init needs key=, or build DPSGDNoiseState(key)")
        return DPSGDNoiseState(key)

    def update(
        updates: Any, state: DPSGDNoiseState, params: Any = None
    ) -> tuple[Any, DPSGDNoiseState]:
        del params
        noisy = _add_noise(fold_digest(state.key, (digest[0], digest[1])), updates, noise_std)
        return noisy, DPSGDNoiseState(jax.random.fold_in(state.key, NEXT_KEY_TAG))

    return optax.GradientTransformation(init, update)


def _check_noise_args(noise_std: Any, digest: Any) -> None:
    """Concrete arguments of `dpsgd_noise` checked at build time (traced ones are the
    compiled step's, built from a checked plan): a finite ``noise_std > 0``, a digest of
    two words."""
    if not isinstance(noise_std, jax.core.Tracer):
        std = float(noise_std)
        if not (math.isfinite(std) and std > 0):
            raise ValueError(f"noise_std must be finite and > 0, got {std!r}")
    if not isinstance(digest, jax.core.Tracer) and np.shape(digest) != (2,):
        raise ValueError(f"digest must be two uint32 words, got shape {np.shape(digest)}")


def _add_noise(key: jax.Array, summed: Any, noise_std: Any) -> Any:
    """``summed + noise_std * z`` per leaf, ``z ~ N(0, I)`` float32 from ``split(key, n_leaves)``."""
    leaves, treedef = jax.tree_util.tree_flatten(summed)
    keys = jax.random.split(key, len(leaves))
    noisy = [  # in float32 whatever the leaf's dtype (float32 leaves: the same bits)
        leaf.astype(jnp.float32) + noise_std * jax.random.normal(k, leaf.shape, jnp.float32)
        for leaf, k in zip(leaves, keys, strict=True)
    ]
    return jax.tree_util.tree_unflatten(treedef, noisy)


class DPSGDPlan(NamedTuple):
    """A calibrated DP-SGD mechanism (public parameters only).

    Attributes:
      epsilon, delta: the target budget.
      noise_multiplier: sigma (noise std per unit of clip norm).
      clip_norm: per-example L2 bound C.
      sampling_rate: Poisson rate q.
      steps: planned number of steps T.
      neighbouring: ``"replace-one"`` or ``"add-remove"``.
      accountant: ``"pld"`` or ``"rdp"``.
      digest: the parameters' digest folded into every noise key.
    """

    epsilon: float
    delta: float
    noise_multiplier: float
    clip_norm: float
    sampling_rate: float
    steps: int
    neighbouring: str
    accountant: str
    digest: tuple[int, int]

    @property
    def noise_std(self) -> float:
        """Standard deviation of the noise on the clipped sum: ``sigma * C``."""
        return self.noise_multiplier * self.clip_norm

    def noise(self, key: jax.Array | None = None) -> optax.GradientTransformation:
        """`dpsgd_noise` at this plan's ``noise_std`` and ``digest`` (``key``: for ``init``)."""
        return dpsgd_noise(self.noise_std, self.digest, key)

    def add_noise(self, key: jax.Array, summed: Any) -> Any:
        """``summed + N(0, (sigma C)^2 I)`` per leaf: one ``update`` of `noise` with ``key``.

        ``summed``: the clipped sum (pytree of float arrays); ``key`` may be traced.
        Returns float32 leaves of the same shapes.
        """
        return self.noise().update(summed, DPSGDNoiseState(key))[0]

    def epsilon_spent(self, steps_done: int) -> float:
        """The accounted epsilon of the first ``steps_done`` steps (<= ``epsilon``)."""
        return dpsgd_epsilon(
            self.noise_multiplier,
            self.delta,
            sampling_rate=self.sampling_rate,
            steps=check_int(steps_done, "steps_done", minimum=1),
            accountant=self.accountant,  # type: ignore[arg-type]
            neighbouring=self.neighbouring,  # type: ignore[arg-type]
        )

    def event(self, steps_done: int | None = None) -> Any:
        """The dp-accounting ``DpEvent`` of ``steps_done`` (default: planned) steps."""
        steps = self.steps if steps_done is None else check_int(steps_done, "steps_done")
        return dpsgd_event(self.noise_multiplier, sampling_rate=self.sampling_rate, steps=steps)

    def record(self, released: str, steps_done: int, **params: Any) -> MechanismRecord:
        """The `MechanismRecord` of the steps actually taken."""
        return dpsgd_record(
            released,
            noise_multiplier=self.noise_multiplier,
            delta=self.delta,
            sampling_rate=self.sampling_rate,
            steps=check_int(steps_done, "steps_done", minimum=1),
            clip_norm=self.clip_norm,
            accountant=self.accountant,  # type: ignore[arg-type]
            neighbouring=self.neighbouring,  # type: ignore[arg-type]
            planned_steps=self.steps,
            target_epsilon=self.epsilon,
            **params,
        )


def dpsgd_plan(
    budget: Budget,
    *,
    sampling_rate: float,
    steps: int,
    clip_norm: float,
    neighbouring: str = "replace-one",
    accountant: str = "pld",
    variant: str | None = None,
) -> DPSGDPlan:
    """Calibrate sigma so that ``steps`` Poisson steps at rate q spend ``budget``.

    Args:
      budget: the target (epsilon, delta).
      sampling_rate: Poisson inclusion probability q in (0, 1].
      steps: planned number of steps T >= 1.
      clip_norm: per-example clipping bound C > 0.
      neighbouring: ``"replace-one"`` (PLD only) or ``"add-remove"``.
      accountant: ``"pld"`` (default) or ``"rdp"``.
      variant: names what the summed gradients cover when a caller releases more
        than one kind of sum under the same parameters (e.g. DP-KIP with learned
        labels); folded into the digest when given, so two variants never draw the
        same noise from one key (the difference of two such releases would be
        noise-free). None leaves the digest as it always was.

    Returns:
      `DPSGDPlan`. Calibration is memoized on the public parameters.
    """
    if not isinstance(budget, Budget):
        raise TypeError(f"budget must be a Budget, got {type(budget).__name__}")
    q = check_sampling_rate(sampling_rate)
    t = check_int(steps, "steps", minimum=1)
    c = check_clip_norm(clip_norm)
    if accountant not in ("pld", "rdp"):
        raise ValueError(f"accountant must be 'pld' or 'rdp', got {accountant!r}")
    rel = check_relation(neighbouring, accountant)
    sigma = float(
        dpsgd_noise_multiplier(
            budget.epsilon,
            budget.delta,
            sampling_rate=q,
            steps=t,
            accountant=accountant,  # type: ignore[arg-type]
            neighbouring=rel,  # type: ignore[arg-type]
        )
    )
    digest = params_digest(
        "dpsgd",
        noise_multiplier=sigma,
        clip_norm=c,
        sampling_rate=q,
        steps=t,
        neighbouring=rel,
        epsilon=budget.epsilon,
        delta=budget.delta,
        **({} if variant is None else {"variant": str(variant)}),
    )
    return DPSGDPlan(budget.epsilon, budget.delta, sigma, c, q, t, rel, accountant, digest)


def noisy_clipped_sum(
    key: jax.Array,
    clipped: Any,
    mask: Any,
    *,
    clip_norm: float,
    noise_multiplier: float,
) -> Any:
    """Sum of clipped per-example values over ``mask`` plus Gaussian noise.

    ``sum_{i: mask_i} g_i + N(0, (sigma C)^2 I)`` per leaf (Abadi et al. 2016,
    Alg. 1 "add noise"; DP-KIP Alg. 1 step 7): the masked sum, then one ``update``
    of `privkernels.privacy.dpsgd.dpsgd_noise` (the one DP-SGD noise path) with
    ``key`` bound to ``params_digest("noisy_clipped_sum", clip_norm, noise_multiplier)``,
    so two parameter settings never share a draw from one key. Padding rows
    (``mask == False``) are excluded with ``where`` (so even NaN padding cannot leak
    in). The caller guarantees each ``g_i`` has global norm ``<= C`` (use
    `clip_per_example`); that is the sensitivity this noise covers.

    Args:
      key: JAX PRNG key (may be traced).
      clipped: pytree of ``(b, ...)`` arrays.
      mask: (b,) bool (or 0/1) array: which rows are real sampled examples.
      clip_norm: C > 0, a concrete number (it is hashed into the key's digest).
      noise_multiplier: sigma > 0, a concrete number (noise std = sigma * C).

    Returns:
      Pytree like ``clipped`` with the leading axis summed out, float32 leaves (the sum
      and the noise are formed in float32 whatever the input dtype).
    """
    key = check_key(key)
    if isinstance(clip_norm, jax.core.Tracer) or isinstance(noise_multiplier, jax.core.Tracer):
        raise TypeError("clip_norm and noise_multiplier must be concrete numbers (not traced)")
    clip_norm = check_clip_norm(clip_norm)
    noise_multiplier = check_positive(noise_multiplier, "noise_multiplier")
    leaves = jax.tree_util.tree_leaves(clipped)
    b = leading_size(leaves, "clipped")
    mask = jnp.asarray(mask)
    if mask.shape != (b,):
        raise ValueError(f"mask must have shape ({b},) to match clipped, got {tuple(mask.shape)}")
    if not isinstance(mask, jax.core.Tracer) and not bool(jnp.all((mask == 0) | (mask == 1))):
        raise ValueError("mask must be boolean, or hold only 0 and 1")
    std = jnp.asarray(noise_multiplier, jnp.float32) * jnp.asarray(clip_norm, jnp.float32)
    digest = params_digest(
        "noisy_clipped_sum", clip_norm=clip_norm, noise_multiplier=noise_multiplier
    )
    return _noisy_sum_impl(key, clipped, mask, std, jnp.asarray(digest, jnp.uint32))


@jax.jit
def _noisy_sum_impl(
    key: jax.Array, clipped: Any, mask: jax.Array, std: jax.Array, digest: jax.Array
) -> Any:
    total = masked_sum(clipped, mask == 1)  # a traced mask's other values: not sampled
    return dpsgd_noise(std, digest).update(total, DPSGDNoiseState(key))[0]
