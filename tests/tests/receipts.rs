//! Receipts: the sender's outbox tells the truth. Every state a message
//! goes through at its recipient (delivered, held, approved, rejected,
//! deferred, read, refused) reaches the sender's `outbox --json` and
//! `outbox ID`, a mailbox whose person turned read receipts off tells
//! no reads, and a typo'd mailbox is refused at the terminal that sent it.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use agentmesh_tests::{exit_code, states, team, wait_for};

#[test]
fn every_state_at_the_recipient_reaches_the_senders_outbox() {
    // Ada's machine and Bob's: Ada's mail to Bob is held for him.
    let [mut a, mut b] = team([("alpha", "Ada"), ("bravo", "Bob")]);

    // Held, then approved, then read.
    let approved = a.send("@bravo", "may I?");
    let m = a.reaches(&approved, "held");
    assert_eq!(states(&m), ["queued", "held"], "{m}");
    b.ok(&["approve", &approved]);
    let m = a.reaches(&approved, "approved");
    assert_eq!(m["held"], false, "{m}");
    b.ok(&["read", &approved]);
    let m = a.reaches(&approved, "read");
    assert_eq!(states(&m), ["queued", "held", "approved", "read"], "{m}");
    // Each state has its time.
    assert!(
        m["states"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["at"].as_str().is_some_and(|t| t.ends_with('Z')))
    );

    // Approved and read while the sender is down: both receipts wait in
    // bravo's outbox and reach alpha together, and neither is lost.
    let later = a.send("@bravo", "while I am away");
    a.reaches(&later, "held");
    a.stop();
    b.ok(&["approve", &later]);
    b.ok(&["read", &later]);
    a.start();
    b.ok(&["connect", &a.addr()]);
    let m = a.reaches(&later, "read");
    assert_eq!(states(&m), ["queued", "held", "approved", "read"], "{m}");
    assert_eq!(m["held"], false, "{m}");

    // Held, then rejected with its person's reason, which survives the
    // recipient's kill -9 right after the decision (the receipt was
    // durable with it).
    let rejected = a.send("@bravo", "and this?");
    a.reaches(&rejected, "held");
    b.ok(&["reject", &rejected, "--reason", "not this week"]);
    b.kill9();
    b.start();
    b.ok(&["connect", &a.addr()]);
    let m = a.reaches(&rejected, "rejected");
    let last = m["states"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["reason"], "not this week", "{m}");
    assert_eq!(states(&m), ["queued", "held", "rejected"], "{m}");
    // The row's own reason says it too, and so does the table.
    assert_eq!(m["reason"], "not this week", "{m}");
    let table = a.ok(&["outbox"]);
    let row = table.lines().find(|l| l.contains(&rejected)).unwrap();
    assert!(row.contains("not this week"), "{table}");

    // A mailbox whose budget allows one wake today: what a Stop hook
    // takes is read (and spends it); what comes next is deferred.
    b.ok(&["trust", "alpha"]);
    let folder = tempfile::tempdir().unwrap();
    let dir = folder.path().join("api");
    std::fs::create_dir(&dir).unwrap();
    b.ok(&["allow", dir.to_str().unwrap(), "--mailbox", "api"]);
    b.ok(&["wake", "set", "api", "off", "--budget", "1"]);
    let taken = a.send("api@bravo", "first");
    let m = a.reaches(&taken, "delivered");
    assert_eq!(states(&m), ["queued", "delivered"], "{m}");
    let shown = b.hook(("claude", "Stop"), &dir, "session-1", None);
    assert!(shown.contains(&taken), "{shown}");
    let m = a.reaches(&taken, "read");
    assert_eq!(states(&m), ["queued", "delivered", "read"], "{m}");
    let deferred = a.send("api@bravo", "second");
    let m = a.reaches(&deferred, "deferred");
    assert!(m["deferred_until"].as_str().is_some(), "{m}");
    assert_eq!(states(&m), ["queued", "delivered", "deferred"], "{m}");

    // Read receipts off: reading tells nothing. Back on, the next read
    // is told; the receipts travel in order, so by then the first would
    // have arrived had it been sent.
    let off = b.json(&["receipts", "api", "--read", "off"]);
    assert_eq!(off["read"], false, "{off}");
    assert_eq!(b.json(&["receipts", "api"])["read"], false, "it sticks");
    b.ok(&["read", &deferred]);
    let told = a.send("api@bravo", "third");
    a.reaches(&told, "deferred");
    b.ok(&["receipts", "api", "--read", "on"]);
    b.ok(&["read", &told]);
    a.reaches(&told, "read");
    let m = a.outbox_entry(&deferred);
    assert_eq!(m["status"], "deferred", "{m}");
    assert!(!states(&m).contains(&"read".to_owned()), "{m}");

    // Refused, with the recipient's suggestion.
    let typo = a.send("apu@bravo", "hello");
    let m = a.reaches(&typo, "refused");
    let last = m["states"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["code"], "no_mailbox", "{m}");
    assert_eq!(
        last["reason"], "no mailbox apu on bravo (did you mean api?)",
        "{m}"
    );

    // `outbox ID` (and the op behind MCP's message_status) says the same
    // of one message, by a prefix of its id too.
    let one = a.json(&["outbox", &approved[..8]]);
    assert_eq!(one["id"], approved.as_str());
    assert_eq!(one["status"], "read");
    assert_eq!(states(&one), ["queued", "held", "approved", "read"]);
    let text = a.ok(&["outbox", &approved]);
    assert!(text.contains("approved") && text.contains("ago"), "{text}");
    let e = a.fails(&["outbox", "ffffffff"]);
    assert!(e.contains("no sent message"), "{e}");
    // The table shows the states with human times.
    let table = a.ok(&["outbox"]);
    assert!(table.contains("queued"), "{table}");
    assert!(table.contains("→ read"), "{table}");

    // Mail between two mailboxes of one machine tells its reads too.
    let here = tempfile::tempdir().unwrap();
    a.ok(&["allow", here.path().to_str().unwrap(), "--mailbox", "notes"]);
    let local = a.send("notes@", "to self");
    a.reaches(&local, "delivered");
    a.ok(&["read", &local]);
    let m = a.reaches(&local, "read");
    assert_eq!(states(&m), ["delivered", "read"], "{m}");
}

#[test]
fn a_typo_in_a_mailbox_is_refused_at_the_terminal_within_two_seconds() {
    let [a, b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    let folder = tempfile::tempdir().unwrap();
    b.ok(&[
        "allow",
        folder.path().to_str().unwrap(),
        "--mailbox",
        "pipeline",
    ]);
    // Connected: the first message gets through.
    let first = a.send("pipeline@bravo", "hi");
    a.reaches(&first, "delivered");

    let mut s = a.pty(&["send", "pipelin@bravo", "are you there?"]);
    s.exp_string("refused: no mailbox pipelin on bravo (did you mean pipeline?)")
        .unwrap();
    assert_eq!(exit_code(&s), Some(1), "a refused send fails");

    // Delivered mail is said too, and --no-wait only prints the id.
    let mut s = a.pty(&["send", "pipeline@bravo", "again"]);
    s.exp_string("delivered").unwrap();
    assert_eq!(exit_code(&s), Some(0));
    let mut s = a.pty(&["send", "pipeline@bravo", "once more", "--no-wait"]);
    let out = s.exp_eof().unwrap();
    assert!(
        !out.contains("delivered") && !out.contains("queued"),
        "{out}"
    );
    assert_eq!(out.trim().len(), 32, "just the id: {out}");

    // A script (no terminal) is not kept waiting: it gets the id.
    let v = a.json(&["send", "pipelin@bravo", "from a script"]);
    assert!(v["status"].is_null(), "{v}");

    // `reply` at a terminal prints the first answer too (issue 36).
    let ask = b.send("@alpha", "which branch?");
    wait_for("bravo's ask at alpha", || {
        a.inbox_all()
            .iter()
            .any(|m| m["id"] == ask.as_str())
            .then_some(())
    });
    let mut s = a.pty(&["reply", &ask, "main"]);
    s.exp_string("delivered").unwrap();
    assert_eq!(exit_code(&s), Some(0));
    // From a script, the id only, as before.
    let v = a.json(&["reply", &ask, "main, again"]);
    assert!(v["status"].is_null(), "{v}");
    assert_eq!(v["id"].as_str().unwrap().len(), 32, "{v}");
}
