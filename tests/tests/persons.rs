//! Persons, not typed names: whose machine a joiner is, the founder says
//! at admission (and may change later); consent compares that person. An
//! answer to a question a mailbox asked is not held. And the ways back:
//! revoke and leave ask a person, a new identity joins again, held mail
//! from a key that is gone says so, a join stopped with Ctrl-C withdraws.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use agentmesh_node::api::{WhoKind, ops};
use agentmesh_node::codes::ErrorCode;
use agentmesh_tests::{ApiClient, Node, exit_code, read_code, wait_for, who};
use serde_json::Value;

/// A founder `alpha` whose person is `root`, as in a container.
fn founder() -> Node {
    let mut a = Node::new("alpha");
    a.start();
    a.ok(&["team", "create", "core", "--owner", "root"]);
    a
}

/// Waits until `from` sees message `id` delivered, and says whether the
/// receiver held it.
fn delivered_held(from: &Node, id: &str) -> bool {
    wait_for("the message to be delivered", || {
        let m = from.outbox_entry(id);
        match m["status"].as_str() {
            Some("delivered") => Some(false),
            Some("held") => Some(m["held"] == true),
            _ => None,
        }
    })
}

/// What `node` audited of message `id`.
fn audited(node: &Node, id: &str) -> Vec<String> {
    node.json(&["audit"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["id"] == id)
        .map(|e| e["event"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn two_people_with_one_login_name_are_the_persons_the_founder_chose() {
    let a = founder();
    let mut b = Node::new("bravo");
    b.start();
    // Bravo's login name is root too, and the founder says (`--person
    // root`, the harness's answer) it is root's: the same person.
    agentmesh_tests::join_with(
        &a,
        &b,
        &["--name", "bravo", "--owner", "root"],
        |_| {},
        |adm| {
            adm.exp_string("it says its owner is root").unwrap();
        },
    );
    let bravo = a.member("bravo").unwrap();
    assert_eq!(bravo["owner"], "root");
    let same = b.send("@alpha", "from root's other machine");
    assert!(
        !delivered_held(&b, &same),
        "one person's machines are never held"
    );
    let moved = a.json(&["team", "person", "bravo", "Bob"]);
    assert_eq!(
        (moved["was"].as_str(), moved["person"].as_str()),
        (Some("root"), Some("Bob"))
    );
    assert_eq!(moved["new_person"], true);
    assert_eq!(a.member("bravo").unwrap()["owner"], "Bob");
    // At once on the founder; bravo learns it by sync.
    let held = b.send("@alpha", "from Bob's machine");
    assert!(
        delivered_held(&b, &held),
        "another person's machine is held"
    );
    assert!(audited(&a, &held).contains(&"held".to_owned()));
    wait_for("bravo to learn it is Bob's", || {
        (b.json(&["team", "show"])["members"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == "bravo" && m["owner"] == "Bob"))
        .then_some(())
    });
    // And back: holding follows again.
    a.ok(&["team", "person", "bravo", "root"]);
    let back = b.send("@alpha", "root again");
    assert!(!delivered_held(&b, &back));
    // The audit says who moved it.
    assert!(
        a.json(&["audit"])
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"] == "person")
    );
    // Only the founder moves machines.
    let e = b.fails(&["team", "person", "alpha", "Mallory"]);
    assert!(e.contains("only the team's founder"), "{e}");
}

#[test]
fn a_claim_equal_to_a_person_is_never_merged_without_a_yes() {
    let a = founder();
    let mut b = Node::new("bravo");
    b.start();
    let ticket = a.json(&["invite"])["ticket"].as_str().unwrap().to_owned();
    let mut j = b.pty(&["join", &ticket, "--name", "bravo", "--owner", "root"]);
    let code = read_code(&mut j, "Pairing code");
    let mut adm = a.pty(&["admit"]);
    adm.exp_string("Type the pairing code shown on bravo: ")
        .unwrap();
    adm.send_line(&code).unwrap();
    adm.exp_string("Whose machine is bravo? It says its owner is \"root\"")
        .unwrap();
    adm.exp_string("1. root (alpha)").unwrap();
    // A new person, with the name prefilled: it is root, a person already.
    adm.exp_string("Which? [1, or n] ").unwrap();
    adm.send_line("n").unwrap();
    adm.exp_string("The new person's name [root]: ").unwrap();
    adm.send_line("").unwrap();
    adm.exp_string("root is a person of this team already.")
        .unwrap();
    adm.exp_string(
        "bravo will count as root's machine: mail between root's machines is never held. Is that right? [y/N] ",
    )
    .unwrap();
    // No: choose again, a new person of another name.
    adm.send_line("n").unwrap();
    adm.exp_string("Which? [1, or n] ").unwrap();
    adm.send_line("n").unwrap();
    adm.exp_string("The new person's name [root]: ").unwrap();
    adm.send_line("Bob").unwrap();
    adm.exp_string("bravo is admitted as Bob's machine.")
        .unwrap();
    let team_code = read_code(&mut adm, "Team code");
    assert_eq!(read_code(&mut j, "Team code"), team_code);
    j.exp_string("[y/N]").unwrap();
    j.send_line("y").unwrap();
    // The joiner is told whose machine it was admitted as.
    j.exp_string("bravo, Bob's machine").unwrap();
    adm.exp_string("is now a member of the team, as Bob's machine.")
        .unwrap();
    j.exp_eof().unwrap();
    adm.exp_eof().unwrap();
    assert_eq!(exit_code(&adm), Some(0));
    assert_eq!(a.member("bravo").unwrap()["owner"], "Bob");
    let id = b.send("@alpha", "hello");
    assert!(delivered_held(&b, &id));

    // `--person` answers in advance: an existing person is that yes.
    let mut c = Node::new("charlie");
    c.start();
    agentmesh_tests::join(&a, &c, "root");
    assert_eq!(a.member("charlie").unwrap()["owner"], "root");
    let id = c.send("@alpha", "root's laptop");
    assert!(!delivered_held(&c, &id));
    // The API refuses a merge that was not said to be one.
    let mut api = ApiClient::attach(&a, who(WhoKind::Human, "ada"), None);
    let e = api
        .call(ops::AdmitPerson {
            request_id: 999,
            person: "root".into(),
            existing: false,
            days: None,
        })
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::PersonExists), "{e}");
    let e = api
        .call(ops::AdmitPerson {
            request_id: 999,
            person: "Nobody".into(),
            existing: true,
            days: None,
        })
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::UnknownPerson), "{e}");
}

/// Alpha (Ada's) and bravo (Bob's), each with a mailbox opted in.
fn two_people_with_mailboxes() -> (Node, Node) {
    let [a, b] = agentmesh_tests::team([("alpha", "Ada"), ("bravo", "Bob")]);
    for (n, m) in [(&a, "api"), (&b, "web")] {
        let dir = n.home().join("work").join(m);
        std::fs::create_dir_all(&dir).unwrap();
        n.ok(&["allow", dir.to_str().unwrap()]);
    }
    (a, b)
}

/// Bravo's newest message in its `web` mailbox, approved if held.
fn at_bravo(b: &Node, text: &str) -> String {
    wait_for("the message to reach bravo", || {
        let held = b.json(&["held"]);
        let inbox = b.json(&["inbox", "--mailbox", "web"]);
        held.as_array()
            .unwrap()
            .iter()
            .chain(inbox.as_array().unwrap())
            .find(|m| m["text"] == text)
            .map(|m| m["id"].as_str().unwrap().to_owned())
    })
}

fn reply(b: &Node, to: &str, id: &str, text: &str) -> String {
    b.json(&["send", to, text, "--reply-to", id, "--from", "web"])["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn answers_to_our_own_asks_pass_and_nothing_else_does() {
    let (a, b) = two_people_with_mailboxes();
    let ask = a.json(&["send", "web@bravo", "which port?", "--ask", "--from", "api"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // At bravo the question is held (Ada's machine): Bob approves it.
    assert!(delivered_held(&a, &ask));
    let at_b = at_bravo(&b, "which port?");
    b.ok(&["approve", &at_b]);
    // Bravo's answers to alpha's own ask land unheld, audited so; five at
    // most.
    for n in 1..=5 {
        let r = reply(&b, "api@alpha", &at_b, &format!("answer {n}"));
        assert!(!delivered_held(&b, &r), "answer {n} was held");
        assert_eq!(audited(&a, &r), ["reply_to_own"], "answer {n}");
    }
    let sixth = reply(&b, "api@alpha", &at_b, "answer 6");
    assert!(
        delivered_held(&b, &sixth),
        "a sixth reply to one ask is held"
    );
    // Unasked mail is held as before.
    let tell = b.json(&["send", "api@alpha", "unasked", "--from", "web"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(delivered_held(&b, &tell));
    // A reply to a tell (not an ask) is held too.
    let told = a.json(&["send", "web@bravo", "fyi", "--from", "api"])["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(delivered_held(&a, &told));
    let at_b = at_bravo(&b, "fyi");
    b.ok(&["approve", &at_b]);
    let r = reply(&b, "api@alpha", &at_b, "about your fyi");
    assert!(delivered_held(&b, &r), "a reply to a tell is held");
}

#[test]
fn revoke_and_leave_ask_a_person_or_refuse_without_yes() {
    let [a, b] = agentmesh_tests::team([("alpha", "Ada"), ("bravo", "Bob")]);
    // No terminal and no --yes: refused, nothing done.
    let e = a.fails(&["revoke", "bravo"]);
    assert!(e.contains("add --yes"), "{e}");
    let j = a.run(&["--json", "revoke", "bravo"]);
    let last = String::from_utf8(j.stderr).unwrap();
    let v: Value = serde_json::from_str(last.lines().last().unwrap()).unwrap();
    assert_eq!(v["code"], "not_interactive");
    assert_eq!(a.member("bravo").unwrap()["revoked"], false);
    let e = b.fails(&["team", "leave"]);
    assert!(e.contains("add --yes"), "{e}");
    assert_eq!(b.member("bravo").unwrap()["standing"], "current");
    // What can't be done is said before anything is asked.
    let e = a.fails(&["team", "leave"]);
    assert!(e.contains("founder cannot leave"), "{e}");
    let e = b.fails(&["revoke", "alpha"]);
    assert!(e.contains("only the team's founder"), "{e}");
    let e = a.fails(&["revoke", "nosuch"]);
    assert!(e.contains("no current member is named"), "{e}");
}

#[test]
fn a_machine_that_left_takes_a_new_identity_and_joins_again() {
    let [a, mut b] = agentmesh_tests::team([("alpha", "Ada"), ("bravo", "Bob")]);
    let old = b.peer_id();
    // Bob's machine writes to Ada: held at alpha.
    let held = b.send("@alpha", "before I left");
    assert!(delivered_held(&b, &held));
    b.ok(&["team", "leave", "--yes"]);
    // Left, not revoked, everywhere people look; revoked: true for scripts.
    assert_eq!(b.status()["team_standing"], "left");
    let status = b.ok(&["status"]);
    assert!(
        status.contains("it left") && status.contains("agentmesh init --new-identity"),
        "{status}"
    );
    wait_for("alpha to learn that bravo left", || {
        let m = a.member("bravo")?;
        (m["standing"] == "left").then_some(m)
    });
    let row = a.member("bravo").unwrap();
    assert_eq!(row["revoked"], true);
    assert!(a.ok(&["team", "show"]).contains("left"));
    let doctor = String::from_utf8(b.run(&["doctor"]).stdout).unwrap();
    assert!(doctor.contains("agentmesh init --new-identity"), "{doctor}");
    // A new identity: refused while the daemon runs, and without a yes.
    let key = std::fs::read(b.home().join("identity.key")).unwrap();
    let e = b.fails(&["init", "--new-identity", "--yes"]);
    assert!(e.contains("agentmesh down"), "{e}");
    b.stop();
    let e = b.fails(&["init", "--new-identity"]);
    assert!(e.contains("add --yes"), "{e}");
    assert_eq!(std::fs::read(b.home().join("identity.key")).unwrap(), key);
    let made = b.json(&["init", "--new-identity", "--yes"]);
    let new = made["peer_id"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    assert_eq!(made["old_peer_id"], old.as_str());
    assert_eq!(made["team_forgotten"], "core");
    let kept = made["old_key_kept_at"].as_str().unwrap();
    // Its name says when, readably: identity.key.replaced-2026-12-06T08-13-03Z.
    let name = std::path::Path::new(kept)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    let stamp = name.strip_prefix("identity.key.replaced-").unwrap();
    let shape: String = stamp
        .chars()
        .map(|c| if c.is_ascii_digit() { 'd' } else { c })
        .collect();
    assert_eq!(shape, "dddd-dd-ddTdd-dd-ddZ", "{name}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(kept).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{kept}");
    assert_eq!(
        std::fs::read(kept).unwrap(),
        key,
        "the old key is kept as it was"
    );
    b.start();
    assert_eq!(b.status()["peer_id"], new.as_str());
    assert!(b.status()["team"].is_null());
    // It joins again with a new ticket, under its old name.
    agentmesh_tests::join(&a, &b, "Bob");
    let team = a.json(&["team", "show"]);
    let bravos: Vec<(&str, &str)> = team["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["name"] == "bravo")
        .map(|m| {
            (
                m["peer_id"].as_str().unwrap(),
                m["standing"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(bravos.contains(&(new.as_str(), "current")), "{bravos:?}");
    assert!(bravos.contains(&(old.as_str(), "left")), "{bravos:?}");
    // The old key's held mail says so, and can't pass as the new bravo's.
    let list = a.json(&["held"]);
    let m = list
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == held.as_str())
        .unwrap()
        .clone();
    assert_eq!(m["sender_gone"], "left");
    assert_eq!(m["from_peer"], old.as_str());
    let text = a.ok(&["held"]);
    let short = format!("{}…{}", &old[..4], &old[old.len() - 6..]);
    assert!(
        text.contains(&format!(
            "sent by bravo key {short}, which left the team since; it can only be rejected"
        )),
        "{text}"
    );
    let e = a.fails(&["approve", &held]);
    assert!(
        e.contains("old key") && e.contains("agentmesh reject"),
        "{e}"
    );
    a.ok(&["reject", &held]);
}

#[test]
fn a_member_or_the_founder_gets_no_new_identity() {
    let [mut a, mut b] = agentmesh_tests::team([("alpha", "Ada"), ("bravo", "Bob")]);
    a.stop();
    b.stop();
    let e = b.fails(&["init", "--new-identity", "--yes"]);
    assert!(
        e.contains("still bravo in team core") && e.contains("agentmesh team leave"),
        "{e}"
    );
    let e = a.fails(&["init", "--new-identity", "--yes"]);
    assert!(e.contains("only admin key"), "{e}");
    // --yes alone is for --new-identity.
    let out = b.run(&["init", "--yes"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn init_name_on_a_member_says_what_works() {
    let [_a, b] = agentmesh_tests::team([("alpha", "Ada"), ("bravo", "Bob")]);
    let e = b.fails(&["init", "--name", "bravo-two"]);
    assert!(
        e.contains("agentmesh team leave")
            && e.contains("agentmesh init --new-identity --name bravo-two")
            && e.contains("agentmesh join TICKET"),
        "{e}"
    );
}

#[test]
fn ctrl_c_on_join_withdraws_the_request() {
    let a = founder();
    let mut b = Node::new("bravo");
    b.start();
    let ticket = a.json(&["invite"])["ticket"].as_str().unwrap().to_owned();
    let mut j = b.pty(&["join", &ticket, "--name", "bravo", "--owner", "Bob"]);
    read_code(&mut j, "Pairing code");
    let mut api = ApiClient::attach(&a, who(WhoKind::Human, "ada"), None);
    wait_for("the request to reach the founder", || {
        let list = api.call(ops::AdmitList).unwrap();
        (!list.as_array().unwrap().is_empty()).then_some(())
    });
    j.exp_string("Ctrl-C withdraws").unwrap();
    j.send_control('c').unwrap();
    j.exp_string("withdrawn").unwrap();
    j.exp_eof().unwrap();
    assert_ne!(exit_code(&j), Some(0));
    wait_for("the founder's list to be empty", || {
        let list = api.call(ops::AdmitList).unwrap();
        list.as_array().unwrap().is_empty().then_some(())
    });
    assert!(a.json(&["audit"]).as_array().unwrap().iter().any(|e| {
        e["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("withdrew")
    }));
}
