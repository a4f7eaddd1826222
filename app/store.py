"""Saved conversations (with each reply's speculation trace), app settings, and exports. Qt-free.

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

import html
import json
import math
import os
import sqlite3
import tempfile
import threading
import time
import typing
import uuid
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

from app.trace import MAPPED_MARK, MAPPED_NOTE, ReplyTrace, RoundRecord, TokenRecord, draft_figure
from app.validate import InvalidData, checked_fields, valid_text
from specdec_core import defaults
from specdec_core.events import TokenState
from specdec_core.loading import kept_files

FORMAT_VERSION = 1  # of one conversation (JSON export and rows); a higher one is read-only here
SCHEMA_VERSION = 1  # of the database (PRAGMA user_version); migrations below bring older ones up
DB_NAME = "conversations.sqlite3"
# Another process (a second app instance, a backup tool) may hold the write lock: each write waits this
# long for it (SQLite's busy timeout), and a write that still finds it locked is tried again.
BUSY_TIMEOUT_S = 10.0
WRITE_ATTEMPTS = 3
RECOVERED_SUFFIX = ".recovered.json"  # conversations/<id>.recovered.json: a chat the database refused at close
ROLES = ("user", "assistant", "system")


def data_dir() -> Path:
    env = os.environ.get("SPECDEC_DATA_DIR")
    if env:
        return Path(env)
    from platformdirs import user_data_dir

    return Path(user_data_dir("specdec", appauthor=False))


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


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


# ---- conversations ------------------------------------------------------------------------------

@dataclass
class Message:
    role: str  # "user" | "assistant"
    content: str
    trace: ReplyTrace | None = None  # assistant replies only
    created: float = field(default_factory=time.time)
    extra: dict = field(default_factory=dict, compare=False, repr=False)  # fields a newer version wrote
    # A regenerated reply: the conversation's other versions from this reply on (app/branches.py), and
    # which of all of them this one is. Saved inside the message's `extra` column, so older versions keep them.
    branches: list[list[Message]] = field(default_factory=list)
    branch_index: int = 0

    def to_dict(self) -> dict:
        d = {**self.extra, "role": self.role, "content": self.content, "created": self.created}
        if self.trace is not None:
            d["trace"] = self.trace.to_dict()
        d.update(self.branch_fields())
        return d

    def branch_fields(self) -> dict:
        if not self.branches:
            return {}
        return {"branches": [[m.to_dict() for m in version] for version in self.branches],
                "branch_index": self.branch_index}

    @classmethod
    def from_dict(cls, d: object, problems: list[str] | None = None) -> Message:
        """Validated; InvalidData when `d` is not a message at all (a bad trace is only dropped)."""
        problems = [] if problems is None else problems
        known, unknown = checked_fields(cls, d, skip=("trace", "extra", "branches"), finite=True, problems=problems)
        if known.get("role") not in ROLES:
            raise InvalidData(f"a message needs a role ({', '.join(ROLES)})")
        trace = None
        if isinstance(d, dict) and d.get("trace"):
            try:
                trace = trace_from_dict(d["trace"])
            except InvalidData as error:
                problems.append(f"a reply's trace was dropped ({error})")
        branches = []
        for version in d.get("branches", []) if isinstance(d, dict) and isinstance(d.get("branches"), list) else []:
            try:
                if not isinstance(version, list) or not version:
                    raise InvalidData("it is not a list of messages")
                branches.append([cls.from_dict(m, problems) for m in version])
            except InvalidData as error:
                problems.append(f"an earlier version of a reply was dropped ({error})")
        index = min(max(known.get("branch_index", 0), 0), len(branches))
        return cls(role=known["role"], content=known.get("content", ""), trace=trace,
                   created=known.get("created", 0.0), extra=unknown, branches=branches, branch_index=index)


@dataclass
class Conversation:
    id: str = field(default_factory=lambda: time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6])
    title: str = "New chat"
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    system: str = ""
    messages: list[Message] = field(default_factory=list)
    # Not part of the conversation's content:
    format: int = field(default=FORMAT_VERSION, compare=False, repr=False)
    extra: dict = field(default_factory=dict, compare=False, repr=False)  # fields a newer version wrote
    read_only: bool = field(default=False, compare=False, repr=False)  # written by a newer version
    notices: list[str] = field(default_factory=list, compare=False, repr=False)  # what loading dropped

    def chat_messages(self) -> list[dict]:
        """What the models see: roles and texts (a reply's text is its committed tokens)."""
        return [{"role": m.role, "content": m.content} for m in self.messages if m.content or m.role == "user"]

    def auto_title(self) -> None:
        if self.title == "New chat":
            first = next((m.content for m in self.messages if m.role == "user" and m.content.strip()), "")
            if first:
                line = " ".join(first.split())
                self.title = line[:48] + ("…" if len(line) > 48 else "")

    def full_title(self) -> str:
        """The title as exports write it: an automatic title cut short with "…" is its first message whole."""
        if self.title.endswith("…"):
            first = next((m.content for m in self.messages if m.role == "user" and m.content.strip()), "")
            line = " ".join(first.split())
            if len(line) >= len(self.title) and line.startswith(self.title[:-1]):
                return line
        return self.title

    def to_dict(self) -> dict:
        return {**self.extra, "format": max(self.format, FORMAT_VERSION), "id": self.id, "title": self.title,
                "created": self.created, "updated": self.updated, "system": self.system,
                "messages": [m.to_dict() for m in self.messages]}

    @classmethod
    def from_dict(cls, d: object) -> Conversation:
        """Validated. InvalidData when `d` is not a conversation; a bad message or trace is dropped and
        described in `notices`. A newer format is read as far as it goes and marked read-only."""
        problems: list[str] = []
        known, unknown = checked_fields(cls, d, skip=("messages", "read_only", "notices", "extra"), finite=True,
                                        problems=problems)
        if not check_id(known.get("id")):
            raise InvalidData("it has no valid id")
        fmt = known.get("format", 1)
        if fmt < 1:
            raise InvalidData(f"unknown format {fmt}")
        raw_messages = d.get("messages", []) if isinstance(d, dict) else []
        if not isinstance(raw_messages, list):
            raise InvalidData("its messages are not a list")
        messages = []
        for i, m in enumerate(raw_messages):
            try:
                messages.append(Message.from_dict(m, problems))
            except InvalidData as error:
                problems.append(f"message {i + 1} was dropped ({error})")
        conv = cls(id=known["id"], title=known.get("title", "Untitled"), created=known.get("created", 0.0),
                   updated=known.get("updated", 0.0), system=known.get("system", ""), messages=messages,
                   format=fmt, extra=unknown)
        conv.notices = [f"“{conv.title}”: {p}" for p in problems]
        if fmt > FORMAT_VERSION:
            conv.read_only = True
            conv.notices.insert(0, f"“{conv.title}” was saved by a newer version of specdec (format {fmt}); "
                                   "it is open read-only, so nothing of it is lost")
        return conv


def check_id(conv_id: object) -> bool:
    return (isinstance(conv_id, str) and 0 < len(conv_id) <= 200 and valid_text(conv_id)
            and not any(c in conv_id for c in "/\\\0") and not conv_id.startswith("."))


def trace_from_dict(data: object) -> ReplyTrace:
    """A ReplyTrace from JSON, every field checked; records with bad fields are dropped."""
    problems: list[str] = []
    known, _ = checked_fields(ReplyTrace, data, skip=("tokens", "rounds"), problems=problems)
    assert isinstance(data, dict)
    tokens = [TokenRecord(**r) for r in _records(TokenRecord, data.get("tokens", []))]
    rounds = [RoundRecord(**r) for r in _records(RoundRecord, data.get("rounds", []))]
    trace = ReplyTrace(**known, tokens=tokens, rounds=rounds)
    try:
        trace.summary()  # reads the stats dict
    except (TypeError, ValueError, AttributeError, ZeroDivisionError):
        trace.stats = None
    return trace


_UNKNOWN = object()  # a conversation this store has not read or written: no revision known
_REQUIRED: dict[type, tuple[str, ...]] = {}


def _records(cls: type, items: object) -> list[dict]:
    if not isinstance(items, list):
        raise InvalidData(f"{cls.__name__} records are not a list")
    required = _REQUIRED.setdefault(cls, tuple(f.name for f in fields(cls)
                                                if f.default is MISSING and f.default_factory is MISSING))
    out = []
    for item in items:
        known, _ = checked_fields(cls, item)
        if all(name in known for name in required) and _plausible(known):
            out.append(known)
    if len(out) < len(items):
        raise InvalidData(f"{len(items) - len(out)} of {len(items)} {cls.__name__} records are damaged")
    return out


_STATES = frozenset(state.value for state in TokenState)
_MAX_COUNT = 4096  # draft tokens per round and the like: the graphs size their buffers by these


def _plausible(record: dict) -> bool:
    """Values a record can really have: counts and indices are small and not negative (the graphs grow a
    histogram to the largest γ they see), states are TokenState values."""
    for key, value in record.items():
        if isinstance(value, int) and not isinstance(value, bool) and key != "token_id":
            if not 0 <= value <= (_MAX_COUNT if key in ("drafted", "accepted", "gamma", "position") else 10**9):
                return False
    if record.get("state", "accepted") not in _STATES or record.get("emitted_state", "accepted") not in _STATES:
        return False
    return not ("accepted" in record and "drafted" in record and record["accepted"] > record["drafted"])


@dataclass(frozen=True)
class ConversationInfo:
    id: str
    title: str
    updated: float
    messages: int
    read_only: bool = False


# ---- the database -------------------------------------------------------------------------------

_SCHEMA_1 = """
CREATE TABLE conversations (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    system TEXT NOT NULL,
    format INTEGER NOT NULL,
    extra TEXT NOT NULL,            -- JSON object: fields this version does not know
    message_count INTEGER NOT NULL,
    document TEXT                   -- a newer format's whole JSON document, kept as it was
);
CREATE INDEX conversations_by_updated ON conversations (updated DESC);
CREATE TABLE messages (
    conversation_id TEXT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    created REAL NOT NULL,
    extra TEXT NOT NULL,
    PRIMARY KEY (conversation_id, position)
) WITHOUT ROWID;
CREATE TABLE traces (               -- apart from messages: the sidebar and a reopened chat read text first
    conversation_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    data BLOB NOT NULL,             -- zlib-compressed JSON of ReplyTrace.to_dict()
    PRIMARY KEY (conversation_id, position),
    FOREIGN KEY (conversation_id, position) REFERENCES messages ON DELETE CASCADE
) WITHOUT ROWID;
CREATE TABLE imported_files (       -- JSON files of earlier versions, imported (or refused) once each
    name TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    outcome TEXT NOT NULL
);
"""

# Migration n brings a database from user_version n - 1 to n, inside one transaction.
_MIGRATIONS: dict[int, str] = {1: _SCHEMA_1}


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
            self._local.conn.executescript(_SCHEMA_1)
            self._import_json_files(self._local.conn)  # recovery files still show, until the database is back
            return
        if version > SCHEMA_VERSION:
            self.read_only = True
            self.read_only_reason = f"it was written by a newer version of specdec (schema {version})"
            self._local.conn = None
            self.notices.append(f"{self.db_path} was written by a newer version of specdec (schema {version}); "
                                "conversations are open read-only")
            return
        if version < 0 or (version == 0 and _table_names(conn) & _TABLES):  # the header's version is damaged
            conn = self._recover(conn, f"its schema version reads {version}")
            version = SCHEMA_VERSION
        for target in range(version + 1, SCHEMA_VERSION + 1):
            try:  # one transaction per step: a crash leaves the previous version, never half of one
                conn.executescript(f"BEGIN IMMEDIATE;\n{_MIGRATIONS[target]}\nPRAGMA user_version = {target};\n"
                                   "COMMIT;")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        damage = self._damage(conn) if version else None
        if damage:
            conn = self._recover(conn, damage)
        self._import_json_files(conn)

    def _damage(self, conn: sqlite3.Connection) -> str | None:
        """What is wrong inside the database (PRAGMA integrity_check: ~5 ms for 5 MB; missing or altered
        tables; see _open for a damaged schema version), or None."""
        try:
            problems = [row[0] for row in conn.execute("PRAGMA integrity_check(5)")]
            # A damaged schema text can name a table that does not exist (a foreign key to "c$nversations"):
            # integrity_check passes, and the first write fails. The key check reads the schema as a write would.
            # Keys are enforced on every connection (_connect), so a row that breaks one is damage too.
            broken = sorted({row[0] for row in conn.execute("PRAGMA foreign_key_check")})
            tables = _table_names(conn)
            altered = [table for table in sorted(_TABLES & tables) if _columns(conn, table) != _COLUMNS[table]]
        except (sqlite3.DatabaseError, UnicodeDecodeError) as error:
            return str(error)
        missing = sorted(_TABLES - tables)
        if problems != ["ok"]:
            return " ".join("; ".join(problems).split())[:300]
        if altered:
            return f"the columns of {', '.join(altered)} are not the ones this version writes"
        if len(missing) > 1:
            return f"the tables {', '.join(missing)} are missing"
        if missing:
            return f"the table {missing[0]} is missing"
        return f"rows of {', '.join(broken)} refer to nothing" if broken else None

    def _recover(self, damaged: sqlite3.Connection, damage: str) -> sqlite3.Connection:
        """Copy what can still be read into a fresh database, keep the damaged file aside, and say what was
        recovered. A conversation whose row is gone but whose messages remain comes back untitled."""
        fresh_path = self.db_path.with_name(f"{DB_NAME}.recovering")
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(str(fresh_path) + suffix).unlink(missing_ok=True)
        fresh = sqlite3.connect(fresh_path, isolation_level=None)
        fresh.executescript(f"BEGIN;\n{_SCHEMA_1}\nPRAGMA user_version = {SCHEMA_VERSION};\nCOMMIT;")
        ids = (_readable(damaged, "SELECT id FROM conversations")[0]
               + _readable(damaged, "SELECT DISTINCT conversation_id FROM messages")[0])
        recovered = incomplete = 0
        for (conv_id,) in dict.fromkeys(ids):
            rows, whole_row = _readable(damaged, "SELECT * FROM conversations WHERE id = ?", (conv_id,))
            messages, all_messages = _readable(damaged, "SELECT * FROM messages WHERE conversation_id = ?",
                                               (conv_id,))
            traces, all_traces = _readable(damaged, "SELECT * FROM traces WHERE conversation_id = ?", (conv_id,))
            partly = not (whole_row and all_messages and all_traces)
            try:
                with _transaction(fresh):
                    if rows:
                        fresh.execute("INSERT INTO conversations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows[0])
                    else:
                        fresh.execute("INSERT INTO conversations VALUES (?, 'Recovered chat', 0, 0, '', ?, '{}', ?, "
                                      "NULL)", (conv_id, FORMAT_VERSION, len(messages)))
                    fresh.executemany("INSERT OR IGNORE INTO messages VALUES (?, ?, ?, ?, ?, ?)", messages)
                    fresh.executemany("INSERT OR IGNORE INTO traces SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM "
                                      "messages WHERE conversation_id = ?1 AND position = ?2)", traces)
                    fresh.execute("UPDATE conversations SET message_count = (SELECT count(*) FROM messages WHERE "
                                  "conversation_id = ?1) WHERE id = ?1", (conv_id,))
                recovered += 1
                incomplete += partly
            except sqlite3.Error:  # a row of the wrong shape: this conversation is lost
                continue
        imported = _readable(damaged, "SELECT * FROM imported_files")[0]
        with _transaction(fresh):
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
        future = self._writer.submit(self._write_retrying, job)
        future.add_done_callback(lambda f, i=info: self._written(conv.id, i, f))
        return future

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

    def _written(self, conv_id: str, info: ConversationInfo | None, future: Future) -> None:
        with self._lock:
            if self._pending.get(conv_id, "gone") is info:
                del self._pending[conv_id]
            if future.exception() is not None:
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
        extra = _json_object(row[6])
        head = {**extra, "id": row[0], "title": row[1], "created": row[2], "updated": row[3], "system": row[4],
                "format": fmt, "messages": []}
        traces = dict(conn.execute("SELECT position, data FROM traces WHERE conversation_id = ?", (conv_id,)))
        problems = []
        for position, role, content, created, m_extra in conn.execute(
                "SELECT position, role, content, created, extra FROM messages WHERE conversation_id = ? "
                "ORDER BY position", (conv_id,)):
            message = {**_json_object(m_extra), "role": role, "content": content, "created": created}
            if position in traces:
                try:
                    message["trace"] = json.loads(_inflated(traces[position]))
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
            with _transaction(conn):
                conn.execute("DELETE FROM conversations WHERE id = ?", (conv_id,))

        future = self._writer.submit(write)
        future.add_done_callback(lambda f: self._written(conv_id, None, f))
        future.result()

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
            with _transaction(conn):
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
            with _transaction(conn):
                conn.execute("DELETE FROM conversations WHERE id = ?", (conv.id,))
                conn.execute("INSERT INTO conversations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             (conv.id, conv.title, conv.created, conv.updated, conv.system, conv.format, "{}",
                              len(conv.messages), text))
            return "imported"
        with self._lock:
            self._saved.pop(conv.id, None)
        self._write(self._prepare(conv), conn, replace=True)
        return "imported"


TRACE_SIZE_LIMIT = 64 << 20  # bytes of one trace's JSON: a long reply's is well under 10 MB


def _inflated(blob: object) -> bytes:
    """A trace blob decompressed, refusing one that inflates past TRACE_SIZE_LIMIT (a zlib bomb of 1 MB
    would take gigabytes and seconds on the GUI thread)."""
    if not isinstance(blob, bytes):
        raise TypeError(f"a trace is stored as {type(blob).__name__}, not bytes")
    inflater = zlib.decompressobj()
    data = inflater.decompress(blob, TRACE_SIZE_LIMIT)
    if inflater.unconsumed_tail:
        raise ValueError(f"it is larger than {TRACE_SIZE_LIMIT >> 20} MB")
    return data


_TABLES = frozenset({"conversations", "messages", "traces", "imported_files"})


def _table_names(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def _schema_columns() -> dict[str, list[str]]:
    conn = sqlite3.connect(":memory:")
    conn.executescript(_SCHEMA_1)
    columns = {table: _columns(conn, table) for table in _TABLES}
    conn.close()
    return columns


_COLUMNS = _schema_columns()  # what each table holds in a sound database of this version


def _readable(conn: sqlite3.Connection, sql: str, args: tuple = ()) -> tuple[list, bool]:
    """(the rows a query can still read from a damaged database, whether it read them all)."""
    rows: list = []
    try:
        for row in conn.execute(sql, args):
            rows.append(row)
    except (sqlite3.DatabaseError, UnicodeDecodeError):
        return rows, False
    return rows, True


class _transaction:
    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, kind, value, tb) -> None:
        if kind is None:
            self.conn.execute("COMMIT")
        elif self.conn.in_transaction:  # SQLite may have rolled back already (a full disk)
            self.conn.execute("ROLLBACK")


def _json_object(text: object) -> dict:
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# ---- settings -----------------------------------------------------------------------------------

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
    calibrate: bool = True  # measure the verifier alone after loading (the speedup baseline)
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


# ---- exports ------------------------------------------------------------------------------------

def to_markdown(conv: Conversation) -> str:
    lines = [f"# {conv.full_title()}", ""]
    if conv.system:
        lines += [f"*System prompt:* {conv.system}", ""]
    for m in conv.messages:
        who = "You" if m.role == "user" else "Assistant"
        lines.append(f"**{who}:**")
        lines.append("")
        lines.append(m.content)
        if m.trace is not None and (m.trace.stats or m.trace.rounds):
            lines.append("")
            lines.append(f"<sub>{m.trace.summary()}</sub>")
        lines.append("")
    return "\n".join(lines)


_HTML_STYLE = {
    "accepted": "background:rgba(46,160,67,.33)",
    "rejected": "color:rgb(215,58,73);text-decoration:line-through;background:rgba(215,58,73,.15)",
    "corrected": "background:rgba(235,160,20,.43)",
    "bonus": "background:rgba(59,130,246,.37)",
    "plain": "",
}


_HTML_MAPPED = "border-bottom:1px dotted currentColor"  # a token a draft with another tokenizer proposed


def _token_title(t) -> str:
    def p(x):
        return "-" if x is None else f"{x:.3f}"
    alts = ", ".join(f"{a!r} {b:.3f}" for a, b in t.alternatives)
    drafted = t.state in (TokenState.ACCEPTED.value, TokenState.REJECTED.value)
    draft_p = draft_figure(t.draft_prob, drafted) if drafted else "-"  # "string match": drafted with no probability
    # As the chat tooltip: the draft's own token(s), and the verifier token they became
    mapped = (f" · {MAPPED_MARK} draft's own token(s): {t.draft_source} → verifier token {t.text!r} "
              f"(id {t.token_id})" if t.draft_source else "")
    return (f"{t.state} · round {t.round + 1}, position {t.position + 1} · draft p {draft_p} · "
            f"verifier p {p(t.target_prob)} · accept p {p(t.accept_prob)}{mapped}"
            + (f" · top: {alts}" if alts else ""))


def to_html(conv: Conversation) -> str:
    """A standalone page; replies keep their token colours (and per-token hover titles)."""
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(conv.full_title())}</title><style>",
        "body{font-family:system-ui,sans-serif;max-width:860px;margin:2em auto;line-height:1.5;padding:0 1em}",
        ".msg{border-radius:12px;padding:.6em 1em;margin:.8em 0;border:1px solid rgba(127,127,127,.3)}",
        ".user{background:rgba(124,92,230,.12);margin-left:4em}",
        ".assistant{background:rgba(127,127,127,.06);margin-right:2em}",
        ".who{font-weight:600;margin-bottom:.2em}.reply{white-space:pre-wrap}",
        ".stats{color:gray;font-size:.85em;margin-top:.4em}",
        ".legend span{padding:1px 6px;margin-right:6px;border-radius:3px}",
        "@media (prefers-color-scheme: dark){body{background:#1e1e22;color:#ddd}}",
        "</style></head><body>",
        f"<h1>{html.escape(conv.full_title())}</h1>",
        "<div class='legend'>" + "".join(f"<span style='{st}'>{name}</span>"
                                          for name, st in _HTML_STYLE.items() if st) + "</div>",
    ]
    if any(t.draft_source for m in conv.messages if m.trace is not None for t in m.trace.tokens):
        out.append(f"<div class='legend'><span style='{_HTML_MAPPED}'>{html.escape(MAPPED_NOTE)}</span> "
                   "(hover a token for them)</div>")
    if conv.system:
        out.append(f"<p><i>System prompt:</i> {html.escape(conv.system)}</p>")
    for m in conv.messages:
        who = "You" if m.role == "user" else "Assistant"
        out.append(f"<div class='msg {m.role}'><div class='who'>{who}</div><div class='reply'>")
        if m.trace is not None and m.trace.tokens:
            for t in m.trace.tokens:
                text = t.text.replace("\n", "↵") if t.state == "rejected" else t.text
                style = ";".join(filter(None, (_HTML_STYLE.get(t.state, ""),
                                               _HTML_MAPPED if t.draft_source else "")))
                out.append(f"<span style='{style}' title='{html.escape(_token_title(t), quote=True)}'>"
                           f"{html.escape(text)}</span>" if style else html.escape(text))
        else:
            out.append(html.escape(m.content))
        out.append("</div>")
        if m.trace is not None and (m.trace.stats or m.trace.rounds):
            out.append(f"<div class='stats'>{html.escape(m.trace.summary())}</div>")
        out.append("</div>")
    out.append("</body></html>")
    return "".join(out)


def to_json(conv: Conversation) -> str:
    return json.dumps(conv.to_dict(), ensure_ascii=False, indent=2)
