//! The local API server: the Unix socket every client attaches to.
//!
//! The socket lives in `HOME/run` (mode 0700) and accepts only processes of
//! the daemon's own user, checked with the socket's peer credentials. That
//! is the whole of its access control: every process of that user is
//! trusted alike (docs/security.md). Each connection is served by its own
//! task; requests go to the node over its bounded command channel.

use std::path::Path;

use futures::{SinkExt, StreamExt};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::codec::{Framed, LinesCodec, LinesCodecError};

use crate::api::{API_VERSION, ClientFrame, DaemonFrame, MAX_FRAME_BYTES};
use crate::node::Handle;

/// The most clients attached at once. Each costs a task and two small
/// buffers; a runaway script opening connections in a loop hits this
/// instead of exhausting file descriptors.
pub const MAX_CLIENTS: usize = 256;

/// Binds the socket at `path`, replacing a stale one (the caller holds the
/// daemon lock, so no live daemon owns it).
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Serves clients until the node stops.
pub async fn serve(listener: UnixListener, node: Handle, name: String, peer_id: String) {
    let uid = nix::unistd::geteuid().as_raw();
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CLIENTS));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a client failed");
                continue;
            }
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tracing::warn!("refusing a client: {MAX_CLIENTS} are attached already");
            continue;
        };
        let (node, name, peer_id) = (node.clone(), name.clone(), peer_id.clone());
        tokio::spawn(async move {
            let _permit = permit;
            match stream.peer_cred() {
                Ok(cred) if cred.uid() == uid => serve_client(stream, node, &name, &peer_id).await,
                Ok(cred) => {
                    tracing::warn!(uid = cred.uid(), "refused a client of another user");
                    let mut framed =
                        Framed::new(stream, LinesCodec::new_with_max_length(MAX_FRAME_BYTES));
                    let _ = send(
                        &mut framed,
                        &DaemonFrame::Error {
                            code: "forbidden".into(),
                            message: "this daemon serves only its own user".into(),
                        },
                    )
                    .await;
                }
                Err(e) => tracing::warn!(error = %e, "cannot read a client's credentials"),
            }
        });
    }
}

async fn send(
    framed: &mut Framed<UnixStream, LinesCodec>,
    frame: &DaemonFrame,
) -> Result<(), LinesCodecError> {
    framed
        .send(serde_json::to_string(frame).expect("daemon frames always serialise"))
        .await
}

fn frame_error(code: &str, message: impl Into<String>) -> DaemonFrame {
    DaemonFrame::Error {
        code: code.into(),
        message: message.into(),
    }
}

/// Reads one line into a frame, or says exactly what is wrong with it.
fn parse(line: &str) -> Result<ClientFrame, DaemonFrame> {
    let value: serde_json::Value = serde_json::from_str(line).map_err(|e| {
        frame_error(
            "malformed_frame",
            format!("the frame is not JSON ({e}); send one JSON object per line"),
        )
    })?;
    let kind = value
        .get("type")
        .and_then(|t| t.as_str())
        .map(str::to_owned);
    match kind.as_deref() {
        None => Err(frame_error(
            "malformed_frame",
            "the frame has no \"type\"; it must be \"attach\" or \"request\"",
        )),
        Some("attach" | "request") => serde_json::from_value(value).map_err(|e| {
            let msg = e.to_string();
            if kind.as_deref() == Some("request") && msg.contains("unknown variant") {
                frame_error("unknown_op", format!("unknown operation: {msg}"))
            } else {
                frame_error(
                    "malformed_frame",
                    format!("the {} frame is invalid: {msg}", kind.unwrap_or_default()),
                )
            }
        }),
        Some(other) => Err(frame_error(
            "unknown_frame",
            format!("unknown frame type {other:?}; it must be \"attach\" or \"request\""),
        )),
    }
}

async fn serve_client(stream: UnixStream, node: Handle, name: &str, peer_id: &str) {
    let mut framed = Framed::new(stream, LinesCodec::new_with_max_length(MAX_FRAME_BYTES));
    let mut attached = false;
    while let Some(line) = framed.next().await {
        let line = match line {
            Ok(l) => l,
            Err(LinesCodecError::MaxLineLengthExceeded) => {
                // The codec discards the rest of the line; the connection
                // stays usable.
                let reply = frame_error(
                    "frame_too_large",
                    format!("frames are at most {MAX_FRAME_BYTES} bytes"),
                );
                if send(&mut framed, &reply).await.is_err() {
                    return;
                }
                continue;
            }
            Err(LinesCodecError::Io(_)) => return,
        };
        if line.trim().is_empty() {
            continue;
        }
        let reply = match parse(&line) {
            Err(frame) => frame,
            Ok(ClientFrame::Attach { version, who, .. }) => {
                if version != API_VERSION {
                    frame_error(
                        "version_mismatch",
                        format!(
                            "this client speaks local API version {version}, the daemon speaks version {API_VERSION}; use the same agentmesh build for both"
                        ),
                    )
                } else {
                    tracing::debug!(kind = ?who.kind, name = %who.name, "client attached");
                    attached = true;
                    DaemonFrame::Attached {
                        version: API_VERSION,
                        peer_id: peer_id.to_owned(),
                        name: name.to_owned(),
                    }
                }
            }
            Ok(ClientFrame::Request { id, .. }) if !attached => DaemonFrame::Response {
                id,
                ok: false,
                result: None,
                error: Some(crate::api::ApiError::new(
                    "not_attached",
                    "send an attach frame before any request",
                )),
            },
            Ok(ClientFrame::Request { id, op }) => match node.request(op).await {
                Ok(result) => DaemonFrame::Response {
                    id,
                    ok: true,
                    result: Some(result),
                    error: None,
                },
                Err(error) => DaemonFrame::Response {
                    id,
                    ok: false,
                    result: None,
                    error: Some(error),
                },
            },
        };
        if send(&mut framed, &reply).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_frames_are_named() {
        let code = |line: &str| match parse(line) {
            Err(DaemonFrame::Error { code, .. }) => code,
            other => panic!("{line}: {other:?}"),
        };
        assert_eq!(code("hello"), "malformed_frame");
        assert_eq!(code("{}"), "malformed_frame");
        assert_eq!(code(r#"{"type":"dance"}"#), "unknown_frame");
        assert_eq!(
            code(r#"{"type":"request","id":1,"op":"fly"}"#),
            "unknown_op"
        );
        assert_eq!(
            code(r#"{"type":"request","op":"status"}"#),
            "malformed_frame"
        );
        assert_eq!(code(r#"{"type":"attach","version":1}"#), "malformed_frame");
        assert_eq!(
            code(r#"{"type":"attach","version":1,"who":{"kind":"robot","name":"r"}}"#),
            "malformed_frame"
        );
        assert!(parse(r#"{"type":"request","id":1,"op":"status"}"#).is_ok());
    }
}
