//! `agentmesh`, the command: everything it does is in the library
//! (src/lib.rs).

fn main() -> std::process::ExitCode {
    agentmesh::main()
}
