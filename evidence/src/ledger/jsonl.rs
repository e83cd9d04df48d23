//! The JSONL export: one canonical JSON object per line, keys sorted:
//!
//! ```text
//! {"hash":"sha256:…","kind":"note","payload":{…verbatim stored bytes…},"prev":"sha256:…","recorded_at":"…","seq":1,"v":1}
//! ```
//! The payload is written as the stored bytes themselves (not re-serialised), and read back as the
//! raw bytes found in the line, so an exported ledger verifies exactly like the SQLite one.

use super::error::LedgerError;
use super::store::LedgerReader;
use eval_core::chain::{Appended, Entry, LineError, NewEntry, Verifier, parse_jsonl_line};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

pub use eval_core::chain::{JSONL_VERSION, jsonl_line};

/// Writes every entry of the SQLite ledger at `ledger` to `out`, one line each; returns the count.
/// Writes to a temporary file first and renames it, so a failed export leaves no half file.
pub fn export_jsonl(ledger: &Path, out: &Path) -> Result<u64, LedgerError> {
    let reader = LedgerReader::open(ledger)?;
    let tmp = out.with_extension("jsonl.partial");
    let file = std::fs::File::create(&tmp).map_err(LedgerError::io(&tmp))?;
    let mut w = BufWriter::new(file);
    let mut count = 0u64;
    let mut io_err = None;
    reader.for_each(|e| {
        let line = jsonl_line(&e);
        if let Err(err) = w.write_all(&line).and_then(|_| w.write_all(b"\n")) {
            io_err = Some(err);
            return std::ops::ControlFlow::Break(());
        }
        count += 1;
        std::ops::ControlFlow::Continue(())
    })?;
    if let Some(err) = io_err {
        return Err(LedgerError::io(&tmp)(err));
    }
    let file = w
        .into_inner()
        .map_err(|e| LedgerError::io(&tmp)(e.into_error()))?;
    file.sync_all().map_err(LedgerError::io(&tmp))?;
    std::fs::rename(&tmp, out).map_err(LedgerError::io(out))?;
    Ok(count)
}

/// Reads a JSONL export line by line (streaming).
pub struct JsonlReader {
    path: PathBuf,
    lines: std::io::Split<BufReader<std::fs::File>>,
    line_no: u64,
}

impl JsonlReader {
    /// Opens an export for reading entry by entry (lines are checked as they are read).
    pub fn open(path: &Path) -> Result<Self, LedgerError> {
        let file = std::fs::File::open(path).map_err(LedgerError::io(path))?;
        Ok(Self {
            path: path.to_path_buf(),
            lines: BufReader::with_capacity(1 << 20, file).split(b'\n'),
            line_no: 0,
        })
    }

    fn parse(&self, bytes: &[u8]) -> Result<Entry, LedgerError> {
        parse_jsonl_line(bytes).map_err(|e| match e {
            LineError::Malformed(reason) => LedgerError::MalformedLine {
                path: self.path.clone(),
                line: self.line_no,
                reason,
            },
            LineError::NewerFormat { found, known } => LedgerError::NewerFormat {
                path: self.path.clone(),
                found,
                known,
            },
        })
    }
}

impl Iterator for JsonlReader {
    type Item = Result<Entry, LedgerError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let raw = match self.lines.next()? {
                Ok(raw) => raw,
                Err(e) => return Some(Err(LedgerError::io(&self.path)(e))),
            };
            self.line_no += 1;
            let trimmed = raw.strip_suffix(b"\r").unwrap_or(&raw);
            if trimmed.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            return Some(self.parse(trimmed));
        }
    }
}

/// Reads a JSONL chain whole (used for small files such as the identity registry).
pub fn read_all(path: &Path) -> Result<Vec<Entry>, LedgerError> {
    JsonlReader::open(path)?.collect()
}

/// Appends entries to a JSONL chain file (such as the identity registry), creating it if needed.
/// The existing chain is verified first: nothing is appended to a chain that does not verify.
/// Holds an exclusive advisory lock on the file while appending, and syncs before returning.
pub fn append_jsonl(path: &Path, entries: Vec<NewEntry>) -> Result<Vec<Appended>, LedgerError> {
    use std::io::Seek;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .open(path)
        .map_err(LedgerError::io(path))?;
    file.lock().map_err(LedgerError::io(path))?;
    let mut verifier = Verifier::new(None);
    if file.metadata().map_err(LedgerError::io(path))?.len() > 0 {
        for entry in JsonlReader::open(path)? {
            if verifier.push(&entry?).is_break() {
                break;
            }
        }
    }
    let report = verifier.finish();
    if let Some(failure) = report.error {
        return Err(LedgerError::MalformedLine {
            path: path.to_path_buf(),
            line: failure.seq(),
            reason: format!("the chain does not verify, nothing appended: {failure}"),
        });
    }
    let mut head = report.head;
    let now = humantime::format_rfc3339_micros(std::time::SystemTime::now()).to_string();
    let mut out = Vec::new();
    let mut bytes = Vec::new();
    for e in entries {
        let entry = e.chained(&head, now.clone());
        bytes.extend_from_slice(&jsonl_line(&entry));
        bytes.push(b'\n');
        head = eval_core::chain::Head {
            seq: entry.seq,
            hash: entry.hash,
        };
        out.push(Appended {
            seq: entry.seq,
            hash: entry.hash,
        });
    }
    file.seek(std::io::SeekFrom::End(0))
        .map_err(LedgerError::io(path))?;
    file.write_all(&bytes).map_err(LedgerError::io(path))?;
    file.sync_all().map_err(LedgerError::io(path))?;
    Ok(out)
}
