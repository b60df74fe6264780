"""Compares two train_full runs: per-step losses (log.csv) and parameters
(safetensors). Used by test_mpi.sh and test_hosts.sh.

usage: compare_runs.py LOG_A LOG_B ST_A ST_B STEPS LOSS_TOL PARAM_TOL LABEL_B
Run A is the one-process reference; PARAM_TOL "-" checks no parameter limit.
Prints one line with the largest differences; exits non-zero past a limit.
"""
import json
import struct
import sys


def losses(path):
    rows = [l.split(",") for l in open(path).read().splitlines()[1:]]
    return {int(r[0]): float(r[2]) for r in rows}


def tensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    data = b[8 + n:]
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = struct.unpack("<%df" % ((e - s) // 4), data[s:e])
    return out


log_a, log_b, st_a, st_b, steps, loss_tol, param_tol, label_b = sys.argv[1:9]
steps, loss_tol = int(steps), float(loss_tol)
la, lb = losses(log_a), losses(log_b)
assert sorted(la) == list(range(1, steps + 1)), "one process: %d log rows" % len(la)
assert sorted(lb) == sorted(la), "%s: steps %s" % (label_b, sorted(lb))
rel = max(abs(la[s] - lb[s]) / abs(la[s]) for s in la)
ta, tb = tensors(st_a), tensors(st_b)
assert sorted(ta) == sorted(tb)
dp = max(abs(x - y) for k in ta for x, y in zip(ta[k], tb[k]))
print("losses within %.2e relative (%d steps), parameters within %.2e" % (rel, steps, dp))
assert rel <= loss_tol, "losses differ by %.3e relative (limit %g)" % (rel, loss_tol)
if param_tol != "-":
    assert dp <= float(param_tol), "parameters differ by %.3e (limit %s)" % (dp, param_tol)
