//! The CSV input of `eval stats paired`: a header with at least `task`, `arm`, `rep` and the score
//! column (`score` or `--metric`); extra columns are allowed. Fields may be quoted with `"` (a
//! doubled `""` inside quotes is a quote). Every bad row is an error naming file, line and column.

use std::path::Path;

use super::StatsError;
use super::data::Observation;

/// Reads the observations of `metric` from a CSV file (see the module docs for the format).
pub fn read_observations(path: &Path, metric: &str) -> Result<Vec<Observation>, StatsError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| StatsError::Input(format!("{file}: cannot read: {e}")))?;
    parse_observations(&text, &file, metric)
}

/// Parses CSV text; `file` is the name error messages use.
pub fn parse_observations(
    text: &str,
    file: &str,
    metric: &str,
) -> Result<Vec<Observation>, StatsError> {
    let bad = |line: usize, column: &str, msg: String| {
        StatsError::Input(format!("{file}:{line}: column {column:?}: {msg}"))
    };
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.strip_suffix('\r').unwrap_or(l)));
    let (_, header) = lines
        .by_ref()
        .find(|(_, l)| !l.trim().is_empty())
        .ok_or_else(|| StatsError::Input(format!("{file}: empty file (expected a header)")))?;
    let header = split_fields(header).map_err(|m| StatsError::Input(format!("{file}:1: {m}")))?;
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
    for (line, raw) in lines {
        if raw.trim().is_empty() {
            continue;
        }
        let fields =
            split_fields(raw).map_err(|m| StatsError::Input(format!("{file}:{line}: {m}")))?;
        if fields.len() != header.len() {
            return Err(StatsError::Input(format!(
                "{file}:{line}: {} fields, the header has {}",
                fields.len(),
                header.len()
            )));
        }
        for (i, name) in [(ti, "task"), (ai, "arm"), (ri, "rep")] {
            if fields[i].trim().is_empty() {
                return Err(bad(line, name, "is empty".into()));
            }
        }
        let text = fields[si].trim();
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
            task: fields[ti].trim().to_string(),
            arm: fields[ai].trim().to_string(),
            rep: fields[ri].trim().to_string(),
            score,
            origin: format!("{file}:{line}"),
        });
    }
    Ok(out)
}

fn split_fields(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut was_quoted = false;
    while let Some(ch) = chars.next() {
        match (quoted, ch) {
            (true, '"') => {
                if chars.peek() == Some(&'"') {
                    chars.next();
                    cur.push('"');
                } else {
                    quoted = false;
                }
            }
            (true, c) => cur.push(c),
            (false, '"') if cur.trim().is_empty() && !was_quoted => {
                cur.clear();
                quoted = true;
                was_quoted = true;
            }
            (false, ',') => {
                out.push(std::mem::take(&mut cur));
                was_quoted = false;
            }
            (false, c) => cur.push(c),
        }
    }
    if quoted {
        return Err("unterminated quoted field".into());
    }
    out.push(cur);
    Ok(out)
}
