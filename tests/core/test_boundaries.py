import subprocess
import sys


def test_importing_the_core_loads_no_qt_or_pyqtgraph_and_the_engine_no_training_or_benchmark_code():
    # One fresh interpreter for both checks (each start imports torch: seconds). The engine and what it
    # needs (models, pairing, stats) never import the distillation pipeline (distill/, a top-level
    # package) or the measuring code (bench.py, its command line); then the whole core, CLI included,
    # loads no Qt.
    code = ("import sys, specdec_core, specdec_core.engine, specdec_core.pairing, specdec_core.models; "
            "bad = [m for m in sys.modules if m.split('.')[0] == 'distill' "
            "or m in ('specdec_core.bench', 'specdec_core.bench_cli', 'specdec_core.cli')]; "
            "import specdec_core.cli; "
            "bad += [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'superqt', 'app')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_command_line_modules_form_no_import_cycle():
    # cli and bench_cli share cli_options; neither imports the other at module level, and the measuring
    # library (bench.py) imports neither.
    import ast
    from pathlib import Path

    import specdec_core

    root = Path(specdec_core.__file__).parent

    def top_level_imports(name: str) -> set[str]:
        tree = ast.parse((root / f"{name}.py").read_text())
        out = set()
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module:
                out.add(node.module)
                out.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
        return out

    assert not {"specdec_core.cli", "specdec_core.bench_cli"} & top_level_imports("bench")
    assert "specdec_core.cli" not in top_level_imports("bench_cli")
    assert not {"specdec_core.cli", "specdec_core.bench", "specdec_core.bench_cli"} & top_level_imports("cli_options")
