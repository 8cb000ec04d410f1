//! Multi-attach: a `watch` client stopped with SIGSTOP does not delay
//! delivery to another, and gets `lagged` when it resumes, then catches up.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};

use agentmesh_node::api::WhoKind;
use agentmesh_tests::{ApiClient, Node, team, wait_for, wait_for_within, who};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// More than the daemon's event queue (1,024) plus what the socket holds.
const MESSAGES: usize = 3000;
const SENDERS: usize = 4;
/// Delivering and printing 3,000 messages on a slow two-core CI machine.
const LONG: std::time::Duration = std::time::Duration::from_secs(120);

struct Watcher {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Watcher {
    fn start(n: &Node) -> Watcher {
        Watcher::start_with(n, &["watch"])
    }

    fn start_with(n: &Node, args: &[&str]) -> Watcher {
        let mut child = n
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(vec![]));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let w = Watcher { child, lines };
        wait_for("watch to attach", || {
            w.saw(|l| l.starts_with("Watching")).then_some(())
        });
        w
    }

    fn saw(&self, f: impl Fn(&str) -> bool) -> bool {
        self.lines.lock().unwrap().iter().any(|l| f(l))
    }

    /// The message ids it printed.
    fn ids(&self) -> HashSet<String> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| {
                l.split_whitespace()
                    .nth(2)
                    .filter(|w| w.len() == 32)
                    .map(str::to_owned)
            })
            .collect()
    }

    fn signal(&self, s: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), s).unwrap();
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_stopped_watcher_does_not_delay_another_and_catches_up() {
    let [a, b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    let live = Watcher::start(&b);
    let stopped = Watcher::start(&b);
    stopped.signal(Signal::SIGSTOP);

    let senders: Vec<_> = (0..SENDERS)
        .map(|s| {
            let mut c = ApiClient::attach(&a, who(WhoKind::Agent, &format!("sender-{s}")), None);
            std::thread::spawn(move || {
                (0..MESSAGES / SENDERS)
                    .map(|i| c.send("@bravo", &format!("burst {s}/{i}")).unwrap())
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let ids: HashSet<String> = senders
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(ids.len(), MESSAGES);

    // The live watcher sees every message while the other is stopped.
    wait_for_within("the live watcher to print every message", LONG, || {
        live.ids().is_superset(&ids).then_some(())
    });
    assert!(
        !live.saw(|l| l.contains("fell behind")),
        "the live watcher lagged"
    );
    assert!(
        stopped.ids().len() < MESSAGES,
        "the stopped watcher could not have read everything"
    );

    // Resumed, the stopped one is told it lagged, and catches up.
    stopped.signal(Signal::SIGCONT);
    wait_for("the resumed watcher to be told it fell behind", || {
        stopped.saw(|l| l.contains("fell behind by")).then_some(())
    });
    wait_for_within(
        "the resumed watcher to catch up on every message",
        LONG,
        || stopped.ids().is_superset(&ids).then_some(()),
    );
}

#[test]
fn watch_on_a_mailbox_shows_only_its_mail_with_its_senders_who() {
    let [a, b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    let project = b.home().join("planner-project");
    std::fs::create_dir_all(&project).unwrap();
    b.ok(&["allow", project.to_str().unwrap(), "--mailbox", "planner"]);
    // Mail is sent from a mailbox that exists (replies to it arrive).
    let review = a.home().join("review-project");
    std::fs::create_dir_all(&review).unwrap();
    a.ok(&["allow", review.to_str().unwrap(), "--mailbox", "reviewer"]);
    let planner = Watcher::start_with(&b, &["watch", "--mailbox", "planner"]);
    // First a message to bravo's own mailbox, landed before the next one.
    let other = a.send("@bravo", "for the owner");
    wait_for("the owner's message to land", || {
        b.inbox_all()
            .iter()
            .any(|m| m["id"] == other.as_str())
            .then_some(())
    });
    // Then one to the planner, from an agent session with a task, sent
    // from alpha's reviewer mailbox.
    let mut agent = ApiClient::attach(
        &a,
        agentmesh_node::api::Who {
            kind: WhoKind::Agent,
            name: "codex".into(),
            session_id: Some("sess-42".into()),
            task: Some("review the merge job".into()),
        },
        None,
    );
    let id = agent
        .call(agentmesh_node::api::ops::Send {
            to: "planner@bravo".into(),
            text: "for the planner".into(),
            ask: true,
            reply_to: None,
            from_mailbox: Some("reviewer".into()),
            wait_first_answer_ms: None,
        })
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_for("the planner's watcher to show its message", || {
        planner.ids().contains(&id).then_some(())
    });
    // Events come in order: the owner's message would have shown first.
    assert!(!planner.ids().contains(&other), "{:?}", planner.ids());
    let m = b
        .inbox_all()
        .into_iter()
        .find(|m| m["id"] == id.as_str())
        .unwrap();
    assert_eq!(m["from"], "reviewer@alpha");
    assert_eq!(m["who"]["kind"], "agent");
    assert_eq!(m["who"]["name"], "codex");
    assert_eq!(m["who"]["session_id"], "sess-42");
    assert_eq!(m["who"]["task"], "review the merge job");
    // The CLI's --from says the same.
    let cli = a.json(&["send", "planner@bravo", "by hand", "--from", "reviewer"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let m = wait_for("the --from message", || {
        b.inbox_all().into_iter().find(|m| m["id"] == cli.as_str())
    });
    assert_eq!(m["from"], "reviewer@alpha");
    assert_eq!(m["mailbox"], "planner");
}
