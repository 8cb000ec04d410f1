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
