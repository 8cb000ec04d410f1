//! `bus stats`: what the bus cost downstream. Per mailbox and in all:
//! broadcasts delivered and dropped (from the audit log's judgments), the
//! wake runs a delivered broadcast started, and the share of those whose
//! session sent nothing and marked nothing (`silent_wake_share`): a run a
//! broadcast woke for nothing. Addressed mail never passes the judge and
//! is not counted.

use std::collections::BTreeMap;

use agentmesh_protocol::Timestamp;

use crate::api::{self, ApiError, BusStatsRow, BusStatsView, RunStatus};
use crate::audit::AuditEvent;
use crate::mail::address::address;
use crate::mail::wake::runs::Runs;
use crate::store::Store;

/// The most audit entries read for the counts.
const MAX_SCAN: usize = 200_000;

fn row(mailbox: String) -> BusStatsRow {
    BusStatsRow {
        mailbox,
        delivered: 0,
        dropped: 0,
        wake_runs: 0,
        silent_runs: 0,
        silent_wake_share: None,
    }
}

/// The counts, as `bus stats` answers them.
pub(in crate::mail) fn bus_stats(
    store: &dyn Store,
    runs: &Runs,
    my_name: &str,
) -> Result<BusStatsView, ApiError> {
    let mut rows: BTreeMap<String, BusStatsRow> = BTreeMap::new();
    let mut since = None;
    for e in store.audit_since(Timestamp::from_unix_millis(0), MAX_SCAN)? {
        let delivered = if e.event == AuditEvent::BroadcastDelivered.as_str() {
            true
        } else if e.event == AuditEvent::BroadcastDropped.as_str() {
            false
        } else {
            continue;
        };
        let Some(m) = e.recipient else { continue };
        since.get_or_insert(e.at);
        let r = rows.entry(m.clone()).or_insert_with(|| row(m));
        if delivered {
            r.delivered += 1;
        } else {
            r.dropped += 1;
        }
    }
    // Runs that ended as they should: one still running, that failed,
    // timed out, was stopped, never started or was cut off by a daemon
    // stop is a failure (`wake list` shows it), not a silent wake.
    for r in runs
        .records()
        .filter(|r| r.broadcast && r.status == RunStatus::Done)
    {
        let m = address(Some(&r.mailbox), my_name);
        let row = rows.entry(m.clone()).or_insert_with(|| row(m));
        row.wake_runs += 1;
        if r.acted == 0 {
            row.silent_runs += 1;
        }
    }
    let mut total = row("*".into());
    for r in rows.values_mut() {
        r.silent_wake_share = share(r.silent_runs, r.wake_runs);
        total.delivered += r.delivered;
        total.dropped += r.dropped;
        total.wake_runs += r.wake_runs;
        total.silent_runs += r.silent_runs;
    }
    total.silent_wake_share = share(total.silent_runs, total.wake_runs);
    Ok(BusStatsView {
        judged_since: since.map(api::rfc3339_ms),
        runs_kept: crate::mail::wake::runs::MAX_RUNS_KEPT,
        mailboxes: rows.into_values().collect(),
        total,
    })
}

fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}
