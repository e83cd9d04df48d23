//! The SQLite layout of a ledger and its read side.
//!
//! ```sql
//! meta(key TEXT PRIMARY KEY, value TEXT)          -- format = 'eval-ledger', version = '1'
//! entries(seq INTEGER PRIMARY KEY, prev BLOB, kind TEXT, payload BLOB, hash BLOB, recorded_at TEXT)
//! ```
//! Triggers refuse UPDATE and DELETE on both tables, and refuse an INSERT whose `seq` is not the
//! next one or whose `prev` is not the head's hash (this also stops `INSERT OR REPLACE`, which
//! would otherwise delete the old row without firing a DELETE trigger).

use super::error::LedgerError;
use eval_core::chain::Entry;
use eval_core::digest::Digest;
use rusqlite::{Connection, OpenFlags, OptionalExtension, config::DbConfig};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The `format` value in a SQLite ledger's meta table; a file with another value is refused.
pub const LEDGER_FORMAT: &str = "eval-ledger";
/// Version 1: the layout above and the hash layout in `entry.rs`.
pub const LEDGER_VERSION: u64 = 1;

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT;
CREATE TABLE IF NOT EXISTS entries(
    seq INTEGER PRIMARY KEY,
    prev BLOB NOT NULL CHECK(length(prev) = 32),
    kind TEXT NOT NULL,
    payload BLOB NOT NULL,
    hash BLOB NOT NULL CHECK(length(hash) = 32),
    recorded_at TEXT NOT NULL
) STRICT;
CREATE TRIGGER IF NOT EXISTS entries_no_update BEFORE UPDATE ON entries
BEGIN SELECT RAISE(ABORT, 'ledger entries are append-only: UPDATE refused'); END;
CREATE TRIGGER IF NOT EXISTS entries_no_delete BEFORE DELETE ON entries
BEGIN SELECT RAISE(ABORT, 'ledger entries are append-only: DELETE refused'); END;
CREATE TRIGGER IF NOT EXISTS entries_chain BEFORE INSERT ON entries
WHEN NEW.seq IS NOT (SELECT COALESCE(MAX(seq), 0) + 1 FROM entries)
  OR NEW.prev IS NOT COALESCE((SELECT hash FROM entries ORDER BY seq DESC LIMIT 1), zeroblob(32))
BEGIN SELECT RAISE(ABORT, 'ledger insert refused: not the next entry of the chain'); END;
CREATE TRIGGER IF NOT EXISTS meta_no_update BEFORE UPDATE ON meta
BEGIN SELECT RAISE(ABORT, 'ledger meta is write-once'); END;
CREATE TRIGGER IF NOT EXISTS meta_no_delete BEFORE DELETE ON meta
BEGIN SELECT RAISE(ABORT, 'ledger meta is write-once'); END;
"#;

const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// What kind of file a ledger path holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceKind {
    /// A SQLite ledger file (the live, appendable form).
    Sqlite,
    /// A JSONL export (read-only, verifies like the ledger it came from).
    Jsonl,
}

/// Looks at the first bytes of `path` to tell a SQLite ledger from a JSONL export.
pub fn detect_source(path: &Path) -> Result<SourceKind, LedgerError> {
    let mut file = std::fs::File::open(path).map_err(LedgerError::io(path))?;
    let mut head = [0u8; 16];
    let mut got = 0;
    while got < head.len() {
        match file.read(&mut head[got..]).map_err(LedgerError::io(path))? {
            0 => break,
            n => got += n,
        }
    }
    if got == 0 {
        return Err(LedgerError::NotALedger {
            path: path.to_path_buf(),
            reason: "the file is empty".into(),
        });
    }
    if got == 16 && &head == SQLITE_MAGIC {
        return Ok(SourceKind::Sqlite);
    }
    if head[0] == b'{' {
        return Ok(SourceKind::Jsonl);
    }
    Err(LedgerError::NotALedger {
        path: path.to_path_buf(),
        reason: "neither a SQLite ledger nor a JSONL export (it starts with neither the SQLite header nor '{')".into(),
    })
}

/// Opens (or creates) a ledger for writing: WAL, `synchronous=FULL`, defensive mode, schema and
/// triggers in place, format checked.
pub(crate) fn open_for_write(path: &Path) -> Result<Connection, LedgerError> {
    if path.exists()
        && std::fs::metadata(path)
            .map_err(LedgerError::io(path))?
            .len()
            > 0
    {
        detect_source(path).and_then(|k| match k {
            SourceKind::Sqlite => Ok(()),
            SourceKind::Jsonl => Err(LedgerError::NotALedger {
                path: path.to_path_buf(),
                reason: "this is a JSONL export; only a SQLite ledger can be appended to".into(),
            }),
        })?;
    }
    let sq = LedgerError::sqlite(path);
    // Never through a link planted at the ledger's name (`eval` may run as root).
    let conn =
        Connection::open_with_flags(path, OpenFlags::default() | OpenFlags::SQLITE_OPEN_NOFOLLOW)
            .map_err(sq)?;
    configure(&conn, path)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(LedgerError::sqlite(path))?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(LedgerError::sqlite(path))?;
    // Never turn somebody else's database into a ledger: a database with tables must be one.
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
            [],
            |r| r.get(0),
        )
        .map_err(|e| not_a_ledger_or(path, e))?;
    if tables > 0 {
        check_format(&conn, path)?;
    }
    conn.execute_batch(SCHEMA)
        .map_err(|e| not_a_ledger_or(path, e))?;
    conn.execute(
        "INSERT OR IGNORE INTO meta(key, value) VALUES ('format', ?1), ('version', ?2)",
        (LEDGER_FORMAT, LEDGER_VERSION.to_string()),
    )
    .map_err(LedgerError::sqlite(path))?;
    check_format(&conn, path)?;
    Ok(conn)
}

fn configure(conn: &Connection, path: &Path) -> Result<(), LedgerError> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)
        .map_err(LedgerError::sqlite(path))?;
    conn.busy_timeout(std::time::Duration::from_secs(30))
        .map_err(LedgerError::sqlite(path))?;
    Ok(())
}

fn not_a_ledger_or(path: &Path, e: rusqlite::Error) -> LedgerError {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase) => LedgerError::NotALedger {
            path: path.to_path_buf(),
            reason: "not a SQLite database".into(),
        },
        _ => LedgerError::Sqlite {
            path: path.to_path_buf(),
            source: e,
        },
    }
}

fn check_format(conn: &Connection, path: &Path) -> Result<(), LedgerError> {
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('meta', 'entries')",
            [],
            |r| r.get(0),
        )
        .map_err(|e| not_a_ledger_or(path, e))?;
    if tables != 2 {
        return Err(LedgerError::NotALedger {
            path: path.to_path_buf(),
            reason: "a SQLite database without eval's meta and entries tables".into(),
        });
    }
    let get = |key: &str| -> Result<Option<String>, LedgerError> {
        conn.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(|e| not_a_ledger_or(path, e))
    };
    let format = get("format")?;
    if format.as_deref() != Some(LEDGER_FORMAT) {
        return Err(LedgerError::NotALedger {
            path: path.to_path_buf(),
            reason: format!("meta.format is {format:?}, expected {LEDGER_FORMAT:?}"),
        });
    }
    let version = get("version")?.and_then(|v| v.parse::<u64>().ok());
    match version {
        Some(v) if v <= LEDGER_VERSION => Ok(()),
        Some(v) => Err(LedgerError::NewerFormat {
            path: path.to_path_buf(),
            found: v,
            known: LEDGER_VERSION,
        }),
        None => Err(LedgerError::NotALedger {
            path: path.to_path_buf(),
            reason: "meta.version is missing or not a number".into(),
        }),
    }
}

/// Read-only access to a SQLite ledger. Reading never writes: the file is opened read-only, so a
/// verifier cannot "repair" what it reads.
pub struct LedgerReader {
    conn: Connection,
    path: PathBuf,
}

impl LedgerReader {
    /// Opens a SQLite ledger read-only, checking its format and version; a JSONL export is refused.
    pub fn open(path: &Path) -> Result<Self, LedgerError> {
        match detect_source(path)? {
            SourceKind::Sqlite => {}
            SourceKind::Jsonl => {
                return Err(LedgerError::NotALedger {
                    path: path.to_path_buf(),
                    reason: "this is a JSONL export, not a SQLite ledger".into(),
                });
            }
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| not_a_ledger_or(path, e))?;
        configure(&conn, path)?;
        check_format(&conn, path)?;
        Ok(Self {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// The ledger file this reader reads.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Calls `f` for every entry in `seq` order, streaming (the ledger is never loaded whole).
    /// Rows whose stored columns are not even the right shape are reported through `f` as entries
    /// with what could be read, so that verification names the seq; `Err` is for SQLite failures.
    pub fn for_each<F>(&self, mut f: F) -> Result<(), LedgerError>
    where
        F: FnMut(Entry) -> std::ops::ControlFlow<()>,
    {
        self.scan("", &[], &mut f)
    }

    /// Entries of one kind, in order.
    pub fn for_each_of_kind<F>(&self, kind: &str, mut f: F) -> Result<(), LedgerError>
    where
        F: FnMut(Entry) -> std::ops::ControlFlow<()>,
    {
        self.scan("WHERE kind = ?1", &[&kind], &mut f)
    }

    fn scan(
        &self,
        filter: &str,
        params: &[&dyn rusqlite::ToSql],
        f: &mut dyn FnMut(Entry) -> std::ops::ControlFlow<()>,
    ) -> Result<(), LedgerError> {
        scan_conn(&self.conn, &self.path, filter, params, f)
    }

    /// All entries (for small ledgers and tests).
    pub fn entries(&self) -> Result<Vec<Entry>, LedgerError> {
        let mut out = Vec::new();
        self.for_each(|e| {
            out.push(e);
            std::ops::ControlFlow::Continue(())
        })?;
        Ok(out)
    }
}

/// Streams the entries of `conn` (optionally filtered) in `seq` order: the one read loop of the
/// reader and of the writer's own views (its snapshot, the signer's resume scan).
pub(crate) fn scan_conn(
    conn: &Connection,
    path: &Path,
    filter: &str,
    params: &[&dyn rusqlite::ToSql],
    f: &mut dyn FnMut(Entry) -> std::ops::ControlFlow<()>,
) -> Result<(), LedgerError> {
    let sql = format!(
        "SELECT seq, prev, kind, payload, hash, recorded_at FROM entries {filter} ORDER BY seq"
    );
    let mut stmt = conn.prepare(&sql).map_err(|e| not_a_ledger_or(path, e))?;
    let mut rows = stmt.query(params).map_err(LedgerError::sqlite(path))?;
    while let Some(row) = rows.next().map_err(LedgerError::sqlite(path))? {
        let entry = row_to_entry(row).map_err(LedgerError::sqlite(path))?;
        if f(entry).is_break() {
            break;
        }
    }
    Ok(())
}

/// Reads a row leniently: a damaged `prev`/`hash` blob becomes a digest that cannot match, so the
/// verifier reports the seq instead of the reader failing without one.
fn row_to_entry(row: &rusqlite::Row<'_>) -> rusqlite::Result<Entry> {
    let seq: i64 = row.get(0)?;
    let prev: Vec<u8> = blob_or_text(row, 1)?;
    let kind: String = String::from_utf8_lossy(&blob_or_text(row, 2)?).into_owned();
    let payload: Vec<u8> = blob_or_text(row, 3)?;
    let hash: Vec<u8> = blob_or_text(row, 4)?;
    let recorded_at = String::from_utf8_lossy(&blob_or_text(row, 5)?).into_owned();
    Ok(Entry {
        seq: u64::try_from(seq).unwrap_or(0),
        prev: Digest::from_slice(&prev).unwrap_or(Digest([0xff; 32])),
        kind,
        payload,
        hash: Digest::from_slice(&hash).unwrap_or(Digest([0xff; 32])),
        recorded_at,
    })
}

fn blob_or_text(row: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<Vec<u8>> {
    use rusqlite::types::ValueRef;
    Ok(match row.get_ref(idx)? {
        ValueRef::Blob(b) | ValueRef::Text(b) => b.to_vec(),
        ValueRef::Null => Vec::new(),
        ValueRef::Integer(i) => i.to_string().into_bytes(),
        ValueRef::Real(r) => r.to_string().into_bytes(),
    })
}

/// The head (last seq and hash) as stored, without verification.
pub(crate) fn stored_head(conn: &Connection, path: &Path) -> Result<super::Head, LedgerError> {
    let row: Option<(i64, Vec<u8>)> = conn
        .query_row(
            "SELECT seq, hash FROM entries ORDER BY seq DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(LedgerError::sqlite(path))?;
    Ok(match row {
        None => super::Head::EMPTY,
        Some((seq, hash)) => super::Head {
            seq: u64::try_from(seq).unwrap_or(0),
            hash: Digest::from_slice(&hash).unwrap_or(Digest([0xff; 32])),
        },
    })
}
