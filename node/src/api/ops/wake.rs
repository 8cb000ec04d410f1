//! Wake's ops: settings and budgets, a dry run, the runs, the sessions
//! hooks report.

use serde::{Deserialize, Serialize};

use super::requests;
use crate::api;

/// The wake wing's operations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", content = "args", rename_all = "snake_case")]
pub enum WakeOp {
    /// [`WakeSet`].
    WakeSet(WakeSet),
    /// [`WakeTest`].
    WakeTest(WakeTest),
    /// [`WakeList`].
    WakeList,
    /// [`WakeStop`].
    WakeStop(WakeStop),
    /// [`Session`].
    Session(Session),
}

/// A person sets whether mail to a mailbox wakes an idle session of
/// an agent, and its daily budget. Answers its [`WakeView`](api::WakeView).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WakeSet {
    /// The mailbox (a name on this machine).
    pub mailbox: String,
    /// The agent, or off.
    pub wake: api::WakeChoice,
    /// Wakes a day it may cost; default: unchanged (at first,
    /// `wake.budget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<u32>,
    /// A Claude Code run's `--max-budget-usd`; default: unchanged (at
    /// first, `wake.max_budget_usd`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_budget_usd: Option<f64>,
}

/// The exact command a wake run of a mailbox would start now; runs
/// nothing. Answers a [`WakeTestView`](api::WakeTestView).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WakeTest {
    /// The mailbox (a name on this machine).
    pub mailbox: String,
}

/// The recent wake runs, newest first. Answers a
/// [`WakeListView`](api::WakeListView).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WakeList;

/// Ends a wake run: SIGTERM to its process group, SIGKILL 10 s later.
/// Answers its [`RunView`](api::RunView) (still `running` until it has
/// exited).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WakeStop {
    /// The run's id (or a unique prefix of it).
    pub run: String,
}

/// An agent's hook reports its session in a mailbox's folder (a run
/// agentmesh started reports none). Answers its
/// [`SessionView`](api::SessionView).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// The mailbox of the session's folder; default: the attached one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mailbox: Option<String>,
    /// The agent.
    pub agent: api::WakeAgent,
    /// Its session id (1 to 128 bytes, one line).
    pub session_id: String,
    /// What happened.
    pub event: api::SessionEvent,
}

requests! {
    WakeSet => api::WakeView = WakeOp::WakeSet;
    WakeTest => api::WakeTestView = WakeOp::WakeTest;
    WakeList => api::WakeListView = |_| WakeOp::WakeList;
    WakeStop => api::RunView = WakeOp::WakeStop;
    Session => api::SessionView = WakeOp::Session;
}
