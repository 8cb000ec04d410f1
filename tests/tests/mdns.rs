//! mDNS discovery between two daemons, each in a network namespace this
//! test creates and connects with a veth pair. Nothing touches the real
//! interfaces. Skipped, with the reason printed, where namespaces can't be
//! made (not root, or no `ip`).

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::process::Command;

use agentmesh_tests::{Node, wait_for};

/// Two namespaces joined by a veth pair: 10.77.0.1 and 10.77.0.2.
struct Lab {
    names: [String; 2],
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run `ip`: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Lab {
    fn new() -> Result<Lab, String> {
        let id = std::process::id();
        let names = [format!("am-mdns-a-{id}"), format!("am-mdns-b-{id}")];
        ip(&["netns", "add", &names[0]])?;
        let lab = Lab { names };
        let (a, b) = (&lab.names[0], &lab.names[1]);
        ip(&["netns", "add", b])?;
        let (va, vb) = (
            format!("vma{}", id % 100_000),
            format!("vmb{}", id % 100_000),
        );
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb])?;
        ip(&["link", "set", &va, "netns", a])?;
        ip(&["link", "set", &vb, "netns", b])?;
        for (ns, dev, addr) in [(a, &va, "10.77.0.1/24"), (b, &vb, "10.77.0.2/24")] {
            ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            // Multicast (224.0.0.251) leaves through the veth.
            ip(&["-n", ns, "route", "add", "224.0.0.0/4", "dev", dev])?;
        }
        Ok(lab)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in &self.names {
            if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            }
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

#[test]
fn mdns_discovers_a_daemon_on_the_same_network() {
    let lab = match Lab::new() {
        Ok(lab) => lab,
        Err(why) => {
            eprintln!(
                "SKIPPED mdns_discovers_a_daemon_on_the_same_network: cannot make network namespaces here: {why}"
            );
            return;
        }
    };
    let mut a = Node::new("alpha");
    let mut b = Node::new("bravo");
    for (n, ns) in [(&mut a, &lab.names[0]), (&mut b, &lab.names[1])] {
        n.mdns = true;
        n.listen = vec!["/ip4/0.0.0.0/tcp/0".into()];
        n.wrapper = vec!["ip".into(), "netns".into(), "exec".into(), ns.clone()];
        n.start();
    }
    let b_id = b.peer_id();
    // Each finds the other with nobody telling it an address.
    let row = wait_for("alpha to discover bravo over mDNS", || {
        a.peer_row(&b_id).filter(|r| {
            r["addresses"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x.as_str().unwrap().starts_with("/ip4/10.77.0.2/tcp/"))
        })
    });
    assert_eq!(row["membership"], "stranger");
    let a_id = a.peer_id();
    wait_for("bravo to discover alpha over mDNS", || {
        b.peer_row(&a_id).filter(|r| {
            r["addresses"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x.as_str().unwrap().starts_with("/ip4/10.77.0.1/tcp/"))
        })
    });
    // And the discovered address works: bravo connects to alpha by it.
    let addr = row["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .find(|x| x.starts_with("/ip4/10.77.0.2/tcp/"))
        .unwrap()
        .to_owned();
    let connected = a.json(&["connect", &format!("{addr}/p2p/{b_id}")]);
    assert_eq!(connected["peer_id"], b_id);

    // Joining needs no reachable address in the ticket: with the ticket's
    // only address wrong, bravo still finds alpha by mDNS and joins.
    a.ok(&["team", "create", "lan", "--owner", "Ada"]);
    let real = a.json(&["invite"])["ticket"].as_str().unwrap().to_owned();
    let mut ticket = agentmesh_protocol::ticket::Ticket::decode(&real).unwrap();
    ticket.addrs = vec!["/ip4/10.77.0.1/tcp/1".parse().unwrap()];
    let mut j = b.pty(&[
        "join",
        &ticket.to_string(),
        "--name",
        "bravo",
        "--owner",
        "Bob",
    ]);
    let code = agentmesh_tests::read_code(&mut j, "Pairing code");
    let mut adm = a.pty(&["admit", "--person", "Bob"]);
    adm.exp_string("Type the pairing code shown on bravo: ")
        .unwrap();
    adm.send_line(&code).unwrap();
    agentmesh_tests::read_code(&mut adm, "Team code");
    agentmesh_tests::read_code(&mut j, "Team code");
    j.exp_string("[y/N]").unwrap();
    j.send_line("y").unwrap();
    j.exp_string("Joined team lan").unwrap();
    adm.exp_string("is now a member").unwrap();
    assert_eq!(b.json(&["team", "show"])["name"], "lan");
    drop(j);
    drop(adm);
    drop(a);
    drop(b);
    drop(lab);
}
