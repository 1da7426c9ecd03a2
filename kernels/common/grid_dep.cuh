// Programmatic dependent launch (sm_90): a kernel launched with the host's `launch_dependent`
// may start while the kernel before it on the stream still runs; it waits here before it reads
// what earlier work wrote. Without the launch attribute both are no-ops.
#pragma once

// Blocks until the grids this one depends on have completed and their writes are visible.
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// Lets the dependent grid launch now (its CTAs still wait in grid_dependency_wait for this one).
__device__ __forceinline__ void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
