//! The receiving person stays in control: folders opt in, mail from
//! another person's machine is held, pause holds everything, and held mail
//! is capped and expires. Time moves with the test clock, not sleeps.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use agentmesh_node::codes::ErrorCode;
use std::time::Duration;

use agentmesh_node::api::{Event, WhoKind, ops};
use agentmesh_tests::{ApiClient, Node, team, wait_for, wait_for_within, who};
use serde_json::Value;

/// Ada's machine and Bob's machine: Bob's mail to Ada is held.
fn two_people() -> (Node, Node) {
    let [a, b] = team([("alpha", "Ada"), ("bravo", "Bob")]);
    (a, b)
}

#[test]
fn held_mail_first_answer_wins_across_two_people() {
    let (a, b) = two_people();
    let mut first = ApiClient::attach(&a, who(WhoKind::Human, "ada-terminal"), None);
    let mut second = ApiClient::attach(&a, who(WhoKind::Human, "ada-laptop-watch"), None);
    let mut agent = ApiClient::attach(&a, who(WhoKind::Agent, "claude"), None);
    let id = b.send("@alpha", "may I?");
    // Both people are prompted.
    for c in [&mut first, &mut second] {
        match c.event() {
            Event::Held { message } => {
                assert_eq!(message.id, id);
                assert_eq!(message.held.map(|h| h.as_str()), Some("other_owner"));
                assert_eq!(message.who.name, agentmesh_node::home::login_name());
            }
            other => panic!("expected a held prompt, got {other:?}"),
        }
    }
    // It is held, not in the inbox; the sender sees it delivered (and held).
    assert!(a.inbox_all().is_empty());
    assert_eq!(a.json(&["held"])[0]["id"], id.as_str());
    wait_for("bravo to see it delivered and held", || {
        let m = b.outbox_entry(&id);
        (m["status"] == "held" && m["held"] == true).then_some(())
    });
    // The first answer wins and clears the prompt everywhere.
    first.call(ops::Approve { id: id.clone() }).unwrap();
    let late = second.call(ops::Approve { id: id.clone() }).unwrap_err();
    assert_eq!(late.code(), Some(ErrorCode::NotHeld), "{late}");
    for c in [&mut first, &mut second] {
        let mut saw = (false, false);
        while !(saw.0 && saw.1) {
            match c.event() {
                Event::Message { message } if message.id == id => saw.0 = true,
                Event::Resolved { id: r, outcome } if r == id => {
                    assert_eq!(outcome, agentmesh_node::api::HeldOutcome::Approved);
                    saw.1 = true;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    // The agent was never prompted; it sees the message once approved.
    match agent.event() {
        Event::Message { message } => assert_eq!(message.id, id),
        other => panic!("the agent got {other:?}"),
    }
    assert_eq!(a.inbox_all()[0]["id"], id.as_str());
    assert!(a.json(&["held"]).as_array().unwrap().is_empty());
    // Trusting bravo stops holding its mail.
    a.ok(&["trust", "bravo"]);
    let next = b.send("@alpha", "thanks");
    wait_for("the trusted machine's mail to land directly", || {
        a.inbox_all()
            .iter()
            .any(|m| m["id"] == next.as_str())
            .then_some(())
    });
}

#[test]
fn held_mail_is_capped_per_sender_and_expires() {
    let (a, b) = two_people();
    let mut sender = ApiClient::attach(&b, who(WhoKind::Agent, "chatty"), None);
    let ids: Vec<String> = (0..101)
        .map(|i| sender.send("@alpha", &format!("#{i}")).unwrap())
        .collect();
    let last = ids.last().unwrap().clone();
    let refused = wait_for("the 101st held message to be refused", || {
        let m = b.outbox_entry(&last);
        (m["status"] == "refused").then_some(m)
    });
    assert!(
        refused["reason"]
            .as_str()
            .unwrap()
            .contains("100 messages from you already wait for Ada's approval"),
        "{refused}"
    );
    wait_for("the first 100 to be held", || {
        (a.json(&["held"]).as_array().unwrap().len() == 100).then_some(())
    });
    // Eight days later, unapproved, they are gone, and the audit says so.
    // (Both clocks move: the machines must agree on the time.)
    a.advance_clock(Duration::from_secs(8 * 24 * 3600 + 3600));
    b.advance_clock(Duration::from_secs(8 * 24 * 3600 + 3600));
    assert!(a.json(&["held"]).as_array().unwrap().is_empty());
    let audit = a.json(&["audit"]);
    let expired = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "expired")
        .count();
    assert_eq!(expired, 100);
    // Room again: bravo's next message is held.
    let again = sender.send("@alpha", "again").unwrap();
    wait_for("a new message to be held", || {
        a.json(&["held"])
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == again.as_str())
            .then_some(())
    });
}

#[test]
fn pause_holds_and_resume_delivers() {
    let (a, b) = two_people();
    a.ok(&["trust", "bravo"]);
    a.ok(&["pause"]);
    let id = b.send("@alpha", "while paused");
    wait_for("the message to be held by the pause", || {
        a.json(&["held"])
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id.as_str() && m["held"] == "paused")
            .cloned()
    });
    assert!(a.inbox_all().is_empty());
    let out = a.ok(&["resume"]);
    assert!(out.contains("1 held message"), "{out}");
    assert_eq!(a.inbox_all()[0]["id"], id.as_str());
}

#[test]
fn resume_keeps_held_what_the_pause_did_not_hold_alone() {
    // Bob's machine is not trusted: pausing then resuming must not let
    // its mail skip Ada's approval. It is held for that from the start
    // (the hold outlasts the pause), and that one decision is audited
    // once: resume leaves it as it is.
    let (a, b) = two_people();
    a.ok(&["pause"]);
    let id = b.send("@alpha", "slipping through?");
    wait_for("the message to be held as another person's", || {
        a.json(&["held"])
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id.as_str() && m["held"] == "other_owner")
            .cloned()
    });
    let resumed = a.json(&["resume"]);
    assert_eq!(resumed["released"], 0, "{resumed}");
    assert_eq!(resumed["still_held"], 0, "{resumed}");
    assert!(a.inbox_all().is_empty(), "untrusted mail was released");
    assert_eq!(a.json(&["held"])[0]["held"], "other_owner");
    let held_entries: Vec<Value> = a
        .json(&["audit"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "held" && e["id"] == id.as_str())
        .cloned()
        .collect();
    assert_eq!(
        held_entries.len(),
        1,
        "one decision, one entry: {held_entries:?}"
    );
    assert_eq!(held_entries[0]["detail"], "held: other_owner");
    // A person who attaches later is prompted for it; an agent is not.
    let mut ada = ApiClient::attach(&a, who(WhoKind::Human, "ada-later"), None);
    match ada.event() {
        Event::Held { message } => assert_eq!(message.id, id),
        other => panic!("expected the held prompt on attach, got {other:?}"),
    }
    ada.call(ops::Approve { id: id.clone() }).unwrap();
    assert_eq!(a.inbox_all()[0]["id"], id.as_str());
}

#[test]
fn folders_opt_in_and_out() {
    let (a, b) = two_people();
    a.ok(&["trust", "bravo"]);
    let folder = tempfile::tempdir().unwrap();
    let project = folder.path().join("Pipeline");
    std::fs::create_dir(&project).unwrap();
    // No such mailbox yet: refused, with a reason the sender sees.
    let id = b.send("pipeline@alpha", "hello");
    let m = wait_for("the message to an unknown mailbox to be refused", || {
        let m = b.outbox_entry(&id);
        (m["status"] == "refused").then_some(m)
    });
    assert!(
        m["reason"]
            .as_str()
            .unwrap()
            .contains("no mailbox pipeline on alpha"),
        "{m}"
    );
    // Opted in: its folder's base name is the mailbox.
    let out = a.ok(&["allow", project.to_str().unwrap()]);
    assert!(out.contains("mailbox pipeline"), "{out}");
    let id = b.send("pipeline@alpha", "hello again");
    let got = wait_for("the opted-in mailbox to receive", || {
        a.inbox_all().into_iter().find(|m| m["id"] == id.as_str())
    });
    assert_eq!(got["mailbox"], "pipeline");
    assert_eq!(
        a.json(&["inbox", "--mailbox", "pipeline"])
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        a.json(&["inbox", "--mailbox", "@"])
            .as_array()
            .unwrap()
            .len(),
        0
    );
    // Opted out: refused again.
    a.ok(&["deny", project.to_str().unwrap()]);
    let id = b.send("pipeline@alpha", "and now?");
    let m = wait_for("the message to an opted-out folder to be refused", || {
        let m = b.outbox_entry(&id);
        (m["status"] == "refused").then_some(m)
    });
    assert!(
        m["reason"].as_str().unwrap().contains("not opted in"),
        "{m}"
    );
    let rows = a.json(&["mailboxes"]);
    assert_eq!(rows[0]["mailbox"], "pipeline", "{rows}");
    assert_eq!(rows[0]["allowed"], false, "{rows}");

    // A folder allowed and then deleted can still be denied: by its path,
    // or by its mailbox's name.
    let gone = folder.path().join("scratch");
    std::fs::create_dir(&gone).unwrap();
    a.ok(&["allow", gone.to_str().unwrap(), "--mailbox", "scratch"]);
    let doomed = folder.path().join("doomed");
    std::fs::create_dir(&doomed).unwrap();
    a.ok(&["allow", doomed.to_str().unwrap()]);
    std::fs::remove_dir(&gone).unwrap();
    std::fs::remove_dir(&doomed).unwrap();
    a.ok(&["deny", gone.to_str().unwrap()]);
    a.ok(&["deny", "--mailbox", "doomed"]);
    let rows = a.json(&["mailboxes"]);
    let allowed: Vec<&Value> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["allowed"] == true)
        .collect();
    assert!(allowed.is_empty(), "{rows}");
    let e = a.fails(&["deny", "--mailbox", "nosuch"]);
    assert!(e.contains("no mailbox is named nosuch"), "{e}");
}

#[test]
fn read_mail_and_undeliverable_mail_expire() {
    let (a, mut b) = two_people();
    a.ok(&["trust", "bravo"]);
    let id = b.send("@alpha", "read me");
    wait_for("delivery", || {
        a.inbox_all()
            .iter()
            .any(|m| m["id"] == id.as_str())
            .then_some(())
    });
    a.ok(&["read", &id]);
    a.advance_clock(Duration::from_secs(29 * 24 * 3600));
    assert_eq!(a.inbox_all().len(), 1, "read mail stays 30 days");
    a.advance_clock(Duration::from_secs(2 * 24 * 3600));
    assert!(a.inbox_all().is_empty(), "read mail is gone after 30 days");

    // Mail to a machine that stays away fails after its lifetime, visibly.
    b.stop();
    let lost = a.send("@bravo", "anyone?");
    // Past its lifetime and the clock skew a receiver allows.
    a.advance_clock(Duration::from_secs(7 * 24 * 3600 + 3600));
    // At once if no attempt was out; else as that attempt fails.
    let m = wait_for("the unreachable message to expire", || {
        let m = a.outbox_entry(&lost);
        (m["status"] == "failed").then_some(m)
    });
    assert!(m["reason"].as_str().unwrap().contains("expired"), "{m}");
}

#[test]
fn a_pause_past_the_held_cap_makes_the_sender_wait_instead_of_failing() {
    let (a, b) = two_people();
    a.ok(&["trust", "bravo"]);
    a.ok(&["pause"]);
    let mut sender = ApiClient::attach(&b, who(WhoKind::Agent, "chatty"), None);
    let ids: Vec<String> = (0..101)
        .map(|i| sender.send("@alpha", &format!("#{i}")).unwrap())
        .collect();
    let held: Vec<String> = wait_for("100 messages to be held by the pause", || {
        let held = a.json(&["held"]);
        let held = held.as_array().unwrap();
        (held.len() == 100).then(|| {
            held.iter()
                .map(|m| m["id"].as_str().unwrap().to_owned())
                .collect()
        })
    });
    let waiting: Vec<&String> = ids.iter().filter(|id| !held.contains(id)).collect();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    // The one past the cap stays with its sender, told the recipient is
    // busy: a pause holds, it does not refuse.
    let m = wait_for("the sender to hear the recipient is busy", || {
        let m = b.outbox_entry(waiting[0]);
        m["reason"]
            .as_str()
            .is_some_and(|r| r.contains("busy"))
            .then_some(m)
    });
    assert_eq!(m["status"], "queued", "{m}");
    a.ok(&["resume"]);
    wait_for("all 101 to reach the inbox after the pause", || {
        let inbox = a.inbox_all();
        ids.iter()
            .all(|id| inbox.iter().any(|m| m["id"] == id.as_str()))
            .then_some(())
    });
}

#[test]
fn a_rejected_message_is_dropped_and_the_audit_says_who_and_why() {
    let (a, b) = two_people();
    let id = b.send("@alpha", "please run this");
    wait_for("the message to be held", || {
        a.json(&["held"])
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == id.as_str())
            .then_some(())
    });
    a.ok(&["reject", &id, "--reason", "not from this project"]);
    assert!(a.json(&["held"]).as_array().unwrap().is_empty());
    assert!(a.inbox_all().iter().all(|m| m["id"] != id.as_str()));
    let audit = a.json(&["audit"]);
    let e = audit
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == "rejected" && e["id"] == id.as_str())
        .unwrap_or_else(|| panic!("no rejected entry in {audit}"));
    let detail = e["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("held message rejected by human ")
            && detail.ends_with(": not from this project"),
        "{detail}"
    );
    assert_eq!(e["body_sha256"].as_str().unwrap().len(), 64);
    // Decided once: a second answer is told so.
    let e = a.fails(&["reject", &id]);
    assert!(
        e.contains("no held message") || e.contains("not held"),
        "{e}"
    );
}

#[test]
fn the_audit_log_keeps_ninety_days() {
    let [a, b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    let old = a.send("@bravo", "from long ago");
    let has = |id: &str| {
        a.json(&["audit"])
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"] == "accepted" && e["id"] == id)
    };
    assert!(has(&old));
    // Both clocks move, so the machines agree on the time.
    a.advance_clock(Duration::from_secs(91 * 24 * 3600));
    b.advance_clock(Duration::from_secs(91 * 24 * 3600));
    let recent = a.send("@bravo", "from today");
    // The daemon prunes the audit log in its periodic maintenance (20 s).
    wait_for_within(
        "entries older than 90 days to leave the audit log",
        Duration::from_secs(60),
        || (!has(&old)).then_some(()),
    );
    assert!(has(&recent));
}

#[test]
fn held_mail_reads_in_words_and_counts_in_english() {
    let (a, b) = two_people();
    let id = b.send("@alpha", "may I?");
    let held = wait_for("bravo's message to be held", || {
        a.json(&["held"])
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id.as_str())
            .cloned()
    });
    // JSON keeps the code; people read what it means.
    assert_eq!(held["held"], "other_owner");
    let text = a.ok(&["held"]);
    let first = text.lines().next().unwrap();
    assert_eq!(
        first,
        format!(
            "{} tell {id} from @bravo [Bob] (human {}) to @alpha [unread] [held: from another person's machine]",
            held["sent_at"].as_str().unwrap(),
            held["who"]["name"].as_str().unwrap()
        )
    );
    assert!(!text.contains("other_owner"), "{text}");
    // The audit log's text too; its JSON keeps the code.
    let audit = a.ok(&["audit"]);
    assert!(
        audit.contains(&format!("id {id}"))
            && audit.contains("- held: from another person's machine"),
        "{audit}"
    );
    assert!(
        a.json(&["audit"])
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["id"] == id.as_str() && e["detail"] == "held: other_owner")
    );
    // One message, said as one.
    let status = a.ok(&["status"]);
    assert!(
        status
            .lines()
            .any(|l| l == "held       1 message waits for approval: `agentmesh held`"),
        "{status}"
    );
    assert_eq!(
        a.ok(&["inbox"]),
        "No messages. 1 message waits for approval: see it with `agentmesh held`.\n"
    );
    let second = b.send("@alpha", "and this?");
    wait_for("the second to be held", || {
        (a.status()["held"] == 2).then_some(())
    });
    assert_eq!(
        a.ok(&["inbox"]),
        "No messages. 2 messages wait for approval: see them with `agentmesh held`.\n"
    );
    a.ok(&["approve", &second]);
}

/// The ids held at `n`.
fn held_ids(n: &Node) -> Vec<String> {
    n.json(&["held"])
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn trust_says_what_is_held_approves_it_when_asked_and_can_be_undone() {
    let (a, b) = two_people();
    // Bob's mail waits for Ada.
    let first = b.send("@alpha", "one");
    let second = b.send("@alpha", "two");
    wait_for("both to be held", || {
        (held_ids(&a).len() == 2).then_some(())
    });
    // Trusting says what is already held, and leaves it held.
    let out = a.ok(&["trust", "bravo"]);
    assert!(
        out.contains("2 messages from it are still held")
            && out.contains("agentmesh trust bravo --approve-held"),
        "{out}"
    );
    let v = a.json(&["trust", "bravo"]);
    assert_eq!(
        (v["held"].as_u64(), v["approved"].as_u64()),
        (Some(2), Some(0)),
        "{v}"
    );
    assert_eq!(v["trusting"], true, "{v}");
    // New mail passes.
    let third = b.send("@alpha", "three");
    b.reaches(&third, "delivered");
    // --approve-held approves each, audited as the person's, and each
    // sender learns it.
    let v = a.json(&["trust", "bravo", "--approve-held"]);
    assert_eq!(
        (v["held"].as_u64(), v["approved"].as_u64()),
        (Some(0), Some(2)),
        "{v}"
    );
    assert!(held_ids(&a).is_empty());
    let audit = a.json(&["audit"]);
    for id in [&first, &second] {
        let e = audit
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["event"] == "approved" && e["id"] == id.as_str())
            .unwrap_or_else(|| panic!("no approved entry for {id} in {audit}"));
        assert!(e["detail"].as_str().unwrap().contains("by human"), "{e}");
        b.reaches(id, "approved");
    }
    // --off holds its mail again; what was delivered stays.
    let out = a.ok(&["trust", "bravo", "--off"]);
    assert!(out.contains("held again"), "{out}");
    let fourth = b.send("@alpha", "four");
    b.reaches(&fourth, "held");
    assert_eq!(held_ids(&a), std::slice::from_ref(&fourth));
    let inbox: Vec<String> = a
        .inbox_all()
        .iter()
        .filter(|m| m["held"].is_null())
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect();
    for id in [&first, &second, &third] {
        assert!(inbox.contains(id), "{id} left the inbox: {inbox:?}");
    }
    assert!(
        a.json(&["audit"])
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"] == "untrust"),
        "no untrust entry"
    );
    // A machine that is not a member is refused, saying so.
    let e = a.fails(&["trust", "nobody", "--off"]);
    assert!(e.contains("no current member is named nobody"), "{e}");
}

/// The `code` of the JSON error a failed `--json` command ends with.
fn code_of(n: &Node, args: &[&str]) -> (String, String) {
    let e = n.fails(args);
    let last: Value =
        serde_json::from_str(e.lines().last().unwrap()).unwrap_or_else(|err| panic!("{err}: {e}"));
    (
        last["code"].as_str().unwrap().to_owned(),
        last["message"].as_str().unwrap_or_default().to_owned(),
    )
}

/// The binding of `mailbox` in `mailboxes --json`.
fn binding(n: &Node, mailbox: &str) -> Value {
    n.json(&["mailboxes"])
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["mailbox"] == mailbox)
        .cloned()
        .unwrap_or_else(|| panic!("no mailbox {mailbox}"))
}

/// Issue 36, point 3: a mailbox moves to another folder (the new-laptop
/// step), keeping its inbox, profile and wake settings and its address.
/// `deny` frees the folder and keeps the mailbox; `allow NEW --mailbox
/// NAME` binds a freed name; a bound one moves only with `--move` (asked
/// at a terminal, not without one), else `mailbox_bound` names its folder
/// and `--move`.
#[test]
fn a_mailbox_moves_to_another_folder_with_its_inbox_and_settings() {
    let [a, b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    let root = tempfile::tempdir().unwrap();
    let folder = |p: &str| {
        let d = root.path().join(p);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::canonicalize(&d).unwrap().display().to_string()
    };
    let (old, new, third) = (
        folder("old/pipeline"),
        folder("src/pipeline"),
        folder("elsewhere/ci"),
    );
    a.ok(&["allow", &old]);
    a.ok(&["profile", "set", "pipeline", "--profile", "Keeps CI green."]);
    a.ok(&["wake", "set", "pipeline", "claude", "--budget", "7"]);
    let before = b.send("pipeline@alpha", "before the move");
    b.reaches(&before, "delivered");

    // Bound elsewhere: refused, naming its folder and --move.
    for args in [
        vec!["allow", new.as_str(), "--json"],
        vec!["allow", new.as_str(), "--mailbox", "pipeline", "--json"],
    ] {
        let (code, message) = code_of(&a, &args);
        assert_eq!(code, "mailbox_bound", "{message}");
        assert!(
            message.contains(&old) && message.contains("--move"),
            "{message}"
        );
    }
    assert_eq!(binding(&a, "pipeline")["path"], old.as_str());

    // deny keeps the mailbox; allow binds the freed name to the new folder.
    a.ok(&["deny", &old]);
    let moved = a.json(&["allow", &new]);
    assert_eq!(moved["mailbox"], "pipeline", "{moved}");
    assert_eq!(moved["path"], new.as_str(), "{moved}");
    assert_eq!(moved["moved_from"], old.as_str(), "{moved}");
    let shown = &a.json(&["profile", "show", "pipeline"])["mailboxes"][0];
    assert_eq!(shown["profile"], "Keeps CI green.", "{shown}");
    assert_eq!(shown["wake"]["wake"], "claude", "{shown}");
    assert_eq!(shown["wake"]["budget"], 7, "{shown}");
    // Its inbox came along, and the address teammates use still reaches it.
    let after = b.send("pipeline@alpha", "after the move");
    b.reaches(&after, "delivered");
    let inbox = a.json(&["inbox", "--mailbox", "pipeline"]);
    let ids: Vec<&str> = inbox
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&before.as_str()) && ids.contains(&after.as_str()),
        "{inbox}"
    );
    // Printed with its machine: `to pipeline@alpha`, not `to pipeline@`.
    let text = a.ok(&["inbox", "--mailbox", "pipeline"]);
    assert!(text.contains(" to pipeline@alpha"), "{text}");
    // The old folder is free: it may receive as another mailbox.
    let other = a.json(&["allow", &old, "--mailbox", "archive"]);
    assert_eq!(other["mailbox"], "archive", "{other}");

    // At a terminal, --move asks first; "n" moves nothing.
    let mut s = a.pty(&["allow", &third, "--mailbox", "pipeline", "--move"]);
    s.exp_string("Move it to").unwrap();
    s.send_line("n").unwrap();
    s.exp_string("Nothing moved.").unwrap();
    s.exp_eof().unwrap();
    assert_eq!(binding(&a, "pipeline")["path"], new.as_str());
    // The folder's own name, folded as the daemon folds it (`Pipeline` is
    // pipeline), is asked about too.
    let capital = folder("more/Pipeline");
    let mut s = a.pty(&["allow", &capital, "--move"]);
    s.exp_string("Move it to").unwrap();
    s.send_line("n").unwrap();
    s.exp_string("Nothing moved.").unwrap();
    s.exp_eof().unwrap();
    assert_eq!(binding(&a, "pipeline")["path"], new.as_str());
    // Without a terminal, --move moves at once (as --yes would).
    let moved = a.json(&["allow", &third, "--mailbox", "pipeline", "--move"]);
    assert_eq!(moved["moved_from"], new.as_str(), "{moved}");
    assert_eq!(binding(&a, "pipeline")["path"], third.as_str());
    assert_eq!(binding(&a, "pipeline")["allowed"], true);
    let last = b.send("pipeline@alpha", "in its third folder");
    b.reaches(&last, "delivered");
    assert_eq!(
        a.json(&["inbox", "--mailbox", "pipeline"])
            .as_array()
            .unwrap()
            .len(),
        3
    );
}
