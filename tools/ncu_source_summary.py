"""Where a kernel's warps stall, per code region and per opcode, from ncu's per-instruction samples.

    ncu --section SourceCounters --section WarpStateStats -k regex:spmm_tiled -o rep python3 tools/profile_one.py ...
    ncu -i rep.ncu-rep --page source --csv --print-source sass > rep.csv
    python tools/ncu_source_summary.py [--top=N] rep.csv [more.csv ...]

Regions: prologue (before the first BAR.SYNC), main loop (to the last executed FFMA), epilogue (the
rest). Shares are of all warp-state samples of the kernel; `selected` is a warp issuing.
"""
import collections
import csv
import re
import sys


def load(path):
    rows = list(csv.reader(open(path)))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    hdr, body = rows[head], rows[head + 1:]
    ix = {h: i for i, h in enumerate(hdr)}
    reasons = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    base = int(body[0][0], 16)
    out = []
    for r in body:
        text = r[ix["Source"]].strip()
        op = re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0] if text else "?"
        out.append((int(r[0], 16) - base, text, op, int(r[ix["Instructions Executed"]] or 0),
                    {h[6:]: int(r[ix[h]] or 0) for h in reasons}))
    return out


def shares(insts, total, top=7):
    c = collections.Counter()
    for *_, s in insts:
        c.update(s)
    return f"{sum(c.values()) / total:.3f}  " + " ".join(f"{k}={v / total:.3f}" for k, v in c.most_common(top))


def summarize(path):
    insts = load(path)
    total = sum(sum(s.values()) for *_, s in insts)
    executed = sum(e for _, _, _, e, _ in insts)
    ffma = sum(e for _, _, op, e, _ in insts if op == "FFMA")
    # No block barrier before the main loop (the warp-packed kernels): the regions collapse.
    first_bar = next((a for a, t, *_ in insts if "BAR.SYNC" in t), 0)
    last_ffma = max(a for a, _, op, e, _ in insts if op == "FFMA" and e > 0)
    print(f"== {path}: {total} samples, FFMA {ffma / executed:.1%} of executed warp instructions")
    print(f"  all        {shares(insts, total, 10)}")
    for name, lo, hi in (("prologue", 0, first_bar), ("main loop", first_bar, last_ffma + 1),
                         ("epilogue", last_ffma + 1, 1 << 62)):
        print(f"  {name:10s} {shares([i for i in insts if lo <= i[0] < hi], total)}")
    by_op = collections.defaultdict(list)
    for i in insts:
        by_op[i[2]].append(i)
    ranked = sorted(by_op.items(), key=lambda kv: -sum(sum(s.values()) for *_, s in kv[1]))
    for op, group in ranked[:8]:
        print(f"  {op:10s} {shares(group, total, 5)}")
    stalled = sorted(insts, key=lambda i: -(sum(i[4].values()) - i[4].get("selected", 0)))
    print(f"  top {TOP} instructions by samples other than selected (offset, share, top reasons, SASS):")
    for a, text, op, e, st in stalled[:TOP]:
        c = collections.Counter({k: v for k, v in st.items() if k != "selected"})
        why = " ".join(f"{k}={v / total:.3f}" for k, v in c.most_common(3))
        print(f"    {a:#07x} {sum(c.values()) / total:.3f} {why:48s} {text[:70]}")


TOP = 0

if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0].startswith("--top="):
        TOP = int(args.pop(0).split("=")[1])
    for p in args:
        summarize(p)
