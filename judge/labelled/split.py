#!/usr/bin/env python3
"""Deterministic tuning / held-out split of labelled.jsonl.

Rerun from the repository root (or anywhere):
    python3 node/tests/judge/split.py          # rewrites node/tests/judge/split.json
    python3 node/tests/judge/split.py --check  # exits 1 if split.json differs

Pairs are split by broadcast: every pair carrying the same broadcast text goes
to the same part, so no broadcast appears in both. A greedy pass visits the groups
in an order drawn from random.Random(SEED) and puts each in the part that keeps
the held-out share of every stratum (all pairs, relevant pairs, each kind, each
kind x label) closest to HELD_OUT_FRACTION. TRIALS such orders are drawn from
the same generator and the pass with the smallest final deviation is kept, so
the result depends only on SEED and the file.
"""
import json
import os
import random
import sys
from collections import Counter, OrderedDict

SEED = 20261202
HELD_OUT_FRACTION = 0.4
TRIALS = 500

HERE = os.path.dirname(os.path.abspath(__file__))
LABELLED = os.path.join(HERE, "labelled.jsonl")
SPLIT = os.path.join(HERE, "split.json")


def strata(row):
    kind, rel = row["kind"], "rel" if row["relevant"] else "irr"
    return ["all", rel, "kind:" + kind, "kind:%s:%s" % (kind, rel)]


def compute():
    rows = [json.loads(line) for line in open(LABELLED, encoding="utf-8") if line.strip()]
    groups = OrderedDict()
    for row in rows:
        groups.setdefault(row["broadcast"], []).append(row)
    total = Counter(s for row in rows for s in strata(row))
    target = {s: HELD_OUT_FRACTION * n for s, n in total.items()}

    rng = random.Random(SEED)

    def cost(counts):
        return sum(((counts[s] - target[s]) / max(target[s], 1.0)) ** 2 for s in total)

    group_strata = [(group, Counter(s for row in group for s in strata(row))) for group in groups.values()]
    best = None
    for _ in range(TRIALS):
        order = list(group_strata)
        rng.shuffle(order)
        held = Counter()
        held_ids, tuning_ids = [], []
        for group, g in order:
            with_group = held + g
            if cost(with_group) < cost(held):
                held = with_group
                held_ids += [row["id"] for row in group]
            else:
                tuning_ids += [row["id"] for row in group]
        c = cost(held)
        if best is None or c < best[0]:
            best = (c, held_ids, tuning_ids)
    _, held_ids, tuning_ids = best
    split = {
        "seed": SEED,
        "held_out_fraction": HELD_OUT_FRACTION,
        "held_out": sorted(held_ids),
        "tuning": sorted(tuning_ids),
    }
    return rows, split


def summary(rows, split):
    by_id = {row["id"]: row for row in rows}
    for name in ("tuning", "held_out"):
        part = [by_id[i] for i in split[name]]
        rel = sum(r["relevant"] for r in part)
        kinds = Counter(r["kind"] for r in part)
        print("%-9s pairs %3d  broadcasts %3d  relevant %3d (%.1f%%)  %s" % (
            name, len(part), len({r["broadcast"] for r in part}), rel, 100.0 * rel / len(part),
            " ".join("%s=%d" % kv for kv in sorted(kinds.items()))))


def main():
    rows, split = compute()
    text = json.dumps(split, indent=1) + "\n"
    if "--check" in sys.argv:
        ok = os.path.exists(SPLIT) and open(SPLIT, encoding="utf-8").read() == text
        print("split.json is up to date" if ok else "split.json differs from a fresh computation")
        summary(rows, split)
        sys.exit(0 if ok else 1)
    with open(SPLIT, "w", encoding="utf-8") as f:
        f.write(text)
    summary(rows, split)


if __name__ == "__main__":
    main()
