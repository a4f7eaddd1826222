"""The settings panel: models (verifier, drafter, draft, device, dtype) and generation settings.

It edits an `app.settings.Settings` in place and says what changed: `models_changed` when a field that
needs a reload changed (the Load button lights up), `changed` for everything else (applies to the
next reply). The doctor's verdict sits right under the draft selector, in words.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPlainTextEdit,
    QPushButton,
    QRadioButton,
    QScrollArea,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.settings import PANEL_MAX, TEMPERATURE_MAX, Settings
from specdec_core.defaults import GAMMA_CEILING, HYBRID, MODEL, PROMPT_LOOKUP, USES_DRAFT
from specdec_core.defaults import VERIFIER as DEFAULT_VERIFIER

EMBEDDED_LABEL = " (embedded)"
NOTE_SEPARATOR = "  ·  "  # between a spec and the note the settings show beside it (cut off again by spec())


class SpecCombo(QComboBox):
    """An editable model spec: the embedded name, a folder, a .gguf file or a hub id."""

    def __init__(self, placeholder: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setEditable(True)
        self.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.lineEdit().setPlaceholderText(placeholder)
        self.setMinimumContentsLength(18)
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)

    def setEditText(self, text: str) -> None:  # noqa: N802 - Qt's name
        super().setEditText(text)
        self.lineEdit().setCursorPosition(0)  # a narrow field shows the name's start, not its end

    def spec(self) -> str:
        text = self.currentText().strip()
        if text.endswith(EMBEDDED_LABEL):
            text = text[: -len(EMBEDDED_LABEL)]
        return text.split(NOTE_SEPARATOR)[0].strip()

    def offer(self, noted: list[tuple[str, str]]) -> None:
        """Offer more specs, each with a note beside it (an offered spec already listed gets the note)."""
        self.blockSignals(True)
        typed = self.currentText()
        for spec, note in noted:
            for i in range(self.count()):
                if self.itemText(i).split(NOTE_SEPARATOR)[0] == spec:
                    self.removeItem(i)
                    break
            self.addItem(f"{spec}{NOTE_SEPARATOR}{note}")
        self.setEditText(typed)
        self.blockSignals(False)

    def set_spec(self, spec: str, recents: list[str], embedded: str | None) -> None:
        self.blockSignals(True)
        self.clear()
        items = []
        if embedded:
            items.append(embedded + EMBEDDED_LABEL)
        items += [r for r in recents if r and r != embedded]
        self.addItems(items)
        self.setEditText(spec + EMBEDDED_LABEL if embedded and spec == embedded else spec)
        self.blockSignals(False)


def _browse_row(combo: SpecCombo, parent: QWidget) -> QWidget:
    """The spec combo and one compact "…" button that offers a model folder or a GGUF file."""
    w = QWidget()
    lay = QHBoxLayout(w)
    lay.setContentsMargins(0, 0, 0, 0)
    lay.setSpacing(4)
    combo.setMinimumContentsLength(6)
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    lay.addWidget(combo, 1)
    browse = QToolButton()
    browse.setText("…")
    browse.setToolTip("Choose a local model folder (transformers format) or a GGUF file")
    browse.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
    menu = QMenu(browse)

    def pick_folder() -> None:
        path = QFileDialog.getExistingDirectory(parent, "Model folder")
        if path:
            combo.setEditText(path)

    def pick_gguf() -> None:
        path, _ = QFileDialog.getOpenFileName(parent, "GGUF model", "", "GGUF models (*.gguf)")
        if path:
            combo.setEditText(path)

    menu.addAction("Model folder…", pick_folder)
    menu.addAction("GGUF file (converted once, then cached)…", pick_gguf)
    browse.setMenu(menu)
    lay.addWidget(browse)
    return w


def stop_sequences(text: str) -> list[str]:
    """The stop sequences typed one per line, "\\n" standing for a line break inside one."""
    return [line.replace("\\n", "\n") for line in text.splitlines() if line]


def stops_text(sequences: list[str]) -> str:
    return "\n".join(q.replace("\n", "\\n") for q in sequences)


class SettingsPanel(QScrollArea):
    changed = Signal()
    models_changed = Signal()
    load_requested = Signal()

    def __init__(self, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.settings = settings
        self.dirty = False  # model settings changed since the pair was loaded
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        inner = QWidget()
        outer = QVBoxLayout(inner)
        outer.setContentsMargins(6, 6, 6, 6)
        outer.addWidget(self._build_models())
        outer.addWidget(self._build_generation())
        outer.addStretch(1)
        self.setWidget(inner)
        self.refresh()
        self._connect_edits()

    def _build_models(self) -> QGroupBox:
        """Which pair: the verifier, who drafts and with what, the device and dtype; and Load models."""
        models = QGroupBox("Models")
        form = QFormLayout(models)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)  # a narrow dock: fields under their labels
        self.verifier = SpecCombo("embedded name, folder, .gguf or hub id")
        form.addRow("Verifier", _browse_row(self.verifier, self))
        form.addRow("Drafter", self._build_drafter_choice())
        self.draft = SpecCombo("draft: folder, .gguf or hub id")
        self.draft_row = _browse_row(self.draft, self)
        form.addRow("Draft", self.draft_row)
        self.draft_tokens = QSpinBox()
        self.draft_tokens.setRange(0, 16)
        self.draft_tokens.setSpecialValueText("γ")
        self.draft_tokens.setToolTip("With both: at most this many tokens from the draft model in a round where "
                                     "prompt lookup finds nothing (γ: as many as gamma). A draft whose later "
                                     "tokens are rarely accepted pays best with 1.")
        form.addRow("Draft tokens", self.draft_tokens)
        # Rows of text span the panel: in the field's column alone a narrow dock wrapped them a few words a line.
        form.addRow(self._build_found_pair())
        self.verdict = QLabel("")
        self.verdict.setWordWrap(True)
        self.verdict.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form.addRow(self.verdict)
        self.device = QComboBox()
        self.device.addItems(["auto", "cpu", "cuda", "mps"])
        self.dtype = QComboBox()
        self.dtype.addItems(["auto", "float32", "bfloat16", "float16"])
        form.addRow("Device", self.device)
        form.addRow("dtype", self.dtype)
        self.load_button = QPushButton("Load models")
        self.load_button.setToolTip("Load the models above in the background (Ctrl+L)")
        self.load_button.clicked.connect(self.load_requested)
        form.addRow("", self.load_button)
        self.pending = QLabel("Changed: these models are loaded when you send your next message, or now with "
                              "Load models. Until then replies use the pair loaded before.")
        self.pending.setObjectName("verdict_bad")
        self.pending.setWordWrap(True)
        self.pending.setVisible(False)
        form.addRow(self.pending)
        return models

    def _build_drafter_choice(self) -> QWidget:
        """Prompt lookup, a draft model, or both, stacked: three choices do not fit side by side in the panel."""
        drafter_row = QWidget()
        dl = QVBoxLayout(drafter_row)
        dl.setContentsMargins(0, 0, 0, 0)
        dl.setSpacing(2)
        self.use_lookup = QRadioButton("Prompt lookup")
        self.use_lookup.setToolTip("Draft by copying earlier text of the conversation (no draft model)")
        self.use_model = QRadioButton("Draft model")
        self.use_model.setToolTip("A small model drafts; it must share the verifier's tokenizer")
        self.use_hybrid = QRadioButton("Both (lookup first)")
        self.use_hybrid.setToolTip("Prompt lookup where the conversation has a match, the draft model elsewhere")
        group = QButtonGroup(self)
        for button in (self.use_lookup, self.use_model, self.use_hybrid):
            group.addButton(button)
            dl.addWidget(button)
        return drafter_row

    def _build_generation(self) -> QGroupBox:
        """How replies are drafted and sampled, and the chat's system prompt and stop sequences."""
        gen = QGroupBox("Generation")
        g = QFormLayout(gen)
        g.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        g.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        self.gamma = QSpinBox()
        self.gamma.setRange(1, GAMMA_CEILING)
        self.gamma.setToolTip("Tokens drafted per round (the starting length when adaptive)")
        self.adaptive = QCheckBox("adaptive")
        self.adaptive.setToolTip("Grow γ by 2 after a fully accepted round, shrink it by 1 after a rejection")
        gr = QWidget()
        grl = QHBoxLayout(gr)
        grl.setContentsMargins(0, 0, 0, 0)
        grl.addWidget(self.gamma, 1)
        grl.addWidget(self.adaptive)
        g.addRow("γ (draft length)", gr)
        self.tree = QSpinBox()
        self.tree.setRange(-1, 64)
        self.tree.setSpecialValueText("auto")
        self.tree.setSuffix(" nodes")
        self.tree.setToolTip("Draft trees: at most this many candidates checked per round in one verifier pass, "
                             "the cost model keeping what pays on this machine. 0: one chain. auto: trees when "
                             "greedy, the chain when sampling (so that a seed reproduces a reply)")
        g.addRow("Draft tree", self.tree)
        self.cutoff = QDoubleSpinBox()
        self.cutoff.setRange(0.0, 0.99)
        self.cutoff.setSingleStep(0.05)
        self.cutoff.setDecimals(2)
        self.cutoff.setSpecialValueText("off")
        self.cutoff.setToolTip("Stop drafting when the draft's top probability falls below this (0: off)")
        g.addRow("Confidence cutoff", self.cutoff)
        self._build_sampling(g)
        self.system = QPlainTextEdit()
        self.system.setPlaceholderText("This chat's system prompt (optional; always kept when old turns are "
                                       "dropped). New chats start with the last one written.")
        self.system.setToolTip("Saved with the conversation: each chat keeps its own")
        self.system.setFixedHeight(72)
        g.addRow("System", self.system)
        self.stops = QPlainTextEdit()
        self.stops.setPlaceholderText("Stop sequences, one per line (\\n for a line break): the reply ends before "
                                      "the first one it writes")
        self.stops.setFixedHeight(48)
        g.addRow("Stop at", self.stops)
        return gen

    def _build_sampling(self, g: QFormLayout) -> None:
        """How the verifier's tokens are drawn, and how long a reply may grow."""
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, TEMPERATURE_MAX)
        self.temperature.setSingleStep(0.1)
        self.temperature.setDecimals(2)
        self.temperature.setSpecialValueText("0 (greedy)")
        g.addRow("Temperature", self.temperature)
        self.top_k = QSpinBox()
        self.top_k.setRange(0, PANEL_MAX["top_k"])
        self.top_k.setSpecialValueText("off")
        g.addRow("Top-k", self.top_k)
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(0.01, 1.0)
        self.top_p.setSingleStep(0.05)
        self.top_p.setDecimals(2)
        g.addRow("Top-p", self.top_p)
        self.repetition = QDoubleSpinBox()
        self.repetition.setRange(1.0, 3.0)
        self.repetition.setSingleStep(0.05)
        self.repetition.setDecimals(2)
        self.repetition.setSpecialValueText("off")
        self.repetition.setToolTip("Make tokens already in the conversation less likely: their scores are divided by "
                                   "this (as transformers does). Draft and verifier both apply it, so speculation "
                                   "still writes exactly what the verifier alone would. 1.1–1.3 is typical.")
        g.addRow("Repetition penalty", self.repetition)
        self.max_new = QSpinBox()
        self.max_new.setRange(1, PANEL_MAX["max_new_tokens"])
        self.max_new.setSingleStep(64)
        g.addRow("Max new tokens", self.max_new)
        self.seed = QSpinBox()
        self.seed.setRange(0, PANEL_MAX["seed"])
        g.addRow("Seed", self.seed)

    def _connect_edits(self) -> None:
        """Every field's edits: a model field's mark the loaded pair stale, the others apply at once."""
        for w in (self.verifier, self.draft):
            w.editTextChanged.connect(self._models_edited)
            w.currentIndexChanged.connect(self._models_edited)
        for w in (self.device, self.dtype):
            w.currentIndexChanged.connect(self._models_edited)
        self.use_lookup.toggled.connect(self._models_edited)
        self.use_hybrid.toggled.connect(self._models_edited)
        self.draft_tokens.valueChanged.connect(self._models_edited)
        for w in (self.gamma, self.tree, self.top_k, self.max_new, self.seed):
            w.valueChanged.connect(self._edited)
        for w in (self.cutoff, self.temperature, self.top_p, self.repetition):
            w.valueChanged.connect(self._edited)
        self.adaptive.toggled.connect(self._edited)
        self.system.textChanged.connect(self._edited)
        self.stops.textChanged.connect(self._edited)

    def refresh(self) -> None:
        """Show the settings object's values (without emitting change signals)."""
        s = self.settings
        widgets = [self.verifier, self.draft, self.device, self.dtype, self.use_lookup, self.use_model,
                   self.use_hybrid, self.draft_tokens,
                   self.gamma, self.tree, self.adaptive, self.cutoff, self.temperature, self.top_k, self.top_p,
                   self.max_new, self.seed, self.system, self.repetition, self.stops]
        for w in widgets:
            w.blockSignals(True)
        self.verifier.set_spec(s.verifier, s.recent_specs, DEFAULT_VERIFIER)
        self.draft.set_spec(s.draft, s.recent_specs, None)
        if self._found:  # the found models stay on offer
            self.verifier.offer(self._found)
            self.draft.offer(self._found)
        self.device.setCurrentText(s.device)
        self.dtype.setCurrentText(s.dtype)
        self.use_lookup.setChecked(s.drafter == PROMPT_LOOKUP)
        self.use_hybrid.setChecked(s.drafter == HYBRID)
        self.use_model.setChecked(s.drafter not in (PROMPT_LOOKUP, HYBRID))
        self.draft_tokens.setValue(s.draft_tokens)
        self.gamma.setValue(s.gamma)
        self.tree.setValue(s.tree_nodes)
        self.adaptive.setChecked(s.adaptive)
        self.cutoff.setValue(s.confidence_cutoff)
        self.temperature.setValue(s.temperature)
        self.top_k.setValue(s.top_k)
        self.top_p.setValue(s.top_p)
        self.max_new.setValue(s.max_new_tokens)
        self.seed.setValue(s.seed)
        self.repetition.setValue(s.repetition_penalty)
        if self.system.toPlainText() != s.system_prompt:
            self.system.setPlainText(s.system_prompt)
        if stop_sequences(self.stops.toPlainText()) != s.stop_sequences:
            self.stops.setPlainText(stops_text(s.stop_sequences))
        for w in widgets:
            w.blockSignals(False)
        self._enable_draft_rows()

    def _models_edited(self, *_a) -> None:
        s = self.settings
        s.verifier = self.verifier.spec() or DEFAULT_VERIFIER
        s.draft = self.draft.spec()
        s.drafter = (PROMPT_LOOKUP if self.use_lookup.isChecked() else HYBRID if self.use_hybrid.isChecked()
                     else MODEL)
        s.draft_tokens = self.draft_tokens.value()
        s.device = self.device.currentText()
        s.dtype = self.dtype.currentText()
        self._enable_draft_rows()
        self.models_changed.emit()

    def _enable_draft_rows(self) -> None:
        self.draft_row.setEnabled(self.settings.drafter in USES_DRAFT)
        self.draft_tokens.setEnabled(self.settings.drafter == HYBRID)

    def _edited(self, *_a) -> None:
        s = self.settings
        s.gamma = self.gamma.value()
        s.tree_nodes = self.tree.value()
        s.adaptive = self.adaptive.isChecked()
        s.confidence_cutoff = round(self.cutoff.value(), 4)
        s.temperature = round(self.temperature.value(), 4)
        s.top_k = self.top_k.value()
        s.top_p = round(self.top_p.value(), 4)
        s.max_new_tokens = self.max_new.value()
        s.seed = self.seed.value()
        s.repetition_penalty = round(self.repetition.value(), 4)
        s.system_prompt = self.system.toPlainText()
        s.stop_sequences = stop_sequences(self.stops.toPlainText())
        self.changed.emit()

    def _build_found_pair(self) -> QWidget:
        """A pair found on this machine (app/found_offers.py), offered in one click; hidden until there is one."""
        self.found_pair_row = QWidget()
        lay = QVBoxLayout(self.found_pair_row)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        self.found_pair_label = QLabel("")
        self.found_pair_label.setWordWrap(True)
        self.found_pair_label.setObjectName("muted")
        self.use_found_pair = QPushButton("Use this pair")
        self.use_found_pair.setToolTip("Put the pair found on this machine into the settings and load it")
        self.use_found_pair.clicked.connect(self._use_found_pair)
        lay.addWidget(self.found_pair_label)
        lay.addWidget(self.use_found_pair)
        self.found_pair_row.setVisible(False)
        self._found: list[tuple[str, str]] = []  # (name, note) of each model found, kept across refresh()
        self._found_pair: tuple[str, str] | None = None
        return self.found_pair_row

    def offer_found(self, noted: list[tuple[str, str]]) -> None:
        """The models found on this machine, by the names discovery gives them, in the verifier's and the draft's
        drop-downs, each with a note (where it was found, its size)."""
        self._found = list(noted)
        self.verifier.offer(self._found)
        self.draft.offer(self._found)

    def offer_pair(self, verifier: str, draft: str, verdict: str) -> None:
        """Offer a verifier and draft found on this machine, put into the settings and loaded in one click."""
        self._found_pair = (verifier, draft)
        self.found_pair_label.setText(f"Found on this machine: {verifier} drafted by {draft} ({verdict})")
        self.found_pair_row.setVisible(True)

    def _use_found_pair(self) -> None:
        if self._found_pair is None:
            return
        verifier, draft = self._found_pair
        self.verifier.setEditText(verifier)
        self.draft.setEditText(draft)
        self.use_model.setChecked(True)
        self.load_requested.emit()

    def offer_drafts(self, candidates: list) -> None:
        """Installed models that could draft for the loaded verifier, each with its vocabulary overlap
        (draft_candidates.DraftCandidate: a draft with another tokenizer drafts through the text, cross_vocab.py)."""
        self.draft.offer([(c.spec, c.label) for c in candidates])

    def show_system(self, text: str) -> None:
        """Show the open chat's system prompt (it becomes the one new chats start with)."""
        if self.system.toPlainText() != text:
            self.system.blockSignals(True)
            self.system.setPlainText(text)
            self.system.blockSignals(False)
        self.settings.system_prompt = text

    def set_verdict(self, text: str, ok: bool | None, details: str = "") -> None:
        """The doctor's verdict in words (ok None: neutral, e.g. while loading)."""
        self.verdict.setText(text)
        self.verdict.setObjectName("verdict_ok" if ok else "verdict_bad" if ok is False else "muted")
        self.verdict.setToolTip(details)
        self.verdict.style().unpolish(self.verdict)
        self.verdict.style().polish(self.verdict)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        """As narrow as the settings can be without scrolling sideways (its vertical scroll bar included): the
        sidebar that holds the panel is never narrower, so no setting is cut off at its right edge."""
        bar = self.verticalScrollBar().sizeHint().width()
        return QSize(self.widget().minimumSizeHint().width() + bar + 2 * self.frameWidth(),
                     super().minimumSizeHint().height())

    def set_dirty(self, dirty: bool) -> None:
        """Whether the model settings differ from the pair loaded (the next message loads them first)."""
        self.dirty = dirty
        self.load_button.setText("Load models ●" if dirty else "Load models")
        self.load_button.setDefault(dirty)
        self.pending.setVisible(dirty)
