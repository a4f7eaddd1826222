"""specdec's desktop app (PySide6). It imports specdec_core; specdec_core never imports it."""

try:  # before any signal is emitted (ours or pyqtgraph's): see _pyside_fix for the bug it works around
    from app._pyside_fix import apply as _apply_pyside_fix

    _apply_pyside_fix()
except ImportError:  # PySide6 not installed: the Qt-free modules (store, trace, session) still import
    pass
