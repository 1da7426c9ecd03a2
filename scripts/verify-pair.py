#!/usr/bin/env python3
"""Compares two `kiln ... verify --json` outputs of the same suite (two binaries, or before and
after a change): the checks each ran, their counts, and every check whose verdict differs.

    python3 scripts/verify-pair.py BEFORE.json AFTER.json

A check is named by what ran (version or check kind) and its problem; its verdict is pass, fail or
skip. Errors and seeds are not compared: every run draws fresh inputs. Exits 1 if the lists of
checks or any verdict differ."""
import json
import re
import sys

# A refusal check names the element it planted the bad value at, drawn afresh each run: the
# position is not part of what was checked.
AT_ELEMENT = re.compile(r" at element \([0-9, ]*\)")


def checks(path):
    with open(path) as f:
        v = json.load(f)
    if isinstance(v, dict):
        v = v.get("outcomes", [])
    out = {}
    for o in v:
        what = o.get("version") or o.get("check") or ""
        problem = o.get("problem", o.get("case", ""))
        if isinstance(problem, dict):
            problem = json.dumps(problem, sort_keys=True)
        key = (AT_ELEMENT.sub(" at element (drawn)", what), AT_ELEMENT.sub(" at element (drawn)", str(problem)),
               str(o.get("mode", o.get("variant", ""))))
        verdict = "skip" if o.get("skipped") else ("pass" if o.get("passed") else "fail")
        # the same check twice (FP8's promotion pair) keeps both
        while key in out:
            key = key + ("again",)
        out[key] = verdict
    return out


def count(c):
    return {v: sum(1 for x in c.values() if x == v) for v in ("pass", "fail", "skip")}


a, b = checks(sys.argv[1]), checks(sys.argv[2])
print(f"before: {len(a)} checks {count(a)}")
print(f"after:  {len(b)} checks {count(b)}")
only_a = sorted(set(a) - set(b))
only_b = sorted(set(b) - set(a))
changed = sorted(k for k in set(a) & set(b) if a[k] != b[k])
for k in only_a:
    print("only before:", *k)
for k in only_b:
    print("only after: ", *k)
for k in changed:
    print(f"verdict {a[k]} -> {b[k]}:", *k)
same = not (only_a or only_b or changed)
print("same checks and verdicts" if same else "DIFFERENT")
sys.exit(0 if same else 1)
