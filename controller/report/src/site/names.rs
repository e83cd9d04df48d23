//! File names for the site's pages: safe for any id an agent or a suite chose, and unique.

use eval_evidence::ledger::Digest;
use std::collections::BTreeMap;

/// A file name for an id: ASCII letters, digits, `-`, `_` and `.` are kept, anything else
/// becomes `_`; a name that had to change (or would be hidden or too long) gets a digest suffix
/// so two ids never share a name.
pub fn safe_name(s: &str) -> String {
    let clean: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean == s && !s.is_empty() && !s.starts_with('.') && s.len() <= 100 {
        return clean;
    }
    let d = Digest::of(s.as_bytes()).hex();
    let head: String = clean.chars().take(80).collect();
    format!("_{head}-{}", &d[..12])
}

/// Unique page names for the attempts (`<slot>.<n>`, sanitised), assigned once.
#[derive(Default)]
pub struct Names {
    by_id: BTreeMap<String, String>,
    taken: std::collections::BTreeSet<String>,
}

impl Names {
    pub fn attempt(&mut self, id: &str) -> String {
        if let Some(n) = self.by_id.get(id) {
            return n.clone();
        }
        let base = match id.rsplit_once('#') {
            Some((slot, n)) => format!("{}.{}", safe_name(slot), safe_name(n)),
            None => safe_name(id),
        };
        let name = if self.taken.contains(&base) {
            format!("{base}-{}", &Digest::of(id.as_bytes()).hex()[..12])
        } else {
            base
        };
        self.taken.insert(name.clone());
        self.by_id.insert(id.to_owned(), name.clone());
        name
    }
}
