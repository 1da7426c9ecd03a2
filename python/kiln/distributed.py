"""Tensor- and expert-parallel layers on kiln's kernels through torch.distributed (NCCL, one process
per GPU): kiln runs each rank's GEMMs and grouped kernels, torch.distributed moves the data."""

from __future__ import annotations

from . import _parallel_checks as checks
from . import gemm as _gemm
from . import moe as _moe

__all__ = ["TensorParallelSwiGLU", "ExpertParallelMoE", "without_multicast", "MULTICAST_OFF"]

try:
    import torch
    import torch.distributed as dist

    _Module = torch.nn.Module
except ImportError:  # the checks above work without torch; the layers need it
    torch, dist = None, None

    class _Module:  # type: ignore[no-redef]
        def __init__(self, *args, **kwargs):
            raise ImportError("kiln.distributed's layers need torch: install torch (`pip install torch`)")


# NVLink SHARP (multicast) off in NCCL, torch's symmetric memory and NVSHMEM.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def without_multicast(env) -> dict:
    """A copy of `env` (e.g. os.environ) with NVLink multicast off: set it in a process's own
    environment before `init_process_group`, and in any environment built for child processes."""
    return {**dict(env), **MULTICAST_OFF}


def _group_info(group):
    if dist is None or not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "torch.distributed is not initialised: call torch.distributed.init_process_group('nccl') "
            "(torchrun sets its environment) before building a kiln.distributed layer"
        )
    return dist.get_rank(group), dist.get_world_size(group)


def _gather_and_compare(mine: dict, group, what: str) -> None:
    """Every rank's `mine`, compared: the same ValueError on every rank when they differ."""
    per_rank = [None] * dist.get_world_size(group)
    dist.all_gather_object(per_rank, mine, group=group)
    checks.ranks_agree(per_rank, what)


class _CommTimer:
    """CUDA events around each collective, while `events` is a list (None: not timed)."""

    def __init__(self):
        self.events = None

    def __call__(self, fn):
        if self.events is None:
            return fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        end.record()
        self.events.append((start, end))
        return out

    def start(self):
        self.events = []

    def stop_ms(self) -> float:
        """Milliseconds inside collectives since `start` (synchronises on the last event)."""
        events, self.events = self.events or [], None
        if events:
            events[-1][1].synchronize()
        return sum(s.elapsed_time(e) for s, e in events)


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _dtype_key(dtype) -> str:
    """`dtype` as compared between ranks (None is the default, bf16)."""
    return "bfloat16" if dtype is None else _dtype_name(dtype)


def _float16(arg: str, dtype):
    """`dtype` (default bf16) unless kiln's kernels do not take it."""
    dtype = dtype or torch.bfloat16
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"`{arg}` is {_dtype_name(dtype)}; kiln's layers run in bfloat16 or float16")
    return dtype


class TensorParallelSwiGLU(_Module):
    """A SwiGLU MLP, down(silu(gate(x)) * up(x)), split over the ranks of `group` (default: the
    world): each rank holds ffn/world columns of gate and up (column-parallel; kiln's fused SwiGLU)
    and the matching rows of down (row-parallel; kiln's GEMM), and the partial outputs are summed
    by an all-reduce. `x` [T, hidden] must be the same on every rank; so is the output."""

    def __init__(self, hidden: int, ffn: int, group=None, dtype=None, check_inputs: bool = True):
        super().__init__()
        self.group = group
        self.rank, self.world = _group_info(group)
        # Compared before any local check, so that a bad argument raises on every rank or none.
        _gather_and_compare({"hidden": hidden, "ffn": ffn, "dtype": _dtype_key(dtype)}, group, "TensorParallelSwiGLU's config")
        self.hidden = checks.positive("hidden", hidden)
        self.ffn = ffn
        self.ffn_local = checks.divide("ffn", ffn, self.world, "the FFN width (gate and up columns, down rows)")
        self.dtype = _float16("dtype", dtype)
        self.check_inputs = check_inputs
        self.comm = _CommTimer()
        dev = torch.device("cuda", torch.cuda.current_device())
        n, k = self.ffn_local, hidden
        self.w1 = torch.nn.Parameter(torch.empty((1, n, k), dtype=self.dtype, device=dev), requires_grad=False)
        self.w3 = torch.nn.Parameter(torch.empty((1, n, k), dtype=self.dtype, device=dev), requires_grad=False)
        self.w2 = torch.nn.Parameter(torch.empty((hidden, n), dtype=self.dtype, device=dev), requires_grad=False)
        self._offsets = {}

    def load_from_full(self, w1, w3, w2):
        """This rank's share of a one-GPU layer's weights (torch's Linear layout): gate `w1` and
        up `w3` [ffn, hidden], down `w2` [hidden, ffn]. Returns self."""
        checks.full_shape("w1", w1.shape, (self.ffn, self.hidden), "the gate projection [ffn, hidden]")
        checks.full_shape("w3", w3.shape, (self.ffn, self.hidden), "the up projection [ffn, hidden]")
        checks.full_shape("w2", w2.shape, (self.hidden, self.ffn), "the down projection [hidden, ffn]")
        a, b = checks.shard(self.rank, self.world, self.ffn)
        with torch.no_grad():
            self.w1.copy_(w1[a:b].unsqueeze(0))
            self.w3.copy_(w3[a:b].unsqueeze(0))
            self.w2.copy_(w2[:, a:b])
        return self

    def _one_expert(self, rows: int):
        """Offsets [0, rows] on the GPU: the MLP is kiln's SwiGLU with one expert."""
        if rows not in self._offsets:
            self._offsets[rows] = torch.tensor([0, rows], dtype=torch.int32, device=self.w1.device)
        return self._offsets[rows]

    def local(self, x):
        """This rank's partial output (before the all-reduce)."""
        if x.dim() != 2 or x.shape[1] != self.hidden:
            raise ValueError(f"`x` has shape {tuple(x.shape)}; expected [tokens, {self.hidden}]")
        h = _moe.swiglu(x, self.w1, self._one_expert(x.shape[0]), w3=self.w3)
        return _gemm(h, self.w2.t())

    def forward(self, x):
        if self.check_inputs:
            _gather_and_compare(
                {"x.shape": tuple(x.shape), "x.dtype": _dtype_name(x.dtype)}, self.group, "TensorParallelSwiGLU's input"
            )
        y = self.local(x)
        self.comm(lambda: dist.all_reduce(y, group=self.group))
        return y


class ExpertParallelMoE(_Module):
    """A mixture-of-experts layer (Mixtral-style: softmax router, top-k, renormalised weights;
    SwiGLU experts) whose `num_experts` experts are split over the ranks of `group`: each rank
    routes its own tokens, sends each routed row to the rank that holds its expert
    (`all_to_all_single`, the counts exchanged first), runs kiln's MoE layer on its local
    experts, sends the rows back and combines them with the routing weights. kiln routes (no
    argsort, no bincount), the local layer gathers and combines in its kernels, and kiln's
    combine sums each token's rows (no index_add_). Ranks may hold different numbers of tokens;
    hidden size and dtype must agree."""

    def __init__(self, num_experts: int, hidden: int, ffn: int, top_k: int, group=None, dtype=None, check_inputs: bool = True):
        super().__init__()
        self.group = group
        self.rank, self.world = _group_info(group)
        # Compared before any local check, so that a bad argument raises on every rank or none.
        _gather_and_compare(
            {"num_experts": num_experts, "hidden": hidden, "ffn": ffn, "top_k": top_k, "dtype": _dtype_key(dtype)},
            group,
            "ExpertParallelMoE's config",
        )
        self.num_experts = num_experts
        self.local_experts = checks.divide("num_experts", num_experts, self.world, "the experts")
        self.hidden = checks.positive("hidden", hidden)
        self.ffn = checks.positive("ffn", ffn)
        self.top_k = checks.top_k(top_k, num_experts)
        self.dtype = _float16("dtype", dtype)
        self.check_inputs = check_inputs
        self.comm = _CommTimer()
        dev = torch.device("cuda", torch.cuda.current_device())
        e = self.local_experts
        self.router = torch.nn.Parameter(torch.empty((num_experts, hidden), dtype=self.dtype, device=dev), requires_grad=False)
        # gate rows 0..ffn then up rows ffn..2ffn per expert (transformers' gate_up_proj)
        self.w13 = torch.nn.Parameter(torch.empty((e, 2 * ffn, hidden), dtype=self.dtype, device=dev), requires_grad=False)
        self.w2 = torch.nn.Parameter(torch.empty((e, hidden, ffn), dtype=self.dtype, device=dev), requires_grad=False)

    def load_from_full(self, router, w13, w2):
        """This rank's experts from a one-GPU layer's weights: `router` [E, hidden], `w13`
        [E, 2 ffn, hidden] (gate rows then up rows), `w2` [E, hidden, ffn]. Returns self."""
        e, h, f = self.num_experts, self.hidden, self.ffn
        checks.full_shape("router", router.shape, (e, h), "the router [num_experts, hidden]")
        checks.full_shape("w13", w13.shape, (e, 2 * f, h), "gate then up rows [num_experts, 2 ffn, hidden]")
        checks.full_shape("w2", w2.shape, (e, h, f), "the down projections [num_experts, hidden, ffn]")
        a, b = checks.shard(self.rank, self.world, e)
        with torch.no_grad():
            self.router.copy_(router)
            self.w13.copy_(w13[a:b])
            self.w2.copy_(w2[a:b])
        return self

    def route(self, x):
        """(top_k_index [T, k] int64, top_k_weights [T, k] f32): softmax over the router's logits
        (in f32), the k largest, renormalised to sum to 1."""
        logits = torch.nn.functional.linear(x.float(), self.router.float())
        weights, index = torch.topk(torch.softmax(logits, dim=-1), self.top_k, dim=-1)
        return index, weights / weights.sum(dim=-1, keepdim=True)

    def forward(self, x):
        index, weights = self.route(x)
        return self.experts(x, index, weights)

    def experts(self, x, top_k_index, top_k_weights):
        """The expert part for given routing: `x` [T, hidden] (this rank's tokens), `top_k_index`
        [T, k] (global expert ids), `top_k_weights` [T, k]. Returns [T, hidden] in x's dtype."""
        if self.check_inputs:  # first: a rank whose input is wrong must not leave the others waiting
            _gather_and_compare(
                {"x.shape[1:]": tuple(x.shape[1:]), "x.dtype": _dtype_name(x.dtype), "top_k_index.shape[1:]": tuple(top_k_index.shape[1:])},
                self.group,
                "ExpertParallelMoE's input",
            )
        if x.dim() != 2 or x.shape[1] != self.hidden:
            raise ValueError(f"`x` has shape {tuple(x.shape)}; expected [tokens, {self.hidden}]")
        t, k = x.shape[0], self.top_k
        for name, v in (("top_k_index", top_k_index), ("top_k_weights", top_k_weights)):
            if tuple(v.shape) != (t, k):
                raise ValueError(f"`{name}` has shape {tuple(v.shape)}; expected ({t}, {k}) for {t} tokens and top_k {k}")
        if self.world == 1:
            # every expert is here: nothing to exchange, the whole layer is one kiln call (its
            # indices checked on the host as the exchange's counts would check them)
            return _moe.experts(x, self.w13, self.w2, top_k_index, top_k_weights, check_indices=self.check_inputs)
        # kiln's routing on the GPU: rows sorted by global expert, so grouped by the rank that
        # holds it; the counts come to the host for the exchange's splits (as NCCL needs them).
        r = _moe.route(top_k_index, top_k_weights, num_experts=self.num_experts)
        counts = r.counts
        counts_all = counts.tolist()
        if sum(counts_all) != t * k:
            raise ValueError(
                f"`top_k_index` holds {t * k - sum(counts_all)} indices outside 0 to {self.num_experts - 1}; "
                f"the layer has experts 0 to {self.num_experts - 1}"
            )
        recv = torch.empty_like(counts)
        self.comm(lambda: dist.all_to_all_single(recv, counts, group=self.group))
        counts_host = [counts_all[i * self.local_experts : (i + 1) * self.local_experts] for i in range(self.world)]
        recv_host = recv.view(self.world, self.local_experts).tolist()
        send_splits = [sum(c) for c in counts_host]
        recv_splits = [sum(c) for c in recv_host]
        sent = x.index_select(0, r.row_token)  # the send buffer, in expert order
        got = sent.new_empty((sum(recv_splits), self.hidden))
        self.comm(lambda: dist.all_to_all_single(got, sent, recv_splits, send_splits, group=self.group))
        y = self._local_experts(got, recv)
        back = y.new_empty((sum(send_splits), self.hidden))
        self.comm(lambda: dist.all_to_all_single(back, y, send_splits, recv_splits, group=self.group))
        # each token's k rows, weighted and summed in pair order (no index_add_)
        return _moe.combine(back, r)

    def _local_experts(self, rows, recv):
        """kiln's layer on the received rows (grouped by source rank, then by local expert): one
        pair per row, its local expert, weight 1; the routing kernel sorts them and the result
        comes back in the received order, ready for the return trip."""
        n = rows.shape[0]
        if n == 0:
            return rows.new_empty((0, self.hidden))
        e = self.local_experts
        local = torch.arange(e, device=rows.device).repeat(self.world)
        expert_of = torch.repeat_interleave(local, recv.view(-1).long(), output_size=n).view(n, 1)
        ones = torch.ones((n, 1), dtype=torch.float32, device=rows.device)
        # (one pair a row: the ordered combine copies each row back, where the atomic one would
        # zero, add into and convert an f32 [rows, hidden] accumulator for the same values)
        return _moe.experts(rows, self.w13, self.w2, expert_of, ones, combine="ordered")
