//! The CSV input of `eval stats paired`: a header with at least `task`, `arm`, `rep` and the score
//! column (`score` or `--metric`); extra columns are allowed. Fields may be quoted with `"` (a
//! doubled `""` inside quotes is a quote; a quoted field may span lines). Every bad row is an error
//! naming file, line and column.

use std::path::Path;

use super::data::Observation;
use super::error::StatsError;

/// Reads the observations of `metric` from a CSV file (see the module docs for the format).
pub fn read_observations(path: &Path, metric: &str) -> Result<Vec<Observation>, StatsError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| StatsError::Input(format!("{file}: cannot read: {e}")))?;
    parse_observations(&text, &file, metric)
}

/// Parses CSV text with the `csv` crate (RFC 4180: a quoted field may hold the delimiter, a
/// doubled quote and line breaks); `file` is the name error messages use, a record's line is the
/// line it starts on. Two things the crate passes silently are refused: text after a field's
/// closing quote (`"ab"cd`, which it joins into the field) and a quote left open at the end.
pub fn parse_observations(
    text: &str,
    file: &str,
    metric: &str,
) -> Result<Vec<Observation>, StatsError> {
    let bad = |line: u64, column: &str, msg: String| {
        StatsError::Input(format!("{file}:{line}: column {column:?}: {msg}"))
    };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(text.as_bytes());
    // Each non-blank record with the line it starts on.
    let mut records = Vec::new();
    let mut record = csv::StringRecord::new();
    loop {
        let start = reader.position().clone();
        let more = reader
            .read_record(&mut record)
            .map_err(|e| StatsError::Input(format!("{file}:{}: {e}", start.line())))?;
        if !more {
            break;
        }
        let line = record.position().map_or(start.line(), csv::Position::line);
        let from = usize::try_from(record.position().map_or(0, csv::Position::byte)).unwrap_or(0);
        let to = usize::try_from(reader.position().byte()).unwrap_or(text.len());
        quoting_error(text.get(from..to).unwrap_or(""))
            .map_err(|m| StatsError::Input(format!("{file}:{line}: {m}")))?;
        if record.iter().all(|f| f.trim().is_empty()) && record.len() <= 1 {
            continue;
        }
        records.push((line, record.clone()));
    }
    let mut records = records.into_iter();
    let (_, header) = records
        .next()
        .ok_or_else(|| StatsError::Input(format!("{file}: empty file (expected a header)")))?;
    let header: Vec<String> = header.iter().map(|h| h.trim().to_string()).collect();
    let col = |name: &str| {
        header.iter().position(|h| h == name).ok_or_else(|| {
            StatsError::Input(format!(
                "{file}: header has no column {name:?} (columns: {})",
                header.join(", ")
            ))
        })
    };
    let (ti, ai, ri, si) = (col("task")?, col("arm")?, col("rep")?, col(metric)?);
    let mut out = Vec::new();
    for (line, fields) in records {
        if fields.len() != header.len() {
            return Err(StatsError::Input(format!(
                "{file}:{line}: {} fields, the header has {}",
                fields.len(),
                header.len()
            )));
        }
        let field = |i: usize| fields.get(i).unwrap_or("").trim();
        for (i, name) in [(ti, "task"), (ai, "arm"), (ri, "rep")] {
            if field(i).is_empty() {
                return Err(bad(line, name, "is empty".into()));
            }
        }
        let text = field(si);
        let score: f64 = text
            .parse()
            .map_err(|_| bad(line, metric, format!("{text:?} is not a number")))?;
        if !score.is_finite() {
            return Err(bad(
                line,
                metric,
                format!("{text:?} is not a finite number"),
            ));
        }
        out.push(Observation {
            task: field(ti).to_string(),
            arm: field(ai).to_string(),
            rep: field(ri).to_string(),
            score,
            origin: format!("{file}:{line}"),
        });
    }
    Ok(out)
}

/// What the `csv` crate accepts and RFC 4180 does not, in one record's raw text: anything but a
/// delimiter or the record's end after a closing quote, and a quoted field never closed. Only
/// quotes that open a field quote it, as the crate reads them.
fn quoting_error(raw: &str) -> Result<(), &'static str> {
    let b = raw.as_bytes();
    let mut i = 0;
    let mut field_start = true;
    while i < b.len() {
        if field_start && b[i] == b'"' {
            i += 1;
            loop {
                match (b.get(i), b.get(i + 1)) {
                    (None, _) => return Err("unterminated quoted field"),
                    (Some(b'"'), Some(b'"')) => i += 2,
                    (Some(b'"'), _) => break,
                    _ => i += 1,
                }
            }
            i += 1;
            match b.get(i) {
                None | Some(b',' | b'\r' | b'\n') => {}
                Some(_) => return Err("text after a closing quote"),
            }
            if i >= b.len() {
                break;
            }
        }
        field_start = b[i] == b',';
        i += 1;
    }
    Ok(())
}
