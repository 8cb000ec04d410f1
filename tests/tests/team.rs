//! The life of a team across three real daemons on loopback.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::time::Instant;

use agentmesh_tests::{Node, join, team, wait_for};

#[test]
fn three_machines_join_revoke_while_one_is_away_and_sync() {
    let mut a = Node::new("alpha");
    let mut b = Node::new("bravo");
    let mut c = Node::new("charlie");
    a.start();
    b.start();
    c.start();
    let created = a.json(&["team", "create", "core", "--owner", "Ada"]);
    assert_eq!(created["name"], "core");
    assert_eq!(created["members"].as_array().unwrap().len(), 1);

    let started = Instant::now();
    let (pairing, team_code) = join(&a, &b, "Bob");
    eprintln!(
        "join end to end on loopback (both people typing at once): {:?}",
        started.elapsed()
    );
    assert_ne!(pairing, team_code);
    join(&a, &c, "Cy");

    // Everyone learns of everyone.
    for n in [&a, &b, &c] {
        wait_for(&format!("{} to list three current members", n.name), || {
            let t = n.json(&["team", "show"]);
            let current = t["members"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["revoked"] == false)
                .count();
            (current == 3).then_some(())
        });
    }
    let team = b.json(&["team", "show"]);
    assert_eq!(team["name"], "core");
    assert_eq!(team["founder"], a.peer_id());
    let bravo = b.member("bravo").unwrap();
    assert_eq!(bravo["owner"], "Bob");
    assert_eq!(bravo["peer_id"], b.peer_id());
    assert!(bravo["admitted_at"].as_str().unwrap().ends_with('Z'));
    let c_id = c.peer_id();
    let row = wait_for("alpha to see charlie connected", || {
        a.peer_row(&c_id).filter(|r| r["connection"] == "direct")
    });
    assert_eq!(row["membership"], "member");
    assert_eq!(row["name"], "charlie");
    assert!(
        matches!(row["transport"].as_str(), Some("tcp" | "quic")),
        "{row}"
    );

    // Bravo goes away; alpha revokes charlie meanwhile.
    b.stop();
    a.ok(&["revoke", "charlie", "--yes"]);
    assert_eq!(a.member("charlie").unwrap()["revoked"], true);
    wait_for("alpha to drop charlie", || {
        a.peer_row(&c_id)
            .filter(|r| r["membership"] == "revoked" && r["connection"] == "none")
    });

    // Bravo comes back, meets alpha, and learns of the revocation.
    b.start();
    wait_for("bravo to learn that charlie was revoked", || {
        (b.member("charlie").unwrap()["revoked"] == true).then_some(())
    });
    assert_eq!(b.member("alpha").unwrap()["revoked"], false);

    // Both refuse charlie now.
    for refuser in [&a, &b] {
        let e = c.fails(&["connect", &refuser.addr()]);
        assert!(
            e.contains("refused") || e.contains("closed the connection"),
            "{e}"
        );
        wait_for(
            &format!("{} to show charlie revoked and disconnected", refuser.name),
            || {
                refuser
                    .peer_row(&c_id)
                    .filter(|r| r["membership"] == "revoked" && r["connection"] == "none")
            },
        );
    }
    // Alpha and bravo still talk to each other.
    let synced = b.json(&["connect", &a.addr()]);
    assert_eq!(synced["membership"], "member");
    // An address that can't be dialled fails, even for a machine connected
    // some other way: `connect` never reports success for an address it
    // could not dial, and says how the machine is reached instead.
    let a_id = a.peer_id();
    let e = b.fails(&["connect", &format!("/ip4/127.0.0.1/tcp/1/p2p/{a_id}")]);
    assert!(
        e.contains("/ip4/127.0.0.1/tcp/1") && e.contains("connected another way"),
        "{e}"
    );
    // For a machine with no connection it fails, saying why.
    let e = b.fails(&["connect", &format!("/ip4/127.0.0.1/tcp/1/p2p/{c_id}")]);
    assert!(e.contains("/ip4/127.0.0.1/tcp/1"), "{e}");

    // Bravo leaves; alpha learns it, and bravo can't invite or revoke.
    let e = b.fails(&["revoke", "alpha"]);
    assert!(e.contains("only the team's founder"), "{e}");
    let e = a.fails(&["team", "leave"]);
    assert!(e.contains("founder cannot leave"), "{e}");
    b.ok(&["team", "leave", "--yes"]);
    wait_for("alpha to learn that bravo left", || {
        (a.member("bravo").unwrap()["revoked"] == true).then_some(())
    });
    // Mail to it says it left (it was not revoked).
    let e = a.fails(&["send", "@bravo", "still there?"]);
    assert!(
        e.contains("bravo left the team; it receives nothing"),
        "{e}"
    );
    let e = b.fails(&["invite"]);
    assert!(e.contains("not in a team"), "{e}");
    // A machine that left is gone from `peers` once its connection is
    // (`team show` keeps it, as left).
    let bravo = b.peer_id();
    b.stop();
    wait_for("bravo gone from alpha's peers", || {
        a.peer_row(&bravo).is_none().then_some(())
    });
    assert_eq!(a.member("bravo").unwrap()["revoked"], true);
}

#[test]
fn a_member_that_moved_is_found_through_another_member() {
    let [a, mut b, mut c] = team([("alpha", "Ada"), ("bravo", "Bob"), ("charlie", "Cy")]);
    c.stop();
    b.stop();
    // Bravo comes back on a new port (port 0) and meets alpha, which keeps
    // bravo's new signed contact record; then bravo goes away again.
    b.start();
    let b_id = b.peer_id();
    let new_addr = b.addr().replace(&format!("/p2p/{b_id}"), "");
    wait_for("alpha to hold bravo's new address", || {
        a.peer_row(&b_id).filter(|r| {
            r["addresses"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x == new_addr.as_str())
        })
    });
    b.stop();
    // Charlie, which never saw bravo's new port, learns it from alpha.
    c.start();
    wait_for("charlie to learn bravo's new address through alpha", || {
        c.peer_row(&b_id).filter(|r| {
            r["addresses"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x == new_addr.as_str())
        })
    });
}

#[test]
fn peers_shows_the_address_in_use_first_with_its_transport() {
    let [a, b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    let row = wait_for("alpha to be connected to bravo", || {
        a.peer_row(&b.peer_id())
            .filter(|r| r["connection"] == "direct")
    });
    let first = row["addresses"][0].as_str().unwrap().to_owned();
    let quic = first.contains("/quic");
    assert_eq!(
        row["transport"],
        if quic { "quic" } else { "tcp" },
        "the transport column is the first address's: {row}"
    );
    // Each address once.
    let all: Vec<&str> = row["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let mut unique = all.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), all.len(), "{row}");
    // The table shows that address beside that transport.
    let table = a.ok(&["peers"]);
    let line = table.lines().find(|l| l.contains("bravo")).unwrap();
    assert!(line.contains(&first), "{table}");
}

/// Issue 36, point 4: two live copies of one machine (a home copied to a
/// new laptop while the old one runs on) split its mail silently; now the
/// copy that sees a contact record of its own key it did not make says so
/// in `status`, `doctor` and its log.
#[test]
fn a_second_copy_of_a_machine_is_named_in_status_doctor_and_the_log() {
    let [a, mut b] = team([("alpha", "Ada"), ("bravo", "Ada")]);
    assert!(b.status().get("another_copy").is_none());
    b.stop();
    let mut twin = Node::copy_of(&b);
    b.start();
    twin.start();
    // Each copy syncs with alpha once both are there (a connection coming
    // up, or `connect`, syncs): alpha holds the later of the two records
    // numbered alike and hands it to the other copy.
    for _ in 0..2 {
        for n in [&b, &twin] {
            n.ok(&["connect", &a.addr()]);
        }
    }
    let (warned, seen) = wait_for("one copy to see the other's contact record", || {
        [&b, &twin].into_iter().find_map(|n| {
            let s = n.status();
            let seen = s.get("another_copy")?.clone();
            Some((n, seen))
        })
    });
    let other = if std::ptr::eq(warned, &b) { &twin } else { &b };
    // The addresses it names are the other copy's.
    let theirs = other.addr();
    let tcp = theirs.split("/p2p/").next().unwrap();
    let addrs = seen["addrs"].as_array().unwrap();
    assert!(addrs.iter().any(|x| x == tcp), "{seen} vs {theirs}");
    // Not its own.
    let mine = warned.addr();
    let mine = mine.split("/p2p/").next().unwrap();
    assert!(!addrs.iter().any(|x| x == mine), "{seen} vs {mine}");
    let text = warned.ok(&["status"]);
    assert!(
        text.contains("WARNING: another daemon runs with this machine's key"),
        "{text}"
    );
    let out = warned.run(&["doctor", "--json"]);
    assert!(!out.status.success(), "doctor fails while two copies run");
    let doctor: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let failed: Vec<&serde_json::Value> = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "fail")
        .collect();
    assert!(
        failed
            .iter()
            .any(|c| c["what"].as_str().unwrap().contains("another daemon runs")),
        "{doctor}"
    );
    assert!(
        warned
            .log()
            .contains("another daemon runs with this machine's key"),
        "{}",
        warned.log()
    );
}

/// The first request of a join is tried again, a second apart, when the
/// founder's machine cannot be reached: a founder whose daemon comes up
/// just after the joiner starts (or one dial that fails on a busy
/// machine) does not end the join.
#[test]
fn a_join_reaches_a_founder_that_comes_up_after_its_first_try() {
    let mut a = Node::new("alpha");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    a.listen = vec![format!("/ip4/127.0.0.1/tcp/{port}")];
    a.start();
    a.ok(&["team", "create", "core", "--owner", "Ada"]);
    let ticket = a.json(&["invite"])["ticket"].as_str().unwrap().to_owned();
    a.stop();
    let mut b = Node::new("bravo");
    b.start();
    let mut j = b.pty(&["join", &ticket, "--name", "bravo", "--owner", "Bob"]);
    wait_for("bravo's first try to fail", || {
        b.log()
            .contains("the founder was not reached; trying again in a second")
            .then_some(())
    });
    a.start();
    let pairing = agentmesh_tests::read_code(&mut j, "Pairing code");
    assert_eq!(pairing.len(), 14, "{pairing}");
}
