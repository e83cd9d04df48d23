"""Yardstick for benches/bootstrap.rs: times scipy.stats.bootstrap(paired=True, method='BCa') on
the data given on stdin ({"runs": [{"n", "B", "reps", "baseline", "candidate"}]}); prints JSON
{"scipy": version, "medians_ms": [...]} in the same order."""
import json
import sys
import time

import numpy as np
import scipy
from scipy import stats


def diff(b, c, axis=-1):
    return np.mean(c, axis=axis) - np.mean(b, axis=axis)


req = json.load(sys.stdin)
medians = []
for run in req["runs"]:
    b = np.asarray(run["baseline"])
    c = np.asarray(run["candidate"])
    times = []
    for k in range(run["reps"]):
        t0 = time.perf_counter()
        stats.bootstrap((b, c), diff, paired=True, vectorized=True, n_resamples=run["B"],
                        method="BCa", rng=np.random.default_rng(k))
        times.append((time.perf_counter() - t0) * 1000)
    medians.append(sorted(times)[len(times) // 2])
json.dump({"scipy": scipy.__version__, "medians_ms": medians}, sys.stdout)
