//! An incremental Server-Sent-Events parser: bytes go in as they arrive, split anywhere (even
//! inside a CRLF), and complete events come out with the exact bytes they were made of, so a
//! caller can forward events unchanged or drop one.

use bytes::Bytes;

/// One server-sent event as it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`; `None` when the event had no data line (e.g. only
    /// comments or blank lines).
    pub data: Option<String>,
    /// The exact bytes of the event, terminating blank line included.
    pub raw: Bytes,
}

/// Frames a byte stream into [`SseEvent`]s, across chunk boundaries.
#[derive(Default)]
pub struct SseParser {
    /// Bytes of the current, not yet terminated line.
    line: Vec<u8>,
    /// Bytes of the current event consumed so far (complete lines with their terminators).
    raw: Vec<u8>,
    /// The previous chunk ended in `\r`: a `\n` at the start of the next one belongs to it.
    after_cr: bool,
    event: Option<String>,
    data: Option<String>,
    /// Bytes of a field line (anything but a comment or a blank line) arrived since the last
    /// [`SseParser::progressed`]: the stream moved on. A `: keep-alive` comment is not progress.
    progress: bool,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; returns the events they complete.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        let mut rest = chunk;
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if let Some((&b'\n', tail)) = rest.split_first() {
                self.raw.push(b'\n');
                rest = tail;
            }
        }
        while let Some(i) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&rest[..i]);
            let term_len = if rest[i] == b'\r' {
                match rest.get(i + 1) {
                    Some(b'\n') => 2,
                    Some(_) => 1,
                    None => {
                        self.after_cr = true;
                        1
                    }
                }
            } else {
                1
            };
            let line = std::mem::take(&mut self.line);
            self.progress |= line.first().is_some_and(|&b| b != b':');
            self.raw.extend_from_slice(&line);
            self.raw.extend_from_slice(&rest[i..i + term_len]);
            rest = &rest[i + term_len..];
            // When a CRLF is split after the `\r`, the `\n` is attributed to the next event's
            // bytes, which keeps every byte accounted for.
            if let Some(ev) = self.line_done(&line) {
                out.push(ev);
            }
        }
        self.line.extend_from_slice(rest);
        self.progress |= !rest.is_empty() && self.line.first().is_some_and(|&b| b != b':');
        out
    }

    /// Whether a field line (data, event, id, …) arrived since the last call; comments and
    /// blank lines do not count. The proxy's idle timer is re-armed only by progress, so an
    /// upstream that sends nothing but keep-alive comments stalls.
    pub fn progressed(&mut self) -> bool {
        std::mem::take(&mut self.progress)
    }

    /// Ends the stream: whatever is left becomes a final event (the SSE spec would discard an
    /// unterminated event; a meter still wants its data, and a forwarder its bytes).
    pub fn finish(&mut self) -> Option<SseEvent> {
        let line = std::mem::take(&mut self.line);
        self.raw.extend_from_slice(&line);
        if !line.is_empty() {
            self.field(&line);
        }
        if self.raw.is_empty() {
            return None;
        }
        Some(self.take_event())
    }

    fn line_done(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            return Some(self.take_event());
        }
        self.field(line);
        None
    }

    fn field(&mut self, line: &[u8]) {
        if line.first() == Some(&b':') {
            return; // comment
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        let value = String::from_utf8_lossy(value);
        match name {
            b"data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(&value);
                }
                None => self.data = Some(value.into_owned()),
            },
            b"event" => self.event = Some(value.into_owned()),
            _ => {}
        }
    }

    fn take_event(&mut self) -> SseEvent {
        SseEvent {
            event: self.event.take(),
            data: self.data.take(),
            raw: Bytes::from(std::mem::take(&mut self.raw)),
        }
    }
}

/// The same framing as [`SseParser`] for a caller that only reads each event's data (a meter):
/// nothing is allocated per event or per line once its buffers have grown to the largest event
/// seen, and an event contained in one chunk is read in place.
#[derive(Default)]
pub struct SseScanner {
    /// The current line, when it started in an earlier chunk.
    line: Vec<u8>,
    /// The current event's `data:` lines joined with `\n`.
    data: Vec<u8>,
    has_data: bool,
    after_cr: bool,
    /// As [`SseParser`]'s: a field line arrived since the last [`SseScanner::progressed`].
    progress: bool,
}

impl SseScanner {
    /// A scanner at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; calls `on_data` with the data of every event they complete that has a data
    /// line (its bytes exactly as [`SseParser`] would have joined them, before any lossy UTF-8
    /// conversion).
    pub fn push(&mut self, chunk: &[u8], mut on_data: impl FnMut(&[u8])) {
        let mut rest = chunk;
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if rest[0] == b'\n' {
                rest = &rest[1..];
            }
        }
        while let Some(i) = memchr::memchr2(b'\n', b'\r', rest) {
            let term_len = if rest[i] == b'\r' {
                match rest.get(i + 1) {
                    Some(b'\n') => 2,
                    Some(_) => 1,
                    None => {
                        self.after_cr = true;
                        1
                    }
                }
            } else {
                1
            };
            if self.line.is_empty() {
                let line = &rest[..i];
                self.progress |= line.first().is_some_and(|&b| b != b':');
                self.line_done(line, &mut on_data);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(&rest[..i]);
                self.progress |= line.first().is_some_and(|&b| b != b':');
                self.line_done(&line, &mut on_data);
                // Keep the buffer's capacity for the next split line.
                line.clear();
                self.line = line;
            }
            rest = &rest[i + term_len..];
        }
        self.line.extend_from_slice(rest);
        self.progress |= !rest.is_empty() && self.line.first().is_some_and(|&b| b != b':');
    }

    /// Whether a field line arrived since the last call (comments and blank lines do not
    /// count), exactly as [`SseParser::progressed`].
    pub fn progressed(&mut self) -> bool {
        std::mem::take(&mut self.progress)
    }

    /// Ends the stream: an unterminated last event still counts (as in [`SseParser::finish`]).
    pub fn finish(&mut self, mut on_data: impl FnMut(&[u8])) {
        let line = std::mem::take(&mut self.line);
        if !line.is_empty() {
            self.field(&line);
        }
        if self.has_data {
            self.has_data = false;
            on_data(&self.data);
            self.data.clear();
        }
    }

    fn line_done(&mut self, line: &[u8], on_data: &mut impl FnMut(&[u8])) {
        if line.is_empty() {
            if self.has_data {
                self.has_data = false;
                on_data(&self.data);
                self.data.clear();
            }
            return;
        }
        self.field(line);
    }

    fn field(&mut self, line: &[u8]) {
        if line.first() == Some(&b':') {
            return; // comment
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        if name == b"data" {
            if self.has_data {
                self.data.push(b'\n');
            }
            self.has_data = true;
            self.data.extend_from_slice(value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scanner reports the same data as the parser, wherever the stream is split.
    #[test]
    fn the_scanner_sees_the_parsers_data_at_every_split() {
        let bytes = STREAM.as_bytes();
        for a in 0..=bytes.len() {
            for b in a..=bytes.len() {
                let mut p = SseParser::new();
                let mut want: Vec<Vec<u8>> = Vec::new();
                for part in [&bytes[..a], &bytes[a..b], &bytes[b..]] {
                    want.extend(
                        p.push(part)
                            .into_iter()
                            .filter_map(|e| e.data)
                            .map(String::into_bytes),
                    );
                }
                want.extend(p.finish().and_then(|e| e.data).map(String::into_bytes));
                let mut sc = SseScanner::new();
                let mut got: Vec<Vec<u8>> = Vec::new();
                let mut p2 = SseParser::new();
                for part in [&bytes[..a], &bytes[a..b], &bytes[b..]] {
                    sc.push(part, |d| got.push(d.to_vec()));
                    let _ = p2.push(part);
                    assert_eq!(sc.progressed(), p2.progressed(), "progress at {a},{b}");
                }
                sc.finish(|d| got.push(d.to_vec()));
                assert_eq!(got, want, "split at {a},{b}");
            }
        }
        // An unterminated last event with data is reported at the end.
        let mut sc = SseScanner::new();
        let mut got = Vec::new();
        sc.push(b"data: a\n\ndata: tail", |d| got.push(d.to_vec()));
        sc.finish(|d| got.push(d.to_vec()));
        assert_eq!(got, vec![b"a".to_vec(), b"tail".to_vec()]);
    }

    const STREAM: &str = ": keep-alive\r\n\r\nevent: message_start\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\ndata: x\n\ndata:y\r\rdata: [DONE]\n\n";

    fn parse_split(splits: &[usize]) -> Vec<SseEvent> {
        let bytes = STREAM.as_bytes();
        let mut p = SseParser::new();
        let mut out = Vec::new();
        let mut last = 0;
        for &s in splits {
            out.extend(p.push(&bytes[last..s]));
            last = s;
        }
        out.extend(p.push(&bytes[last..]));
        out.extend(p.finish());
        out
    }

    #[test]
    fn comments_and_blank_lines_are_not_progress() {
        let mut p = SseParser::new();
        p.push(b": keep-alive\n\n: keep");
        assert!(!p.progressed());
        p.push(b"-alive\n\n\r\n");
        assert!(!p.progressed());
        p.push(b"da");
        assert!(p.progressed(), "a data line under way is progress");
        assert!(!p.progressed(), "reported once");
        p.push(b"ta: x\n\n");
        assert!(p.progressed());
        p.push(b"\n: ping\n");
        assert!(!p.progressed());
    }

    #[test]
    fn events_are_the_same_wherever_the_stream_is_split() {
        let whole = parse_split(&[]);
        let datas: Vec<_> = whole.iter().map(|e| e.data.clone()).collect();
        assert_eq!(
            datas,
            vec![
                None,
                Some("{\"a\":\n1}".to_owned()),
                Some("x".to_owned()),
                Some("y".to_owned()),
                Some("[DONE]".to_owned())
            ]
        );
        assert_eq!(whole[1].event.as_deref(), Some("message_start"));
        for a in 0..=STREAM.len() {
            for b in a..=STREAM.len() {
                let got = parse_split(&[a, b]);
                let d: Vec<_> = got
                    .iter()
                    .filter(|e| e.data.is_some())
                    .map(|e| e.data.clone())
                    .collect();
                let w: Vec<_> = whole
                    .iter()
                    .filter(|e| e.data.is_some())
                    .map(|e| e.data.clone())
                    .collect();
                assert_eq!(d, w, "split at {a},{b}");
                let raw: Vec<u8> = got.iter().flat_map(|e| e.raw.to_vec()).collect();
                assert_eq!(raw, STREAM.as_bytes(), "bytes lost at {a},{b}");
            }
        }
    }
}
