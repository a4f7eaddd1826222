"""The app's settings (settings.json in the data directory): the defaults, and each saved value checked on
load against the rules the CLI and the engine use. Qt-free."""

from __future__ import annotations

import json
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path

from app.data_files import atomic_write_text, data_dir
from app.validate import InvalidData, checked_fields
from specdec_core import defaults
from specdec_core.loading import kept_files

_CHOICES = {"drafter": defaults.DRAFTER_KINDS, "dtype": ("auto", "float32", "bfloat16", "float16")}
# Fields GenerationConfig checks (ranges, finite floats): one rule for the CLI, the engine and the app.
_GENERATION_FIELDS = ("temperature", "top_k", "top_p", "seed", "max_new_tokens", "gamma", "confidence_cutoff",
                      "tree_nodes", "repetition_penalty")
# The settings panel's temperatures. A higher one in settings.json is refused at load: the panel would show it
# as 2.00 while replies sampled at it, then silently write 2.0 back at the next edit. (The CLI takes any.)
TEMPERATURE_MAX = 2.0
# The settings panel's whole-number boxes hold at most these (Qt's spin boxes hold 32-bit integers: a larger
# value in settings.json stopped the app at start with an OverflowError). A larger one is refused at load.
PANEL_MAX = {"top_k": 100_000, "max_new_tokens": 32_768, "seed": 2**31 - 1}


@dataclass
class Settings:
    # The app's defaults are the CLI's (specdec_core.defaults, torch-free): the embedded verifier with the
    # shipped draft head as a hybrid, one head token per round where prompt lookup finds nothing.
    verifier: str = defaults.VERIFIER
    draft: str = defaults.DRAFT
    drafter: str = defaults.DRAFTER  # one of defaults.DRAFTER_KINDS
    draft_tokens: int = defaults.DRAFT_TOKENS  # hybrid: the draft's tokens per round without a lookup match (0: gamma)
    device: str = "auto"
    dtype: str = "auto"
    speculate: bool = True
    gamma: int = defaults.GAMMA
    tree_nodes: int = -1  # draft trees: at most this many nodes a round; 0 a chain; -1 auto (config.TREE_AUTO)
    adaptive: bool = False
    confidence_cutoff: float = 0.0
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0  # 1: off (GenerationConfig.repetition_penalty)
    max_new_tokens: int = 256
    seed: int = 0
    system_prompt: str = ""  # the open chat's system prompt is its own (Conversation.system); this starts new ones
    stop_sequences: list[str] = field(default_factory=list)  # a reply ends at the first of these it writes
    colored: bool = True
    reading: bool = False  # reading mode: rejected drafts hidden inside replies
    code_colored: bool = False  # fenced code coloured token by token (off: plain, a thin mark at each correction)
    calibrate: bool = True  # after a load: rehearse a reply, measure the verifier alone (app/baseline_controller.py)
    recent_specs: list[str] = field(default_factory=list)
    model_dirs: list[str] = field(default_factory=list)  # searched for models besides other apps' folders

    @classmethod
    def load(cls, root: Path | None = None) -> Settings:
        """The saved settings; a missing file gives the defaults, and a damaged file or value gives the
        default for what is damaged, described in the result's `notices` (never an exception)."""
        path = (Path(root) if root else data_dir()) / "settings.json"
        s = cls()
        s.notices = []
        problems: list[str] = []
        try:  # a FIFO, a directory, a huge or deeply nested file: refused before it is read (kept_files.py)
            data = kept_files.read_bytes(path, kept_files.JSON_LIMIT)
            if data is None:
                return s
            known, _ = checked_fields(cls, _whole_numbers(cls, kept_files.parse_json(data)), finite=True,
                                      problems=problems)
        except (kept_files.DamagedFile, InvalidData) as error:
            line = kept_files.set_aside(path, str(error), "the settings are the defaults")
            s.notices.append(line.removeprefix("specdec: ").replace(" is damaged", " was damaged", 1))
            return s
        for name, value in known.items():
            problem = _setting_problem(name, value)
            if problem:
                problems.append(f"{name}: {problem}")
            else:
                setattr(s, name, value)
        if problems:
            s.notices.append(f"Some settings in {path} were invalid and use their defaults: " + "; ".join(problems))
        return s

    def save(self, root: Path | None = None) -> None:
        path = (Path(root) if root else data_dir()) / "settings.json"
        atomic_write_text(path, json.dumps(asdict(self), indent=2))


Settings.notices = ()  # type: ignore[attr-defined]  # what load() refused; set per instance by load()


def _whole_numbers(cls: type, data: object) -> object:
    """JSON has one number type: accept 4.0 for an int setting (not 4.5)."""
    if not isinstance(data, dict):
        return data
    ints = {name for name, hint in typing.get_type_hints(cls).items() if hint is int}
    return {k: int(v) if k in ints and isinstance(v, float) and v.is_integer() else v for k, v in data.items()}


def _setting_problem(name: str, value: object) -> str | None:
    if name in _CHOICES and value not in _CHOICES[name]:
        return f"{value!r} is not one of {', '.join(_CHOICES[name])}"
    if name == "draft_tokens" and isinstance(value, int) and not 0 <= value <= 128:
        return f"{value} is outside 0..128"
    if name in PANEL_MAX and isinstance(value, int) and value > PANEL_MAX[name]:
        return f"{value} is above {PANEL_MAX[name]}, the highest the settings panel offers"
    if name == "temperature" and isinstance(value, float) and value > TEMPERATURE_MAX:
        return f"{value:g} is above {TEMPERATURE_MAX:g}, the highest the settings panel offers"
    if name in _GENERATION_FIELDS:
        from specdec_core.config import GenerationConfig
        from specdec_core.errors import ConfigError

        try:
            GenerationConfig(**{name: value}, **({"gamma_max": defaults.gamma_max(value)} if name == "gamma" else {})
                             ).validate()
        except ConfigError as error:
            return str(error)
        except TypeError:
            return f"{value!r} is not valid"
    return None
