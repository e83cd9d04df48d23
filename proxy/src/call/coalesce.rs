//! Coalescing a stream's ready chunks into one write to the client.
//!
//! The upstream client hands its body over one chunk at a time (hyper's body channel holds one
//! chunk, and the connection task decodes the next only after the previous was taken), and the
//! client's connection writes after every chunk its body yields before the next is ready. A
//! DeepSeek stream sends one event per token, so forwarding chunk by chunk costs a write (and the
//! client a read and a wakeup) per token. Instead, after each chunk the pump gives the upstream's
//! connection task — just woken by the chunk taken from it — a few scheduler turns, and takes the
//! next chunk if they produced one; the batch goes out as soon as `TURNS` turns in a row produced
//! nothing. A turn never waits for I/O, so only bytes that had already reached the proxy are ever
//! added to a batch: nothing is held back while the upstream waits, and the added delay is
//! bounded by the proxy's own work on bytes it already has.

use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};

/// The most bytes one batch carries: a bound on the proxy's buffering per stream, and on how
/// long the first byte of a batch waits for the rest of it.
pub(super) const MAX_BATCH: usize = 64 * 1024;

/// Turns in a row that found nothing ready before a batch closes. A chunk already in the
/// upstream connection's read buffer is handed over within two turns (measured: the take wakes
/// the connection task, whose next poll decodes the chunk and wakes the pump), so a third empty
/// turn means the connection task is waiting on the socket: the upstream has sent nothing more.
const TURNS: usize = 3;

/// A stream's source as the coalescing loop sees it.
pub(super) trait Chunks {
    /// What ended or broke the stream, kept for the next read.
    type End;
    /// The next chunk if one is ready now (registering the task's waker otherwise), or the end.
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Result<Bytes, Self::End>>;
    /// The per-chunk work (meter, digest, redaction); returns what the client may see of it.
    fn process(&mut self, chunk: Bytes) -> Bytes;
}

/// Adds to `first` (already processed) every chunk that becomes ready without waiting on the
/// upstream, up to [`MAX_BATCH`]; returns the batch and, if the stream ended meanwhile, its end.
///
/// A turn is `tokio::task::yield_now`: the task resumes once everything runnable on its worker
/// has run (the upstream's connection task among them), or earlier, when the connection task
/// hands over a chunk. [`TURNS`] turns in a row with nothing to take end the batch; a turn
/// never waits for I/O, so the batch never waits for the upstream.
pub(super) async fn coalesce<C: Chunks>(src: &mut C, first: Bytes) -> (Bytes, Option<C::End>) {
    let mut batch: Option<BytesMut> = None;
    let mut len = first.len();
    let mut idle_turns = 0;
    while len < MAX_BATCH {
        let next = std::future::poll_fn(|cx| Poll::Ready(src.poll_chunk(cx))).await;
        let chunk = match next {
            Poll::Ready(Ok(c)) => c,
            Poll::Ready(Err(end)) => return (joined(first, batch), Some(end)),
            Poll::Pending if idle_turns >= TURNS => break,
            Poll::Pending => {
                tokio::task::yield_now().await;
                idle_turns += 1;
                continue;
            }
        };
        idle_turns = 0;
        let out = src.process(chunk);
        if out.is_empty() {
            continue;
        }
        len += out.len();
        let b = batch.get_or_insert_with(|| {
            let mut b = BytesMut::with_capacity(MAX_BATCH.min(4 * len));
            b.extend_from_slice(&first);
            b
        });
        b.extend_from_slice(&out);
    }
    (joined(first, batch), None)
}

fn joined(first: Bytes, batch: Option<BytesMut>) -> Bytes {
    match batch {
        Some(b) => b.freeze(),
        None => first,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::secret::{SecretKey, StreamRedactor};
    use std::collections::VecDeque;

    const KEY: &str = "sk-coalesce-0123456789abcdef";

    /// Chunks that are all ready at once, redacted by the real stream redactor.
    struct Ready {
        chunks: VecDeque<Bytes>,
        redactor: StreamRedactor,
        processed: usize,
    }

    impl Ready {
        fn redactions(&self) -> usize {
            self.redactor.redactions()
        }
    }

    impl Chunks for Ready {
        type End = &'static str;
        fn poll_chunk(&mut self, _: &mut Context<'_>) -> Poll<Result<Bytes, &'static str>> {
            Poll::Ready(self.chunks.pop_front().ok_or("end"))
        }
        fn process(&mut self, chunk: Bytes) -> Bytes {
            self.processed += 1;
            self.redactor.push_bytes(chunk)
        }
    }

    fn ready(chunks: Vec<Vec<u8>>) -> Ready {
        let key = SecretKey::from_value_for_tests(KEY).unwrap();
        Ready {
            chunks: chunks.into_iter().map(Bytes::from).collect(),
            redactor: key.redactor().stream(),
            processed: 0,
        }
    }

    /// A source whose readiness the test scripts: each poll takes the next entry, `None` being
    /// a poll that finds nothing ready (the upstream waiting, or its connection task not yet
    /// run).
    struct Scripted {
        polls: VecDeque<Option<&'static [u8]>>,
    }

    impl Chunks for Scripted {
        type End = ();
        fn poll_chunk(&mut self, _: &mut Context<'_>) -> Poll<Result<Bytes, ()>> {
            match self.polls.pop_front() {
                Some(Some(c)) => Poll::Ready(Ok(Bytes::from_static(c))),
                Some(None) => Poll::Pending,
                None => Poll::Ready(Err(())),
            }
        }
        fn process(&mut self, chunk: Bytes) -> Bytes {
            chunk
        }
    }

    /// Polls `f` at most `max` times with a waker that does nothing, outside any runtime (where
    /// a yield wakes its task at once): `None` when it did not finish, i.e. it waits for
    /// something the test never provides. No timing is involved.
    fn drive<F: std::future::Future>(f: F, max: usize) -> Option<F::Output> {
        let mut f = std::pin::pin!(f);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        (0..max).find_map(|_| match f.as_mut().poll(&mut cx) {
            Poll::Ready(v) => Some(v),
            Poll::Pending => None,
        })
    }

    #[test]
    fn chunks_that_are_ready_go_out_in_one_batch() {
        let mut src = ready(
            (0..50)
                .map(|i| format!("data: {i}\n\n").into_bytes())
                .collect(),
        );
        let first = src.chunks.pop_front().unwrap();
        let (out, end) = drive(coalesce(&mut src, first), 10).unwrap();
        let want: String = (0..50).map(|i| format!("data: {i}\n\n")).collect();
        assert_eq!(
            out,
            want.as_bytes(),
            "every ready chunk, in order, in one batch"
        );
        assert_eq!(end, Some("end"), "the end is kept for the next read");
    }

    #[test]
    fn a_batch_stops_at_its_bound_and_leaves_the_rest() {
        let big = vec![b'x'; MAX_BATCH / 4];
        let mut src = ready(vec![big.clone(); 10]);
        let first = src.chunks.pop_front().unwrap();
        let (out, end) = drive(coalesce(&mut src, first), 10).unwrap();
        assert_eq!(out.len(), MAX_BATCH, "four chunks reach the bound");
        assert_eq!(end, None);
        assert_eq!(src.chunks.len(), 6, "the rest waits for the next batch");
    }

    /// The key split across two chunks of one batch is redacted; the redactor sees every chunk
    /// in order whichever batch it lands in.
    #[test]
    fn a_key_split_across_coalesced_chunks_is_redacted() {
        let (a, b) = KEY.split_at(11);
        let chunks = vec![
            format!("data: {{\"content\":\"x{a}").into_bytes(),
            format!("{b}y\"}}\n\n").into_bytes(),
            b"data: [DONE]\n\n".to_vec(),
        ];
        let mut src = ready(chunks);
        let first = src.chunks.pop_front().unwrap();
        let first = src.process(first);
        let (out, _) = drive(coalesce(&mut src, first), 10).unwrap();
        let text = String::from_utf8(out.to_vec()).unwrap();
        assert!(!text.contains(KEY) && !text.contains(b), "{text}");
        assert!(text.contains("x[REDACTED]y"), "{text}");
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        assert_eq!(src.redactions(), 1);
        assert_eq!(src.processed, 3);
    }

    /// Bytes that reached the proxy are never held while the upstream waits: once a turn finds
    /// nothing ready, the batch goes out, whatever the upstream does later.
    #[test]
    fn nothing_is_held_back_while_the_upstream_waits() {
        let mut polls = vec![Some(&b"data: 2\n\n"[..])];
        polls.extend([None; TURNS + 1]);
        polls.push(Some(b"data: 3\n\n"));
        let mut src = Scripted {
            polls: polls.into(),
        };
        let (out, end) = drive(coalesce(&mut src, Bytes::from_static(b"data: 1\n\n")), 10)
            .expect("the batch waited for the upstream");
        assert_eq!(out, &b"data: 1\n\ndata: 2\n\n"[..]);
        assert_eq!(end, None, "the upstream is still open");
        assert_eq!(
            src.polls.len(),
            1,
            "the later chunk is left for the next batch"
        );
    }

    /// A chunk that becomes ready within the turns (the upstream's connection task ran) joins
    /// the batch; only `TURNS` empty turns in a row end it.
    #[test]
    fn a_chunk_ready_within_the_turns_joins_the_batch() {
        let mut polls = vec![None; TURNS];
        polls.push(Some(&b"data: 2\n\n"[..]));
        polls.extend([None; TURNS - 1]);
        polls.push(Some(b"data: 3\n\n"));
        let mut src = Scripted {
            polls: polls.into(),
        };
        let (out, end) = drive(coalesce(&mut src, Bytes::from_static(b"data: 1\n\n")), 20).unwrap();
        assert_eq!(out, &b"data: 1\n\ndata: 2\n\ndata: 3\n\n"[..]);
        assert_eq!(end, Some(()));
    }
}
