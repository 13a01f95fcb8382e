"""Tunes a few knobs of the prefill cost models (csrc/dispatch.h, replayed by
tools/replay_prefill_heuristic.py, whose variant class V carries the knobs) on flushed plan sweeps (tools/sweep_splits.py output), by a coordinate
search on the picks' mean log time over the best timed plan, with a two-fold check over the (n, k) pairs:

    python tools/tune_prefill_heuristic.py --sweeps A.csv+A_rep.csv B.csv ... [--folds]

Sweeps joined by "+" are repetitions of one sweep: a plan's time is the minimum over them (the flushed
timings have rare positive outliers, up to 6x, in ~1% of the rows). Knobs (1.0 / 0.0 = the committed rule):
  k21      factor on kernel 21 / 22's stage time (all patterns);
  k21_N    factor on kernel 21 / 22's stage time at N:32 (per pattern);
  k21_round  microseconds per round of kernel 21 / 22's grid (pipeline fill, epilogue, block launch);
  wp_K     factor on warp-packed kernel K's cost (18, 19, 20);
  tiled    factor on the tiled kernels' cost;
  ws       factor on the workspace reduction's fixed cost.
"""
import argparse
import collections
import csv
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replay_prefill_heuristic as R  # noqa: E402

def default_knobs():
    return {"k21": 1.0, "k21_16": 1.0, "k21_12": 1.0, "k21_8": 1.0, "k21_4": 1.0, "k21_round": 0.0,
            "wp_18": 1.0, "wp_19": 1.0, "wp_20": 1.0, "tiled": 1.0, "ws": 1.0}


def variant(kn):
    """The replay's variant (replay_prefill_heuristic.V) for a flat knob dict."""
    return R.V(k21=kn["k21"], k21_round=kn["k21_round"], tiled=kn["tiled"], ws=kn["ws"],
               k21_n={N: kn[f"k21_{N}"] for N in (16, 12, 8, 4)}, wp={K: kn[f"wp_{K}"] for K in (18, 19, 20)})


def choose(m, n, k, N, kn):
    """The replay's choose_plan with the knobs applied (equal to it at default_knobs())."""
    return R.choose(m, n, k, N, variant(kn))


def load(spec):
    """{(m, n, k, N): {(kernel, split): us}}, the minimum over the '+'-joined repetitions."""
    by = collections.defaultdict(dict)
    for path in spec.split("+"):
        for r in csv.DictReader(open(path)):
            key = (int(r["m"]), int(r["n"]), int(r["k"]), int(r["N"]))
            plan = (int(r["kernel"]), int(r["split"]))
            t = float(r["ms"]) * 1000
            by[key][plan] = min(t, by[key].get(plan, t))
    return by


def score(cells, kn):
    """Mean log(pick / best) over the cells whose pick was timed, and the count of cells whose pick was not."""
    tot, cnt, miss = 0.0, 0, 0
    for (m, n, k, N), d in cells:
        p = choose(m, n, k, N, kn)
        if p not in d:
            miss += 1
            continue
        tot += math.log(d[p] / min(d.values()))
        cnt += 1
    return (tot / cnt if cnt else 0.0) + 0.05 * miss / max(1, len(cells)), miss


GRID = {"k21": [0.8, 0.85, 0.9, 0.95, 1.0, 1.05, 1.1], "k21_round": [0, 1, 2, 3, 4, 6, 8, 10],
        "ws": [0.5, 0.75, 1.0, 1.25, 1.5, 2.0]}
FACTORS = [0.85, 0.9, 0.95, 0.97, 1.0, 1.03, 1.05, 1.1, 1.15]


def search(cells, names, rounds=3):
    kn = default_knobs()
    cur, _ = score(cells, kn)
    for _ in range(rounds):
        moved = False
        for name in names:
            for v in GRID.get(name, FACTORS):
                trial = dict(kn, **{name: v})
                s, _ = score(cells, trial)
                if s < cur - 1e-6:
                    cur, kn, moved = s, trial, True
        if not moved:
            break
    return kn, cur


def report(label, cells, kn):
    g = collections.defaultdict(list)
    base = default_knobs()
    for (m, n, k, N), d in cells:
        p, p0 = choose(m, n, k, N, kn), choose(m, n, k, N, base)
        if p in d and p0 in d:
            best = min(d.values())
            g[(N, m)].append((d[p] / best, d[p0] / best))
    ge = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
    print(label)
    for key in sorted(g):
        print(f"   {key[0]:2d}:32 m={key[1]:5d}: committed/best {ge([b for _, b in g[key]]):.4f}  "
              f"tuned/best {ge([a for a, _ in g[key]]):.4f}  committed/tuned "
              f"{ge([b / a for a, b in g[key]]):.4f}  ({len(g[key])} cells)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweeps", nargs="+", required=True)
    ap.add_argument("--knobs", default="k21,k21_16,k21_12,k21_8,k21_4,k21_round,wp_18,wp_19,wp_20,tiled,ws")
    ap.add_argument("--folds", action="store_true", help="two-fold check over the (n, k) pairs")
    a = ap.parse_args()
    cells = []
    for spec in a.sweeps:
        cells += list(load(spec).items())
    names = a.knobs.split(",")
    base = default_knobs()
    s0, miss0 = score(cells, base)
    kn, s1 = search(cells, names)
    print(f"{len(cells)} cells; committed mean log(pick/best) {s0:.4f} (untimed picks {miss0}); tuned {s1:.4f}")
    print("tuned knobs:", {k: v for k, v in kn.items() if v != base[k]})
    report("in-sample", cells, kn)
    if a.folds:
        nks = sorted({(n, k) for (m, n, k, N), _ in cells})
        for f in range(2):
            train = [c for c in cells if nks.index(c[0][1:3]) % 2 != f]
            test = [c for c in cells if nks.index(c[0][1:3]) % 2 == f]
            knf, _ = search(train, names)
            print(f"fold {f}: knobs", {k: v for k, v in knf.items() if v != base[k]})
            report(f"fold {f}, held-out half", test, knf)


if __name__ == "__main__":
    main()
