"""Errors the engine raises for bad input; the CLI and the app show their message, never a traceback."""


class SpecdecError(Exception):
    """Base class: the message is written for the user."""


class ConfigError(SpecdecError, ValueError):
    """An invalid generation setting (gamma < 1, temperature < 0, top-p outside (0, 1], ...)."""


class ModelLoadError(SpecdecError):
    """A model spec that cannot be resolved or loaded; the message names what was tried."""


class IncompatiblePairError(SpecdecError):
    """A draft that cannot be paired with the verifier; the message says exactly why."""


class PromptTooLongError(SpecdecError):
    """The prompt does not fit in the verifier's context window."""


class ChatTemplateError(SpecdecError):
    """The chat template refused the conversation (raise_exception), failed, or ran past its limits."""


class NonFiniteError(SpecdecError, RuntimeError):
    """A distribution with NaN or infinite entries: sampling from it would return garbage, not fail.

    A RuntimeError, so the engine ends the reply with it as an error (as for any failure of the model)."""


def first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
