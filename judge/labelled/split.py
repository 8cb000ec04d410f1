#!/usr/bin/env python3
"""The tuning / held-out split of the labelled set, by team.

    python3 judge/labelled/split.py          # rewrites judge/labelled/split.json
    python3 judge/labelled/split.py --check  # exits 1 if split.json differs

Whole teams are held out, so no broadcast, profile or organisation of the
held-out part is ever seen in tuning: two of the first eight teams of
teams/*.jsonl, drawn with random.Random(SEED).sample, and the two teams
written after the model was fixed (FRESH), never scored before it was.
The first set (fernhill.jsonl, issue 19's) is always in the tuning part.
"""
import json
import os
import random
import sys

SEED = 20261205
HERE = os.path.dirname(os.path.abspath(__file__))
TEAMS = ["t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8"]
FRESH = ["t9", "t10", "t11", "t12"]


def compute():
    held = sorted(random.Random(SEED).sample(TEAMS, 2)) + FRESH
    tuning = ["fernhill"] + [t for t in TEAMS if t not in held]
    return json.dumps({"seed": SEED, "tuning": tuning, "held_out": held}, indent=1) + "\n"


def main():
    text = compute()
    path = os.path.join(HERE, "split.json")
    if "--check" in sys.argv:
        if open(path).read() != text:
            sys.exit("split.json differs from what split.py computes")
        return
    open(path, "w").write(text)


if __name__ == "__main__":
    main()
