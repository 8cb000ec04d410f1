//! The MCP server's standard input and output, with a thin line filter in
//! front of rmcp's own transport: a line that is not JSON is answered with
//! a JSON-RPC parse error (`-32700`, id null), as JSON-RPC 2.0 asks, where
//! rmcp's transport drops it without a word (a client that sent a broken
//! request would wait for an answer for ever).
//!
//! ```text
//!  stdin ── lines (at most MAX_LINE) ── JSON ─────────> rmcp (its transport, over a pipe)
//!                                    └─ not JSON, too long, not UTF-8 ── parse error ─┐
//!  rmcp's answers and notifications, line by line ─────────────────────────────────┴──> stdout
//! ```
//!
//! One task writes stdout, whole lines only, so a parse error never lands
//! inside one of rmcp's lines. Everything else (what JSON means, which
//! methods exist, invalid requests) stays rmcp's.

use agentmesh_node::frames::{Line, LineCodec};
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::codec::FramedRead;

/// The longest line read from the MCP client: a `send_message` of the
/// longest message (64 KiB of text, at most six times that as JSON
/// escapes) fits with room. A longer line is skipped and answered with a
/// parse error; what is buffered stays bounded by it.
pub const MAX_LINE: usize = 1024 * 1024;

/// The pipe between the filter and rmcp, in bytes each way.
const PIPE: usize = 64 * 1024;

/// Parse errors waiting to be written, at most: past it the filter waits
/// for stdout, so a client that sends garbage faster than it reads
/// answers is slowed, never buffered without bound.
const ERRORS_QUEUE: usize = 64;

/// The JSON-RPC code of a parse error.
pub const PARSE_ERROR: i64 = -32700;

/// Starts the filter on this process's standard input and output; gives
/// the end rmcp serves on, and the task that writes stdout (done once rmcp
/// is, and all it and the filter wrote is flushed).
pub fn filtered() -> (DuplexStream, JoinHandle<()>) {
    let (stdin, stdout) = rmcp::transport::stdio_pipes();
    filtered_on(stdin, stdout)
}

/// The filter between `stdin` and `stdout`, which need not be the
/// process's own (the fuzz target gives it bytes and reads what it wrote).
#[expect(
    clippy::disallowed_methods,
    reason = "the filter lives as long as the MCP session (it ends at its input's end); the writer's handle is the caller's"
)]
pub fn filtered_on(
    stdin: impl AsyncRead + Unpin + Send + 'static,
    stdout: impl AsyncWrite + Unpin + Send + 'static,
) -> (DuplexStream, JoinHandle<()>) {
    let (rmcp_side, ours) = tokio::io::duplex(PIPE);
    let (from_rmcp, mut to_rmcp) = tokio::io::split(ours);
    let (errors_tx, mut errors) = mpsc::channel::<String>(ERRORS_QUEUE);
    tokio::spawn(async move {
        let mut lines = FramedRead::new(stdin, LineCodec::new(MAX_LINE));
        while let Some(line) = lines.next().await {
            let problem = match line {
                Ok(Line::Text(text)) => match not_json(&text) {
                    None => {
                        let forwarded = async {
                            to_rmcp.write_all(text.as_bytes()).await?;
                            to_rmcp.write_all(b"\n").await
                        };
                        if forwarded.await.is_err() {
                            // rmcp has stopped.
                            break;
                        }
                        continue;
                    }
                    Some(problem) => problem,
                },
                Ok(Line::TooLarge) => format!(
                    "the line is over {MAX_LINE} bytes and was skipped; send one JSON-RPC message per line"
                ),
                Ok(Line::NotUtf8) => {
                    "the line is not UTF-8; send one JSON-RPC message per line".to_owned()
                }
                Err(_) => break,
            };
            if errors_tx.send(parse_error(&problem)).await.is_err() {
                break;
            }
        }
        // The client closed its end: so does rmcp's input.
        let _ = to_rmcp.shutdown().await;
    });
    let writer = tokio::spawn(async move {
        let mut out = stdout;
        let mut answers = BufReader::new(from_rmcp);
        let mut line = Vec::new();
        let mut filter_open = true;
        loop {
            // A parse error first: it was queued before the filter passed
            // on any line after the bad one, so the client hears of each
            // line in order. `read_until` keeps what it read when the
            // other branch wins, and goes on with the same line the next
            // time.
            let next = tokio::select! {
                biased;
                error = errors.recv(), if filter_open => match error {
                    Some(e) => e.into_bytes(),
                    None => {
                        filter_open = false;
                        continue;
                    }
                },
                read = answers.read_until(b'\n', &mut line) => match read {
                    Ok(n) if n > 0 => std::mem::take(&mut line),
                    // rmcp is done: so is the server, once the parse
                    // errors already queued are written.
                    _ => {
                        let mut rest = vec![];
                        while let Ok(e) = errors.try_recv() {
                            rest.extend(e.into_bytes());
                        }
                        let _ = out.write_all(&rest).await;
                        let _ = out.flush().await;
                        return;
                    }
                },
            };
            if out.write_all(&next).await.is_err() || out.flush().await.is_err() {
                // The client closed stdout: no one reads answers any more.
                return;
            }
        }
    });
    (rmcp_side, writer)
}

/// Why `line` is not JSON, if it is not (blank lines are skipped, as rmcp
/// skips them).
fn not_json(line: &str) -> Option<String> {
    let line = line.strip_prefix('\u{feff}').unwrap_or(line);
    if line.trim().is_empty() {
        return None;
    }
    match serde_json::from_str::<serde::de::IgnoredAny>(line) {
        Ok(_) => None,
        Err(e) if e.is_syntax() || e.is_eof() => Some(format!(
            "the line is not JSON ({e}); send one JSON-RPC message per line"
        )),
        // JSON, but not a message: rmcp answers that (invalid request).
        Err(_) => None,
    }
}

/// A JSON-RPC parse error, as one line.
fn parse_error(problem: &str) -> String {
    let e = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": { "code": PARSE_ERROR, "message": format!("Parse error: {problem}") },
    });
    format!("{e}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lines_that_are_not_json_are_parse_errors() {
        assert_eq!(
            not_json(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            None
        );
        // JSON, but no message: rmcp's to answer.
        assert_eq!(not_json("[1, 2]"), None);
        assert_eq!(not_json("   "), None);
        for bad in ["not json", "{\"jsonrpc\":", "{}}", "\u{feff}{"] {
            assert!(not_json(bad).is_some(), "{bad:?}");
        }
        let e: serde_json::Value = serde_json::from_str(&parse_error("x")).unwrap_or_default();
        assert_eq!(e["error"]["code"], PARSE_ERROR);
        assert!(e["id"].is_null() && e.get("id").is_some(), "{e}");
    }
}
