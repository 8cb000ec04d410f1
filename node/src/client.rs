//! The typed client of the local API: the one way every command talks to
//! the daemon.

use std::path::PathBuf;

use futures::{SinkExt, StreamExt};
use serde::de::DeserializeOwned;
use tokio::net::UnixStream;
use tokio_util::codec::Framed;

use crate::api::{self, API_VERSION, ApiError, ClientFrame, DaemonFrame, MAX_FRAME_BYTES, Op, Who};
use crate::frames::{Line, LineCodec};
use crate::home::Home;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// No daemon is listening on the home's socket.
    #[error(
        "the agentmesh daemon is not running (nothing is listening on {socket}); start it with `agentmesh up`"
    )]
    NotRunning {
        /// The socket that was tried.
        socket: PathBuf,
    },
    /// The daemon answered the request with an error.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The daemon refused a frame, or answered something unexpected.
    #[error("the daemon answered unexpectedly: {0}")]
    Protocol(String),
    /// The connection failed midway.
    #[error("the connection to the daemon failed: {0}")]
    Io(String),
}

impl ClientError {
    /// The API error code, when the daemon answered with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Api(e) => Some(&e.code),
            _ => None,
        }
    }
}

/// An attached connection to the daemon.
#[derive(Debug)]
pub struct Client {
    framed: Framed<UnixStream, LineCodec>,
    next_id: u64,
    /// Events that arrived while a call waited for its answer.
    pending: std::collections::VecDeque<api::Event>,
    /// Events dropped from `pending` (how many, and the last message seq
    /// read before them), reported by the next `next_event`.
    lost: Option<(u64, u64)>,
    /// The newest message seq `next_event` returned.
    yielded_seq: u64,
    /// The daemon's PeerId.
    pub peer_id: String,
    /// The daemon's machine name.
    pub name: String,
    /// The newest message seq in the daemon's inbox when this client
    /// attached (see [`DaemonFrame::Attached`]).
    pub attached_seq: u64,
}

impl Client {
    /// Connects to the daemon of `home` and attaches as `who`, to no
    /// mailbox (events of every mailbox), receiving only new events.
    pub async fn connect(home: &Home, who: Who) -> Result<Client, ClientError> {
        Client::attach(home, who, None, None).await
    }

    /// Connects and attaches as `who` to `mailbox` (`None`: every mailbox);
    /// with `after_seq`, the daemon first replays the stored messages after
    /// it as events.
    pub async fn attach(
        home: &Home,
        who: Who,
        mailbox: Option<String>,
        after_seq: Option<u64>,
    ) -> Result<Client, ClientError> {
        let socket = home.socket();
        let stream = UnixStream::connect(&socket)
            .await
            .map_err(|_| ClientError::NotRunning {
                socket: socket.clone(),
            })?;
        let mut framed = Framed::new(stream, LineCodec::new(MAX_FRAME_BYTES));
        let attach = ClientFrame::Attach {
            version: API_VERSION,
            who,
            mailbox,
            after_seq,
        };
        send(&mut framed, &attach).await?;
        match recv(&mut framed).await? {
            DaemonFrame::Attached {
                peer_id,
                name,
                last_seq,
                ..
            } => Ok(Client {
                attached_seq: last_seq,
                framed,
                next_id: 0,
                pending: std::collections::VecDeque::new(),
                lost: None,
                yielded_seq: after_seq.unwrap_or(0),
                peer_id,
                name,
            }),
            DaemonFrame::Error { message, .. } => Err(ClientError::Protocol(message)),
            other => Err(ClientError::Protocol(format!("{other:?}"))),
        }
    }

    /// Runs `op` and reads its result as `T`.
    pub async fn call<T: DeserializeOwned>(&mut self, op: Op) -> Result<T, ClientError> {
        // Said here, before the text is escaped into a frame whose own
        // limit would give a less useful answer.
        if let Op::Send { text, .. } = &op
            && text.len() > agentmesh_protocol::cbor::MAX_BODY_BYTES
        {
            return Err(ClientError::Api(ApiError::new(
                "too_large",
                format!(
                    "the message is {} bytes, over the limit of {} bytes (64 KiB); send less text, or send it in parts",
                    text.len(),
                    agentmesh_protocol::cbor::MAX_BODY_BYTES
                ),
            )));
        }
        self.next_id += 1;
        let id = self.next_id;
        send(&mut self.framed, &ClientFrame::Request { id, op }).await?;
        loop {
            match recv(&mut self.framed).await? {
                DaemonFrame::Response {
                    id: got,
                    ok,
                    result,
                    error,
                } if got == id => {
                    return if ok {
                        serde_json::from_value(result.unwrap_or(serde_json::Value::Null))
                            .map_err(|e| ClientError::Protocol(e.to_string()))
                    } else {
                        Err(ClientError::Api(error.unwrap_or_else(|| {
                            ApiError::new("unknown", "the daemon gave no reason")
                        })))
                    };
                }
                DaemonFrame::Error { code, message } => {
                    return Err(ClientError::Api(ApiError { code, message }));
                }
                // Kept for `next_event`, bounded like the daemon's queue.
                DaemonFrame::Event { event } => {
                    if self.pending.len() == crate::mail::EVENT_QUEUE {
                        // Dropped, but not silently: the next event this
                        // client reads says how many were missed and from
                        // where to catch up, as the daemon's own does.
                        let dropped = self.pending.pop_front();
                        let (missed, after_seq) = self.lost.unwrap_or_else(|| {
                            // Caught up to what was read, or (attached
                            // "from now on", nothing read yet) to just
                            // before the first message dropped.
                            let before = match &dropped {
                                Some(api::Event::Message { message }) if self.yielded_seq == 0 => {
                                    message.seq.saturating_sub(1)
                                }
                                _ => self.yielded_seq,
                            };
                            (0, before)
                        });
                        self.lost = Some((missed + 1, after_seq));
                    }
                    self.pending.push_back(*event);
                }
                // Responses to other requests are not ours.
                _ => continue,
            }
        }
    }

    /// `status`.
    pub async fn status(&mut self) -> Result<api::Status, ClientError> {
        self.call(Op::Status).await
    }

    /// Every row of the peer table, gathered page by page.
    pub async fn peers(&mut self) -> Result<Vec<api::PeerRow>, ClientError> {
        let mut rows = vec![];
        let mut after = None;
        loop {
            let page: api::PeersPage = self.call(Op::Peers { after, limit: None }).await?;
            rows.extend(page.peers);
            match page.next_after {
                Some(next) => after = Some(next),
                None => return Ok(rows),
            }
        }
    }

    /// The next event pushed to this client, including those that arrived
    /// while [`Client::call`] waited for an answer.
    pub async fn next_event(&mut self) -> Result<api::Event, ClientError> {
        if let Some((missed, after_seq)) = self.lost.take() {
            return Ok(api::Event::Lagged { missed, after_seq });
        }
        let event = match self.pending.pop_front() {
            Some(e) => e,
            None => loop {
                if let DaemonFrame::Event { event } = recv(&mut self.framed).await? {
                    break *event;
                }
            },
        };
        if let api::Event::Message { message } = &event {
            self.yielded_seq = self.yielded_seq.max(message.seq);
        }
        Ok(event)
    }
}

async fn send(
    framed: &mut Framed<UnixStream, LineCodec>,
    frame: &ClientFrame,
) -> Result<(), ClientError> {
    framed
        .send(serde_json::to_string(frame).expect("client frames always serialise"))
        .await
        .map_err(|e| ClientError::Io(e.to_string()))
}

async fn recv(framed: &mut Framed<UnixStream, LineCodec>) -> Result<DaemonFrame, ClientError> {
    let line = framed
        .next()
        .await
        .ok_or_else(|| ClientError::Io("the daemon closed the connection".into()))?
        .map_err(|e| ClientError::Io(e.to_string()))?;
    let line = match line {
        Line::Text(l) => l,
        Line::TooLarge => {
            return Err(ClientError::Protocol(format!(
                "the daemon sent a frame over {MAX_FRAME_BYTES} bytes"
            )));
        }
        Line::NotUtf8 => {
            return Err(ClientError::Protocol(
                "the daemon sent a frame that is not UTF-8".into(),
            ));
        }
    };
    serde_json::from_str(&line).map_err(|e| ClientError::Protocol(format!("{e}: {line}")))
}
