//! 414 for a request line of 64 KiB or more, with a JSON body.
//!
//! actix-http answers such a line with a bare 400 (the URI does not parse past 65,534
//! bytes) or 431 (the head outgrows its 128 KiB buffer), before any route or middleware
//! sees the request. So the limit is kept one layer lower: [`LineLimit`] wraps each
//! accepted connection and follows the request stream just enough to know where each
//! request line starts (heads up to their blank line, bodies skipped by
//! `Content-Length`). It holds each request line back until its end; one that reaches
//! [`MAX_REQUEST_LINE`] bytes is dropped and replaced by a request for
//! [`URI_TOO_LONG_PATH`], which the API answers with 414 and a JSON error in its turn
//! (after the answers to earlier pipelined requests). Bodies sent with chunked transfer
//! encoding are not followed: the rest of such a connection passes through unchecked
//! (actix-http's own limits still apply there).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The shortest request line refused with 414: 64 KiB. Far above any URL a browser or
/// HTTP library sends (they stop near 2 to 8 KiB), and below actix-http's own limits.
pub const MAX_REQUEST_LINE: usize = 65_536;

/// Longest header line prefix kept to find `Content-Length` / `Transfer-Encoding`.
const HEADER_PREFIX: usize = 128;

/// The path that stands in for a request line over the limit; routed to a 414.
pub const URI_TOO_LONG_PATH: &str = "/.well-known/fairshare/uri-too-long";

fn stand_in() -> Vec<u8> {
    format!("GET {URI_TOO_LONG_PATH} HTTP/1.1\r\n").into_bytes()
}

#[derive(Debug)]
enum State {
    /// Holding a request line until its end (in `LineLimit::line`).
    RequestLine,
    /// Dropping the rest of a request line over the limit.
    Discarding,
    /// In the header lines: the current line's first bytes, and what the head said
    /// about its body so far.
    Headers {
        line: Vec<u8>,
        content_length: u64,
        chunked: bool,
    },
    /// Passing this many body bytes.
    Body(u64),
    /// No longer followed (chunked body).
    Passthrough,
}

impl State {
    fn headers() -> State {
        State::Headers {
            line: Vec::new(),
            content_length: 0,
            chunked: false,
        }
    }
}

/// A connection whose request lines are held to [`MAX_REQUEST_LINE`].
#[derive(Debug)]
pub struct LineLimit<T> {
    inner: T,
    state: State,
    /// The request line held back so far.
    line: Vec<u8>,
    /// Bytes ready for the reader, from `ready_at` on.
    ready: Vec<u8>,
    ready_at: usize,
}

/// Length of a line without its line ending.
fn content_len(line: &[u8]) -> usize {
    line.iter().filter(|b| !matches!(b, b'\r' | b'\n')).count()
}

impl<T> LineLimit<T> {
    /// Wraps a freshly accepted connection.
    pub fn new(inner: T) -> Self {
        LineLimit {
            inner,
            state: State::RequestLine,
            line: Vec::new(),
            ready: Vec::new(),
            ready_at: 0,
        }
    }

    /// Follows `data` from the client, queueing what the server may read.
    fn follow(&mut self, data: &[u8]) {
        let mut i = 0;
        while i < data.len() {
            let rest = &data[i..];
            match &mut self.state {
                State::Passthrough => {
                    self.ready.extend_from_slice(rest);
                    return;
                }
                State::Body(n) => {
                    let take = (*n).min(rest.len() as u64) as usize;
                    self.ready.extend_from_slice(&rest[..take]);
                    *n -= take as u64;
                    i += take;
                    if *n == 0 {
                        self.state = State::RequestLine;
                    }
                }
                State::RequestLine => match rest.iter().position(|b| *b == b'\n') {
                    Some(k) => {
                        self.line.extend_from_slice(&rest[..=k]);
                        i += k + 1;
                        let len = content_len(&self.line);
                        if len >= MAX_REQUEST_LINE {
                            self.refuse();
                            self.ready.extend(stand_in());
                            self.state = State::headers();
                        } else {
                            self.ready.append(&mut self.line);
                            // Blank lines before a request line are passed on as such.
                            if len > 0 {
                                self.state = State::headers();
                            }
                        }
                        self.line.clear();
                    }
                    None => {
                        self.line.extend_from_slice(rest);
                        i = data.len();
                        if content_len(&self.line) >= MAX_REQUEST_LINE {
                            self.refuse();
                            self.line = Vec::new();
                            self.state = State::Discarding;
                        }
                    }
                },
                State::Discarding => match rest.iter().position(|b| *b == b'\n') {
                    Some(k) => {
                        i += k + 1;
                        self.ready.extend(stand_in());
                        self.state = State::headers();
                    }
                    None => i = data.len(),
                },
                State::Headers {
                    line,
                    content_length,
                    chunked,
                } => {
                    let b = rest[0];
                    i += 1;
                    self.ready.push(b);
                    match b {
                        b'\n' if line.is_empty() => {
                            // End of the head.
                            self.state = if *chunked {
                                State::Passthrough
                            } else if *content_length > 0 {
                                State::Body(*content_length)
                            } else {
                                State::RequestLine
                            };
                        }
                        b'\n' => {
                            let text = String::from_utf8_lossy(line).to_ascii_lowercase();
                            if let Some(v) = text.strip_prefix("content-length:") {
                                *content_length = v.trim().parse().unwrap_or(0);
                            } else if let Some(v) = text.strip_prefix("transfer-encoding:") {
                                *chunked |= v.contains("chunked");
                            }
                            line.clear();
                        }
                        b'\r' => {}
                        _ if line.len() < HEADER_PREFIX => line.push(b),
                        _ => {}
                    }
                }
            }
        }
    }

    fn refuse(&self) {
        tracing::debug!(
            target: crate::telemetry::CLIENT_FAULT_TARGET,
            "request line of {MAX_REQUEST_LINE} bytes or more: answered 414"
        );
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for LineLimit<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.ready_at < this.ready.len() {
                let n = buf.remaining().min(this.ready.len() - this.ready_at);
                buf.put_slice(&this.ready[this.ready_at..this.ready_at + n]);
                this.ready_at += n;
                if this.ready_at == this.ready.len() {
                    this.ready.clear();
                    this.ready_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if matches!(this.state, State::Passthrough) {
                return Pin::new(&mut this.inner).poll_read(cx, buf);
            }
            let mut chunk = [0u8; 8192];
            let mut read = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) => {}
                other => return other,
            }
            if read.filled().is_empty() {
                // End of stream: hand on a request line still held, then the end.
                if this.line.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                this.ready.append(&mut this.line);
                continue;
            }
            this.follow(read.filled());
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for LineLimit<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, data)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn follow_all(chunks: &[&[u8]]) -> (LineLimit<()>, Vec<u8>) {
        let mut l = LineLimit::new(());
        for c in chunks {
            l.follow(c);
        }
        let out = l.ready.clone();
        (l, out)
    }

    #[test]
    fn ordinary_requests_with_bodies_pass_untouched() {
        let a = b"POST /v1/jobs HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello";
        let b = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
        let whole = [a.as_slice(), b.as_slice()].concat();
        // Byte by byte, and in one piece.
        let bytes: Vec<&[u8]> = whole.chunks(1).collect();
        for chunks in [bytes, vec![whole.as_slice()]] {
            let (l, out) = follow_all(&chunks);
            assert_eq!(out, whole);
            assert!(matches!(l.state, State::RequestLine));
        }
    }

    #[test]
    fn a_body_with_long_lines_is_not_a_request_line() {
        let body = vec![b'x'; 2 * MAX_REQUEST_LINE];
        let head = format!(
            "POST /v1/jobs HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let (_, out) = follow_all(&[head.as_bytes(), &body]);
        assert_eq!(out, [head.as_bytes(), &body].concat());
    }

    #[test]
    fn a_request_line_at_the_limit_is_replaced_across_reads() {
        let mut line = b"GET /".to_vec();
        line.extend(std::iter::repeat_n(b'a', MAX_REQUEST_LINE));
        line.extend(b" HTTP/1.1\r\nHost: x\r\n\r\n");
        let (first, rest) = line.split_at(1000);
        let (_, out) = follow_all(&[first, rest]);
        let want = format!("GET {URI_TOO_LONG_PATH} HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!(String::from_utf8_lossy(&out), want);
        let mut under = vec![b'a'; MAX_REQUEST_LINE - 1];
        under.extend(b"\r\n");
        let (_, out) = follow_all(&[&under]);
        assert_eq!(out, under);
    }

    #[test]
    fn a_chunked_body_ends_following() {
        let (l, _) = follow_all(&[b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n"]);
        assert!(matches!(l.state, State::Passthrough));
    }
}
