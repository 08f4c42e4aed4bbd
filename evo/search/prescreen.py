"""A small Gaussian process in numpy, for the evo sampler's offspring pre-screening.

:class:`~evo.search.sampler_evo.EvoSampler` breeds several children per trial with its usual
operators and proposes the one this model scores best (expected improvement), so an
evaluation is spent on the child the study's own measurements favour. Unlike
:mod:`evo.search.surrogate` (scikit-learn, for ``evo-gp``) it needs nothing beyond numpy, a
dependency of evo, so the default sampler keeps working on a bare install.

Model: zero-mean GP of the standardized log fitness over encoded genes
(:mod:`evo.search.encoding`), squared-exponential kernel with one length scale shared by all
gene columns, unit signal variance and a white-noise term. The length scale and the noise are
picked from small fixed grids by the log marginal likelihood (an exhaustive search over a few
values is cheap at the tens to hundreds of points a study holds, and needs no optimizer).
Nothing is learned from outside the study.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

LENGTH_SCALES = (0.25, 0.5, 1.0, 2.0, 4.0)
NOISES = (1e-3, 1e-2, 1e-1)


def _sq_dist(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    d = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2 * A @ B.T
    return np.maximum(d, 0.0)


@dataclass
class TinyGp:
    """A fitted GP (see module docstring); build it with :meth:`fit`."""

    X: np.ndarray
    length: float
    noise: float
    alpha: np.ndarray
    L: np.ndarray
    y_mean: float
    y_sd: float

    @classmethod
    def fit(cls, X: np.ndarray, y: np.ndarray, length: float | None = None, noise: float | None = None) -> TinyGp:
        """The GP of ``y`` on the rows of ``X``: the hyperparameters of highest marginal
        likelihood on the grids, or ``length`` and ``noise`` when given (no search)."""
        y_mean = float(y.mean())
        y_sd = float(y.std()) or 1.0
        ys = (y - y_mean) / y_sd
        D = _sq_dist(X, X)
        best: tuple[float, float, float, np.ndarray, np.ndarray] | None = None
        for length_ in (LENGTH_SCALES if length is None else (length,)):
            K0 = np.exp(-0.5 * D / length_ ** 2)
            for noise_ in (NOISES if noise is None else (noise,)):
                try:
                    L = np.linalg.cholesky(K0 + noise_ * np.eye(len(X)))
                except np.linalg.LinAlgError:
                    continue
                alpha = np.linalg.solve(L.T, np.linalg.solve(L, ys))
                lml = -0.5 * float(ys @ alpha) - float(np.log(np.diag(L)).sum())
                if best is None or lml > best[0]:
                    best = (lml, length_, noise_, L, alpha)
        if best is None:
            raise np.linalg.LinAlgError("no kernel of the grid gives a positive definite matrix")
        _, length_, noise_, L, alpha = best
        return cls(X, length_, noise_, alpha, L, y_mean, y_sd)

    def predict(self, Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation of the latent (noise-free) standardized value at each row of ``Z``."""
        Ks = np.exp(-0.5 * _sq_dist(Z, self.X) / self.length ** 2)
        mu = Ks @ self.alpha
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
