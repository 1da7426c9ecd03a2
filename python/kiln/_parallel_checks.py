"""The checks of kiln.distributed's layers, in plain Python (no torch, no GPU): a world size that
must divide a width, weights of the wrong shape, and ranks whose configs or inputs disagree."""

from __future__ import annotations


def positive(arg: str, value) -> int:
    """`value` as an int, or ValueError naming `arg` unless it is a positive integer."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{arg}` is {value!r}; it must be a positive integer")
    return value


def divide(arg: str, value: int, world: int, what: str) -> int:
    """`value // world`: the share of each rank, or ValueError naming `arg` when the world size
    does not divide it (`what` says what is split)."""
    positive(arg, value)
    positive("world size", world)
    if value % world:
        fits = [d for d in range(1, min(value, 64) + 1) if value % d == 0 and d & (d - 1) == 0]
        raise ValueError(
            f"`{arg}` is {value}, which the world size {world} does not divide: {what} is split "
            f"evenly over the ranks; run on a number of GPUs that divides it ({', '.join(map(str, fits))})"
        )
    return value // world


def top_k(value, num_experts: int) -> int:
    """`value` unless it is not between 1 and `num_experts`."""
    positive("top_k", value)
    if value > num_experts:
        raise ValueError(f"`top_k` is {value} but there are {num_experts} experts; route each token to at most {num_experts}")
    return value


def full_shape(arg: str, shape, expected: tuple, doc: str) -> None:
    """ValueError naming `arg` unless `shape` is `expected` (a full, one-GPU weight)."""
    if tuple(shape) != tuple(expected):
        raise ValueError(f"`{arg}` has shape {tuple(shape)}; expected {tuple(expected)} ({doc})")


def shard(rank: int, world: int, total: int) -> tuple[int, int]:
    """The [start, stop) of rank `rank`'s equal share of `total` (which `world` divides)."""
    n = total // world
    return rank * n, (rank + 1) * n


def disagreements(per_rank: list) -> list[str]:
    """For each key whose value differs between ranks (`per_rank[r]` is rank r's dict), one
    phrase: "`hidden`: 4096 on ranks 0, 2; 2048 on rank 1"."""
    keys: list = []
    for cfg in per_rank:
        keys.extend(k for k in cfg if k not in keys)
    out = []
    for k in keys:
        groups: dict = {}
        for r, cfg in enumerate(per_rank):
            groups.setdefault(repr(cfg.get(k)), []).append(r)
        if len(groups) > 1:
            parts = [
                f"{v} on rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}"
                for v, rs in sorted(groups.items(), key=lambda g: g[1][0])
            ]
            out.append(f"`{k}`: {'; '.join(parts)}")
    return out


def ranks_agree(per_rank: list, what: str) -> None:
    """ValueError saying what differed unless every rank's dict (`per_rank`, gathered from all
    ranks, so that every rank raises the same error) is the same; `what` names the call."""
    diff = disagreements(per_rank)
    if diff:
        raise ValueError(
            f"the {len(per_rank)} ranks disagree on {what}: {' | '.join(diff)}; every rank must "
            f"build the layer with the same arguments and give it inputs of the same shape and dtype"
        )
