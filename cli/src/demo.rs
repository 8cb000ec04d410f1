//! `agentmesh demo`: the whole job on loopback, for a newcomer.
//!
//! Starts two daemons in temporary homes, one Alice's and one Bob's, makes
//! a team of them through the real join protocol (the demo plays both
//! people, reading the pairing code on one and typing it into the other,
//! and saying whose machine the joiner is, which only works because it runs
//! both temporary machines itself), sends an ask between two mailboxes
//! (held for Bob, who approves it) and its reply (not held: it answers
//! Alice's own question), has Bob trust Alice's machine so her next message
//! lands directly, prints the peer table, both inboxes and the audit trail,
//! and cleans up. It changes nothing outside its temporary directory and adds
//! no way around `admit`'s terminal rule: it uses the same local API every
//! client has, on machines it created a minute ago.

use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode, Stdio};
use std::time::{Duration, Instant};

use agentmesh_node::api::{
    AdmitApproved, AdmitMatched, InboxPage, JoinRequestView, JoinStarted, JoinState, MessageView,
    PeerRow, WhoKind, ops,
};
use agentmesh_node::client::Client;
use agentmesh_node::config::Config;
use agentmesh_node::home::Home;
use anyhow::Context;

use crate::term;

const WAIT: Duration = Duration::from_secs(20);

/// With `--json`, the narrative goes to stderr and a summary to stdout.
static NARRATE_TO_STDERR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

macro_rules! say {
    ($($arg:tt)*) => {
        if NARRATE_TO_STDERR.load(std::sync::atomic::Ordering::Relaxed) {
            eprintln!($($arg)*);
        } else {
            crate::outln!($($arg)*);
        }
    };
}

/// A daemon the demo started.
struct DemoNode {
    name: &'static str,
    home: Home,
    child: Child,
}

impl Drop for DemoNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(root: &Path, name: &'static str) -> anyhow::Result<DemoNode> {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir)?;
    let config = Config {
        name: Some(name.into()),
        ..Config::default()
    };
    std::fs::write(dir.join("config.toml"), config.to_toml())?;
    let log = std::fs::File::create(dir.join("daemon.log"))?;
    let child = std::process::Command::new(std::env::current_exe()?)
        .arg("--home")
        .arg(&dir)
        .args(["daemon", "--no-mdns", "--listen", "/ip4/127.0.0.1/tcp/0"])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("cannot start a demo daemon")?;
    Ok(DemoNode {
        name,
        home: Home::at(dir),
        child,
    })
}

async fn attach(n: &DemoNode, mailbox: Option<&str>) -> anyhow::Result<Client> {
    let deadline = Instant::now() + WAIT;
    loop {
        let who = agentmesh_node::api::Who {
            kind: WhoKind::Human,
            name: "demo".into(),
            session_id: None,
            task: None,
        };
        match Client::attach(&n.home, who, mailbox.map(str::to_owned), None).await {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() > deadline => {
                return Err(e).context(format!("{} did not start", n.name));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

async fn until<T>(
    what: &str,
    mut f: impl AsyncFnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            anyhow::bail!("the demo timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until message `id` is in the inbox `client` is attached to.
async fn arrived(client: &mut Client, what: &str, id: &str) -> anyhow::Result<()> {
    until(&format!("{what} to arrive"), async || {
        let page: InboxPage = client
            .call(ops::Inbox {
                mailbox: None,
                unread: false,
                after_seq: None,
                limit: None,
            })
            .await?;
        Ok(page.messages.iter().any(|m| m.id == id).then_some(()))
    })
    .await
}

fn step(text: &str) {
    say!("\n== {text}");
}

/// `agentmesh demo`.
pub fn demo(json: bool) -> anyhow::Result<ExitCode> {
    NARRATE_TO_STDERR.store(json, std::sync::atomic::Ordering::Relaxed);
    let root: PathBuf = std::env::temp_dir().join(format!("agentmesh-demo-{}", std::process::id()));
    let result = run(&root);
    let _ = std::fs::remove_dir_all(&root);
    let (ask, reply) = result?;
    if json {
        term::json(&serde_json::json!({ "ok": true, "ask": ask, "reply": reply }))?;
        return Ok(ExitCode::SUCCESS);
    }
    say!(
        "\nThe demo's daemons are stopped and its files removed. To do this for real, see the README's \"Two machines\"."
    );
    Ok(ExitCode::SUCCESS)
}

/// demo-alice founds a team and admits demo-bob, a person on each side
/// comparing codes.
async fn pair_up(a: &mut Client, b: &mut Client) -> anyhow::Result<()> {
    step("demo-alice founds a team and invites demo-bob");
    a.call(ops::TeamCreate {
        name: "demo".into(),
        owner: "Alice".into(),
        member_days: None,
    })
    .await?;
    let invite: agentmesh_node::api::Invite = a.call(ops::Invite { ttl_secs: None }).await?;
    say!("ticket: {}", invite.ticket);

    step("demo-bob asks to join; a person on each side compares codes");
    let started: JoinStarted = b
        .call(ops::JoinStart {
            ticket: invite.ticket.clone(),
            name: "demo-bob".into(),
            owner: "Bob".into(),
        })
        .await?;
    say!(
        "demo-bob shows the pairing code     {}",
        started.pairing_code
    );
    let request: JoinRequestView = until("the join request", async || {
        let list: Vec<JoinRequestView> = a.call(ops::AdmitList).await?;
        Ok(list.into_iter().next())
    })
    .await?;
    say!(
        "demo-alice's person types it into `agentmesh admit` ({} asks to join)",
        request.name
    );
    let matched: AdmitMatched = a
        .call(ops::AdmitCode {
            request_id: request.request_id,
            code: started.pairing_code.clone(),
        })
        .await?;
    say!(
        "the code matches; whose machine is it? It says its owner is {}; Alice's person says: a new person, Bob",
        matched.claimed_owner
    );
    let approved: AdmitApproved = a
        .call(ops::AdmitPerson {
            request_id: request.request_id,
            person: "Bob".into(),
            existing: false,
            days: None,
        })
        .await?;
    say!("demo-alice shows the team code      {}", approved.team_code);
    let state: JoinState = until("the founder's approval", async || {
        let s: JoinState = b
            .call(ops::JoinStatus {
                join_id: started.join_id,
            })
            .await?;
        Ok((s.state != agentmesh_node::api::JoinPhase::Waiting).then_some(s))
    })
    .await?;
    let shown = state.team_code.unwrap_or_default();
    say!("demo-bob computed the team code     {shown}");
    anyhow::ensure!(shown == approved.team_code, "the team codes differ");
    say!("they match, so demo-bob's person confirms");
    b.call(ops::JoinConfirm {
        join_id: started.join_id,
        accept: true,
    })
    .await?;
    Ok(())
}

/// Each machine opts a folder in; api@demo-alice asks pipeline@demo-bob,
/// whose person approves it; the reply comes back unheld; Bob trusts
/// demo-alice. The ids of the ask and its reply.
async fn converse(a: &mut Client, b: &mut Client, root: &Path) -> anyhow::Result<(String, String)> {
    step("each machine opts a project folder in: its mailbox receives");
    for (c, folder) in [(&mut *a, "api"), (&mut *b, "pipeline")] {
        let path = root.join("projects").join(folder);
        std::fs::create_dir_all(&path)?;
        let v: agentmesh_node::api::BindingView = c
            .call(ops::Allow {
                path: path.display().to_string(),
                mailbox: None,
                move_bound: false,
            })
            .await?;
        say!("{} -> mailbox {}", path.display(), v.mailbox);
    }

    step("api@demo-alice asks pipeline@demo-bob a question");
    let ask: agentmesh_node::api::SentView = a
        .call(ops::Send {
            to: "pipeline@demo-bob".into(),
            text: "Before I change the schema: how do you handle late-arriving rows?".into(),
            ask: true,
            reply_to: None,
            from_mailbox: Some("api".into()),
            wait_first_answer_ms: None,
        })
        .await?;
    let ask_id = ask.id;
    say!("sent {ask_id}");
    let held: MessageView = until("the ask to be held at demo-bob", async || {
        let held: Vec<MessageView> = b.call(ops::Held).await?;
        Ok(held.into_iter().find(|m| m.id == ask_id))
    })
    .await?;
    say!(
        "held at demo-bob ({}): mail from another person's machine waits for its person (`agentmesh held`)",
        held.held
            .map(agentmesh_node::api::HeldReason::as_str)
            .unwrap_or_default()
    );
    say!("Bob approves it (`agentmesh approve {}`)", &ask_id[..8]);
    b.call(ops::Approve { id: ask_id.clone() }).await?;
    arrived(&mut *b, "the ask", &ask_id).await?;

    step("pipeline@demo-bob replies, in the same thread");
    let reply: agentmesh_node::api::SentView = b
        .call(ops::Send {
            to: "api@demo-alice".into(),
            text: "They go to a side table and are merged hourly.".into(),
            ask: false,
            reply_to: Some(ask_id.clone()),
            from_mailbox: Some("pipeline".into()),
            wait_first_answer_ms: None,
        })
        .await?;
    let reply_id = reply.id;
    arrived(&mut *a, "the reply", &reply_id).await?;
    say!("not held at demo-alice: it answers the question api@demo-alice asked demo-bob");

    step("Bob trusts demo-alice: her machine's mail is no longer held");
    b.call(ops::Trust {
        machine: "demo-alice".into(),
        off: false,
        approve_held: false,
    })
    .await?;
    let thanks: agentmesh_node::api::SentView = a
        .call(ops::Send {
            to: "pipeline@demo-bob".into(),
            text: "Thanks! Merging hourly works for the schema change.".into(),
            ask: false,
            reply_to: None,
            from_mailbox: Some("api".into()),
            wait_first_answer_ms: None,
        })
        .await?;
    let thanks_id = thanks.id;
    arrived(&mut *b, "the thanks", &thanks_id).await?;
    say!("delivered straight to pipeline@demo-bob (`agentmesh trust demo-alice`)");
    Ok((ask_id, reply_id))
}

/// demo-alice's peer table, both inboxes and both audit trails.
async fn show(a: &mut Client, b: &mut Client) -> anyhow::Result<()> {
    step("demo-alice's peer table");
    let peers: Vec<PeerRow> = a.peers().await?;
    for p in &peers {
        say!(
            "{:<10} {}  {:<8} {:<7} {}",
            p.name.clone().unwrap_or_default(),
            term::short_peer(&p.peer_id),
            p.membership,
            p.connection,
            p.addresses.first().cloned().unwrap_or_default()
        );
    }
    for (label, c) in [("demo-bob's", &mut *b), ("demo-alice's", &mut *a)] {
        step(&format!("{label} inbox"));
        let page: InboxPage = c
            .call(ops::Inbox {
                mailbox: None,
                unread: false,
                after_seq: None,
                limit: None,
            })
            .await?;
        for m in page.messages {
            say!(
                "{} {} from {} to {}@ ({} {}): {}",
                m.kind,
                m.id,
                m.from,
                m.mailbox.unwrap_or_default(),
                if m.who.kind == WhoKind::Agent {
                    "agent"
                } else {
                    "human"
                },
                m.who.name,
                m.text
            );
            if let Some(r) = m.in_reply_to {
                say!("    in reply to {r}, thread {}", m.thread);
            }
        }
    }
    for (label, c) in [("demo-alice's", &mut *a), ("demo-bob's", &mut *b)] {
        step(&format!("{label} audit trail (body hashes, never bodies)"));
        let audit: Vec<agentmesh_node::api::AuditView> =
            c.call(ops::Audit { since_secs: None }).await?;
        for e in audit {
            say!(
                "{} {:<14} {} {}",
                e.at,
                e.event,
                e.id.unwrap_or_default(),
                e.body_sha256
                    .map(|h| format!("sha256 {}…", &h[..12]))
                    .unwrap_or(e.detail)
            );
        }
    }
    Ok(())
}

/// Runs the demo; the ids of the ask and its reply.
fn run(root: &Path) -> anyhow::Result<(String, String)> {
    step("starting two daemons on loopback, in temporary homes");
    let alice = start(root, "demo-alice")?;
    let bob = start(root, "demo-bob")?;
    let rt = term::runtime()?;
    let ids = rt.block_on(async {
        let mut a = attach(&alice, None).await?;
        let mut b = attach(&bob, None).await?;
        say!("demo-alice is {}\ndemo-bob   is {}", a.peer_id, b.peer_id);

        pair_up(&mut a, &mut b).await?;
        let (ask_id, reply_id) = converse(&mut a, &mut b, root).await?;
        show(&mut a, &mut b).await?;
        step("stopping the demo's daemons");
        for c in [&mut a, &mut b] {
            let _ = c.call(ops::Shutdown).await;
        }
        anyhow::Ok((ask_id, reply_id))
    })?;
    let deadline = Instant::now() + WAIT;
    for mut n in [alice, bob] {
        while n.child.try_wait()?.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(ids)
}
