"""Reference intervals from scipy.stats.bootstrap for the SciPy cross-check test.

Reads {"resamples": B, "seed": S, "datasets": [{"name", "baseline": [...], "candidate": [...]}]}
on stdin; prints, per dataset, the percentile and BCa intervals of the paired mean difference and
of the relative improvement (paired=True, resampling tasks), and SciPy's version.
"""
import json
import sys
import warnings

import numpy as np
import scipy
from scipy import stats


def diff(b, c, axis=-1):
    return np.mean(c, axis=axis) - np.mean(b, axis=axis)


def rel(b, c, axis=-1):
    mb = np.mean(b, axis=axis)
    return (np.mean(c, axis=axis) - mb) / mb


def main():
    req = json.load(sys.stdin)
    out = {"scipy": scipy.__version__, "results": {}}
    for ds in req["datasets"]:
        b = np.asarray(ds["baseline"], dtype=float)
        c = np.asarray(ds["candidate"], dtype=float)
        res = {}
        for name, fn in (("diff", diff), ("relative", rel)):
            for method in ("percentile", "BCa"):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    r = stats.bootstrap(
                        (b, c), fn, paired=True, vectorized=True,
                        n_resamples=req["resamples"], method=method,
                        confidence_level=0.95, rng=np.random.default_rng(req["seed"]),
                    )
                lo, hi = float(r.confidence_interval.low), float(r.confidence_interval.high)
                res[f"{name}_{method.lower()}"] = [
                    None if np.isnan(lo) else lo,
                    None if np.isnan(hi) else hi,
                ]
                res[f"{name}_se"] = float(r.standard_error)
        out["results"][ds["name"]] = res
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
