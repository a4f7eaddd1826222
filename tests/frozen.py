"""What the tests keep frozen from Python's cyclic collector (app/gc_pin.py does the same in the app), shared by
tests/conftest.py and tests/app/conftest.py (torch-free)."""

from __future__ import annotations

import gc

REFREEZE_AT = 100_000  # objects the collector walks, past which what is alive after a test is frozen too

# Whether anything (a window closing, a chat opened: app/gc_pin.py) thawed the frozen objects since this file last
# froze them. Asked after every test; gc.get_freeze_count() would walk every frozen object to answer (~30 ms for the
# ~450k objects of the modules), 30 s over a suite.
_thawed = True
_unfreeze = gc.unfreeze


def _unfreeze_and_note() -> None:
    global _thawed
    _thawed = True
    _unfreeze()


gc.unfreeze = _unfreeze_and_note


def freeze_what_is_alive() -> None:
    """Collect, then freeze every object alive (app/gc_pin.py freeze_what_is_loaded, without needing Qt)."""
    global _thawed
    gc.collect()
    gc.freeze()
    _thawed = False


def refreeze_if_needed(*, collect: bool) -> None:
    """After a test: where something thawed the frozen objects, or the collector's oldest generation has grown past
    REFREEZE_AT, collect and freeze what is alive; else collect only if asked. One walk over what is alive, however
    many fixtures ask (each full collection of thawed modules walks ~450k objects: 0.25 s)."""
    if _thawed or len(gc.get_objects(2)) > REFREEZE_AT:
        freeze_what_is_alive()
    elif collect:
        gc.collect()
