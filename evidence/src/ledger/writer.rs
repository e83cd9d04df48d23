//! The single writer: one thread owns the SQLite connection; producers send entries over a
//! channel and get back the `seq` and `hash` assigned to them once the transaction that holds them
//! has committed (group commit: whatever is queued when a transaction starts goes into it).
//!
//! The writer is also the only thing that signs: a [`crate::signing::Checkpointer`] attaches a
//! signer to it, and from then on the writer feeds the Merkle tree with each entry as it inserts
//! it and signs checkpoints inside its own transactions. Before and after every commit it checks
//! that the ledger's path still names the file it holds (device and inode); once it does not,
//! every later append is refused — a file renamed over the path is never appended to or signed.

use super::error::LedgerError;
use super::store;
use crate::signing::{RecordedCheckpoint, SigningError, SigningKeyPair, signer::Signer};
use eval_core::chain::{Appended, Entry, Head, NewEntry, entry_hash};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// What one append request gets back: its entries' seqs and hashes, and the checkpoint signed in
/// the same transaction when the request asked for one and a signer is attached.
type Acked = (Vec<Appended>, Option<RecordedCheckpoint>);
type Reply = oneshot::Sender<Result<Acked, AppendFailure>>;

/// Why a transaction failed, cloneable because one failure answers every producer in the batch;
/// the handle turns it into a [`LedgerError`] naming the ledger.
#[derive(Clone, Debug)]
enum AppendFailure {
    /// A `RAISE(ABORT, ...)` of the append-only triggers.
    Refused(String),
    Sqlite(std::sync::Arc<rusqlite::Error>),
    /// The path no longer names the writer's file, or it did not during an earlier commit.
    Replaced(String),
    /// Signing the transaction's checkpoint failed; nothing of the batch was committed.
    Signing(String),
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
            Self::Replaced(reason) => LedgerError::Replaced { path, reason },
            Self::Signing(reason) => LedgerError::CheckpointFailed { path, reason },
        }
    }
}

enum Request {
    /// Entries to append; `true` asks for a checkpoint in the same transaction.
    Append(Vec<NewEntry>, bool, Reply),
    Head(oneshot::Sender<Head>),
    /// Attach a signer (its key and origin); answered with the last checkpoint found. A std
    /// channel, so that a caller inside an async runtime can wait for it too.
    AttachSigner(
        Arc<SigningKeyPair>,
        String,
        std::sync::mpsc::SyncSender<Result<Option<RecordedCheckpoint>, SigningError>>,
    ),
    /// Every entry, read through the writer's own connection.
    Entries(std::sync::mpsc::SyncSender<Result<Vec<Entry>, LedgerError>>),
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
    /// The file the writer holds (device, inode), as its locked descriptor says.
    file: (u64, u64),
    /// Identifies this writer to the checkpointers attached to it.
    token: Arc<()>,
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
        let file = fd_identity(&lock).map_err(LedgerError::io(path))?;
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
                run_writer(conn, thread_path, file, head, rx)
            })
            .map_err(LedgerError::io(path))?;
        Ok(Self {
            inner: std::sync::Arc::new(Inner {
                tx: Some(tx),
                path: path.to_path_buf(),
                file,
                token: Arc::new(()),
                thread: Some(handle),
            }),
        })
    }

    /// True when `other` is a handle to this same writer (not merely one of the same path).
    pub fn same_writer(&self, other: &LedgerWriter) -> bool {
        std::sync::Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// What a checkpointer keeps (weakly) to know the writer it signs for.
    pub(crate) fn signer_token(&self) -> Arc<()> {
        self.inner.token.clone()
    }

    /// The (device, inode) of the file this writer holds.
    pub fn file_identity(&self) -> (u64, u64) {
        self.inner.file
    }

    /// Attaches a signer: the writer reads its own file once (chain, checkpoints, coverage; see
    /// `Signer::attach`) and from then on signs the checkpoints asked of it inside its own
    /// transactions. Returns the last checkpoint found.
    pub(crate) fn attach_signer(
        &self,
        key: Arc<SigningKeyPair>,
        origin: &str,
    ) -> Result<Option<RecordedCheckpoint>, SigningError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.sender()?
            .send(Request::AttachSigner(key, origin.to_owned(), tx))
            .map_err(|_| LedgerError::WriterGone("the writer thread ended".into()))?;
        rx.recv()
            .map_err(|_| LedgerError::WriterGone("the writer thread ended".into()))?
    }

    /// Every entry of the ledger as the writer's own connection holds it — what it appends to
    /// and signs — never re-read by path. Waits for everything queued before it to commit.
    pub fn entries_blocking(&self) -> Result<Vec<Entry>, LedgerError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.sender()?
            .send(Request::Entries(tx))
            .map_err(|_| LedgerError::WriterGone("the writer thread ended".into()))?;
        rx.recv()
            .map_err(|_| LedgerError::WriterGone("the writer thread ended".into()))?
    }

    /// Appends entries atomically and, when a signer is attached, a checkpoint covering them in
    /// the same transaction (so no committed entry is ever outside a signature). Without a signer
    /// it is [`Self::append_batch`] and the checkpoint is `None`.
    pub async fn append_signed(&self, entries: Vec<NewEntry>) -> Result<Acked, LedgerError> {
        let rx = self.send(entries, true)?;
        rx.await
            .map_err(|_| LedgerError::WriterGone("the writer thread ended".into()))?
            .map_err(|f| f.into_error(self.path()))
    }

    /// [`Self::append_signed`] for callers outside an async runtime.
    pub fn append_signed_blocking(&self, entries: Vec<NewEntry>) -> Result<Acked, LedgerError> {
        let rx = self.send(entries, true)?;
        rx.blocking_recv()
            .map_err(|_| LedgerError::WriterGone("the writer thread ended".into()))?
            .map_err(|f| f.into_error(self.path()))
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
        let rx = self.send(entries, false)?;
        rx.await
            .map_err(|_| LedgerError::WriterGone("the writer thread ended".into()))?
            .map(|(a, _)| a)
            .map_err(|f| f.into_error(self.path()))
    }

    /// [`Self::append`] for callers outside an async runtime (the CLI).
    pub fn append_blocking(&self, entry: NewEntry) -> Result<Appended, LedgerError> {
        let rx = self.send(vec![entry], false)?;
        let (mut v, _) = rx
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
        sign: bool,
    ) -> Result<oneshot::Receiver<Result<Acked, AppendFailure>>, LedgerError> {
        let (tx, rx) = oneshot::channel();
        self.sender()?
            .send(Request::Append(entries, sign, tx))
            .map_err(|_| LedgerError::WriterGone("the writer thread ended".into()))?;
        Ok(rx)
    }

    /// Drops this handle; if it was the last, waits until the writer has committed everything,
    /// released the lock and ended (the same as dropping it, said out loud).
    pub fn close(self) {
        drop(self);
    }
}

/// The writer thread's state besides the connection.
struct State {
    path: PathBuf,
    file: (u64, u64),
    head: Head,
    signer: Option<Signer>,
    /// Set once the path was found naming another file: every later append is refused.
    replaced: Option<String>,
}

impl State {
    /// Refuses (and remembers) a path that no longer names the writer's file.
    fn check_file(&mut self) -> Result<(), AppendFailure> {
        if let Some(r) = &self.replaced {
            return Err(AppendFailure::Replaced(r.clone()));
        }
        let now = std::fs::metadata(&self.path).map(|m| meta_identity(&m));
        if now.as_ref().ok() != Some(&self.file) {
            let r = format!(
                "the ledger file was replaced or removed under its writer (it holds device {} inode {}; the path now names {}); refusing every further append",
                self.file.0,
                self.file.1,
                match now {
                    Ok((d, i)) => format!("device {d} inode {i}"),
                    Err(e) => format!("nothing readable ({e})"),
                }
            );
            self.replaced = Some(r.clone());
            return Err(AppendFailure::Replaced(r));
        }
        Ok(())
    }
}

fn run_writer(
    mut conn: rusqlite::Connection,
    path: PathBuf,
    file: (u64, u64),
    head: Head,
    mut rx: mpsc::UnboundedReceiver<Request>,
) {
    let mut st = State {
        path,
        file,
        head,
        signer: None,
        replaced: None,
    };
    let mut queue: Vec<Request> = Vec::new();
    while let Some(first) = rx.blocking_recv() {
        queue.push(first);
        let mut pending: usize = 0;
        while pending < MAX_BATCH {
            match rx.try_recv() {
                Ok(req) => {
                    if let Request::Append(e, _, _) = &req {
                        pending += e.len();
                    }
                    queue.push(req);
                }
                Err(_) => break,
            }
        }
        let mut appends: Vec<(Vec<NewEntry>, bool, Reply)> = Vec::new();
        for req in queue.drain(..) {
            match req {
                Request::Append(entries, sign, reply) => appends.push((entries, sign, reply)),
                // Everything else sees the ledger with the appends queued before it committed.
                other => {
                    flush(&mut conn, &mut st, std::mem::take(&mut appends));
                    answer(&conn, &mut st, other);
                }
            }
        }
        flush(&mut conn, &mut st, appends);
    }
}

fn answer(conn: &rusqlite::Connection, st: &mut State, req: Request) {
    match req {
        Request::Append(..) => {}
        Request::Head(reply) => {
            // A caller that stopped waiting for the head needs no answer.
            let _ = reply.send(st.head);
        }
        Request::AttachSigner(key, origin, reply) => {
            let r = Signer::attach(conn, &st.path, st.head, key, &origin).map(|s| {
                let last = s.last().cloned();
                st.signer = Some(s);
                last
            });
            let _ = reply.send(r);
        }
        Request::Entries(reply) => {
            let mut out = Vec::new();
            let r = store::scan_conn(conn, &st.path, "", &[], &mut |e| {
                out.push(e);
                std::ops::ControlFlow::Continue(())
            })
            .map(|()| out);
            let _ = reply.send(r);
        }
    }
}

fn flush(
    conn: &mut rusqlite::Connection,
    st: &mut State,
    appends: Vec<(Vec<NewEntry>, bool, Reply)>,
) {
    if appends.is_empty() {
        return;
    }
    let undo = st.signer.as_ref().map(Signer::undo_point);
    let result = st
        .check_file()
        .and_then(|()| commit(conn, st, &appends))
        .and_then(|r| st.check_file().map(|()| r));
    match result {
        Ok((assigned, new_head, checkpoint)) => {
            st.head = new_head;
            for ((_, sign, reply), result) in appends.into_iter().zip(assigned) {
                let cp = if sign { checkpoint.clone() } else { None };
                // Committed either way; a producer that stopped waiting loses only the ack.
                let _ = reply.send(Ok((result, cp)));
            }
        }
        Err(failure) => {
            if let (Some(s), Some(u)) = (st.signer.as_mut(), undo) {
                s.undo(u);
            }
            // Nothing of the batch was committed (or, after a replacement, it went to a file
            // that is no longer the ledger); the head stays where SQLite says it is. If even that
            // read fails, the stale head makes the next append fail the chain trigger, so nothing
            // is written on a wrong link.
            if let Ok(h) = store::stored_head(conn, &st.path) {
                st.head = h;
            }
            for (_, _, reply) in appends {
                // A producer that stopped waiting has nobody left to tell.
                let _ = reply.send(Err(failure.clone()));
            }
        }
    }
}

type Committed = (Vec<Vec<Appended>>, Head, Option<RecordedCheckpoint>);

fn commit(
    conn: &mut rusqlite::Connection,
    st: &mut State,
    appends: &[(Vec<NewEntry>, bool, Reply)],
) -> Result<Committed, AppendFailure> {
    let sql = AppendFailure::classify;
    let tx = conn.transaction().map_err(sql)?;
    let mut cursor = st.head;
    let now = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
    let mut assigned = Vec::with_capacity(appends.len());
    let mut checkpoint = None;
    {
        let mut stmt = tx
            .prepare_cached(
                "INSERT INTO entries(seq, prev, kind, payload, hash, recorded_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )
            .map_err(sql)?;
        let mut insert = |cursor: &mut Head,
                          signer: &mut Option<Signer>,
                          e: &NewEntry|
         -> Result<Appended, AppendFailure> {
            let seq = cursor.seq + 1;
            let hash = entry_hash(&cursor.hash, seq, e.kind(), e.payload());
            stmt.execute((
                seq as i64,
                &cursor.hash.0[..],
                e.kind(),
                e.payload(),
                &hash.0[..],
                &now,
            ))
            .map_err(sql)?;
            if let Some(s) = signer.as_mut() {
                s.push(&cursor.hash, seq, e.kind(), e.payload());
            }
            *cursor = Head { seq, hash };
            Ok(Appended { seq, hash })
        };
        for (entries, _, _) in appends {
            let mut out = Vec::with_capacity(entries.len());
            for e in entries {
                out.push(insert(&mut cursor, &mut st.signer, e)?);
            }
            assigned.push(out);
        }
        if appends.iter().any(|(_, sign, _)| *sign)
            && let Some(signer) = st.signer.as_mut()
        {
            let (signed, entry) = signer
                .sign()
                .map_err(|e| AppendFailure::Signing(e.to_string()))?;
            let at = insert(&mut cursor, &mut st.signer, &entry)?;
            if let Some(signer) = st.signer.as_mut() {
                checkpoint = Some(signer.signed(at.seq, signed));
            }
        }
    }
    tx.commit().map_err(sql)?;
    Ok((assigned, cursor, checkpoint))
}

fn meta_identity(m: &std::fs::Metadata) -> (u64, u64) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        (m.dev(), m.ino())
    }
    #[cfg(not(unix))]
    {
        (0, m.len())
    }
}

fn fd_identity(f: &std::fs::File) -> std::io::Result<(u64, u64)> {
    f.metadata().map(|m| meta_identity(&m))
}
