"""Saved conversations (with each reply's speculation trace) in one SQLite database. Qt-free.

The conversation itself is app/conversation.py, the settings app/settings.py, the exports app/export_formats.py.

Layout under the data directory (platformdirs' user data dir, or $SPECDEC_DATA_DIR):
    conversations.sqlite3     every conversation: one row each, one row per message, one blob per trace
    conversations/<id>.json   the JSON files of versions before the database; imported once, left in place
    settings.json             the app's settings

Why SQLite (measured in docs/performance.md, "Measurements behind comments in the code"): a save
writes only the messages that changed since the last save or load, in one transaction (WAL journal: a
crash or a full disk mid-write leaves the previous state), and the sidebar reads one indexed table. Saves
run on a single writer thread, in order; `save` waits for its write, `save_in_background` does not.

Everything read back is validated (app/validate.py): a damaged row, trace or JSON file is skipped or
dropped and described in `notices`, never fatal. Data written by a newer version (a higher `format`)
opens read-only and is never overwritten; fields this version does not know are kept and written back.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from app.conversation import FORMAT_VERSION, Conversation, ConversationInfo, Message, check_id
from app.data_files import atomic_write_text, data_dir
from app.store_schema import (
    MIGRATIONS,
    SCHEMA_1,
    TABLES,
    damage_in,
    inflated,
    json_object,
    readable,
    salvage,
    table_names,
    transaction,
)
from app.validate import InvalidData, valid_text

SCHEMA_VERSION = 1  # of the database (PRAGMA user_version); store_schema.MIGRATIONS brings older ones up
DB_NAME = "conversations.sqlite3"
# Another process (a second app instance, a backup tool) may hold the write lock: each write waits this
# long for it (SQLite's busy timeout), and a write that still finds it locked is tried again.
BUSY_TIMEOUT_S = 10.0
WRITE_ATTEMPTS = 3
RECOVERED_SUFFIX = ".recovered.json"  # conversations/<id>.recovered.json: a chat the database refused at close


class StoreReadOnlyError(PermissionError):
    """A save refused: the conversation (or the whole store) was written by a newer version."""


class SaveConflict(Exception):
    """A save refused because another process (a second app instance) changed or deleted the conversation
    since this store last read or wrote it. Nothing was written; `ConversationStore.keep_both` makes the
    caller's version a conversation of its own, so that neither is lost."""

    def __init__(self, conv_id: str, title: str, deleted: bool) -> None:
        self.conv_id, self.title, self.deleted = conv_id, title, deleted
        super().__init__(f"“{title}” was {'deleted' if deleted else 'changed'} by another specdec window since "
                         "this one read it")

_UNKNOWN = object()  # a conversation this store has not read or written: no revision known


@dataclass
class _SaveJob:
    """One save, prepared on the caller's thread (a snapshot: the conversation may change right after)."""

    row: tuple  # the conversations row
    count: int  # messages now; rows at and past this position are deleted
    changed: list[tuple[tuple, bytes | None]]  # (message row, trace JSON or None)


def _fingerprint(m: Message) -> tuple:
    """Cheap identity of a message's saved state: a reply's trace grows while it streams, and may be
    replaced (regenerate), so its object, sizes and final fields are part of it."""
    t = m.trace
    trace = None if t is None else (id(t), len(t.tokens), len(t.rounds), t.stop_reason, t.error, t.baseline_tps,
                                    t.stats is None, t.verifier, t.drafter)
    return (m.role, m.content, m.created, trace, id(m.extra), len(m.extra), len(m.branches), m.branch_index)


class ConversationStore:
    """Conversations in SQLite. `save`, `load`, `list` and `delete` may be called from any one thread
    (the GUI's); writes run in order on the store's own writer thread."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else data_dir()
        self.folder = self.root / "conversations"  # JSON files of earlier versions
        self.db_path = self.root / DB_NAME
        self.notices: list[str] = []  # what opening the store skipped or refused, for the window to show
        self.recovery_reason = ""  # why the last save_or_recover wrote a recovery file
        self.read_only = False
        self.read_only_reason = ""  # why the store opened read-only, for what a refused save says
        self._read_only_mode = "mode=ro"  # how a read-only store opens the file (see _open_read_only)
        self._saved: dict[str, list[tuple]] = {}  # conversation id -> fingerprints of its stored messages
        self._pending: dict[str, ConversationInfo | None] = {}  # queued writes, for list(); None: deleted
        self._failed: set[str] = set()  # conversations whose last write failed
        # The `updated` value of each conversation's row as this store last read or wrote it: its revision. A
        # save checks it in its transaction, so a write by another process in between is a conflict, not lost.
        self._revisions: dict[str, object] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specdec-store")
        self._open()

    # -- connections --
    def _connect(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self.read_only and self.db_path.exists():
                conn = sqlite3.connect(f"{self.db_path.resolve().as_uri()}?{self._read_only_mode}", uri=True,
                                       isolation_level=None, timeout=BUSY_TIMEOUT_S)
            else:
                conn = sqlite3.connect(self.db_path, isolation_level=None, timeout=BUSY_TIMEOUT_S)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")  # durable at each checkpoint; WAL keeps it atomic
            conn.execute("PRAGMA foreign_keys=ON")
            self._local.conn = conn
        return conn

    def _open(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            try:
                conn = self._connect()
                version = conn.execute("PRAGMA user_version").fetchone()[0]
            except (sqlite3.DatabaseError, UnicodeDecodeError) as error:
                # OperationalError etc.: not a damaged file. A damaged schema can fail to decode instead.
                if isinstance(error, sqlite3.DatabaseError) and type(error) is not sqlite3.DatabaseError:
                    raise
                self._set_aside(error)
                conn = self._connect()
                version = 0
        except (OSError, sqlite3.Error) as error:
            self.read_only = True
            self.read_only_reason = str(error)
            if self._open_read_only():  # a full disk or a read-only folder: what is saved is still shown
                self.notices.append(f"Saved conversations cannot be written ({error}); they are shown read-only "
                                    "and nothing new will be saved")
                return
            self.notices.append(f"Saved conversations cannot be opened ({error}); nothing will be saved")
            self._local.conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            self._local.conn.executescript(SCHEMA_1)
            self._import_json_files(self._local.conn)  # recovery files still show, until the database is back
            return
        if version > SCHEMA_VERSION:
            self.read_only = True
            self.read_only_reason = f"it was written by a newer version of specdec (schema {version})"
            self._local.conn = None
            self.notices.append(f"{self.db_path} was written by a newer version of specdec (schema {version}); "
                                "conversations are open read-only")
            return
        if version < 0 or (version == 0 and table_names(conn) & TABLES):  # the header's version is damaged
            conn = self._recover(conn, f"its schema version reads {version}")
            version = SCHEMA_VERSION
        for target in range(version + 1, SCHEMA_VERSION + 1):
            try:  # one transaction per step: a crash leaves the previous version, never half of one
                conn.executescript(f"BEGIN IMMEDIATE;\n{MIGRATIONS[target]}\nPRAGMA user_version = {target};\n"
                                   "COMMIT;")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        damage = damage_in(conn) if version else None
        if damage:
            conn = self._recover(conn, damage)
        self._import_json_files(conn)

    def _recover(self, damaged: sqlite3.Connection, damage: str) -> sqlite3.Connection:
        """Copy what can still be read into a fresh database, keep the damaged file aside, and say what was
        recovered. A conversation whose row is gone but whose messages remain comes back untitled."""
        fresh_path = self.db_path.with_name(f"{DB_NAME}.recovering")
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(str(fresh_path) + suffix).unlink(missing_ok=True)
        fresh = sqlite3.connect(fresh_path, isolation_level=None)
        fresh.executescript(f"BEGIN;\n{SCHEMA_1}\nPRAGMA user_version = {SCHEMA_VERSION};\nCOMMIT;")
        recovered, incomplete = salvage(damaged, fresh)
        imported = readable(damaged, "SELECT * FROM imported_files")[0]
        with transaction(fresh):
            fresh.executemany("INSERT OR IGNORE INTO imported_files VALUES (?, ?, ?, ?)", imported)
        fresh.close()
        damaged.close()
        self._local.conn = None
        aside = self._move_aside()
        os.replace(fresh_path, self.db_path)
        some = f" ({incomplete} of them in part)" if incomplete else ""
        self.notices.append(f"The conversation database was damaged inside ({damage}); it was kept as {aside.name} "
                            f"and {recovered} conversation{'' if recovered == 1 else 's'}{some} recovered into a "
                            "new one")
        return self._connect()

    def _open_read_only(self) -> bool:
        """Open the existing database without writing anything (not even the WAL's shared memory file, which
        a read-only folder or a full disk refuses: `immutable`), if it can be read at all."""
        self._local.conn = None
        if not self.db_path.is_file():
            return False
        for mode in ("mode=ro", "immutable=1"):
            self._read_only_mode = mode
            try:
                conn = self._connect()
                conn.execute("SELECT count(*) FROM conversations").fetchone()
                return True
            except sqlite3.Error:
                self._local.conn = None
        return False

    def _move_aside(self) -> Path:
        """Rename the database file (and its WAL and shared-memory files) to a dated `.damaged-` name."""
        aside = self.db_path.with_name(f"{DB_NAME}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        for suffix in ("", "-wal", "-shm"):
            path = Path(str(self.db_path) + suffix)
            if path.exists():
                os.replace(path, Path(str(aside) + suffix))
        return aside

    def _set_aside(self, error: Exception) -> None:
        """A database file that is not one (damaged): keep it for recovery, start a new one."""
        self._local.conn = None
        aside = self._move_aside()
        self.notices.append(f"The conversation database could not be read ({error}); it was kept as {aside.name} "
                            "and a new one started")

    def close(self) -> None:
        """Finish queued writes and close the connections; the last to close checkpoints the WAL into the
        database file, so that a copy of the .sqlite3 file alone holds every chat."""
        try:
            self._writer.submit(self._close_connection).result()
        except RuntimeError:  # closed before
            pass
        self._writer.shutdown(wait=True)
        self._close_connection()

    def _close_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- saving --
    def save(self, conv: Conversation) -> None:
        """Write what changed in `conv` since it was last saved or loaded, and wait for it."""
        self.save_in_background(conv).result()

    def save_in_background(self, conv: Conversation) -> Future:
        """Queue the write of what changed in `conv`; the Future raises what the write raised (OSError,
        sqlite3.Error). Prepared here (O(changed messages)), written on the store's thread."""
        if self.read_only or conv.read_only:
            with self._lock:  # a refused save is a failed one: closing keeps the chat in a recovery file
                self._failed.add(conv.id)
            raise StoreReadOnlyError(f"“{conv.title}” was saved by a newer version of specdec and is read-only "
                                     "here" if conv.read_only else
                                     f"the conversation store is read-only ({self.read_only_reason})")
        if not check_id(conv.id):
            raise ValueError(f"bad conversation id {conv.id!r}")
        conv.updated = time.time()
        job = self._prepare(conv)
        info = ConversationInfo(conv.id, conv.title, conv.updated, len(conv.messages))
        with self._lock:
            self._pending[conv.id] = info
            self._saved[conv.id] = [_fingerprint(m) for m in conv.messages]
        return self._writer.submit(self._booked, conv.id, info, self._write_retrying, job)

    def save_failed(self, conv_id: str) -> bool:
        """Whether the last write of conversation `conv_id` failed (after the queued writes land)."""
        try:
            self._writer.submit(lambda: None).result()
        except RuntimeError:  # the store is closed: every queued write has landed
            pass
        with self._lock:
            return conv_id in self._failed

    def save_or_recover(self, conv: Conversation) -> Path | None:
        """Save `conv` and wait; if the database refuses it (locked past every retry, damaged, a full disk),
        write it to conversations/<id>.recovered.json instead, which the next start imports. Returns that
        file's path (None: saved). Raises OSError only when the recovery file cannot be written either.
        A conversation another process changed or deleted meanwhile is kept as a copy of its own
        (`keep_both`; the message is in `notices`)."""
        try:
            try:
                self.save(conv)
            except SaveConflict as conflict:
                self.notices.append(self.keep_both(conv, conflict))
                self.save(conv)
            return None
        except (OSError, sqlite3.Error, SaveConflict) as error:
            reason = error
        self.recovery_reason = str(reason)  # also when the recovery file fails: the caller says both reasons
        conv.updated = time.time()  # newer than its row: the next start's import takes this version
        document = conv.to_dict()
        if conv.read_only:  # a newer version's chat, never overwritten: what was added here comes back beside it
            document.update(id=Conversation().id, title=f"{conv.title} (this window's copy)")
        path = self.folder / f"{document['id']}{RECOVERED_SUFFIX}"
        atomic_write_text(path, json.dumps(document, ensure_ascii=False))
        return path

    def keep_both(self, conv: Conversation, conflict: SaveConflict) -> str:
        """After a SaveConflict: `conv` (this side's version) becomes a new conversation with its own id and a
        marked title, written whole by its next save; the other side's version (or its deletion) stays as it
        is. Returns what to tell the user."""
        with self._lock:
            self._saved.pop(conv.id, None)
            self._failed.discard(conv.id)
        conv.id = Conversation().id
        conv.title = f"{conflict.title} (this window's copy)"
        other = ("was deleted in another specdec window" if conflict.deleted else
                 "was changed in another specdec window since this one opened it")
        return (f"“{conflict.title}” {other}. Both are kept: this window's version is saved as a new "
                f"conversation, “{conv.title}”.")

    def _prepare(self, conv: Conversation) -> _SaveJob:
        saved = self._saved.get(conv.id, [])
        changed = []
        for i, m in enumerate(conv.messages):
            if i < len(saved) and saved[i] == _fingerprint(m):
                continue
            row = (conv.id, i, m.role, m.content, m.created, json.dumps({**m.extra, **m.branch_fields()},
                                                                         ensure_ascii=False))
            trace = None if m.trace is None else json.dumps(m.trace.to_dict(), ensure_ascii=False).encode()
            changed.append((row, trace))
        row = (conv.id, conv.title, conv.created, conv.updated, conv.system, FORMAT_VERSION,
               json.dumps(conv.extra, ensure_ascii=False), len(conv.messages))
        return _SaveJob(row=row, count=len(conv.messages), changed=changed)

    def _write_retrying(self, job: _SaveJob) -> None:
        """_write, tried again while another process holds the lock past the busy timeout."""
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                self._write(job)
                return
            except sqlite3.OperationalError as error:
                locked = "locked" in str(error) or "busy" in str(error)
                if not locked or attempt == WRITE_ATTEMPTS:
                    raise
                time.sleep(0.05 * attempt)

    def _write(self, job: _SaveJob, conn: sqlite3.Connection | None = None, *, replace: bool = False) -> None:
        """Write one save in one transaction. Unless `replace` (an import), the row must still be the revision
        this store last read or wrote (or absent, for a conversation this store never stored): else another
        process wrote or deleted it in between, and SaveConflict is raised with nothing written."""
        conn = conn or self._connect()
        conv_id = job.row[0]
        conn.execute("BEGIN IMMEDIATE")
        try:
            existing = conn.execute("SELECT format, updated FROM conversations WHERE id = ?", (conv_id,)).fetchone()
            if existing is not None and isinstance(existing[0], int) and existing[0] > FORMAT_VERSION:
                raise StoreReadOnlyError(f"conversation {conv_id} was saved by a newer version of specdec")
            with self._lock:
                known = self._revisions.get(conv_id, _UNKNOWN)
            if not replace and (existing[1] if existing is not None else _UNKNOWN) != known:
                raise SaveConflict(conv_id, job.row[1], deleted=existing is None)
            conn.execute(
                "INSERT INTO conversations (id, title, created, updated, system, format, extra, message_count) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET title = excluded.title, "
                "created = excluded.created, updated = excluded.updated, system = excluded.system, "
                "format = excluded.format, extra = excluded.extra, message_count = excluded.message_count",
                job.row)
            conn.execute("DELETE FROM messages WHERE conversation_id = ? AND position >= ?", (conv_id, job.count))
            for row, trace in job.changed:
                conn.execute("INSERT OR REPLACE INTO messages (conversation_id, position, role, content, created, "
                             "extra) VALUES (?, ?, ?, ?, ?, ?)", row)
                if trace is None:
                    conn.execute("DELETE FROM traces WHERE conversation_id = ? AND position = ?", row[:2])
                else:
                    conn.execute("INSERT OR REPLACE INTO traces (conversation_id, position, data) VALUES (?, ?, ?)",
                                 (*row[:2], zlib.compress(trace, 1)))
            conn.execute("COMMIT")
            with self._lock:
                self._revisions[conv_id] = job.row[3]
        except BaseException:
            if conn.in_transaction:  # SQLite rolls back by itself after some errors (a full disk)
                conn.execute("ROLLBACK")
            raise

    def _booked(self, conv_id: str, info: ConversationInfo | None, write: Callable[..., None], *args) -> None:
        """Run a queued write on the store's thread, then book its outcome (`_written`) before its Future resolves:
        a caller woken by the Future (`save`, `delete`) never lists a write that has ended as still queued. A
        done-callback ran after the caller woke, and a conversation the other window had deleted meanwhile was
        listed but could not be loaded."""
        try:
            write(*args)
        except BaseException:
            self._written(conv_id, info, failed=True)
            raise
        self._written(conv_id, info, failed=False)

    def _written(self, conv_id: str, info: ConversationInfo | None, failed: bool) -> None:
        with self._lock:
            if self._pending.get(conv_id, "gone") is info:
                del self._pending[conv_id]
            if failed:
                self._saved.pop(conv_id, None)  # unknown what is stored now: the next save writes it all
                self._failed.add(conv_id)
            else:
                self._failed.discard(conv_id)

    # -- reading --
    def load(self, conv_id: str) -> Conversation:
        """The conversation, validated: damaged messages or traces are dropped and named in `notices`.
        Raises KeyError when there is no such conversation, InvalidData when its row is unreadable."""
        self._writer.submit(lambda: None).result()  # queued writes of it land first
        return self._load_checked(conv_id)

    def load_in_background(self, conv_id: str) -> Future:
        """`load` on the store's own thread, after the queued writes (a 200-reply chat takes about a second
        to read and validate: the window stays responsive meanwhile). The Future raises what `load` raises.
        A read-only store loads here and now (its thread never opens a connection)."""
        if not self.read_only:
            return self._writer.submit(self._load_checked, conv_id)
        future: Future = Future()
        try:
            future.set_result(self.load(conv_id))
        except Exception as error:  # noqa: BLE001 - handed to the caller as the Future's exception
            future.set_exception(error)
        return future

    def _load_checked(self, conv_id: str) -> Conversation:
        try:
            return self._load(conv_id)
        except sqlite3.Error as error:  # a damaged page, a newer schema
            raise InvalidData(f"conversation {conv_id} cannot be read: {error}") from error

    def _load(self, conv_id: str) -> Conversation:
        conn = self._connect()
        row = conn.execute("SELECT id, title, created, updated, system, format, extra, document "
                           "FROM conversations WHERE id = ?", (conv_id,)).fetchone()
        if row is None:
            raise KeyError(f"no saved conversation {conv_id!r}")
        fmt = row[5]
        if isinstance(fmt, int) and fmt > FORMAT_VERSION:
            try:
                document = json.loads(row[7]) if isinstance(row[7], str) else None
            except ValueError:
                document = None
            if not isinstance(document, dict):
                raise InvalidData(f"conversation {conv_id} was saved by a newer version and cannot be read here")
            document = {**document, "id": conv_id, "format": fmt}
            return Conversation.from_dict(document)
        extra = json_object(row[6])
        head = {**extra, "id": row[0], "title": row[1], "created": row[2], "updated": row[3], "system": row[4],
                "format": fmt, "messages": []}
        traces = dict(conn.execute("SELECT position, data FROM traces WHERE conversation_id = ?", (conv_id,)))
        problems = []
        for position, role, content, created, m_extra in conn.execute(
                "SELECT position, role, content, created, extra FROM messages WHERE conversation_id = ? "
                "ORDER BY position", (conv_id,)):
            message = {**json_object(m_extra), "role": role, "content": content, "created": created}
            if position in traces:
                try:
                    message["trace"] = json.loads(inflated(traces[position]))
                except (zlib.error, ValueError, TypeError, RecursionError) as error:
                    problems.append(f"the trace of message {position + 1} was dropped ({str(error)[:120]})")
            head["messages"].append(message)
        conv = Conversation.from_dict(head)
        conv.notices[:0] = [f"“{conv.title}”: {p}" for p in problems]
        with self._lock:
            self._saved[conv.id] = [_fingerprint(m) for m in conv.messages] if not problems and \
                len(conv.messages) == len(head["messages"]) else []
            self._revisions[conv.id] = row[3]
        return conv

    def delete(self, conv_id: str) -> None:
        if self.read_only:
            raise StoreReadOnlyError("the conversation store is read-only")
        with self._lock:
            self._pending[conv_id] = None
            self._saved.pop(conv_id, None)
            self._revisions.pop(conv_id, None)

        def write() -> None:
            conn = self._connect()
            with transaction(conn):
                conn.execute("DELETE FROM conversations WHERE id = ?", (conv_id,))

        self._writer.submit(self._booked, conv_id, None, write).result()

    def list(self) -> list[ConversationInfo]:
        """Saved conversations, most recently updated first (queued saves included); bad rows skipped."""
        out: dict[str, ConversationInfo] = {}
        with self._lock:  # before the rows: a save that lands in between is then in one or the other, never neither
            pending = dict(self._pending)
        try:
            rows = self._connect().execute("SELECT id, title, updated, message_count, format FROM conversations "
                                           "ORDER BY updated DESC").fetchall()
        except sqlite3.Error as error:  # e.g. a newer schema this version cannot read
            rows = []
            notice = f"Saved conversations cannot be listed ({error})"
            if notice not in self.notices:
                self.notices.append(notice)
        for conv_id, title, updated, count, fmt in rows:
            bad = [what for what, ok in (("id", check_id(conv_id)), ("title", valid_text(title)),
                                         ("date", isinstance(updated, (int, float))),
                                         ("message count", isinstance(count, int)),
                                         ("format", isinstance(fmt, int))) if not ok]
            if bad:  # named, not hidden: the README promises that what is skipped is said
                shown = conv_id if check_id(conv_id) else repr(conv_id)[:60]
                notice = f"A saved conversation ({shown}) is not listed: its {', '.join(bad)} cannot be read"
                if notice not in self.notices:
                    self.notices.append(notice)
                continue
            out[conv_id] = ConversationInfo(conv_id, title, float(updated), count, fmt > FORMAT_VERSION)
        for conv_id, info in pending.items():
            if info is None:
                out.pop(conv_id, None)
            else:
                out[conv_id] = info
        infos = list(out.values())
        if pending:
            infos.sort(key=lambda c: c.updated if math.isfinite(c.updated) else 0.0, reverse=True)
        return infos

    # -- the JSON files of earlier versions --
    def _import_json_files(self, conn: sqlite3.Connection) -> None:
        """Import each conversations/*.json once (again only if the file changes); report what is refused."""
        try:
            paths = sorted(self.folder.glob("*.json"))
        except OSError:
            return
        if not paths:
            return
        seen = {name: (size, mtime) for name, size, mtime in
                conn.execute("SELECT name, size, mtime_ns FROM imported_files")}
        for path in paths:
            try:
                stat = path.stat()
            except OSError:
                continue
            if seen.get(path.name) == (stat.st_size, stat.st_mtime_ns):
                continue
            try:
                outcome = self._import_one(conn, path)
            except (sqlite3.Error, ValueError, RecursionError) as error:  # never a reason not to start
                outcome = f"it could not be imported ({error})"
            if outcome != "imported":
                self.notices.append(f"Skipped {path.name} in {self.folder}: {outcome}")
            with transaction(conn):
                conn.execute("INSERT OR REPLACE INTO imported_files VALUES (?, ?, ?, ?)",
                             (path.name, stat.st_size, stat.st_mtime_ns, outcome))

    def _import_one(self, conn: sqlite3.Connection, path: Path) -> str:
        try:
            text = path.read_bytes().decode("utf-8")
            document = json.loads(text)
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
            return f"it is not readable JSON ({str(error)[:120]})"
        try:
            conv = Conversation.from_dict(document)
        except (InvalidData, RecursionError) as error:
            return f"it is not a conversation ({error})"
        self.notices.extend(conv.notices)
        if path.name.endswith(RECOVERED_SUFFIX):
            self.notices.append(f"“{conv.title}” could not be saved when specdec last closed; it was kept in "
                                f"{path.name} and is back in the list")
        existing = conn.execute("SELECT updated FROM conversations WHERE id = ?", (conv.id,)).fetchone()
        if existing is not None and isinstance(existing[0], (int, float)) and existing[0] >= conv.updated:
            return "imported"  # the database holds this conversation already, as new or newer
        if conv.read_only:  # a newer format: keep the whole document, as it was
            with transaction(conn):
                conn.execute("DELETE FROM conversations WHERE id = ?", (conv.id,))
                conn.execute("INSERT INTO conversations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             (conv.id, conv.title, conv.created, conv.updated, conv.system, conv.format, "{}",
                              len(conv.messages), text))
            return "imported"
        with self._lock:
            self._saved.pop(conv.id, None)
        self._write(self._prepare(conv), conn, replace=True)
        return "imported"
