//! Facts about the workspace itself that users and later issues rely on.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

/// libp2p signs with ed25519-dalek through libp2p-identity; the protocol
/// signs envelopes and blocks with ed25519-dalek directly. They must be one
/// copy, so a machine's key means the same thing to both.
#[test]
fn one_copy_of_the_signature_code() {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock"))
        .expect("Cargo.lock is committed at the workspace root");
    // (curve25519-dalek has two copies: snow, inside libp2p-noise, keeps its
    // own for the Noise handshake; it never touches machine keys.)
    for crate_name in ["ed25519-dalek", "libp2p-identity"] {
        let copies = lock
            .lines()
            .filter(|l| *l == format!("name = \"{crate_name}\""))
            .count();
        assert_eq!(
            copies, 1,
            "Cargo.lock holds {copies} versions of {crate_name}"
        );
    }
}

/// `cargo build --release --workspace --bins` (how scripts and the
/// benchmarks build) must give no binary the test clock: in the feature
/// resolution of a build without dev-dependencies, agentmesh-node has no
/// `test-clock`. Before the fix the tests crate asked for it as a normal
/// dependency, and feature unification put it into `agentmesh`.
#[test]
fn no_user_build_has_the_test_clock() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "tree",
            "--workspace",
            "--edges",
            "normal,build",
            "--invert",
            "agentmesh-node",
            "--format",
            "{p} {f}",
            "--locked",
            "--offline",
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8(out.stdout).unwrap();
    let first = tree.lines().next().unwrap_or_default();
    assert!(first.starts_with("agentmesh-node"), "{tree}");
    assert!(
        !first.contains("test-clock"),
        "a user build would have the test clock: {first}"
    );
}
