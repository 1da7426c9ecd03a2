"""Per-launch time of a list of launches replayed back to back from one CUDA graph: what
scripts/gemv_graph.py (the GEMV through Python) and scripts/read_ceiling.py (plain read kernels)
time the same way. The scripts import it from their own folder (`python3 scripts/NAME.py` puts
scripts/ first on sys.path)."""
import statistics

import torch


def ev():
    return torch.cuda.Event(enable_timing=True)


def graph_us(gos, reps):
    """Captures `gos` (callables that each enqueue one launch on the current stream) into one
    graph after a warm-up pass on a side stream, replays it reps + 2 times and returns the median
    and the least per-launch time in microseconds of the last `reps` replays."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for g in gos:
            g()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for g in gos:
            g()
    ts = []
    for i in range(reps + 2):
        s, e = ev(), ev()
        s.record()
        graph.replay()
        e.record()
        e.synchronize()
        if i >= 2:
            ts.append(s.elapsed_time(e) * 1e3 / len(gos))
    ts.sort()
    return statistics.median(ts), ts[0]
