"""Python's cyclic garbage collector, run on the GUI thread only while a window is open.

CPython collects in whichever thread allocates past the collector's threshold. Here that is usually a
worker thread: models load and replies decode there and allocate most of the objects. A collection on a
worker finalises all cyclic garbage, including Qt objects of a closed window or an old bubble, whose
C++ destructors then run on the wrong thread. Qt does not allow that. In the app tests it deadlocked:
the loading thread was collecting and blocked inside such a destructor, holding the GIL, while the GUI
thread waited for the GIL.

So while a window is open, automatic collection is off, and a timer on the GUI thread collects
instead, by the collector's own rules. pyqtgraph, calibre and novelWriter do the same for the same
reason. The GUI waits no longer than before: a collection holds the GIL on whichever thread runs it.

A conversation read from the store is hundreds of thousands of tracked objects for 200 replies (every
token's record and its alternatives). Each young collection that found them walked them all, and so did the
next older one: 0.3-0.7 s stalls on the GUI thread (bench/open_chat.py) for records that live as long as the
chat is shown. So while one is read nothing is collected (`pause`), and once it has arrived every object
alive is frozen (`freeze`, gc.freeze): no collection walks them again. Reference counting still frees them (a
record refers to no record, so a closed chat's records go when the chat does); only cyclic garbage among the
frozen objects waits, until the next conversation is opened (`pause` thaws them) and a full collection runs,
or the window closes. (Switching between two chats eight times left none.)

What is alive before the first window opens (the modules of torch, transformers, Qt and pyqtgraph: ~400k objects)
is frozen once by `freeze_what_is_loaded`, so that no full collection walks it either. Closing the window thaws only
what `freeze` froze while it was open, so its collection walks the window's objects, not every module's.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

INTERVAL_MS = 500


class GuiThreadCollector(QObject):
    """Counts the windows that need collection pinned to the GUI thread; the first turns it on."""

    def __init__(self) -> None:
        super().__init__()
        self.users = 0
        self._restore = True  # whether automatic collection was on before the first user
        self._long_lived = 0  # objects in the oldest generation after the last full collection
        self.paused = False  # a conversation is being read: collect nothing until it has arrived
        self._froze = False  # whether `freeze` froze objects of the open window (so closing must thaw them)
        self._timer = QTimer(self)
        self._timer.setInterval(INTERVAL_MS)
        self._timer.timeout.connect(self.collect)

    @property
    def active(self) -> bool:
        return self.users > 0

    def acquire(self) -> None:
        if self.users == 0:
            self._restore = gc.isenabled()
            gc.disable()
            self._timer.start()
        self.users += 1

    def release(self) -> None:
        if self.users == 0:
            return
        self.users -= 1
        if self.users == 0:
            self._timer.stop()
            self.paused = False
            if self._froze:  # the window's own objects are among the frozen: thawed, so that they are collected
                gc.unfreeze()
                self._froze = False
            gc.collect()  # here, on the GUI thread, before any other thread may collect again
            if self._restore:
                gc.enable()

    def pause(self) -> None:
        """Collect nothing until `freeze`: long-lived records are being made (a conversation is read). Thaws
        what the last freeze kept, so that the collector sees the previous chat's objects again."""
        gc.unfreeze()
        self.paused = True

    def freeze(self) -> None:
        """Collect again, and never walk the objects alive now (the conversation just read among them)."""
        gc.freeze()
        self._froze = self.active
        self.paused = False
        self._long_lived = 0  # the old generation is now only what comes after: full collections are cheap again

    def collect(self) -> int | None:
        """Collect the oldest generation whose count passed its threshold; which one, or None (also while
        paused).

        gc.get_count() counts allocations since the last young collection, and for the older
        generations the collections of the next younger one: the counts CPython itself compares with
        gc.get_threshold() to choose what to collect.
        """
        counts, thresholds = gc.get_count(), gc.get_threshold()
        if self.paused or counts[0] <= thresholds[0]:
            return None
        generation = 0
        for older in (1, 2):
            if counts[older] > thresholds[older]:
                generation = older
        # With a model loaded a full collection walks ~400k objects (0.2-0.4 s on a 2-core laptop CPU:
        # a visible stall). Like CPython, make one only once the oldest generation has grown by a
        # quarter since the last one.
        if generation == 2 and len(gc.get_objects(2)) < self._long_lived * 5 // 4:
            generation = 1
        gc.collect(generation)
        if generation == 2:
            self._long_lived = len(gc.get_objects(2))
        return generation


_collector: GuiThreadCollector | None = None


def freeze_what_is_loaded() -> None:
    """Before the first window opens: collect, then freeze every object alive (the imported modules' mostly), so
    that no later collection walks them. Garbage made of them later is never collected: only what lives as long as
    the process may be here."""
    gc.collect()
    gc.freeze()


def collector() -> GuiThreadCollector:
    """The process's collector (created on first use, which must be on the GUI thread)."""
    global _collector
    if _collector is None:
        _collector = GuiThreadCollector()
    return _collector
