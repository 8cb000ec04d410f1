//! The typed client split in two: one task waits for events while
//! another makes calls on the same connection (what the MCP server does).

#![allow(
    clippy::disallowed_methods,
    reason = "tests and their harness spawn helper tasks and queues freely; they end with the test"
)]
#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use agentmesh_node::codes::ErrorCode;
use std::time::Duration;

use agentmesh_node::api::{Event, WhoKind, ops};
use agentmesh_node::client::Client;
use agentmesh_node::home::Home;
use agentmesh_tests::{team, who};

#[test]
fn the_event_half_waits_while_the_request_half_calls() {
    let [a, b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let home = Home::at(b.home());
        // Attached for events (`connect` attaches for requests only).
        let client = Client::attach(&home, who(WhoKind::Agent, "claude"), None, None)
            .await
            .unwrap();
        let (requests, mut events) = client.split();
        // Waiting for an event, on its own task.
        let waiter = tokio::spawn(async move {
            loop {
                if let Event::Message { message } = events.next().await.unwrap() {
                    return message.text;
                }
            }
        });
        // Meanwhile calls are answered, many at once, on the same
        // connection: nothing waits for the event.
        let calls = (0..20).map(|_| {
            let r = requests.clone();
            async move { r.call(ops::Status).await.unwrap() }
        });
        for status in futures::future::join_all(calls).await {
            assert_eq!(status.name, "bravo");
        }
        assert!(!waiter.is_finished(), "no message was sent yet");
        let id = a.send("@bravo", "to the event half");
        let text = tokio::time::timeout(Duration::from_secs(30), waiter)
            .await
            .expect("the message event within 30 s")
            .unwrap();
        assert_eq!(text, "to the event half");
        // And a call after it still works, with its own errors.
        let read = requests.call(ops::Read { id }).await.unwrap();
        assert_eq!(read.text, "to the event half");
        let e = requests
            .call(ops::Revoke {
                name: "alpha".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::NotAdmin));
    });
}
