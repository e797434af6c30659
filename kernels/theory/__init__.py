"""Theory: closed forms and numerically exact predictions, one module per family, none needing torch.

* :mod:`.collapse`: underflow of the non-sink P, the threshold Δc, and the scales (dp, coverage);
  its public names are re-exported here (``pcast.theory.critical_delta``);
* :mod:`.lazy`: saturation under lazy rescaling (τ > 0);
* :mod:`.policy`: the P-policy options (sink seeding, exp2 offset, the best lazy scale);
* :mod:`.vcast`: the V-cast floor;
* :mod:`.fp4`: P in microscaled FP4;
* :mod:`.decode`: underflow under split-KV decode and the error of a partition-normalised P.

May import: :mod:`pcast.contract` and :mod:`pcast.formats`.
"""

from pcast.theory.collapse import (METHODS, ORDERS, bit_exact, coverage, critical_delta, delta_k, dp,
                                     log_threshold, optimal_scale, underflow_fraction)

__all__ = ["delta_k", "log_threshold", "critical_delta", "underflow_fraction", "dp", "coverage",
           "bit_exact", "optimal_scale", "ORDERS", "METHODS"]
