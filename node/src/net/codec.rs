//! The request-response codec of agentmesh's protocols: libp2p's CBOR
//! codec behind two bounds a stranger can't talk its way past.
//!
//! - **Sizes per protocol and direction.** Each protocol reads requests
//!   and responses up to what its messages need ([`Limits`]), not
//!   request-response's defaults (1 MiB requests, 10 MiB responses).
//! - **A shared budget for inbound requests.** Every connection's handler
//!   reads requests into memory before the node can look at who sent
//!   them, so the bytes being read at once, over all connections, come out
//!   of one budget per protocol. A request that finds the budget spent is
//!   dropped unread (its sender sees the stream fail and retries later),
//!   so a flood of connections holds at most the budget, however many
//!   connections and streams it opens.
//!
//! Lists inside messages are bounded while they decode
//! ([`bounded`]), so a small message of many tiny items can't decode into
//! a large one.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::prelude::*;
use libp2p::StreamProtocol;
use libp2p::request_response::{self, cbor};
use serde::{Serialize, de::DeserializeOwned};

pub use crate::wire::{Limits, bounded};

/// How much of a message is read per step; only the bytes that arrived
/// are taken from the budget.
const CHUNK: usize = 4 * 1024;

/// Bytes that may be in use at once, shared by every clone.
#[derive(Debug, Clone)]
pub struct Budget {
    free: Arc<AtomicUsize>,
}

impl Budget {
    /// A budget of `bytes`.
    pub fn new(bytes: usize) -> Self {
        Budget {
            free: Arc::new(AtomicUsize::new(bytes)),
        }
    }

    /// Bytes not in use now (shown by the codec's `Debug`).
    pub fn free(&self) -> usize {
        self.free.load(Ordering::Relaxed)
    }

    /// Takes `n` bytes if they are free.
    fn take(&self, n: usize) -> bool {
        self.free
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |free| {
                free.checked_sub(n)
            })
            .is_ok()
    }

    fn give(&self, n: usize) {
        self.free.fetch_add(n, Ordering::AcqRel);
    }
}

/// Bytes taken from a [`Budget`], given back when dropped.
struct Reserved<'a> {
    budget: &'a Budget,
    bytes: usize,
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.budget.give(self.bytes);
    }
}

/// Reads at most `max` bytes from `io`, taking every byte that arrives from
/// `budget` (no budget: just the size bound). A stream that sends nothing,
/// or a byte at a time, holds only what it sent.
async fn read_bounded<T: AsyncRead + Unpin + Send>(
    io: &mut T,
    max: usize,
    budget: Option<&Budget>,
) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut reserved = budget.map(|budget| Reserved { budget, bytes: 0 });
    let mut chunk = vec![0u8; CHUNK];
    loop {
        if out.len() > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("message over its limit of {max} bytes"),
            ));
        }
        let want = CHUNK.min(max + 1 - out.len());
        let n = io.read(&mut chunk[..want]).await?;
        if n == 0 {
            return Ok(out);
        }
        if let Some(r) = reserved.as_mut() {
            if !r.budget.take(n) {
                return Err(io::Error::other(
                    "too many requests are being read at once; try again later",
                ));
            }
            r.bytes += n;
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// libp2p's CBOR codec with [`Limits`].
pub struct Codec<Req, Resp> {
    inner: cbor::codec::Codec<Req, Resp>,
    limits: Limits,
    budget: Budget,
}

impl<Req, Resp> std::fmt::Debug for Codec<Req, Resp> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Codec")
            .field("limits", &self.limits)
            .field("budget_free", &self.budget.free())
            .finish()
    }
}

impl<Req, Resp> Clone for Codec<Req, Resp> {
    fn clone(&self) -> Self {
        Codec {
            inner: self.inner.clone(),
            limits: self.limits,
            budget: self.budget.clone(),
        }
    }
}

impl<Req, Resp> Codec<Req, Resp> {
    /// A codec bounded by `limits`, with a fresh inbound budget.
    pub fn new(limits: Limits) -> Self {
        Codec {
            // The inner codec only ever decodes a slice read here.
            inner: cbor::codec::Codec::default()
                .set_request_size_maximum(limits.request as u64)
                .set_response_size_maximum(limits.response as u64),
            limits,
            budget: Budget::new(limits.inbound_budget),
        }
    }
}

impl<Req, Resp> request_response::Codec for Codec<Req, Resp>
where
    Req: Send + Serialize + DeserializeOwned,
    Resp: Send + Serialize + DeserializeOwned,
{
    type Protocol = StreamProtocol;
    type Request = Req;
    type Response = Resp;

    async fn read_request<T>(&mut self, protocol: &StreamProtocol, io: &mut T) -> io::Result<Req>
    where
        T: AsyncRead + Unpin + Send,
    {
        let budget = self.budget.clone();
        let bytes = read_bounded(io, self.limits.request, Some(&budget)).await?;
        self.inner.read_request(protocol, &mut &bytes[..]).await
    }

    async fn read_response<T>(&mut self, protocol: &StreamProtocol, io: &mut T) -> io::Result<Resp>
    where
        T: AsyncRead + Unpin + Send,
    {
        // Responses answer requests this machine chose to send, so their
        // number is bounded by what it sends; only their size is bounded here.
        let bytes = read_bounded(io, self.limits.response, None).await?;
        self.inner.read_response(protocol, &mut &bytes[..]).await
    }

    async fn write_request<T>(
        &mut self,
        protocol: &StreamProtocol,
        io: &mut T,
        req: Req,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        self.inner.write_request(protocol, io, req).await
    }

    async fn write_response<T>(
        &mut self,
        protocol: &StreamProtocol,
        io: &mut T,
        res: Resp,
    ) -> io::Result<()>
    where
        T: AsyncWrite + Unpin + Send,
    {
        self.inner.write_response(protocol, io, res).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

    use super::*;

    #[test]
    fn reads_take_from_the_budget_and_give_it_back() {
        futures::executor::block_on(async {
            let budget = Budget::new(100 * 1024);
            let data = vec![7u8; 40 * 1024];
            let got = read_bounded(&mut &data[..], 64 * 1024, Some(&budget))
                .await
                .unwrap();
            assert_eq!(got, data);
            assert_eq!(budget.free(), 100 * 1024, "given back after the read");
            // Over the size limit: refused, budget given back.
            let e = read_bounded(&mut &data[..], 20 * 1024, Some(&budget))
                .await
                .unwrap_err();
            assert!(e.to_string().contains("over its limit"), "{e}");
            assert_eq!(budget.free(), 100 * 1024);
            // A stream trickling a byte at a time holds what it sent, not
            // a chunk per read.
            struct Trickle(usize);
            impl AsyncRead for Trickle {
                fn poll_read(
                    mut self: std::pin::Pin<&mut Self>,
                    _: &mut std::task::Context<'_>,
                    buf: &mut [u8],
                ) -> std::task::Poll<io::Result<usize>> {
                    if self.0 == 0 || buf.is_empty() {
                        return std::task::Poll::Ready(Ok(0));
                    }
                    self.0 -= 1;
                    buf[0] = 1;
                    std::task::Poll::Ready(Ok(1))
                }
            }
            let small = Budget::new(300);
            let got = read_bounded(&mut Trickle(200), 1024, Some(&small))
                .await
                .unwrap();
            assert_eq!(got.len(), 200, "200 one-byte reads fit a 300-byte budget");
            // A budget spent elsewhere refuses the read.
            assert!(budget.take(100 * 1024 - 10));
            let e = read_bounded(&mut &data[..], 64 * 1024, Some(&budget))
                .await
                .unwrap_err();
            assert!(e.to_string().contains("try again later"), "{e}");
            budget.give(100 * 1024 - 10);
            assert_eq!(budget.free(), 100 * 1024);
        });
    }

    #[derive(Debug, serde::Deserialize)]
    struct List {
        #[serde(deserialize_with = "bounded::<_, _, 3>")]
        items: Vec<serde_bytes::ByteBuf>,
        after: u8,
    }

    #[test]
    fn long_lists_keep_their_first_items_and_decode_on() {
        let mut bytes = vec![];
        let items: Vec<serde_bytes::ByteBuf> = (0..1000u16)
            .map(|i| serde_bytes::ByteBuf::from(i.to_be_bytes().to_vec()))
            .collect();
        #[derive(serde::Serialize)]
        struct Out<'a> {
            items: &'a [serde_bytes::ByteBuf],
            after: u8,
        }
        ciborium::into_writer(
            &Out {
                items: &items,
                after: 9,
            },
            &mut bytes,
        )
        .unwrap();
        let list: List = ciborium::from_reader(&bytes[..]).unwrap();
        assert_eq!(list.items.len(), 3);
        assert_eq!(list.items[2].as_slice(), &2u16.to_be_bytes());
        assert_eq!(list.after, 9, "the fields after the list still decode");
    }

    /// The sync messages as a build before the directory wrote and read
    /// them.
    mod before {
        use serde::{Deserialize, Serialize};

        #[derive(Debug, Serialize, Deserialize)]
        pub enum SyncRequest {
            Digest {
                #[serde(with = "serde_bytes")]
                team: Vec<u8>,
                #[serde(with = "serde_bytes")]
                digest: Vec<u8>,
                contacts: Vec<serde_bytes::ByteBuf>,
            },
        }

        #[derive(Debug, Serialize, Deserialize)]
        pub enum SyncReply {
            InSync { contacts: Vec<serde_bytes::ByteBuf> },
        }
    }

    /// What `from`'s build writes as a request, as `to`'s build reads it
    /// (libp2p's CBOR codec both ways, as on the wire).
    fn carried<A, B>(request: A) -> B
    where
        A: Send + Serialize + DeserializeOwned,
        B: Send + Serialize + DeserializeOwned,
    {
        use request_response::Codec as _;
        let protocol = StreamProtocol::new("/t");
        let mut bytes = vec![];
        futures::executor::block_on(async {
            cbor::codec::Codec::<A, A>::default()
                .write_request(
                    &protocol,
                    &mut futures::io::Cursor::new(&mut bytes),
                    request,
                )
                .await
                .unwrap();
            cbor::codec::Codec::<B, B>::default()
                .read_request(&protocol, &mut &bytes[..])
                .await
                .unwrap()
        })
    }

    #[test]
    fn a_team_with_mixed_versions_reads_each_others_syncs() {
        use crate::wire::{DIRECTORY_RECORD, RecordHave, SyncReply, SyncRequest, TypedRecord};
        // An older member's digest and answer: no directory, no records.
        let new: SyncRequest = carried(before::SyncRequest::Digest {
            team: vec![1; 32],
            digest: vec![2; 32],
            contacts: vec![],
        });
        assert!(matches!(new, SyncRequest::Digest { directory, .. } if directory.is_empty()));
        let new: SyncReply = carried(before::SyncReply::InSync { contacts: vec![] });
        assert!(
            matches!(new, SyncReply::InSync { records, more_records: false, .. } if records.is_empty())
        );
        // A newer member's: the older one skips what it does not know.
        let old: before::SyncReply = carried(SyncReply::InSync {
            contacts: vec![],
            records: vec![TypedRecord {
                kind: DIRECTORY_RECORD.into(),
                bytes: serde_bytes::ByteBuf::from(vec![1, 2, 3]),
            }],
            more_records: true,
        });
        assert!(matches!(old, before::SyncReply::InSync { contacts } if contacts.is_empty()));
        let _: before::SyncRequest = carried(SyncRequest::Digest {
            team: vec![1; 32],
            digest: vec![2; 32],
            contacts: vec![],
            directory: vec![RecordHave {
                peer: vec![0; 38],
                seq: 4,
            }],
        });
    }
}
