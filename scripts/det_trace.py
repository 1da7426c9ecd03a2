#!/usr/bin/env python3
"""Where a d256 ordered deterministic backward's time goes, from the stamps of one launch.

`kiln attn bench --backward --deterministic --version V --det-trace PREFIX` writes
PREFIX-V.bin: u32 records of 16 words (bwd_fa3_d256.cu's KILN_D256_TRACE), record
(block * 2 + role) * per + it, per = group * ceil(Sq / 64). Each stamped add carries its
counter (word 0), the turn it awaited (1), the global timer (ns, low 32 bits) when its wait
for the turn began (2), when it saw the turn and issued its reduce (3), when it began to wait
for the reduce's completion (4), saw it (5), bumped the counter (6), its step began (7: a
consumer's stage full, a writer's tiles handed over), (a writer) the tiles read (15); the SM
clock at 2..6 (8..12), the SM (13) and the bumps a block makes on a counter (14: 2, one a
consumer; 1, the writer's).

Prints, in microseconds, the medians, means and 10th/90th percentiles of: the step (one
issue to the next of the same adder), the wait for the turn, the reduce's completion after
its issue, the adder's own wait for it, the hop (the previous adder's issue to this one's,
on the same counter), and how late a bump is seen (the previous adder's bump to this
adder's turn, where this adder was already waiting). Usage: det_trace.py FILE --per N.
"""
import argparse
import sys

import numpy as np

READY, TURN, CW0, CW1, BUMP, STEP, READ = 2, 3, 4, 5, 6, 7, 15


def rel(v, ref):
    """Low 32 bits of a timer as signed offsets from ref (the launch spans far under 2 s)."""
    return ((v.astype(np.int64) - ref + (1 << 31)) % (1 << 32)) - (1 << 31)


def stats(name, x, note=""):
    x = np.asarray(x, dtype=np.float64) / 1000.0
    if x.size == 0:
        print(f"{name:44s} (none)")
        return
    p10, p50, p90 = np.percentile(x, [10, 50, 90])
    print(f"{name:44s} n={x.size:8d} median {p50:7.3f} mean {x.mean():7.3f} p10 {p10:7.3f} p90 {p90:7.3f} {note}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--per", type=int, required=True, help="group * ceil(Sq / 64): records a block and role")
    a = ap.parse_args()
    raw = np.fromfile(a.file, dtype="<u4")
    if raw.size % (16 * a.per):
        sys.exit(f"{a.file}: {raw.size} words is not whole blocks of 2 x {a.per} records of 16")
    r = raw.reshape(-1, a.per, 16)  # (block * 2 + role, it, word)
    stamped = r[:, :, 14] != 0
    recs = r[stamped]
    if recs.size == 0:
        sys.exit(f"{a.file}: no stamped record")
    bumps = int(np.bincount(recs[:, 14]).argmax())
    ref = int(recs[0, TURN])
    t = {e: rel(r[:, :, e], ref) for e in (READY, TURN, CW0, CW1, BUMP, STEP, READ)}
    writer = bumps == 1
    print(f"{a.file}: {recs.shape[0]} stamped adds, {int(stamped.any(axis=1).sum())} adders x walks, "
          f"{'one writer a block (1 bump)' if writer else 'two consumer adders a block (2 bumps)'}, "
          f"{len(np.unique(recs[:, 13]))} SMs")
    # the SM clock's rate, from the turn waits long enough to read on the global timer
    clk = ((recs[:, 9].astype(np.int64) - recs[:, 8]) % (1 << 32)).astype(np.float64)
    gt = (rel(recs[:, TURN], ref) - rel(recs[:, READY], ref)).astype(np.float64)
    ok = gt > 2000
    if ok.any():
        print(f"SM clock over the turn waits: {np.median(clk[ok] / gt[ok]):.3f} GHz (median of {ok.sum()})")
    s = stamped
    span = (t[BUMP][s].max() - t[STEP][s].min()) / 1e3
    print(f"first step to last bump: {span:.1f} us")

    # per adder: consecutive stamped iterations
    both = s[:, 1:] & s[:, :-1]
    stats("step (issue to next issue)", (t[TURN][:, 1:] - t[TURN][:, :-1])[both])
    stats("step (start to next start)", (t[STEP][:, 1:] - t[STEP][:, :-1])[both])
    wait = (t[TURN] - t[READY])[s]
    stats("wait for the turn", wait, f"({(wait > 100).mean() * 100:.0f} % over 0.1 us)")
    stats("start to turn wait (the add's own work)", (t[READY] - t[STEP])[s])
    stats("issue to completion seen", (t[CW1] - t[TURN])[s])
    cw = (t[CW1] - t[CW0])[s]
    stats("the adder's wait for completion", cw, f"({(cw > 100).mean() * 100:.0f} % over 0.1 us)")
    stats("issue to its completion wait begun", (t[CW0] - t[TURN])[s])
    stats("completion seen to bump made", (t[BUMP] - t[CW1])[s])
    if writer:
        stats("issue to tiles read (stage released)", (t[READ] - t[TURN])[s])

    # the chain on each counter: order the adds by turn; the turn of an add is its rank times
    # the bumps a block, so the adds before it are those of the rank below (both consumers')
    sem = r[:, :, 0][s].astype(np.int64)
    rank = r[:, :, 1][s].astype(np.int64) // bumps
    ti, tr, tb = t[TURN][s], t[READY][s], t[BUMP][s]
    role = np.nonzero(s)[0] % 2
    key = sem * (1 << 20) + rank
    order = np.lexsort((role, key))
    key, ti, tr, tb = key[order], ti[order], tr[order], tb[order]
    # per (counter, rank): the last bump and the first issue of the block
    uk, first = np.unique(key, return_index=True)
    last_bump = np.maximum.reduceat(tb, first)
    first_issue = np.minimum.reduceat(ti, first)
    idx = np.searchsorted(uk, key)
    prev = np.searchsorted(uk, key - 1)
    has = (prev < uk.size) & (uk[np.minimum(prev, uk.size - 1)] == key - 1)
    pb = np.where(has, last_bump[np.minimum(prev, uk.size - 1)], 0)
    pi = np.where(has, first_issue[np.minimum(prev, uk.size - 1)], 0)
    waited = has & (tr < pb)
    stats("hop: previous block's issue to this issue", (ti - pi)[has])
    stats("previous block's issue to this one ready", (tr - pi)[has], "(< hop: it waited)")
    stats("bump made to turn seen (adder waiting)", (ti - pb)[waited], f"({waited.sum()} of {has.sum()} adds waited for a bump)")
    stats("previous block's issue to its last bump", (pb - pi)[has])
    _ = idx


if __name__ == "__main__":
    main()
