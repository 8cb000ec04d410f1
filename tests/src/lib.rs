//! # agentmesh-tests
//!
//! Integration tests that start the real `agentmesh` daemon and
//! `agentmesh-relay` as processes, on port 0 with temporary homes, and the
//! network-namespace NAT lab. This library will hold the harness they share
//! (start a daemon, wait for it with a deadline, drive a pseudo-terminal);
//! the tests themselves live in `tests/tests/`. The daemon does not exist
//! yet, so there is nothing here to run.
