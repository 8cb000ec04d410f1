//! Envelopes and raw requests made by hand, a process's memory and a
//! home's size.

use super::*;

/// The peak resident memory of a process (VmHWM), MiB.
pub fn peak_rss_mib(pid: i32) -> f64 {
    crate::bench_messaging::proc_status_mib(pid, "VmHWM")
}

/// The bytes a directory's files take, recursively.
pub fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// The identity kept in a node's home (its daemon should be stopped, or
/// the test acts as that machine beside it).
pub fn identity_of(home: &std::path::Path) -> Identity {
    let bytes = std::fs::read(home.join("identity.key")).expect("a key file");
    Identity::from_key_file(&bytes).expect("a valid key file")
}

/// An envelope from `from` to the owner's mailbox of `to`, as a courier
/// seals it, sent at `sent_at` and valid for `lifetime`, by an agent
/// called mallory.
pub fn envelope(
    from: &Identity,
    to: &Identity,
    team: TeamId,
    text: &str,
    sent_at: Timestamp,
    lifetime: Duration,
) -> Envelope {
    envelope_by("mallory", from, to, team, text, sent_at, lifetime)
}

/// [`envelope`], by the agent called `agent`.
pub fn envelope_by(
    agent: &str,
    from: &Identity,
    to: &Identity,
    team: TeamId,
    text: &str,
    sent_at: Timestamp,
    lifetime: Duration,
) -> Envelope {
    let id = MessageId::random(&mut rand::rng());
    let header = Header {
        id,
        team,
        from: from.peer_id(),
        to: to.peer_id(),
        kind: Kind::Tell,
        in_reply_to: None,
        thread: id,
        hop: 0,
        taint: false,
        sent_at,
        expires_at: sent_at.saturating_add(lifetime),
    };
    let body = Body {
        who: Who {
            kind: WhoKind::Agent,
            name: agent.into(),
            session_id: None,
            task: None,
        },
        from_mailbox: None,
        to_mailbox: None,
        text: text.into(),
        attachments: vec![],
    };
    agentmesh_protocol::seal(from, &to.x25519_public(), &header, &body, &mut rand::rng())
        .expect("a valid envelope")
}

/// `wire` with its header's version field (the header's first item) set
/// to `version`.
pub fn with_version(wire: &[u8], version: u64) -> Vec<u8> {
    with_header_item(wire, 0, ciborium::Value::Integer(version.into()))
}

/// `wire` with item `index` of its header (docs/protocol.md §5.2) set
/// to `value`, everything else as it was: what a machine that changes
/// an envelope it passes on would send.
pub fn with_header_item(wire: &[u8], index: usize, value: ciborium::Value) -> Vec<u8> {
    use ciborium::Value;
    let mut outer: Value = ciborium::from_reader(wire).expect("an envelope");
    let Value::Array(items) = &mut outer else {
        panic!("an envelope is an array")
    };
    let Value::Bytes(header) = &items[0] else {
        panic!("the header is bytes")
    };
    let mut h: Value = ciborium::from_reader(&header[..]).expect("a header");
    if let Value::Array(fields) = &mut h {
        fields[index] = value;
    }
    let mut header = vec![];
    ciborium::into_writer(&h, &mut header).expect("encodes");
    items[0] = Value::Bytes(header);
    let mut out = vec![];
    ciborium::into_writer(&outer, &mut out).expect("encodes");
    out
}

/// A codec that writes a request's bytes exactly as given (truncated CBOR,
/// junk, more than a limit) and reads back whatever comes.
#[derive(Debug, Clone, Default)]
struct RawCodec;

impl request_response::Codec for RawCodec {
    type Protocol = libp2p::StreamProtocol;
    type Request = Vec<u8>;
    type Response = Vec<u8>;

    async fn read_request<T>(&mut self, _: &Self::Protocol, io: &mut T) -> std::io::Result<Vec<u8>>
    where
        T: futures::AsyncRead + Unpin + Send,
    {
        let mut v = vec![];
        futures::AsyncReadExt::read_to_end(io, &mut v).await?;
        Ok(v)
    }

    async fn read_response<T>(&mut self, _: &Self::Protocol, io: &mut T) -> std::io::Result<Vec<u8>>
    where
        T: futures::AsyncRead + Unpin + Send,
    {
        let mut v = vec![];
        futures::AsyncReadExt::read_to_end(&mut futures::AsyncReadExt::take(io, 16 << 20), &mut v)
            .await?;
        Ok(v)
    }

    async fn write_request<T>(
        &mut self,
        _: &Self::Protocol,
        io: &mut T,
        req: Vec<u8>,
    ) -> std::io::Result<()>
    where
        T: futures::AsyncWrite + Unpin + Send,
    {
        futures::AsyncWriteExt::write_all(io, &req).await?;
        futures::AsyncWriteExt::close(io).await
    }

    async fn write_response<T>(
        &mut self,
        _: &Self::Protocol,
        io: &mut T,
        res: Vec<u8>,
    ) -> std::io::Result<()>
    where
        T: futures::AsyncWrite + Unpin + Send,
    {
        futures::AsyncWriteExt::write_all(io, &res).await
    }
}

/// Sends `payload`, as it is, as one request on `protocol` to the daemon
/// at `addr`, from a fresh identity: the raw bytes of its answer, or why
/// there was none.
pub fn raw_request(
    addr: &Multiaddr,
    protocol: libp2p::StreamProtocol,
    payload: Vec<u8>,
) -> Result<Vec<u8>, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let mut swarm = libp2p::SwarmBuilder::with_new_identity()
            .with_tokio()
            .with_tcp(
                tcp::Config::default(),
                noise::Config::new,
                yamux::Config::default,
            )
            .expect("tcp")
            .with_behaviour(|_| {
                request_response::Behaviour::with_codec(
                    RawCodec,
                    [(protocol, request_response::ProtocolSupport::Outbound)],
                    request_response::Config::default()
                        .with_request_timeout(Duration::from_secs(20)),
                )
            })
            .expect("behaviour")
            .build();
        let peer = peer_of(addr);
        swarm
            .behaviour_mut()
            .send_request_with_addresses(&peer, payload, vec![addr.clone()]);
        let answer = tokio::time::timeout(PEER_DEADLINE, async {
            loop {
                match swarm.select_next_some().await {
                    SwarmEvent::Behaviour(request_response::Event::Message {
                        message: request_response::Message::Response { response, .. },
                        ..
                    }) => return Ok(response),
                    SwarmEvent::Behaviour(request_response::Event::OutboundFailure {
                        error,
                        ..
                    }) => return Err(error.to_string()),
                    _ => {}
                }
            }
        })
        .await;
        answer.unwrap_or_else(|_| Err("no answer within the deadline".into()))
    })
}
