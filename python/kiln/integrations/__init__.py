"""Plug-ins that put kiln's kernels under other libraries' models."""
