//! Memberships that expire unless renewed, on the daemons' test clocks: a
//! member past its expiry is held back (its mail waits at the sender, its
//! connections close) until the founder renews it; a member two thirds of
//! the way through its term is renewed on its own.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::time::{Duration, Instant};

use agentmesh_tests::{Node, join, team, wait_for_within};
use serde_json::Value;

const DAY: u64 = 86_400;

/// `node`'s `team show --json` row for `machine`.
fn row(node: &Node, machine: &str) -> Value {
    node.member(machine)
        .unwrap_or_else(|| panic!("{machine} is in {}'s team", node.name))
}

/// Unix seconds of an RFC 3339 time.
fn secs(rfc3339: &Value) -> u64 {
    humantime::parse_rfc3339(rfc3339.as_str().unwrap())
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn a_lapsed_member_is_held_back_until_the_founder_renews_it() {
    let [alpha, beta] = team([("alpha", "ann"), ("beta", "bob")]);
    beta.ok(&["trust", "alpha"]);
    // The founder's membership never expires; beta's lasts the default
    // 180 days from its admission, given by alpha.
    let (a, b) = (row(&alpha, "alpha"), row(&alpha, "beta"));
    assert!(
        a["expires_at"].is_null() && a["renewed_by"].is_null(),
        "{a}"
    );
    assert_eq!(b["renewed_by"], "alpha", "{b}");
    let admitted = secs(&b["admitted_at"]);
    let until = secs(&b["expires_at"]);
    assert!((until - admitted).abs_diff(180 * DAY) < 60, "180 days: {b}");
    let status = beta.status();
    assert_eq!(status["member_until"], b["expires_at"], "{status}");
    let first = alpha.send("@beta", "while a member");
    alpha.reaches(&first, "delivered");

    // 181 days on, with no renewal: beta lapsed, on both sides.
    alpha.advance_clock(Duration::from_secs(181 * DAY));
    beta.advance_clock(Duration::from_secs(181 * DAY));
    wait_for_within("alpha to see beta lapsed", Duration::from_secs(30), || {
        (row(&alpha, "beta")["standing"] == "lapsed").then_some(())
    });
    wait_for_within("beta to see itself lapsed", Duration::from_secs(30), || {
        (beta.status()["team_standing"] == "lapsed").then_some(())
    });
    // Its connections are closed.
    let beta_id = beta.peer_id();
    wait_for_within(
        "alpha to close its connections to beta",
        Duration::from_secs(30),
        || {
            alpha
                .peer_row(&beta_id)
                .is_none_or(|r| r["connection"] == "none")
                .then_some(())
        },
    );
    // Mail to it is accepted and held back: never sent while it lapsed.
    let held = alpha.send("@beta", "while lapsed");
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(3) {
        let m = alpha.outbox_entry(&held);
        assert_eq!(m["status"], "queued", "held back while beta lapsed: {m}");
        assert_eq!(m["attempts"], 0, "never tried: {m}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // A member does not renew itself once lapsed; the founder does.
    let renewed = alpha.json(&["team", "renew", "beta", "--days", "30"]);
    assert_eq!(renewed["renewed_by"], "alpha", "{renewed}");
    let m = alpha.reaches(&held, "delivered");
    assert_eq!(m["text"], "while lapsed");
    let b = row(&alpha, "beta");
    assert_eq!(b["standing"], "current", "{b}");
    wait_for_within(
        "beta to hear of its renewal",
        Duration::from_secs(30),
        || (beta.status()["member_until"] == b["expires_at"]).then_some(()),
    );
    let audit = alpha.ok(&["audit"]);
    assert!(
        audit.contains("lapsed") && audit.contains("renewed"),
        "{audit}"
    );
}

#[test]
fn a_member_two_thirds_through_its_term_is_renewed_on_its_own() {
    let mut alpha = Node::new("alpha");
    let mut beta = Node::new("beta");
    alpha.start();
    beta.start();
    alpha.ok(&[
        "team",
        "create",
        "core",
        "--owner",
        "ann",
        "--member-days",
        "7",
    ]);
    join(&alpha, &beta, "bob");
    let before = row(&alpha, "beta");
    let (admitted, until) = (secs(&before["admitted_at"]), secs(&before["expires_at"]));
    assert!((until - admitted).abs_diff(7 * DAY) < 60, "{before}");
    // Past two thirds (4.7 days), before the end (7).
    alpha.advance_clock(Duration::from_secs(5 * DAY));
    beta.advance_clock(Duration::from_secs(5 * DAY));
    let after = wait_for_within("beta's term to be renewed", Duration::from_secs(90), || {
        let r = row(&alpha, "beta");
        (secs(&r["expires_at"]) > until).then_some(r)
    });
    // Renewed for another term of the same length, from then.
    let renewed_until = secs(&after["expires_at"]);
    assert!(
        renewed_until.abs_diff(admitted + 5 * DAY + 7 * DAY) < 120,
        "{after}"
    );
    assert_eq!(after["renewed_by"], "alpha");
    assert_eq!(after["standing"], "current");
    // Out-of-range terms are refused, saying the range.
    let e = alpha.fails(&["team", "renew", "beta", "--days", "3"]);
    assert!(e.contains("7 to 3650 days"), "{e}");
    // A shorter term changes nothing, and the answer says the one that
    // counts.
    let long = alpha.json(&["team", "renew", "beta", "--days", "30"]);
    let short = alpha.json(&["team", "renew", "beta", "--days", "7"]);
    assert_eq!(
        short["expires_at"], long["expires_at"],
        "{short} after {long}"
    );
    assert_eq!(row(&alpha, "beta")["expires_at"], long["expires_at"]);
    let e = alpha.fails(&["team", "renew", "alpha"]);
    assert!(e.contains("does not expire"), "{e}");
}
