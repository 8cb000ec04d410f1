//! Relayed circuits idle for too long are closed.
//!
//! libp2p-relay 0.22 copies a circuit's bytes between its two streams in
//! the source connection's handler, with a total duration and byte limit
//! and no idle timeout; neither its handler nor its events say when bytes
//! last moved. So the relay's transport wraps every connection's
//! multiplexer ([`Muxer`]) and every stream of it ([`Substream`]): a stream
//! whose negotiated protocol is the relay's hop protocol (a circuit's, or a
//! reservation's, source side) or stop protocol (a circuit's destination
//! side) fails with `TimedOut` once no byte has moved on it, either way, for
//! the idle timeout. libp2p-relay's copy then ends, and the circuit closes
//! as when its duration runs out.
//!
//! The protocol is read from the relay's own side of multistream-select, the
//! first bytes it writes on the stream: as listener, its echo of the
//! protocol it accepted; as dialer, its proposal. Those bytes are the
//! relay's own, so a peer cannot disguise a circuit (a negotiation longer
//! than [`NEGOTIATION_BYTES`] counts as a circuit's, and so idles out too).
//! Other streams (identify, ping, Kademlia, AutoNAT) are passed through
//! untouched.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{AsyncRead, AsyncWrite};
use libp2p::core::muxing::{StreamMuxer, StreamMuxerEvent};
use tokio::time::{Instant, Sleep};

/// Bytes of the relay's side of a stream's protocol negotiation read to
/// find the protocol. multistream-select's header is 20 bytes, an echo or
/// proposal of the relay's protocols 33 or 34, a refusal 4: an honest
/// negotiation takes well under 512, and one that takes more is treated as
/// a circuit's.
pub const NEGOTIATION_BYTES: usize = 512;

const HEADER: &[u8] = b"/multistream/1.0.0\n";
const REFUSAL: &[u8] = b"na\n";

/// How long a circuit may carry no byte; shared by every connection's
/// [`Muxer`], so that a reload (SIGHUP) changes it for circuits open
/// already as for new ones.
#[derive(Debug, Clone)]
pub struct IdleTimeout(Arc<AtomicU64>);

impl IdleTimeout {
    /// `timeout`, to be shared.
    pub fn new(timeout: Duration) -> IdleTimeout {
        IdleTimeout(Arc::new(AtomicU64::new(millis(timeout))))
    }

    /// The timeout now.
    pub fn get(&self) -> Duration {
        Duration::from_millis(self.0.load(Ordering::Relaxed))
    }

    /// From now on, `timeout`.
    pub fn set(&self, timeout: Duration) {
        self.0.store(millis(timeout), Ordering::Relaxed);
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A connection's multiplexer whose circuit streams close after
/// `timeout` without a byte.
#[derive(Debug)]
pub struct Muxer<M> {
    inner: M,
    timeout: IdleTimeout,
}

impl<M> Muxer<M> {
    /// Wraps `inner`.
    pub fn new(inner: M, timeout: IdleTimeout) -> Muxer<M> {
        Muxer { inner, timeout }
    }
}

impl<M> StreamMuxer for Muxer<M>
where
    M: StreamMuxer + Unpin,
    M::Substream: Unpin,
{
    type Substream = Substream<M::Substream>;
    type Error = M::Error;

    fn poll_inbound(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::Substream, Self::Error>> {
        let timeout = self.timeout.clone();
        Pin::new(&mut self.inner)
            .poll_inbound(cx)
            .map_ok(|s| Substream::new(s, timeout))
    }

    fn poll_outbound(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Self::Substream, Self::Error>> {
        let timeout = self.timeout.clone();
        Pin::new(&mut self.inner)
            .poll_outbound(cx)
            .map_ok(|s| Substream::new(s, timeout))
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }

    fn poll(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<StreamMuxerEvent, Self::Error>> {
        Pin::new(&mut self.inner).poll(cx)
    }
}

/// What is known of a stream's protocol.
#[derive(Debug)]
enum Kind {
    /// Not yet: the relay's side of the negotiation so far.
    Negotiating(Vec<u8>),
    /// Not a circuit's.
    Other,
    /// A circuit's (or a reservation's): bytes last moved at `last`.
    Circuit {
        last: Instant,
        timer: Pin<Box<Sleep>>,
    },
}

/// A stream of a [`Muxer`].
#[derive(Debug)]
pub struct Substream<S> {
    inner: S,
    timeout: IdleTimeout,
    kind: Kind,
}

impl<S> Substream<S> {
    fn new(inner: S, timeout: IdleTimeout) -> Substream<S> {
        Substream {
            inner,
            timeout,
            kind: Kind::Negotiating(Vec::new()),
        }
    }

    /// The relay wrote `bytes`.
    fn wrote(&mut self, bytes: &[u8]) {
        if let Kind::Negotiating(seen) = &mut self.kind {
            let room = NEGOTIATION_BYTES.saturating_sub(seen.len());
            seen.extend_from_slice(&bytes[..bytes.len().min(room)]);
            match protocol(seen) {
                Some(true) => self.start_circuit(),
                Some(false) => self.kind = Kind::Other,
                None if seen.len() >= NEGOTIATION_BYTES => self.start_circuit(),
                None => {}
            }
        }
        self.moved();
    }

    fn start_circuit(&mut self) {
        let last = Instant::now();
        self.kind = Kind::Circuit {
            last,
            timer: Box::pin(tokio::time::sleep_until(last + self.timeout.get())),
        };
    }

    /// Bytes moved.
    fn moved(&mut self) {
        if let Kind::Circuit { last, .. } = &mut self.kind {
            *last = Instant::now();
        }
    }

    /// Whether a circuit's stream has been idle for the timeout; if not,
    /// the timer wakes `cx` when it would be.
    fn idle(&mut self, cx: &mut Context<'_>) -> bool {
        let Kind::Circuit { last, timer } = &mut self.kind else {
            return false;
        };
        loop {
            let deadline = *last + self.timeout.get();
            if Instant::now() >= deadline {
                return true;
            }
            if timer.deadline() != deadline {
                timer.as_mut().reset(deadline);
            }
            if timer.as_mut().poll(cx).is_pending() {
                return false;
            }
        }
    }

    fn timed_out(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "relayed circuit idle for {}",
                humantime::format_duration(self.timeout.get())
            ),
        )
    }
}

/// Whether the negotiation the relay wrote so far (`seen`) settled on the
/// hop or stop protocol (`Some(true)`), on another (`Some(false)`), or not
/// yet (`None`). It is a series of messages, each a varint length and that
/// many bytes: the header, refusals, answers to `ls` (which do not start
/// with `/`), and the protocol, `/…\n`.
fn protocol(seen: &[u8]) -> Option<bool> {
    let hop = [libp2p::relay::HOP_PROTOCOL_NAME.as_ref().as_bytes(), b"\n"].concat();
    let stop = [libp2p::relay::STOP_PROTOCOL_NAME.as_ref().as_bytes(), b"\n"].concat();
    let mut rest = seen;
    loop {
        let (len, after) = unsigned_varint(rest)?;
        let message = after.get(..len)?;
        rest = &after[len..];
        if message == HEADER || message == REFUSAL {
            continue;
        }
        if message.first() == Some(&b'/') && message.last() == Some(&b'\n') {
            return Some(message == hop.as_slice() || message == stop.as_slice());
        }
    }
}

/// A varint (LEB128, as multistream-select frames its messages) at the
/// start of `bytes`, and the bytes after it; `None` if incomplete or over 3
/// bytes (a message over 2 MiB, which no negotiation has).
fn unsigned_varint(bytes: &[u8]) -> Option<(usize, &[u8])> {
    let mut n = 0usize;
    for (i, b) in bytes.iter().enumerate().take(3) {
        n |= usize::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((n, &bytes[i + 1..]));
        }
    }
    None
}

impl<S: AsyncRead + Unpin> AsyncRead for Substream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    this.moved();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Pending if this.idle(cx) => Poll::Ready(Err(this.timed_out())),
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Substream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => {
                this.wrote(&buf[..n]);
                Poll::Ready(Ok(n))
            }
            Poll::Pending if this.idle(cx) => Poll::Ready(Err(this.timed_out())),
            other => other,
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_flush(cx) {
            Poll::Pending if this.idle(cx) => Poll::Ready(Err(this.timed_out())),
            other => other,
        }
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(messages: &[&[u8]]) -> Vec<u8> {
        messages
            .iter()
            .flat_map(|m| {
                let mut v = vec![u8::try_from(m.len()).unwrap()];
                v.extend_from_slice(m);
                v
            })
            .collect()
    }

    #[test]
    fn the_relays_own_negotiation_names_the_protocol() {
        let hop = b"/libp2p/circuit/relay/0.2.0/hop\n";
        let stop = b"/libp2p/circuit/relay/0.2.0/stop\n";
        assert_eq!(protocol(&framed(&[HEADER, hop])), Some(true));
        assert_eq!(protocol(&framed(&[HEADER, stop])), Some(true));
        assert_eq!(
            protocol(&framed(&[HEADER, b"/ipfs/id/1.0.0\n"])),
            Some(false)
        );
        // Refused proposals first, then the hop protocol.
        assert_eq!(
            protocol(&framed(&[HEADER, REFUSAL, REFUSAL, hop])),
            Some(true)
        );
        // An answer to `ls` lists protocols: it is not the protocol.
        let ls = framed(&[b"/ipfs/id/1.0.0\n", hop]);
        let mut listed = ls.clone();
        listed.push(b'\n');
        assert_eq!(protocol(&framed(&[HEADER, &listed, hop])), Some(true));
        assert_eq!(protocol(&framed(&[HEADER, &listed])), None);
        // Not yet: the header alone, or half a message.
        assert_eq!(protocol(&framed(&[HEADER])), None);
        assert_eq!(protocol(&framed(&[HEADER, hop])[..30]), None);
    }
}
