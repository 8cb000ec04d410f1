//! How the daemon speaks to agents: a peer's message framed for a model
//! (as another machine's words, never the user's instruction), and what a
//! wake run is (the agent's command line and its prompt, built from a
//! mailbox's settings). The mail actor's `wake` wing decides when a run
//! starts; this says what it runs.

pub mod framing;
pub mod run;
