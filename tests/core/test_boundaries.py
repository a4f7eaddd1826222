import subprocess
import sys


def test_importing_the_core_loads_no_qt_or_pyqtgraph_and_the_engine_no_training_or_benchmark_code():
    # One fresh interpreter for both checks (each start imports torch: seconds). The engine and what it
    # needs (models, pairing, stats) never import the distillation pipeline (distill/, a top-level
    # package) or the measuring code (bench.py, its command line); then the whole core, CLI included,
    # loads no Qt.
    code = ("import sys, specdec_core, specdec_core.engine, specdec_core.pairs.pairing, specdec_core.loading.models; "
            "bad = [m for m in sys.modules if m.split('.')[0] == 'distill' "
            "or m.startswith(('specdec_core.measuring', 'specdec_core.commands'))]; "
            "import specdec_core.commands.cli; "
            "bad += [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'superqt', 'app')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _core_imports():
    """(module path, line, imported specdec_core module) for every import in specdec_core, in functions too."""
    import ast
    from pathlib import Path

    import specdec_core

    root = Path(specdec_core.__file__).parent
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "specdec_core":
                names = [node.module] if node.module != "specdec_core" else \
                    [f"specdec_core.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names if alias.name.split(".")[0] == "specdec_core"]
            else:
                continue
            for name in names:
                yield module, node.lineno, name


# The core's layers, lowest first, as each sub-package's docstring states them: a layer imports only the
# layers before it (and itself). "vocabulary" is the shared root (config, defaults, errors, events, stats).
_LAYERS = ["vocabulary", "text", "verification", "loading", "drafting", "engine", "pairs", "measuring", "commands"]
_SIBLINGS = {"text", "verification", "loading"}  # side by side: none of the three imports another


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in ("config", "defaults", "errors", "events", "stats", "assets", "__init__"):
        return "vocabulary"
    return parts[1]


def test_each_core_layer_imports_only_the_layers_below_it():
    bad = []
    for module, line, name in _core_imports():
        mine, theirs = _layer(module), _layer(name)
        if _LAYERS.index(theirs) > _LAYERS.index(mine) or (mine != theirs and {mine, theirs} <= _SIBLINGS):
            bad.append(f"{module}:{line} ({mine}) imports {name} ({theirs})")
    assert not bad, "\n".join(bad)


def test_the_layer_check_sees_an_import_upwards():
    assert _LAYERS.index(_layer("specdec_core.commands.cli")) > _LAYERS.index(_layer("specdec_core.engine"))
    assert _layer("specdec_core.drafting.trees") == "drafting" and _layer("specdec_core.events") == "vocabulary"
    found = {(module, name) for module, _, name in _core_imports()}
    assert ("specdec_core.engine.loop", "specdec_core.drafting.drafters") in found  # imports are seen at all


def _package_root(package: str):
    """The folder of `package` ("specdec_core" or "app"), as imported (the worktree's, with PYTHONPATH)."""
    import importlib
    from pathlib import Path

    return Path(importlib.import_module(package).__file__).parent


def _modules(package: str) -> dict:
    """Each module of `package` by its dotted name (a package by its own name, not `.__init__`) -> its path."""
    root = _package_root(package)
    return {".".join(p.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"): p
            for p in sorted(root.rglob("*.py"))}


def _import_graph(package: str = "specdec_core") -> dict[str, set[str]]:
    """Each module of `package` -> the modules of `package` it imports (in functions too; `from package import
    module` counts as importing that module)."""
    import ast

    paths = _modules(package)
    graph: dict[str, set[str]] = {module: set() for module in paths}
    for module, path in paths.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in paths:
                names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in paths else node.module
                         for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            graph[module] |= {name for name in names if name in paths and name != module}
    return graph


def _a_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle in `graph` (its modules in order, the first repeated at the end), or [] when none."""
    done: set[str] = set()

    def walk(module: str, path: list[str]) -> list[str]:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return []
        for imported in sorted(graph[module]):
            if found := walk(imported, [*path, module]):
                return found
        done.add(module)
        return []

    return next((found for module in sorted(graph) if (found := walk(module, []))), [])


def test_no_core_module_imports_itself_through_others():
    # Issue 54: events <-> stats and catalog <-> specs once imported each other (lazily, inside functions,
    # which this check counts too: a circle is a circle however late it closes).
    assert _a_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]  # the check sees one
    assert _a_cycle(_import_graph()) == []


def test_the_command_line_modules_form_no_import_cycle():
    # cli and bench_cli share cli_options; neither imports the other at module level.
    import ast
    from pathlib import Path

    import specdec_core

    commands = Path(specdec_core.__file__).parent / "commands"

    def top_level_imports(name: str) -> set[str]:
        out = set()
        for node in ast.parse((commands / f"{name}.py").read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module:
                out.add(node.module)
                out.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
        return out

    cli, bench_cli = "specdec_core.commands.cli", "specdec_core.commands.bench_cli"
    assert cli not in top_level_imports("bench_cli")
    assert not {cli, bench_cli} & top_level_imports("cli_options")


def test_modules_outside_the_main_window_use_only_its_public_surface():
    # The window's private members (`self._x` and `def _x` in app/window.py) are its own: the controllers,
    # talk mode, the rank dialog and main.py reach it through public names, and never probe it with
    # getattr/hasattr for an attribute it may lack.
    import ast
    from pathlib import Path

    app_dir = Path(__file__).resolve().parents[2] / "app"
    window_tree = ast.parse((app_dir / "window.py").read_text())
    (main_window,) = [n for n in window_tree.body if isinstance(n, ast.ClassDef) and n.name == "MainWindow"]
    private = {n.name for n in ast.walk(main_window) if isinstance(n, ast.FunctionDef)}
    private |= {n.attr for n in ast.walk(main_window)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"}
    private = {name for name in private if name.startswith("_") and not name.startswith("__")}
    assert {"_busy", "_closing", "_close_refused", "_build"} <= private  # the scan finds them

    def is_window(node: ast.expr) -> bool:  # how the app's modules name the main window
        return (isinstance(node, ast.Name) and node.id in ("window", "w", "win")) or \
            (isinstance(node, ast.Attribute) and node.attr in ("window", "window_"))

    bad = []
    for path in sorted(app_dir.rglob("*.py")):
        if path.name == "window.py" and path.parent == app_dir:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{path.relative_to(app_dir.parent)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Attribute) and node.attr in private and \
                    not (isinstance(node.value, ast.Name) and node.value.id == "self"):
                bad.append(f"{where} uses the window's private .{node.attr}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ("getattr", "hasattr") and node.args and is_window(node.args[0]):
                bad.append(f"{where} probes the window with {node.func.id}")
    assert not bad, "\n".join(bad)


QT_FREE_APP_MODULES = ("session", "trace", "store", "store_schema", "conversation", "data_files", "settings", "runs",
                       "export_formats", "speedup", "branches", "validate", "markdown", "ports", "host",
                       "talk/context", "talk/rounds", "talk/drafters", "toggles", "graphs/figures", "graphs/header",
                       "graphs/stats_files", "models_line")


def test_the_apps_qt_free_modules_import_no_qt_not_even_inside_a_function():
    # The work the window hands to its threads, the trace, the store, the figures and the controllers' shared
    # port run without Qt (tests and scripts use them so): they import no PySide6, pyqtgraph or superqt anywhere,
    # lazily or for type checking, and no app module but each other (the window, the workers and the widgets do).
    import ast
    from pathlib import Path

    app_dir = Path(__file__).resolve().parents[2] / "app"
    allowed = [f"app.{m.replace('/', '.')}" for m in QT_FREE_APP_MODULES]
    bad = []
    for module in QT_FREE_APP_MODULES:
        for node in ast.walk(ast.parse((app_dir / f"{module}.py").read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [f"{node.module}.{a.name}" for a in node.names]  # `from app import x`: app.x
            else:
                continue
            for name in names:
                qt = name.split(".")[0] in ("PySide6", "pyqtgraph", "superqt")
                other_app = name.startswith("app.") and not any(name == m or name.startswith(f"{m}.") for m in allowed)
                if qt or other_app:
                    bad.append(f"app/{module}.py:{node.lineno} imports {name}")
    assert not bad, "\n".join(bad)


def _long_functions(package: str, most: int = 60) -> list[str]:
    """"path:line name (n lines)" for every function of `package` over `most` lines, methods and nested ones too."""
    import ast

    root = _package_root(package)
    return [f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in sorted(root.rglob("*.py")) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > most]


def test_every_function_in_the_core_reads_in_one_screen():
    # Issue 26: no function over 60 lines in specdec_core (a long one is split into named steps).
    long = _long_functions("specdec_core")
    assert not long, "\n".join(long)


def test_every_function_in_the_app_reads_in_one_screen():
    # Issue 54: the app is held to the core's standard; a long Qt body becomes builders of a screen each.
    long = _long_functions("app")
    assert not long, "\n".join(long)


def _long_files(package: str, most: int = 600) -> list[str]:
    """"path (n lines)" for every module of `package` over `most` lines."""
    root = _package_root(package).parent
    return [f"{path.relative_to(root)} ({n} lines)"
            for path in _modules(package).values() if (n := len(path.read_text().splitlines())) > most]


def test_no_app_or_core_file_is_over_600_lines():
    # Issue 54: a file holds one role (the store, the settings, one panel of the graphs, one screen's builders,
    # the bench's measurements apart from the draft ranking's); past 600 lines it holds several.
    assert _long_files("app", most=50)  # the check sees files at all
    long = _long_files("app") + _long_files("specdec_core")
    assert not long, "\n".join(long)


# Talk mode (app/talk) sits on top of the window: it reads the window through its ports (app/ports.py) and
# runs what app/runs.py holds. Only the composition root installs it (the Talk menu), so nothing else in the
# app depends on it; the chat's race, the graphs and the host reach the shared runs in app/runs.py.
_INSTALLS_TALK = {("app.window", "app.talk")}


def _app_imports():
    """(module, imported app module) for every import in app/ (in functions too), as the import graph reads them."""
    for module, names in _import_graph("app").items():
        for name in sorted(names):
            yield module, name


def test_nothing_outside_talk_mode_imports_it():
    assert ("app.talk.race", "app.runs") in {(m, i) for m, i in _app_imports()}  # the scan sees imports at all
    bad = [f"{module} imports {name}" for module, name in _app_imports()
           if not module.startswith("app.talk") and (name == "app.talk" or name.startswith("app.talk."))
           and (module, name) not in _INSTALLS_TALK]
    assert not bad, "\n".join(bad)


def test_no_app_module_imports_itself_through_others():
    assert _a_cycle(_import_graph("app")) == []


def test_every_script_imports_names_the_core_still_has():
    """bench/, scripts/ and distill/ run outside the test suite: a name the core moved or dropped shows up
    here, not when someone runs the benchmark (bench/real_pair.py once imported a module from before the
    core was laid out by role)."""
    import ast
    import importlib
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    missing = []
    for path in sorted([*root.glob("bench/*.py"), *root.glob("scripts/*.py"), *root.glob("distill/*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("specdec_core"):
                module = importlib.import_module(node.module)
                missing += [f"{path.name}: {node.module}.{alias.name}" for alias in node.names
                            if not hasattr(module, alias.name)
                            and importlib.util.find_spec(f"{node.module}.{alias.name}") is None]
            elif isinstance(node, ast.Import):
                missing += [f"{path.name}: {alias.name}" for alias in node.names
                            if alias.name.startswith("specdec_core") and importlib.util.find_spec(alias.name) is None]
    assert not missing
