//! `agentmesh-relay`: parses its arguments and runs the relay library.

fn main() {
    println!(
        "agentmesh-relay {}: not built yet; see CHANGELOG.md",
        agentmesh_relay::VERSION
    );
}
