//! The local socket under abuse: idle connections, a full house of
//! clients, frames too large, not UTF-8, or naming a key twice. Each gets
//! an error frame that says what to do, the connection stays usable where
//! the docs say so, and a well-behaved client always gets in.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use agentmesh_node::api::WhoKind;
use agentmesh_node::server::{ATTACH_TIMEOUT, MAX_CLIENTS, MAX_EVENT_CLIENTS, MAX_UNATTACHED};
use agentmesh_tests::{ApiClient, Node, who};

fn socket(n: &Node) -> UnixStream {
    let s = UnixStream::connect(n.home().join("run/agentmesh.sock")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// The next frame the daemon sends on `r`.
fn read_frame(r: &mut BufReader<UnixStream>) -> serde_json::Value {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
}

fn attach_line() -> &'static [u8] {
    b"{\"type\":\"attach\",\"version\":1,\"who\":{\"kind\":\"human\",\"name\":\"t\"}}\n"
}

#[test]
fn idle_sockets_never_lock_a_client_out() {
    let mut a = Node::new("alpha");
    a.start();
    // One that never attaches: told why when its time is up. (Its clock
    // starts before the connect: the daemon may accept it, and start its
    // own, before connect returns here.)
    let opened = Instant::now();
    let first = socket(&a);
    // A thousand more idle sockets.
    let idle: Vec<UnixStream> = (0..1000).map(|_| socket(&a)).collect();
    let started = Instant::now();
    let mut c = ApiClient::attach(&a, who(WhoKind::Human, "ada"), None);
    let status = c.call(agentmesh_node::api::Op::Status).unwrap();
    let took = started.elapsed();
    assert_eq!(status["name"], "alpha");
    assert!(
        took < Duration::from_secs(2),
        "status took {took:?} beside 1,000 idle sockets"
    );
    eprintln!("status beside 1,000 idle sockets: {took:?}");
    // The idle socket is closed with a reason at its deadline.
    let mut r = BufReader::new(first);
    let v = read_frame(&mut r);
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["code"], "attach_timeout", "{v}");
    assert!(opened.elapsed() >= ATTACH_TIMEOUT);
    let mut rest = vec![];
    assert_eq!(r.read_to_end(&mut rest).unwrap(), 0, "then closed");
    drop(idle);

    // Past MAX_UNATTACHED waiting connections, the oldest makes room, told
    // why.
    let mut crowd: Vec<UnixStream> = (0..MAX_UNATTACHED + 1).map(|_| socket(&a)).collect();
    let oldest = crowd.remove(0);
    let v = read_frame(&mut BufReader::new(oldest));
    assert_eq!(v["code"], "busy", "{v}");
    assert!(v["message"].as_str().unwrap().contains("attach"), "{v}");
    drop(crowd);

    drop(c);
    a.stop();
}

/// Attaches on a fresh socket with `line`; the socket, and the answer.
fn attach_with(n: &Node, line: &[u8]) -> (UnixStream, serde_json::Value) {
    let mut s = socket(n);
    s.write_all(line).unwrap();
    let v = read_frame(&mut BufReader::new(s.try_clone().unwrap()));
    (s, v)
}

fn attach_for_requests_line() -> &'static [u8] {
    b"{\"type\":\"attach\",\"version\":1,\"who\":{\"kind\":\"human\",\"name\":\"t\"},\"events\":false}\n"
}

/// The `{"code":…}` line a `--json` command that failed ends its stderr
/// with.
fn error_code(n: &Node, args: &[&str]) -> String {
    let e = n.fails(args);
    let last: serde_json::Value =
        serde_json::from_str(e.lines().last().unwrap()).unwrap_or_else(|err| panic!("{err}: {e}"));
    last["code"].as_str().unwrap().to_owned()
}

/// Issue 17, points 8 and 9: clients attached for events (`watch`, MCP
/// servers) take at most MAX_EVENT_CLIENTS slots, so commands and hooks
/// (attached for requests only) still get in; a refused attach reaches
/// the CLI with its own code (`busy`, `bad_mailbox`), not `protocol`.
#[test]
fn event_clients_leave_slots_for_commands_and_refusals_keep_their_codes() {
    let mut a = Node::new("alpha");
    a.start();
    // An attach the daemon refuses, through the CLI.
    assert_eq!(
        error_code(&a, &["watch", "--mailbox", "Not A Name!", "--json"]),
        "bad_mailbox"
    );
    let mut held: Vec<UnixStream> = vec![];
    for _ in 0..MAX_EVENT_CLIENTS {
        let (s, v) = attach_with(&a, attach_line());
        assert_eq!(v["type"], "attached", "{v}");
        held.push(s);
    }
    // The next event client is told `busy`, saying why and what still works.
    let (_, v) = attach_with(&a, attach_line());
    assert_eq!(v["code"], "busy", "{v}");
    let m = v["message"].as_str().unwrap();
    assert!(
        m.contains(&MAX_EVENT_CLIENTS.to_string()) && m.contains("commands and hooks"),
        "{v}"
    );
    assert_eq!(error_code(&a, &["watch", "--json"]), "busy");
    // Commands still work, and a hook.
    assert_eq!(a.status()["name"], "alpha");
    let dir = a.home().join("work").join("box");
    std::fs::create_dir_all(&dir).unwrap();
    a.ok(&["allow", dir.to_str().unwrap()]);
    let id = a.send("box@", "still delivered");
    let mut hook = a
        .command(&["hook", "claude", "PostToolUse"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let input = serde_json::json!({"session_id": "s", "cwd": dir});
    hook.stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let out = hook.wait_with_output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&id),
        "{out:?}"
    );
    // Requests-only clients fill the rest; past it, everyone is `busy`.
    for _ in MAX_EVENT_CLIENTS..MAX_CLIENTS {
        let (s, v) = attach_with(&a, attach_for_requests_line());
        assert_eq!(v["type"], "attached", "{v}");
        held.push(s);
    }
    let (_, v) = attach_with(&a, attach_for_requests_line());
    assert_eq!(v["code"], "busy", "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains(&MAX_CLIENTS.to_string()),
        "{v}"
    );
    assert_eq!(error_code(&a, &["status", "--json"]), "busy");
    // One leaves: a command gets in again.
    held.pop();
    agentmesh_tests::wait_for("a slot to be free again", || {
        a.run(&["status"]).status.success().then_some(())
    });
    drop(held);
    a.stop();
}

#[test]
fn bad_frames_get_an_error_and_the_connection_stays_usable() {
    let mut a = Node::new("alpha");
    a.start();
    let mut s = socket(&a);
    let mut r = BufReader::new(s.try_clone().unwrap());
    s.write_all(attach_line()).unwrap();
    assert_eq!(read_frame(&mut r)["type"], "attached");
    let status = |s: &mut UnixStream, r: &mut BufReader<UnixStream>, id: u64| {
        s.write_all(format!("{{\"type\":\"request\",\"id\":{id},\"op\":\"status\"}}\n").as_bytes())
            .unwrap();
        let v = read_frame(r);
        assert_eq!(v["id"], id, "{v}");
        assert_eq!(v["ok"], true, "the connection still answers: {v}");
    };
    // Over 1 MiB.
    let mut big = vec![b' '; 2 * 1024 * 1024];
    big.push(b'\n');
    s.write_all(&big).unwrap();
    let v = read_frame(&mut r);
    assert_eq!(v["code"], "frame_too_large", "{v}");
    status(&mut s, &mut r, 1);
    // Not UTF-8.
    s.write_all(b"{\"type\":\"request\",\"id\":2,\"op\":\"st\xffus\"}\n")
        .unwrap();
    let v = read_frame(&mut r);
    assert_eq!(v["code"], "malformed_frame", "{v}");
    assert!(v["message"].as_str().unwrap().contains("UTF-8"), "{v}");
    status(&mut s, &mut r, 3);
    // A key named twice is refused, not run as its last value.
    s.write_all(b"{\"type\":\"request\",\"id\":4,\"op\":\"status\",\"op\":\"shutdown\"}\n")
        .unwrap();
    let v = read_frame(&mut r);
    assert_eq!(v["code"], "malformed_frame", "{v}");
    assert!(v["message"].as_str().unwrap().contains("twice"), "{v}");
    status(&mut s, &mut r, 5);
    // An op with default arguments may leave them out.
    s.write_all(b"{\"type\":\"request\",\"id\":6,\"op\":\"peers\"}\n")
        .unwrap();
    let v = read_frame(&mut r);
    assert_eq!(v["ok"], true, "{v}");
    // A truncated frame (no newline, then gone) harms nothing.
    let mut t = socket(&a);
    t.write_all(b"{\"type\":\"request\",\"id\":7,\"op\":\"shut")
        .unwrap();
    drop(t);
    status(&mut s, &mut r, 8);
    a.ok(&["status"]);
    a.stop();
}
