//! Carriers: a member its person marks as always on (`carry = true`)
//! says so in its signed directory record, and every member's
//! `directory` and `team show` show it.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use agentmesh_tests::{team, wait_for};

#[test]
fn a_machine_marked_carry_is_announced_to_the_team() {
    let [a, mut c] = team([("alpha", "Ada"), ("charlie", "Ada")]);
    let set = c.json(&["config", "set", "carry", "true"]);
    assert_eq!(set["value"], true, "{set}");
    c.stop();
    c.start();
    c.ok(&["connect", &a.addr()]);
    // Its own view at once; the team's once its new record arrives.
    let me = shown_member(&c, "charlie");
    assert_eq!(me["always_on"], true, "{me}");
    let row = wait_for("alpha's directory to show charlie as a carrier", || {
        a.json(&["directory"])["machines"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "charlie" && m["always_on"] == true)
            .cloned()
    });
    assert_eq!(row["known"], true, "{row}");
    let shown = shown_member(&a, "charlie");
    assert_eq!(shown["always_on"], true, "{shown}");
    assert!(a.ok(&["team", "show"]).contains("charlie (carrier)"));
    assert!(a.ok(&["directory"]).contains("carrier"));
    // Not every machine is one.
    let alpha = shown_member(&a, "alpha");
    assert_eq!(alpha["always_on"], false, "{alpha}");
}

/// Machine `name` as `team show --json` on `n` lists it.
fn shown_member(n: &agentmesh_tests::Node, name: &str) -> serde_json::Value {
    n.json(&["team", "show"])["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .cloned()
        .unwrap()
}
