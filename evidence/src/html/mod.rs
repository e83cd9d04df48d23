//! The HTML building blocks shared by every page `eval` writes: the one-page report
//! (`report::render`, `eval report --format html`) and the controller's static site
//! (`eval-report`'s `site`). Escaping, numbers, the page shell, the base stylesheet, table heads
//! and the one forest plot ([`forest`]) live here, so the two never drift apart.
//!
//! This module knows nothing of reports: it takes strings and numbers. Everything a page shows
//! passes through [`esc`] (text and quoted attribute values alike); the pages have no script.

pub mod forest;

use crate::gates::evaluate::fmt_value;
use std::fmt::Write as _;

/// HTML-escapes text for element content and quoted attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 8);
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A number as the reports print it (four decimals at most, no trailing zeros; a non-finite
/// value as the gates print it).
pub fn num(v: f64) -> String {
    if v.is_finite() {
        let s = format!("{v:.4}");
        let s = s.trim_end_matches('0').trim_end_matches('.');
        if s == "-0" { "0".into() } else { s.to_string() }
    } else {
        fmt_value(v)
    }
}

/// The style rules every page shares (the verdict banner, tables, pass/fail, notes, the fixture
/// banner); each page adds its own `body` layout.
pub const BASE_CSS: &str = "h1.verdict{padding:.5em .8em;border-radius:6px;color:#fff}h1.allowed{background:#1b7f3b}\
h1.blocked{background:#b3261e}table{border-collapse:collapse;margin:.5em 0 1.5em}\
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}\
.pass{color:#1b7f3b;font-weight:600}.fail{color:#b3261e;font-weight:600}code{font-size:12px}\
.note{color:#555;font-size:13px}.fixture{background:#fff3cd;border:1px solid #e0c060;padding:.5em}";

/// A whole page: `title` (escaped here), `head` (trusted markup: a stylesheet) and `body`
/// (markup whose text the caller escaped).
pub fn document(title: &str, head: &str, body: &str) -> String {
    let mut o = String::with_capacity(body.len() + head.len() + 256);
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>{}</title>{head}</head><body>\n{body}</body></html>\n",
        esc(title)
    );
    o
}

/// Opens a table and writes its header row: `attrs` is trusted markup (` id="gates"`), the
/// headers are escaped.
pub fn table_head(o: &mut String, attrs: &str, headers: &[&str]) {
    let _ = write!(o, "<table{attrs}><tr>");
    for h in headers {
        let _ = write!(o, "<th>{}</th>", esc(h));
    }
    let _ = writeln!(o, "</tr>");
}

/// The class of a verdict cell (the stylesheet colours `pass` and `fail`).
pub fn pass_class(passed: bool) -> &'static str {
    if passed { "pass" } else { "fail" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn esc_neutralises_markup_and_quotes() {
        assert_eq!(
            esc("<a href='x'>\"&\"</a>"),
            "&lt;a href=&#39;x&#39;&gt;&quot;&amp;&quot;&lt;/a&gt;"
        );
    }

    #[test]
    fn num_trims_and_never_prints_minus_zero() {
        assert_eq!(num(0.25), "0.25");
        assert_eq!(num(2.0), "2");
        assert_eq!(num(-0.00001), "0");
        assert_eq!(num(1.23456), "1.2346");
    }

    #[test]
    fn document_escapes_the_title_and_keeps_the_body() {
        let d = document("a<b", "<style>x</style>", "<p>hi</p>");
        assert!(d.starts_with("<!DOCTYPE html>\n"));
        assert!(d.contains(
            "<title>a&lt;b</title><style>x</style></head><body>\n<p>hi</p></body></html>\n"
        ));
    }

    #[test]
    fn table_head_escapes_headers() {
        let mut o = String::new();
        table_head(&mut o, " id=\"t\"", &["a<b", "c"]);
        assert_eq!(o, "<table id=\"t\"><tr><th>a&lt;b</th><th>c</th></tr>\n");
    }
}
