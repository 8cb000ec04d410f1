//! The daemon's side of relays, on loopback (the NAT lab in natlab.rs
//! proves the rest behind real NATs): `--relay` reserves at once and
//! `status` shows the reservation and the circuit addresses, and their
//! end when the relay goes; tickets carry circuit addresses, and a joiner
//! adopts their relays; bad
//! `--relay` values are refused saying what to write.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use agentmesh_tests::relay::{Relay, relay_bin};
use agentmesh_tests::{Node, wait_for};
use serde_json::Value;

/// The node's reservation on `relay`, once `state` is what it shows.
fn reservation(node: &Node, relay: &Relay, state: &str) -> Value {
    wait_for(
        &format!("{}'s reservation to be {state}", node.name),
        || {
            let s = node.status();
            s["reservations"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["relay_peer_id"] == relay.peer_id.as_str() && r["state"] == state)
                .cloned()
        },
    )
}

#[test]
fn status_shows_the_reservation_and_circuit_addresses_and_their_end() {
    let mut relay = Relay::start();
    let mut a = Node::new("alpha");
    a.daemon_args = vec!["--relay".into(), relay.addr()];
    a.start();
    let me = a.peer_id();
    let r = reservation(&a, &relay, "reserved");
    let circuit = format!("{}/p2p-circuit/p2p/{me}", relay.addr());
    assert_eq!(r["relay"], relay.addr());
    assert_eq!(r["adopted"], false);
    assert!(
        r["circuit_addrs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == circuit.as_str()),
        "{r}"
    );
    let s = a.status();
    assert!(
        s["circuit_addrs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == circuit.as_str()),
        "{s}"
    );
    assert!(
        ["unknown", "private", "public"].contains(&s["reachability"].as_str().unwrap()),
        "{s}"
    );
    // People see it too.
    let text = a.ok(&["status"]);
    assert!(
        text.contains(&format!("relay      {}: reserved", relay.addr())),
        "{text}"
    );
    assert!(text.contains(&circuit), "{text}");
    // The relay goes away: the reservation and its circuits are gone,
    // with why. (That it is tried again is shown in the NAT lab: here on
    // loopback AutoNAT soon finds the machine public and it stops making
    // new reservations, saying so.)
    relay.stop();
    let r = wait_for("the lost reservation to be gone", || {
        let s = a.status();
        s["reservations"][0]
            .as_object()
            .filter(|r| r["state"] != "reserved")
            .cloned()
    });
    assert!(
        ["waiting", "connecting", "not_needed"].contains(&r["state"].as_str().unwrap()),
        "{r:?}"
    );
    assert!(r["circuit_addrs"].as_array().unwrap().is_empty(), "{r:?}");
    assert!(
        a.status()["circuit_addrs"].as_array().unwrap().is_empty(),
        "no circuit through a relay that is gone"
    );
}

#[test]
fn tickets_carry_circuit_addresses_first() {
    let relay = Relay::start();
    let mut a = Node::new("alpha");
    a.daemon_args = vec!["--relay".into(), relay.addr()];
    a.start();
    reservation(&a, &relay, "reserved");
    a.ok(&["team", "create", "far", "--owner", "Ada"]);
    let ticket = a.json(&["invite"])["ticket"].as_str().unwrap().to_owned();
    let t = agentmesh_protocol::ticket::Ticket::decode(&ticket).unwrap();
    let first = t.addrs[0].to_string();
    assert!(
        first.starts_with(&format!("{}/p2p-circuit", relay.addr())),
        "{:?}",
        t.addrs
    );
    assert!(
        t.addrs
            .iter()
            .any(|x| !x.to_string().contains("p2p-circuit")),
        "the direct addresses too: {:?}",
        t.addrs
    );
}

#[test]
fn a_joiner_adopts_the_tickets_relays_and_reaches_the_founder_through_them() {
    let relay = Relay::start();
    let mut a = Node::new("alpha");
    a.daemon_args = vec!["--relay".into(), relay.addr()];
    a.start();
    reservation(&a, &relay, "reserved");
    a.ok(&["team", "create", "far", "--owner", "Ada"]);
    // Bravo knows nothing but the ticket, and the ticket nothing but the
    // circuit: the join goes through the relay.
    let real = a.json(&["invite"])["ticket"].as_str().unwrap().to_owned();
    let mut ticket = agentmesh_protocol::ticket::Ticket::decode(&real).unwrap();
    ticket
        .addrs
        .retain(|x| x.to_string().contains("p2p-circuit"));
    assert!(!ticket.addrs.is_empty());
    let mut b = Node::new("bravo");
    b.start();
    agentmesh_tests::join_ticket(
        &a,
        &b,
        &ticket.to_string(),
        &["--name", "bravo", "--owner", "Bob"],
    );
    assert_eq!(b.json(&["team", "show"])["name"], "far");
    // Bravo adopted the relay and reserves on it, remembered across a
    // restart.
    let r = reservation(&b, &relay, "reserved");
    assert_eq!(r["adopted"], true);
    b.stop();
    b.start();
    let r = reservation(&b, &relay, "reserved");
    assert_eq!(r["adopted"], true, "still used after a restart");
    // And mail flows both ways.
    let id = b.send("@alpha", "over the relay");
    wait_for("bravo's message to arrive", || {
        let s = b.outbox_entry(&id)["status"].clone();
        (s == "delivered" || s == "held").then_some(())
    });
    let id = a.send("@bravo", "and back");
    wait_for("alpha's message to arrive", || {
        let s = a.outbox_entry(&id)["status"].clone();
        (s == "delivered" || s == "held").then_some(())
    });
}

#[test]
fn a_relay_without_its_peer_id_is_refused_saying_what_to_write() {
    let a = Node::new("alpha");
    for bad in ["/ip4/127.0.0.1/tcp/4001", "not an address"] {
        let out = a.run(&["daemon", "--no-mdns", "--relay", bad, "--json"]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        let last: Value = serde_json::from_str(err.lines().last().unwrap()).unwrap();
        assert_eq!(last["code"], "bad_address", "{err}");
        assert!(
            last["message"].as_str().unwrap().contains("/p2p/"),
            "says what to write: {err}"
        );
    }
    // In config.toml too, naming the field.
    let config = a.home().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("[relays]\naddrs = []\n"), "{text}");
    let text = text.replacen("addrs = []", "addrs = [\"/ip4/127.0.0.1/tcp/4001\"]", 1);
    std::fs::write(&config, text).unwrap();
    let out = a.run(&["daemon", "--no-mdns", "--json"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("relays.addrs[0]"), "{err}");
}

/// A stranger's circuit starts no hole punch (once, one made a daemon dial
/// 300 addresses of the stranger's choosing, 900 times), and a member's
/// punch dials at most 8 addresses; an honest member's is still dialled.
#[test]
fn hole_punching_runs_with_members_only_and_on_few_addresses() {
    use agentmesh_tests::hostile::{DialTraps, PunchBait, identity_of};
    let relay = Relay::start();
    let [mut a, mut honest, mut greedy] =
        agentmesh_tests::team([("alpha", "Ada"), ("bravo", "Ada"), ("carol", "Ada")]);
    // Their daemons stop; their keys are used by the baits below.
    honest.stop();
    greedy.stop();
    a.stop();
    a.daemon_args = vec!["--relay".into(), relay.addr()];
    a.start();
    reservation(&a, &relay, "reserved");
    let circuit: libp2p::Multiaddr = format!("{}/p2p-circuit/p2p/{}", relay.addr(), a.peer_id())
        .parse()
        .unwrap();
    let stranger_traps = DialTraps::new(300);
    let stranger = PunchBait::dial(
        &agentmesh_protocol::Identity::generate(&mut rand::rng()),
        &circuit,
        stranger_traps.addrs.clone(),
    );
    let greedy_traps = DialTraps::new(40);
    let greedy_bait = PunchBait::dial(
        &identity_of(&greedy.home()),
        &circuit,
        greedy_traps.addrs.clone(),
    );
    wait_for("the stranger's and the greedy member's circuits", || {
        (stranger.connections() >= 2 && greedy_bait.connections() >= 2).then_some(())
    });
    // An honest member, connected after both: its 2 addresses are dialled
    // (so hole punching ran, and the others had every chance to).
    let honest_traps = DialTraps::new(2);
    let _honest_bait = PunchBait::dial(
        &identity_of(&honest.home()),
        &circuit,
        honest_traps.addrs.clone(),
    );
    wait_for("the honest member's addresses to be dialled", || {
        (honest_traps.hits() >= 2).then_some(())
    });
    eprintln!(
        "stranger: {} hole punches, {} dials to its 300 addresses; greedy member: {} dials to its 40",
        stranger.punches(),
        stranger_traps.hits(),
        greedy_traps.hits()
    );
    assert_eq!(
        stranger.punches(),
        0,
        "a stranger's circuit started a hole punch"
    );
    assert_eq!(
        stranger_traps.hits(),
        0,
        "a stranger's addresses were dialled"
    );
    // The greedy member is offered a punch, and refused it for its 40
    // addresses: DCUtR tries 3 times, dialling none of them.
    wait_for("the greedy member's hole punches", || {
        (greedy_bait.punches() >= 3).then_some(())
    });
    assert!(
        greedy_traps.hits() <= 8,
        "{} dials to a member's 40 addresses",
        greedy_traps.hits()
    );
}

/// A relay's text log read by a journal or a file (no terminal) is plain
/// text: no colour codes.
#[test]
fn a_relays_text_log_has_no_colour_codes_without_a_terminal() {
    let key = tempfile::tempdir().unwrap();
    let mut child = Command::new(relay_bin())
        .args(["--identity", key.path().join("relay.key").to_str().unwrap()])
        .args(["--listen", "/ip4/127.0.0.1/tcp/0"])
        .args(["--log-format", "text"])
        .env_remove("NO_COLOR")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(
            log.read_line(&mut line).unwrap() > 0,
            "the relay exited: {seen}"
        );
        seen.push_str(&line);
        if line.contains("listening") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        !seen.contains('\u{1b}'),
        "colour codes in the log: {seen:?}"
    );
}

/// The error `args --json` fails with, as JSON.
fn json_error(node: &Node, args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.push("--json");
    let e = node.fails(&args);
    serde_json::from_str::<Value>(e.lines().last().unwrap_or_default()).unwrap()
}

#[test]
fn relays_lists_them_and_forgets_an_adopted_one_for_good_but_not_a_configured_one() {
    let relay = Relay::start();
    let mut a = Node::new("alpha");
    a.daemon_args = vec!["--relay".into(), relay.addr()];
    a.start();
    reservation(&a, &relay, "reserved");
    let view = a.json(&["relays"]);
    assert_eq!(view["reservations"], 2, "the default: {view}");
    let row = &view["relays"][0];
    assert_eq!(row["peer_id"], relay.peer_id.as_str(), "{view}");
    assert_eq!(row["addrs"], serde_json::json!([relay.addr()]), "{view}");
    assert_eq!(row["adopted"], false, "{view}");
    assert!(
        row["expires_at"].is_null(),
        "not reported by libp2p: {view}"
    );
    assert!(row["failing_since"].is_null(), "{view}");
    let text = a.ok(&["relays"]);
    assert!(
        text.contains(&relay.peer_id) && text.contains(&relay.addr()),
        "{text}"
    );
    // A configured relay is not forgotten here: config.toml names it.
    let e = json_error(&a, &["relays", "forget", &relay.peer_id]);
    assert_eq!(e["code"], "relay_configured", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("relays.addrs"),
        "{e}"
    );
    a.ok(&["team", "create", "far", "--owner", "Ada"]);
    let ticket = a.json(&["invite"])["ticket"].as_str().unwrap().to_owned();
    let mut b = Node::new("bravo");
    b.start();
    agentmesh_tests::join_ticket(&a, &b, &ticket, &["--name", "bravo", "--owner", "Bob"]);
    wait_for("bravo to adopt the ticket's relay", || {
        let view = b.json(&["relays"]);
        (view["relays"][0]["adopted"] == true).then_some(())
    });
    let e = json_error(&b, &["relays", "forget", "12D3KooWNoSuchRelayAtAll"]);
    assert_eq!(e["code"], "unknown_relay", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains(&relay.peer_id),
        "names the ones it knows: {e}"
    );
    let left = b.json(&["relays", "forget", &relay.peer_id]);
    assert_eq!(left["relays"], serde_json::json!([]), "{left}");
    assert!(b.status()["circuit_addrs"].as_array().unwrap().is_empty());
    // Gone for good: not adopted again after a restart.
    b.stop();
    b.start();
    assert_eq!(b.json(&["relays"])["relays"], serde_json::json!([]));
    let text = b.ok(&["relays"]);
    assert!(text.starts_with("No relays"), "{text}");
}
