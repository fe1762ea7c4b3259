"""A causal reading of one run: what each step used, and where the failure's path starts.

:mod:`.graph` builds, per run, the graph of what each step took from earlier steps (values and names
it repeats, the call behind a tool or code result); :mod:`.reading` follows the failure signal back
through it and says, per step, whether its content is supported by its inputs.
"""

from otel_blame.attribution.causal.graph import RunGraph, build_graph
from otel_blame.attribution.causal.reading import CausalReading, read_causally

__all__ = ["CausalReading", "RunGraph", "build_graph", "read_causally"]
