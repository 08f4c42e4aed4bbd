"""The models behind :mod:`evo.search.sampler_gp`, fit on what the current study has measured.

scikit-learn is an optional dependency (``pip install 'evo-kernels[gp]'``): it is imported by
the functions here, never at module import, and :func:`require` turns its absence into a
one-line error when the sampler is made.

- :func:`fit_value_model`: a Gaussian process (scikit-learn's ``GaussianProcessRegressor``;
  Matern 5/2 with one length scale per gene column, a constant and a white-noise term, all
  fitted by maximum marginal likelihood) of the standardized log fitness over encoded genes.
  The fitted length scales are the genes' importances: a short one means the gene matters.
- :func:`expected_improvement`: the acquisition.
- :class:`FailureModel`: the probability that a point fails for a reason of its own (build
  rejection, compile error, wrong result, crash, timeout), by logistic regression over the
  genes on this study's built-or-failed points; 1 for every point until it has seen both a
  failure and a success.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING

import numpy as np

from evo.errors import EvoError

if TYPE_CHECKING:
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import Kernel
    from sklearn.linear_model import LogisticRegression


def require() -> None:
    """EvoError unless scikit-learn can be imported."""
    try:
        import sklearn  # noqa: F401
    except ImportError:
        raise EvoError("the evo-gp sampler needs scikit-learn: pip install 'evo-kernels[gp]'") from None


def _kernel(width: int) -> Kernel:
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

    return (ConstantKernel(1.0, (1e-2, 1e2)) * Matern(np.ones(max(1, width)), (5e-2, 2e1), nu=2.5)
            + WhiteKernel(1e-2, (1e-6, 1.0)))


def standardize(y: np.ndarray) -> np.ndarray:
    sd = float(y.std())
    return (y - y.mean()) / (sd if sd > 0 else 1.0)


def fit_value_model(X: np.ndarray, y: np.ndarray, kernel: Kernel | None = None) -> GaussianProcessRegressor:
    """The GP of ``y`` (already standardized) on ``X``; with ``kernel`` given, its
    hyperparameters are kept as they are (no refit: used to condition on pending points)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process import GaussianProcessRegressor

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        gp = GaussianProcessRegressor(kernel if kernel is not None else _kernel(X.shape[1]),
                                      optimizer=None if kernel is not None else "fmin_l_bfgs_b",
                                      random_state=0)
        return gp.fit(X, y)


def expected_improvement(mu: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    """E[max(f - best, 0)] under N(mu, sd^2), per point."""
    sd = np.maximum(sd, 1e-9)
    z = (mu - best) / sd
    cdf = 0.5 * np.vectorize(math.erfc)(-z / math.sqrt(2))
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return (mu - best) * cdf + sd * pdf


class FailureModel:
    """P(a point does not fail for a reason of its own), see module docstring."""

    def __init__(self, X: np.ndarray, failed: np.ndarray) -> None:
        self.model: LogisticRegression | None = None
        if 0 < failed.sum() < len(failed):
            from sklearn.linear_model import LogisticRegression

            self.model = LogisticRegression(C=1.0).fit(X, failed.astype(int))

    def p_ok(self, X: np.ndarray) -> np.ndarray:
        if self.model is None:
            return np.ones(len(X))
        return self.model.predict_proba(X)[:, 0]
