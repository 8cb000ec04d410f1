//! [`ApiClient`]: a client of one node's local API, as the CLI uses it,
//! for tests that call it many times or read its events; [`who`] names
//! who attaches.

use std::time::Duration;

use serde_json::Value;

use crate::{DEADLINE, Node};

/// A client of one node's local API, as the CLI uses it, for tests that
/// call it many times (bursts) or read its events.
pub struct ApiClient {
    rt: tokio::runtime::Runtime,
    client: agentmesh_node::client::Client,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient").finish_non_exhaustive()
    }
}

/// A person (or an agent) attaching in a test.
pub fn who(kind: agentmesh_node::api::WhoKind, name: &str) -> agentmesh_node::api::Who {
    agentmesh_node::api::Who {
        kind,
        name: name.into(),
        session_id: None,
        task: None,
    }
}

impl ApiClient {
    /// Attaches to `node` as `who`, to `mailbox` (`None`: every mailbox).
    pub fn attach(node: &Node, who: agentmesh_node::api::Who, mailbox: Option<&str>) -> ApiClient {
        ApiClient::attach_at(&node.home(), who, mailbox, None)
    }

    /// Attaches to the daemon of the home `home`, with the events after
    /// `after_seq` replayed first (how a client catches up after `lagged`).
    pub fn attach_at(
        home: &std::path::Path,
        who: agentmesh_node::api::Who,
        mailbox: Option<&str>,
        after_seq: Option<u64>,
    ) -> ApiClient {
        let mailbox = mailbox.map(str::to_owned);
        ApiClient::open(home, |home| async move {
            agentmesh_node::client::Client::attach(&home, who, mailbox, after_seq).await
        })
    }

    /// Connects to the daemon of the home `home` as `who`, without
    /// attaching (no events): a command's connection, for asking only.
    pub fn connect_at(home: &std::path::Path, who: agentmesh_node::api::Who) -> ApiClient {
        ApiClient::open(home, |home| async move {
            agentmesh_node::client::Client::connect(&home, who).await
        })
    }

    /// A client `open` makes for the home `home`, on a runtime of its own.
    fn open<F>(
        home: &std::path::Path,
        open: impl FnOnce(agentmesh_node::home::Home) -> F,
    ) -> ApiClient
    where
        F: Future<
            Output = Result<agentmesh_node::client::Client, agentmesh_node::client::ClientError>,
        >,
    {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = rt
            .block_on(open(agentmesh_node::home::Home::at(home)))
            .unwrap();
        ApiClient { rt, client }
    }

    /// Makes a request; its typed answer, or why not.
    pub fn ask<R: agentmesh_node::api::Request>(
        &mut self,
        r: R,
    ) -> Result<R::Answer, agentmesh_node::client::ClientError> {
        self.rt.block_on(self.client.call(r))
    }

    /// Makes a request; its answer as the socket carries it.
    pub fn call<R: agentmesh_node::api::Request>(
        &mut self,
        r: R,
    ) -> Result<Value, agentmesh_node::client::ClientError> {
        self.rt.block_on(self.client.call_as(r.into_op()))
    }

    /// Sends a message; its id, or why not.
    pub fn send(
        &mut self,
        to: &str,
        text: &str,
    ) -> Result<String, agentmesh_node::client::ClientError> {
        let v = self.call(agentmesh_node::api::ops::Send {
            to: to.into(),
            text: text.into(),
            ask: false,
            reply_to: None,
            from_mailbox: None,
            wait_first_answer_ms: None,
        })?;
        Ok(v["id"].as_str().unwrap().to_owned())
    }

    /// Replies to the received message `id` (from the mailbox attached,
    /// to its sender); the reply's id, or why not.
    pub fn reply(
        &mut self,
        id: &str,
        text: &str,
    ) -> Result<String, agentmesh_node::client::ClientError> {
        let v = self.call(agentmesh_node::api::ops::Send {
            to: String::new(),
            text: text.into(),
            ask: false,
            reply_to: Some(id.into()),
            from_mailbox: None,
            wait_first_answer_ms: None,
        })?;
        Ok(v["id"].as_str().unwrap().to_owned())
    }

    /// The next event, however long it takes; `None` once the connection
    /// is gone.
    pub fn next_event_forever(&mut self) -> Option<agentmesh_node::api::Event> {
        self.rt.block_on(self.client.next_event()).ok()
    }

    /// The next event within `wait`, or `None` (no event, or the
    /// connection is gone).
    pub fn event_within(&mut self, wait: Duration) -> Option<agentmesh_node::api::Event> {
        self.rt
            .block_on(async { tokio::time::timeout(wait, self.client.next_event()).await })
            .ok()
            .and_then(Result::ok)
    }

    /// The next event, waiting at most [`DEADLINE`].
    pub fn event(&mut self) -> agentmesh_node::api::Event {
        self.rt
            .block_on(async { tokio::time::timeout(DEADLINE, self.client.next_event()).await })
            .expect("an event within the deadline")
            .unwrap()
    }
}
