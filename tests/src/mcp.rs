//! An agent's side of `agentmesh mcp`: rmcp's MCP client spawning the real
//! server as a child process, recording every `notifications/claude/channel`
//! it is sent. The agent tests and `agentmesh-bench mcp` drive it.

#![allow(
    clippy::disallowed_methods,
    reason = "tests and their harness spawn helper tasks and queues freely; they end with the test"
)]
use std::path::Path;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, CustomNotification,
    Implementation,
};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::Node;

/// A channel notification as the client got it, and when.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// Its params: `{content, meta}`.
    pub params: Value,
    /// When it arrived.
    pub at: Instant,
}

/// The client's handler: its name, and where notifications go.
#[derive(Debug, Clone)]
pub struct Recorder {
    name: String,
    pushed: mpsc::UnboundedSender<Pushed>,
}

impl ClientHandler for Recorder {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new(self.name.clone(), "1.0"),
        )
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        _context: NotificationContext<RoleClient>,
    ) {
        if notification.method == "notifications/claude/channel" {
            let _ = self.pushed.send(Pushed {
                params: notification.params.unwrap_or_default(),
                at: Instant::now(),
            });
        }
    }
}

/// One agent session: `agentmesh mcp` and the client driving it.
#[derive(Debug)]
pub struct Session {
    /// The running client.
    pub service: RunningService<RoleClient, Recorder>,
    /// Channel notifications, in order.
    pub pushed: mpsc::UnboundedReceiver<Pushed>,
    /// The server's process id.
    pub pid: u32,
}

impl Session {
    /// Spawns `agentmesh --home NODE mcp ARGS` in `cwd` as the client
    /// `client_name`, and initializes it.
    pub async fn spawn(node: &Node, cwd: &Path, client_name: &str, args: &[&str]) -> Session {
        Session::spawn_at(&node.home(), cwd, client_name, args).await
    }

    /// [`Session::spawn`] for a home by path.
    pub async fn spawn_at(home: &Path, cwd: &Path, client_name: &str, args: &[&str]) -> Session {
        let mut cmd = tokio::process::Command::new(crate::bin());
        cmd.arg("--home").arg(home).arg("mcp").args(args);
        cmd.current_dir(cwd);
        cmd.env_remove("AGENTMESH_HOME");
        let transport = TokioChildProcess::new(cmd).expect("agentmesh mcp starts");
        let pid = transport.id().unwrap_or(0);
        let (tx, pushed) = mpsc::unbounded_channel();
        let recorder = Recorder {
            name: client_name.into(),
            pushed: tx,
        };
        let service = recorder
            .serve(transport)
            .await
            .expect("the MCP handshake completes");
        Session {
            service,
            pushed,
            pid,
        }
    }

    /// Calls `tool` with `args`.
    pub async fn call(&self, tool: &str, args: Value) -> CallToolResult {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        if let Value::Object(map) = args {
            params = params.with_arguments(map);
        }
        self.service
            .call_tool(params)
            .await
            .unwrap_or_else(|e| panic!("{tool}: {e}"))
    }

    /// Calls `tool`, which must succeed; its structured result.
    pub async fn ok(&self, tool: &str, args: Value) -> Value {
        let r = self.call(tool, args).await;
        assert_ne!(r.is_error, Some(true), "{tool} failed: {r:?}");
        match r.structured_content {
            Some(v) => v,
            None => panic!("{tool} gave no structured result: {:?}", r.content),
        }
    }

    /// Calls `tool`, which must fail with a tool error; its text.
    pub async fn fails(&self, tool: &str, args: Value) -> String {
        let r = self.call(tool, args).await;
        assert_eq!(r.is_error, Some(true), "{tool} should have failed: {r:?}");
        serde_json::to_value(&r.content)
            .ok()
            .and_then(|c| c[0]["text"].as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// The next channel notification, within `within`.
    pub async fn next_push(&mut self, within: Duration) -> Option<Pushed> {
        tokio::time::timeout(within, self.pushed.recv())
            .await
            .ok()
            .flatten()
    }

    /// Ends the session (the client goes; the server exits).
    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }
}
