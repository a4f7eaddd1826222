"""Work around reference-counting bugs in PySide6 6.12.0 on Python 3.11 and older.

PySide6 6.12.0 drops references it does not own: `SignalInstance.emit()` returns `True` without a new
reference, and every Python slot or virtual override that Qt calls (a QTimer's timeout, a
`documentSizeChanged` handler, `resizeEvent`, ...) has its `None` result released once too often.
Python 3.12+ makes None, True and False immortal, so there the leaks are harmless; on 3.11 a GUI
bleeds thousands of references a second and the interpreter aborts within minutes with
"Fatal Python error: none_dealloc" (or bool_dealloc).

The fix is what Python 3.12 does: give these three singletons a refcount so large that no leak can
ever bring it to zero (2**50; at a million leaks a second that lasts 35 years). They are never freed
anyway, so nothing else changes. It is applied only when the probe below sees the bug. Remove this
module once the project requires PySide6 != 6.12.0.
"""

from __future__ import annotations

import ctypes
import sys

_BOOST = 1 << 50
_applied = False


def emit_steals_a_reference() -> bool:
    """True if this PySide6's `emit()` loses a reference to its return value (the 6.12.0 bug)."""
    from PySide6.QtCore import QObject, Signal

    class _Probe(QObject):
        fired = Signal()

    probe = _Probe()
    n = 16
    before = sys.getrefcount(True)
    for _ in range(n):
        result = probe.fired.emit()
        del result
    stolen = before - sys.getrefcount(True)
    for _ in range(max(0, stolen)):  # give back what the probe took
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(True))
    return stolen >= n


def apply() -> bool:
    """Make None, True and False effectively immortal if this PySide6 leaks references; True if applied."""
    global _applied
    if _applied:
        return True
    if sys.version_info >= (3, 12) or sys.implementation.name != "cpython" or hasattr(sys, "gettotalrefcount"):
        return False  # immortal singletons already (3.12+), or an object layout we don't poke at
    if not emit_steals_a_reference():
        return False
    for obj in (None, True, False):
        # ob_refcnt is the first field of every CPython object, and id() is the object's address.
        ctypes.c_ssize_t.from_address(id(obj)).value += _BOOST
    _applied = True
    return True
