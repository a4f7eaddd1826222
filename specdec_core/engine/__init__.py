"""The engine: the speculative decoding loop (`loop`) and the data a round passes between its steps (`rounds`).

Generation is a generator of typed events (events.py); the CLI, the benchmarks and the app consume it. How much
each round drafts is the planner's decision (drafting/planner.py), not the loop's. May import every layer below
it (the root vocabulary, text, verification, loading, drafting); never pairs, measuring or the command line.
"""

from specdec_core.engine.loop import Engine
from specdec_core.engine.rounds import Controls

__all__ = ["Controls", "Engine"]
