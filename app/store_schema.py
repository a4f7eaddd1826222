"""The conversation database: its schema, what counts as damage inside it, how what is still readable is
salvaged, and the small SQLite helpers the store reads and writes it with. Qt-free."""

from __future__ import annotations

import json
import sqlite3
import zlib

from app.conversation import FORMAT_VERSION

SCHEMA_1 = """
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
MIGRATIONS: dict[int, str] = {1: SCHEMA_1}


TRACE_SIZE_LIMIT = 64 << 20  # bytes of one trace's JSON: a long reply's is well under 10 MB


def inflated(blob: object) -> bytes:
    """A trace blob decompressed, refusing one that inflates past TRACE_SIZE_LIMIT (a zlib bomb of 1 MB
    would take gigabytes and seconds on the GUI thread)."""
    if not isinstance(blob, bytes):
        raise TypeError(f"a trace is stored as {type(blob).__name__}, not bytes")
    inflater = zlib.decompressobj()
    data = inflater.decompress(blob, TRACE_SIZE_LIMIT)
    if inflater.unconsumed_tail:
        raise ValueError(f"it is larger than {TRACE_SIZE_LIMIT >> 20} MB")
    return data


TABLES = frozenset({"conversations", "messages", "traces", "imported_files"})


def table_names(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def column_names(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def _schema_columns() -> dict[str, list[str]]:
    conn = sqlite3.connect(":memory:")
    conn.executescript(SCHEMA_1)
    columns = {table: column_names(conn, table) for table in TABLES}
    conn.close()
    return columns


COLUMNS = _schema_columns()  # what each table holds in a sound database of this version


def readable(conn: sqlite3.Connection, sql: str, args: tuple = ()) -> tuple[list, bool]:
    """(the rows a query can still read from a damaged database, whether it read them all)."""
    rows: list = []
    try:
        for row in conn.execute(sql, args):
            rows.append(row)
    except (sqlite3.DatabaseError, UnicodeDecodeError):
        return rows, False
    return rows, True


class transaction:
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


def json_object(text: object) -> dict:
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def damage_in(conn: sqlite3.Connection) -> str | None:
    """What is wrong inside the database (PRAGMA integrity_check: ~5 ms for 5 MB; missing or altered
    tables; see _open for a damaged schema version), or None."""
    try:
        problems = [row[0] for row in conn.execute("PRAGMA integrity_check(5)")]
        # A damaged schema text can name a table that does not exist (a foreign key to "c$nversations"):
        # integrity_check passes, and the first write fails. The key check reads the schema as a write would.
        # Keys are enforced on every connection (_connect), so a row that breaks one is damage too.
        broken = sorted({row[0] for row in conn.execute("PRAGMA foreign_key_check")})
        tables = table_names(conn)
        altered = [table for table in sorted(TABLES & tables) if column_names(conn, table) != COLUMNS[table]]
    except (sqlite3.DatabaseError, UnicodeDecodeError) as error:
        return str(error)
    missing = sorted(TABLES - tables)
    if problems != ["ok"]:
        return " ".join("; ".join(problems).split())[:300]
    if altered:
        return f"the columns of {', '.join(altered)} are not the ones this version writes"
    if len(missing) > 1:
        return f"the tables {', '.join(missing)} are missing"
    if missing:
        return f"the table {missing[0]} is missing"
    return f"rows of {', '.join(broken)} refer to nothing" if broken else None


def salvage(damaged: sqlite3.Connection, fresh: sqlite3.Connection) -> tuple[int, int]:
    """Copy every conversation that can still be read from a damaged database into a fresh one: (how many
    were copied, how many of those only in part). A conversation whose row is gone but whose messages
    remain comes back untitled."""
    ids = (readable(damaged, "SELECT id FROM conversations")[0]
           + readable(damaged, "SELECT DISTINCT conversation_id FROM messages")[0])
    recovered = incomplete = 0
    for (conv_id,) in dict.fromkeys(ids):
        rows, whole_row = readable(damaged, "SELECT * FROM conversations WHERE id = ?", (conv_id,))
        messages, all_messages = readable(damaged, "SELECT * FROM messages WHERE conversation_id = ?",
                                           (conv_id,))
        traces, all_traces = readable(damaged, "SELECT * FROM traces WHERE conversation_id = ?", (conv_id,))
        partly = not (whole_row and all_messages and all_traces)
        try:
            with transaction(fresh):
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
    return recovered, incomplete
