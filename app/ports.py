"""What the window's controllers see of it: the state they work on and a few verbs, not its widgets.

A controller (loading, the race, the conversation's life, exports, talk mode, the dialogs) is given the main
window typed as a port, a `typing.Protocol` that names only what it uses; `MainWindow` satisfies each one
structurally. `WindowPort` here is the part most share, `RunPort` what a run is built from, and `RunReport` what a
run (app/run_controller.py) tells the controller that started it; each controller's module extends them with what it
needs besides (the chat view, the graphs, a progress bar's verbs). No port imports app/window.py, so the window and
its controllers form no import cycle, and a controller can be read, and driven, without the whole window. Qt-free.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from app.conversation import Conversation
    from app.host import Runner
    from app.session import Busy, PromptInfo, Session
    from app.settings import Settings


class StatePort(Protocol):
    """The app's state as the window holds it, and what its one engine is doing."""

    settings: Settings
    session: Session | None  # the loaded pair (None: nothing loaded yet)
    conv: Conversation  # the open conversation

    @property
    def busy(self) -> Busy:
        """What the engine is doing (Busy.IDLE is falsy)."""

    @busy.setter
    def busy(self, state: Busy) -> None: ...


class WindowPort(StatePort, Protocol):
    """The window as every controller sees it: the state, and the status line, error and info notices through
    which the user is told."""

    @property
    def closing(self) -> bool:
        """The window is closing or closed: slots keep their data and touch no widget."""

    def say(self, text: str) -> None:
        """Put `text` on the status line."""

    def show_error(self, text: str) -> None:
        """An error notice in the chat (and its first line on the status line)."""

    def show_info(self, text: str) -> None:
        """An info notice in the chat."""


class RunPort(StatePort, Protocol):
    """What a run (the reply, the race, a talk demo) is built from: the state and the prompt."""

    def prompt_messages(self, prompt: str | None = None) -> list[dict] | str:
        """The chat messages a run would send (with `prompt`, else the composer's text), or why there are none."""

    def job_runner(self) -> Runner:
        """Where a run on the session's models decodes now (app/host.py): the window's decoding process, where
        one can, else this process. May fork that process: call it on the GUI thread."""


class RunReport(Protocol):
    """What a run tells the controller that started it (the reply's, the race's), on the GUI thread, in order."""

    def run_prompt(self, info: PromptInfo) -> None:
        """The job built its prompt: how long it is, and how many old turns it left out."""

    def run_event(self, lane: str, event: object) -> None:
        """One of the job's events, once folded into `lane`'s trace (a reply's lane is run_controller.SOLE)."""

    def run_failed(self, error: BaseException) -> None:
        """The job raised (the engine refused the input, or the decoding process failed)."""

    def run_ended(self) -> None:
        """The job has ended (finished, stopped or failed): after its last event and its error."""
