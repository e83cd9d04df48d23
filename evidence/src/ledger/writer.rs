//! The single writer: one thread owns the SQLite connection; producers send entries over a
//! channel and get back the `seq` and `hash` assigned to them once the transaction that holds them
//! has committed (group commit: whatever is queued when a transaction starts goes into it).

use super::error::LedgerError;
use super::store;
use eval_core::chain::{Appended, Head, NewEntry, entry_hash};
use std::path::{Path, PathBuf};
use tokio::sync::{mpsc, oneshot};

type Reply = oneshot::Sender<Result<Vec<Appended>, AppendFailure>>;

/// Why a transaction failed, cloneable because one failure answers every producer in the batch;
/// the handle turns it into a [`LedgerError`] naming the ledger.
#[derive(Clone, Debug)]
enum AppendFailure {
    /// A `RAISE(ABORT, ...)` of the append-only triggers.
    Refused(String),
    Sqlite(std::sync::Arc<rusqlite::Error>),
}

impl AppendFailure {
    fn classify(e: rusqlite::Error) -> Self {
        match &e {
            rusqlite::Error::SqliteFailure(f, msg)
                if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_TRIGGER =>
            {
                Self::Refused(msg.clone().unwrap_or_else(|| e.to_string()))
            }
            _ => Self::Sqlite(std::sync::Arc::new(e)),
        }
    }

    fn into_error(self, path: &Path) -> LedgerError {
        let path = path.to_path_buf();
        match self {
            Self::Refused(reason) => LedgerError::AppendRefused { path, reason },
            Self::Sqlite(source) => LedgerError::AppendFailed { path, source },
        }
    }
}

enum Request {
    Append(Vec<NewEntry>, Reply),
    Head(oneshot::Sender<Head>),
}

/// A cloneable handle to the ledger's single writer. When the last handle is dropped, the writer
/// commits everything it acknowledged, releases the ledger's lock and its thread ends — before the
/// drop returns, so the same process (or another) can open the ledger again right away.
#[derive(Clone)]
pub struct LedgerWriter {
    inner: std::sync::Arc<Inner>,
}

struct Inner {
    /// `None` only while dropping: closing the channel is what tells the thread to finish.
    tx: Option<mpsc::UnboundedSender<Request>>,
    path: PathBuf,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(handle) = self.thread.take() {
            // A panicked writer committed nothing more; every pending producer already got
            // `WriterGone`, so there is nobody to tell here.
            let _ = handle.join();
        }
    }
}

/// Most entries one transaction takes, so that one huge burst cannot delay every acknowledgement.
const MAX_BATCH: usize = 4096;

impl LedgerWriter {
    /// Opens or creates the ledger at `path` and starts its writer thread. Only one writer may
    /// hold a ledger at a time (an exclusive advisory lock on the file); readers are never blocked.
    pub fn open(path: &Path) -> Result<Self, LedgerError> {
        let conn = store::open_for_write(path)?;
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .open(path)
            .map_err(LedgerError::io(path))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(LedgerError::Io {
                    path: path.to_path_buf(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::WouldBlock,
                        "another eval process is writing this ledger",
                    ),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(LedgerError::io(path)(e)),
        }
        let head = store::stored_head(&conn, path)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let thread_path = path.to_path_buf();
        let handle = std::thread::Builder::new()
            .name("ledger-writer".into())
            .spawn(move || {
                let _lock = lock;
                run_writer(conn, thread_path, head, rx)
            })
            .map_err(LedgerError::io(path))?;
        Ok(Self {
            inner: std::sync::Arc::new(Inner {
                tx: Some(tx),
                path: path.to_path_buf(),
                thread: Some(handle),
            }),
        })
    }

    /// The ledger file this writer appends to.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    fn sender(&self) -> Result<&mpsc::UnboundedSender<Request>, LedgerError> {
        self.inner
            .tx
            .as_ref()
            .ok_or_else(|| LedgerError::WriterGone("the writer is closing".into()))
    }

    /// Appends one entry; resolves after its transaction has committed.
    pub async fn append(&self, entry: NewEntry) -> Result<Appended, LedgerError> {
        let mut v = self.append_batch(vec![entry]).await?;
        v.pop()
            .ok_or_else(|| LedgerError::WriterGone("empty acknowledgement".into()))
    }

    /// Appends entries atomically and contiguously, in one transaction.
    pub async fn append_batch(&self, entries: Vec<NewEntry>) -> Result<Vec<Appended>, LedgerError> {
        let rx = self.send(entries)?;
        rx.await
            .map_err(|_| LedgerError::WriterGone("the writer thread ended".into()))?
            .map_err(|f| f.into_error(self.path()))
    }

    /// [`Self::append`] for callers outside an async runtime (the CLI).
    pub fn append_blocking(&self, entry: NewEntry) -> Result<Appended, LedgerError> {
        let rx = self.send(vec![entry])?;
        let mut v = rx
            .blocking_recv()
            .map_err(|_| LedgerError::WriterGone("the writer thread ended".into()))?
            .map_err(|f| f.into_error(self.path()))?;
        v.pop()
            .ok_or_else(|| LedgerError::WriterGone("empty acknowledgement".into()))
    }

    /// The head as the writer knows it (everything acknowledged so far).
    pub async fn head(&self) -> Result<Head, LedgerError> {
        let (tx, rx) = oneshot::channel();
        self.sender()?
            .send(Request::Head(tx))
            .map_err(|_| LedgerError::WriterGone("the writer thread ended".into()))?;
        rx.await
            .map_err(|_| LedgerError::WriterGone("the writer thread ended".into()))
    }

    /// [`Self::head`] for callers outside an async runtime (the CLI).
    pub fn head_blocking(&self) -> Result<Head, LedgerError> {
        let (tx, rx) = oneshot::channel();
        self.sender()?
            .send(Request::Head(tx))
            .map_err(|_| LedgerError::WriterGone("the writer thread ended".into()))?;
        rx.blocking_recv()
            .map_err(|_| LedgerError::WriterGone("the writer thread ended".into()))
    }

    fn send(
        &self,
        entries: Vec<NewEntry>,
    ) -> Result<oneshot::Receiver<Result<Vec<Appended>, AppendFailure>>, LedgerError> {
        let (tx, rx) = oneshot::channel();
        self.sender()?
            .send(Request::Append(entries, tx))
            .map_err(|_| LedgerError::WriterGone("the writer thread ended".into()))?;
        Ok(rx)
    }

    /// Drops this handle; if it was the last, waits until the writer has committed everything,
    /// released the lock and ended (the same as dropping it, said out loud).
    pub fn close(self) {
        drop(self);
    }
}

fn run_writer(
    mut conn: rusqlite::Connection,
    path: PathBuf,
    mut head: Head,
    mut rx: mpsc::UnboundedReceiver<Request>,
) {
    let mut queue: Vec<Request> = Vec::new();
    while let Some(first) = rx.blocking_recv() {
        queue.push(first);
        let mut pending: usize = 0;
        while pending < MAX_BATCH {
            match rx.try_recv() {
                Ok(req) => {
                    if let Request::Append(e, _) = &req {
                        pending += e.len();
                    }
                    queue.push(req);
                }
                Err(_) => break,
            }
        }
        let mut appends: Vec<(Vec<NewEntry>, Reply)> = Vec::new();
        for req in queue.drain(..) {
            match req {
                Request::Append(entries, reply) => appends.push((entries, reply)),
                Request::Head(reply) => {
                    // A caller that stopped waiting for the head needs no answer.
                    let _ = reply.send(head);
                }
            }
        }
        if appends.is_empty() {
            continue;
        }
        match commit(&mut conn, &head, &appends) {
            Ok((assigned, new_head)) => {
                head = new_head;
                for ((_, reply), result) in appends.into_iter().zip(assigned) {
                    // Committed either way; a producer that stopped waiting loses only the ack.
                    let _ = reply.send(Ok(result));
                }
            }
            Err(e) => {
                // Nothing of the batch was committed; the head stays where SQLite says it is. If
                // even that read fails, the stale head makes the next append fail the chain
                // trigger, so nothing is written on a wrong link.
                if let Ok(h) = store::stored_head(&conn, &path) {
                    head = h;
                }
                let failure = AppendFailure::classify(e);
                for (_, reply) in appends {
                    // A producer that stopped waiting has nobody left to tell.
                    let _ = reply.send(Err(failure.clone()));
                }
            }
        }
    }
}

fn commit(
    conn: &mut rusqlite::Connection,
    head: &Head,
    appends: &[(Vec<NewEntry>, Reply)],
) -> rusqlite::Result<(Vec<Vec<Appended>>, Head)> {
    let tx = conn.transaction()?;
    let mut cursor = *head;
    let now = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
    let mut assigned = Vec::with_capacity(appends.len());
    {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO entries(seq, prev, kind, payload, hash, recorded_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for (entries, _) in appends {
            let mut out = Vec::with_capacity(entries.len());
            for e in entries {
                let seq = cursor.seq + 1;
                let hash = entry_hash(&cursor.hash, seq, e.kind(), e.payload());
                stmt.execute((
                    seq as i64,
                    &cursor.hash.0[..],
                    e.kind(),
                    e.payload(),
                    &hash.0[..],
                    &now,
                ))?;
                cursor = Head { seq, hash };
                out.push(Appended { seq, hash });
            }
            assigned.push(out);
        }
    }
    tx.commit()?;
    Ok((assigned, cursor))
}
