"""A small Gaussian process in numpy, for the evo sampler's offspring pre-screening.

:class:`~evo.search.sampler_evo.EvoSampler` breeds several children per trial with its usual
operators and proposes the one this model scores best (expected improvement), so an
evaluation is spent on the child the study's own measurements favour. Unlike
:mod:`evo.search.surrogate` (scikit-learn, for ``evo-gp``) it needs nothing beyond numpy, a
dependency of evo, so the default sampler keeps working on a bare install.

Model: zero-mean GP of the standardized log fitness over encoded genes
(:mod:`evo.search.encoding`), squared-exponential kernel, unit signal variance and a
white-noise term. The length scale (shared by all gene columns) and the noise are picked from
small fixed grids by the log marginal likelihood (an exhaustive search over a few values is
cheap at the tens to hundreds of points a study holds, and needs no optimizer). With ``ard``
(what the evo sampler uses) each column then gets its own length scale: the maximum a
posteriori under a log-normal prior (median ``PRIOR_LENGTH`` = 0.7 of a column's [0, 1] range,
log sd 1; the prior keeps a handful of points from declaring a gene irrelevant), by a
coordinate search that halves or doubles one column's length scale at a time. A gene that moves
the value gets a short length scale, one that does not a long one, so the model's
neighbourhood of a point follows the genes that matter in this study. Nothing is learned from
outside the study.

Bounded cost: a fit costs O(n^3) per kernel tried, and a study of a thousand trials refitted on
every ask made the ask, not the GPU, the bottleneck (issue 35). The GP is therefore fitted on a
window of at most ``WINDOW_BEST`` + ``WINDOW_RECENT`` points (:func:`window`): the best ones,
which hold the incumbent and the region expected improvement cares about, and the most recent
ones, which follow where the search is now. A study smaller than the window is fitted on all
its points, exactly as before. The linear algebra runs on one BLAS thread (:func:`one_blas_thread`):
at a few hundred points a multithreaded Cholesky only waits for its threads, and on a busy host
(or beside other workers) it took 90-350 ms instead of 1-3 ms.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

LENGTH_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0)
NOISES = (1e-3, 1e-2, 1e-1)
DEFAULT_NOISE = 1e-2  # the noise of a GP conditioned before any fit (EvoSampler)
# ARD: a log-normal prior on each column's length scale (median PRIOR_LENGTH, log sd PRIOR_SD),
# and the coordinate search that maximizes the posterior (see TinyGp.fit)
PRIOR_LENGTH = 0.7
PRIOR_SD = 1.0
ARD_FACTORS = (0.5, 2.0)
ARD_SWEEPS = 2
# the fit's window (see window): the best WINDOW_BEST points and the WINDOW_RECENT most recent others
WINDOW_BEST = 64
WINDOW_RECENT = 128


def window(y: np.ndarray, best: int = WINDOW_BEST, recent: int = WINDOW_RECENT) -> np.ndarray:
    """Indices (ascending) of the points of ``y`` (oldest first) that a GP is fitted on: the
    ``best`` highest, plus the ``recent`` latest of the others; all of them when there are no
    more than ``best + recent``. The highest point is always in, so expected improvement is
    measured against the study's true incumbent."""
    n = len(y)
    if n <= best + recent:
        return np.arange(n)
    top = np.argsort(-y, kind="stable")[:best]
    rest = np.setdiff1d(np.arange(n), top)
    return np.sort(np.concatenate([top, rest[-recent:]]))


@cache
def _blas_controller() -> Any:
    """threadpoolctl's controller of this process's BLAS libraries, or None where threadpoolctl is
    missing (a declared dependency, but the offline GPU host's image may lack it)."""
    try:
        from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]
    except ImportError:
        return None
    return ThreadpoolController()


@contextlib.contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the block with numpy's BLAS on one thread, where threadpoolctl can say so."""
    controller = _blas_controller()
    if controller is None:
        yield
        return
    with controller.limit(limits=1, user_api="blas"):
        yield


def _sq_dist(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    d = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2 * A @ B.T
    return np.maximum(d, 0.0)


def _log_prior(length: np.ndarray) -> float:
    """log density (up to a constant) of the ARD prior on the length scales."""
    z = (np.log(length) - math.log(PRIOR_LENGTH)) / PRIOR_SD
    return -0.5 * float((z * z).sum())


@dataclass
class TinyGp:
    """A fitted GP (see module docstring); build it with :meth:`fit`. ``length``: one length
    scale per column of ``X`` (a float broadcasts to every column)."""

    X: np.ndarray
    length: np.ndarray | float
    noise: float
    alpha: np.ndarray
    L: np.ndarray
    y_mean: float
    y_sd: float

    @staticmethod
    def _solve(X: np.ndarray, ys: np.ndarray, length: np.ndarray | float,
               noise: float) -> tuple[float, np.ndarray, np.ndarray]:
        """(log marginal likelihood, Cholesky factor, alpha) of the standardized ``ys``;
        LinAlgError when the kernel matrix is not positive definite."""
        Xs = X / length
        L = np.linalg.cholesky(np.exp(-0.5 * _sq_dist(Xs, Xs)) + noise * np.eye(len(X)))
        alpha = np.linalg.solve(L.T, np.linalg.solve(L, ys))
        return -0.5 * float(ys @ alpha) - float(np.log(np.diag(L)).sum()), L, alpha

    @classmethod
    def fit(cls, X: np.ndarray, y: np.ndarray, length: np.ndarray | float | None = None,
            noise: float | None = None, ard: bool = False) -> TinyGp:
        """The GP of ``y`` on the rows of ``X``: the hyperparameters of highest marginal
        likelihood on the grids (one length scale shared by every column), or ``length`` and
        ``noise`` when given (no search). ``ard``: one length scale per column instead, the
        maximum a posteriori under a log-normal prior (median ``PRIOR_LENGTH``): the shared
        grid first, then a coordinate search that halves or doubles one column's length
        scale at a time while the posterior improves (``ARD_SWEEPS`` passes). A column whose
        gene moves the value gets a short length scale, one that does not a long one."""
        with one_blas_thread():
            return cls._fit(X, y, length, noise, ard)

    @classmethod
    def _fit(cls, X: np.ndarray, y: np.ndarray, length: np.ndarray | float | None, noise: float | None,
             ard: bool) -> TinyGp:
        y_mean = float(y.mean())
        y_sd = float(y.std()) or 1.0
        ys = (y - y_mean) / y_sd
        width = X.shape[1]
        prior = _log_prior if ard else (lambda _: 0.0)
        best: tuple[float, float, np.ndarray | float, float, np.ndarray, np.ndarray] | None = None
        for length_ in (LENGTH_SCALES if length is None else (length,)):
            ls = np.full(width, float(length_)) if ard and np.ndim(length_) == 0 else length_
            for noise_ in (NOISES if noise is None else (noise,)):
                try:
                    lml, L, alpha = cls._solve(X, ys, ls, noise_)
                except np.linalg.LinAlgError:
                    continue
                score = lml + prior(np.broadcast_to(ls, (width,)))
                if best is None or score > best[0]:
                    best = (score, lml, ls, noise_, L, alpha)
        if best is None:
            raise np.linalg.LinAlgError("no kernel of the grid gives a positive definite matrix")
        score, lml, ls, noise_, L, alpha = best
        if ard and length is None:
            ls, L, alpha = cls._ard(X, ys, np.array(ls, dtype=float), noise_, (score, lml, L, alpha))
        return cls(X, ls, noise_, alpha, L, y_mean, y_sd)

    @classmethod
    def _ard(cls, X: np.ndarray, ys: np.ndarray, ls: np.ndarray, noise: float,
             start: tuple[float, float, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The ARD coordinate search of :meth:`fit` from the length scales ``ls`` (whose posterior
        score, log marginal likelihood, Cholesky factor and alpha are ``start``): its length scales,
        Cholesky factor and alpha. A column that is zero in every row of ``X`` (the genes of a family
        no point of the window is of, a flag every point has off) scales to zero whatever its length
        scale: the kernel matrix of a step on it is bit for bit the current one, so the step's
        likelihood is the current one's and only the prior moves; it is not factorized again (on a
        study of three families with one of them never timed, 33 of 46 columns: two thirds of the
        factorizations of a fit; issue 35)."""
        score, lml, L, alpha = start
        still = ~np.any(X, axis=0)
        for _ in range(ARD_SWEEPS):
            for j in range(len(ls)):
                for f in ARD_FACTORS:
                    trial = ls.copy()
                    trial[j] *= f
                    try:
                        lml2, L2, a2 = (lml, L, alpha) if still[j] else cls._solve(X, ys, trial, noise)
                    except np.linalg.LinAlgError:
                        continue
                    if lml2 + _log_prior(trial) > score + 1e-9:
                        score, lml, ls, L, alpha = lml2 + _log_prior(trial), lml2, trial, L2, a2
        return ls, L, alpha

    def predict(self, Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation of the latent (noise-free) standardized value at each row of ``Z``."""
        Ks = np.exp(-0.5 * _sq_dist(Z / self.length, self.X / self.length))
        mu = Ks @ self.alpha
        with one_blas_thread():
            v = np.linalg.solve(self.L, Ks.T)
        var = np.maximum(1.0 - (v * v).sum(0), 1e-12)
        return mu, np.sqrt(var)

    def standardized(self, v: float) -> float:
        """A value on the scale the GP models."""
        return (v - self.y_mean) / self.y_sd

    def unstandardized(self, v: np.ndarray) -> np.ndarray:
        """Values of the GP's scale back on the scale of the ``y`` it was fitted to."""
        return v * self.y_sd + self.y_mean


def expected_improvement(mu: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    """E[max(f - best, 0)] under N(mu, sd^2), per point."""
    sd = np.maximum(sd, 1e-9)
    z = (mu - best) / sd
    cdf = 0.5 * np.array([math.erfc(-x / math.sqrt(2)) for x in z])
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return (mu - best) * cdf + sd * pdf
