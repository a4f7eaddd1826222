import subprocess
import sys


def test_importing_the_core_loads_no_qt_or_pyqtgraph():
    code = ("import sys, specdec_core, specdec_core.engine, specdec_core.cli; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'superqt', 'app')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
