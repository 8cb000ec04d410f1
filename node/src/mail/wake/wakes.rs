//! Which mailboxes wake an idle session when mail arrives, and the
//! sessions their agents' hooks reported: the state `agentmesh wake set`
//! and the SessionStart / SessionEnd hooks change, and custody is read
//! from.
//!
//! ```text
//!  wake set MAILBOX claude|codex|off [--budget N] [--max-budget-usd X]
//!      ── WakeRecord (kept; removed when off with nothing of its own)
//!  hook SessionStart ── session live ── any hook: still live (seen)
//!  hook SessionEnd ── ended at once; no hook for 12 h ── no longer live
//!  (a run agentmesh started reports no session: AGENTMESH_WAKE_RUN)
//! ```
//!
//! The newest session a mailbox's hooks reported for an agent is the one
//! a run resumes; a live one is never resumed (its transcript is its
//! person's). At most [`MAX_SESSIONS`] are kept per mailbox.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentmesh_protocol::Timestamp;

use crate::agents::run::{self as wake, Run, SessionId};
use crate::api::{
    self, ApiError, MessageView, SessionEvent, SessionView, WakeAgent, WakeTestView, WakeView,
};
use crate::codes::ErrorCode;
use crate::config::WakeRules;
use crate::store::{FolderBinding, SessionRecord, SpentRecord, Store, StoreError, WakeRecord};

/// A session with no hook for this long is no longer live (Codex has no
/// SessionEnd hook; a laptop that slept kills none either).
pub(in crate::mail) const LIVE_FOR: Duration = Duration::from_secs(12 * 3600);

/// Sessions kept per mailbox (the newest by their last hook).
pub(in crate::mail) const MAX_SESSIONS: usize = 8;

/// Wakes a day a mailbox may be given, at most.
const MAX_BUDGET: u32 = 10_000;

/// The wake settings and the sessions hooks reported.
#[derive(Debug)]
pub(in crate::mail) struct Wakes {
    rules: WakeRules,
    /// The daemon's home (a run's AGENTMESH_HOME).
    home: PathBuf,
    settings: BTreeMap<String, WakeRecord>,
    /// Per mailbox, oldest first by `seen`.
    sessions: BTreeMap<String, Vec<SessionRecord>>,
    /// What each mailbox spent of its budget, on the day the record names.
    spent: BTreeMap<String, SpentRecord>,
    /// The day each mailbox's spent budget was last logged (`budget`), so
    /// a flood of mail logs it once a day.
    logged: BTreeMap<String, String>,
    /// The local day as of the last look ([`Wakes::day_turned`]).
    today: String,
}

/// What counts against a mailbox's daily wake budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::mail) enum Spend {
    /// A wake run started.
    Run,
    /// A broadcast was delivered to it.
    Broadcast,
    /// A Stop hook kept its session working.
    Stop,
}

impl Wakes {
    /// The stored settings and sessions.
    pub(in crate::mail) fn load(
        store: &dyn Store,
        rules: WakeRules,
        home: PathBuf,
    ) -> Result<Wakes, StoreError> {
        let settings = store
            .wakes()?
            .into_iter()
            .map(|r| (r.mailbox.clone(), r))
            .collect();
        let mut sessions: BTreeMap<String, Vec<SessionRecord>> = BTreeMap::new();
        for s in store.sessions()? {
            sessions.entry(s.mailbox.clone()).or_default().push(s);
        }
        for list in sessions.values_mut() {
            list.sort_by_key(|s| s.seen);
        }
        let spent = store
            .spent()?
            .into_iter()
            .map(|r| (r.mailbox.clone(), r))
            .collect();
        Ok(Wakes {
            rules,
            home,
            settings,
            sessions,
            spent,
            logged: BTreeMap::new(),
            today: String::new(),
        })
    }

    /// The agent mail to `mailbox` wakes, if any.
    pub(in crate::mail) fn agent(&self, mailbox: &str) -> Option<WakeAgent> {
        self.settings.get(mailbox).and_then(|r| r.agent)
    }

    /// The mailboxes whose mail wakes an agent.
    pub(in crate::mail) fn mailboxes(&self) -> impl Iterator<Item = &str> {
        self.settings
            .values()
            .filter(|r| r.agent.is_some())
            .map(|r| r.mailbox.as_str())
    }

    /// `mailbox`'s daily wake budget.
    pub(in crate::mail) fn budget(&self, mailbox: &str) -> u32 {
        self.settings
            .get(mailbox)
            .and_then(|r| r.budget)
            .unwrap_or(self.rules.budget)
    }

    /// `mailbox`'s spending cap a Claude Code run.
    pub(in crate::mail) fn max_budget_usd(&self, mailbox: &str) -> f64 {
        self.settings
            .get(mailbox)
            .and_then(|r| r.max_budget_usd)
            .unwrap_or(self.rules.max_budget_usd)
    }

    /// Whether `now` is on another local day than the last look (the
    /// first look is none).
    pub(in crate::mail) fn day_turned(&mut self, now: Timestamp) -> bool {
        let (day, _) = local_day(now);
        if day == self.today {
            return false;
        }
        let first = self.today.is_empty();
        self.today = day;
        !first
    }

    /// What `mailbox` spent of its budget on `now`'s local day.
    pub(in crate::mail) fn spent(&self, mailbox: &str, now: Timestamp) -> u32 {
        let (day, _) = local_day(now);
        self.spent
            .get(mailbox)
            .filter(|r| r.day == day)
            .map_or(0, SpentRecord::total)
    }

    /// What is left of `mailbox`'s budget today.
    pub(in crate::mail) fn left(&self, mailbox: &str, now: Timestamp) -> u32 {
        self.budget(mailbox)
            .saturating_sub(self.spent(mailbox, now))
    }

    /// When `mailbox`'s spent budget resets, if it is spent: the next
    /// local midnight. (A budget of 0 is no budget spent: its mail is for
    /// its person's own session, and no midnight changes that.)
    pub(in crate::mail) fn deferred_until(
        &self,
        mailbox: &str,
        now: Timestamp,
    ) -> Option<Timestamp> {
        (self.budget(mailbox) > 0 && self.left(mailbox, now) == 0).then(|| local_day(now).1)
    }

    /// Whether `mailbox`'s spent budget is to be logged now: once a day.
    pub(in crate::mail) fn log_spent(&mut self, mailbox: &str, now: Timestamp) -> bool {
        let (day, _) = local_day(now);
        if self.logged.get(mailbox) == Some(&day) {
            return false;
        }
        if self.logged.len() >= 4096 {
            self.logged.clear();
        }
        self.logged.insert(mailbox.to_owned(), day);
        true
    }

    /// Counts `what` against `mailbox`'s budget today, durably.
    pub(in crate::mail) fn spend(
        &mut self,
        store: &dyn Store,
        mailbox: &str,
        what: Spend,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let (day, _) = local_day(now);
        let fresh = || SpentRecord {
            mailbox: mailbox.to_owned(),
            day: day.clone(),
            runs: 0,
            broadcasts: 0,
            stops: 0,
        };
        let r = self.spent.entry(mailbox.to_owned()).or_insert_with(fresh);
        if r.day != day {
            *r = fresh();
        }
        let n = match what {
            Spend::Run => &mut r.runs,
            Spend::Broadcast => &mut r.broadcasts,
            Spend::Stop => &mut r.stops,
        };
        *n = n.saturating_add(1);
        store.put_spent(r)
    }

    /// A run counted today never started (its program is missing): it
    /// cost nothing, so it is given back, durably.
    pub(in crate::mail) fn refund_run(
        &mut self,
        store: &dyn Store,
        mailbox: &str,
        now: Timestamp,
    ) -> Result<(), StoreError> {
        let (day, _) = local_day(now);
        match self.spent.get_mut(mailbox) {
            Some(r) if r.day == day && r.runs > 0 => {
                r.runs -= 1;
                store.put_spent(r)
            }
            _ => Ok(()),
        }
    }

    /// The rules a run is started with.
    pub(in crate::mail) fn rules(&self) -> &WakeRules {
        &self.rules
    }

    /// The daemon's home.
    pub(in crate::mail) fn home(&self) -> &Path {
        &self.home
    }

    /// `wake set`: durably, before it is answered.
    pub(in crate::mail) fn set(
        &mut self,
        store: &dyn Store,
        mailbox: &str,
        agent: Option<WakeAgent>,
        budget: Option<u32>,
        max_budget_usd: Option<f64>,
    ) -> Result<(), ApiError> {
        if mailbox == "@" {
            return Err(ApiError::new(
                ErrorCode::BadMailbox,
                "the owner's mailbox is its person's own: no run is started for it; wake a folder's mailbox (`agentmesh wake set MAILBOX claude`)",
            ));
        }
        if budget.is_some_and(|b| b > MAX_BUDGET) {
            return Err(ApiError::new(
                ErrorCode::BadInput,
                format!("--budget must be from 0 to {MAX_BUDGET} wakes a day"),
            ));
        }
        if max_budget_usd.is_some_and(|x| !(x > 0.0 && x <= 1000.0)) {
            return Err(ApiError::new(
                ErrorCode::BadInput,
                "--max-budget-usd must be more than 0 and at most 1000 (US dollars a run)",
            ));
        }
        let mut r = self.settings.get(mailbox).cloned().unwrap_or(WakeRecord {
            mailbox: mailbox.to_owned(),
            agent: None,
            budget: None,
            max_budget_usd: None,
        });
        r.agent = agent;
        r.budget = budget.or(r.budget);
        r.max_budget_usd = max_budget_usd.or(r.max_budget_usd);
        let keep = r.agent.is_some() || r.budget.is_some() || r.max_budget_usd.is_some();
        store.put_wake(mailbox, keep.then_some(&r))?;
        if keep {
            self.settings.insert(mailbox.to_owned(), r);
        } else {
            self.settings.remove(mailbox);
        }
        Ok(())
    }

    /// A hook reported `event` of session `id` of `agent` in `mailbox`'s
    /// folder at `now`: durably.
    pub(in crate::mail) fn session(
        &mut self,
        store: &dyn Store,
        mailbox: &str,
        agent: WakeAgent,
        id: &str,
        event: SessionEvent,
        now: Timestamp,
    ) -> Result<SessionRecord, ApiError> {
        if id.is_empty() || id.len() > 128 || id.chars().any(char::is_control) {
            return Err(ApiError::new(
                ErrorCode::BadInput,
                "a session id is 1 to 128 bytes on one line",
            ));
        }
        let now = now.as_unix_millis();
        let list = self.sessions.entry(mailbox.to_owned()).or_default();
        let at = list.iter().position(|s| s.agent == agent && s.id == id);
        let mut s = at.map(|i| list.remove(i)).unwrap_or(SessionRecord {
            mailbox: mailbox.to_owned(),
            agent,
            id: id.to_owned(),
            started: now,
            seen: now,
            ended: None,
        });
        s.seen = now;
        match event {
            // A session resumed after its end is live again.
            SessionEvent::Start => s.ended = None,
            SessionEvent::Seen => {}
            SessionEvent::End => s.ended = Some(now),
        }
        store.put_session(&s, false)?;
        list.push(s.clone());
        while list.len() > MAX_SESSIONS {
            let old = list.remove(0);
            store.put_session(&old, true)?;
        }
        Ok(s)
    }

    /// The newest session `agent`'s hooks reported in `mailbox`'s folder:
    /// the one a run resumes.
    pub(in crate::mail) fn newest(
        &self,
        mailbox: &str,
        agent: WakeAgent,
    ) -> Option<&SessionRecord> {
        self.sessions
            .get(mailbox)?
            .iter()
            .rev()
            .find(|s| s.agent == agent)
    }

    /// The session a run of `agent` for `mailbox` resumes: the newest its
    /// hooks (or a run) reported, if its id is in the agents' own shape;
    /// else none (a new session).
    pub(in crate::mail) fn resumable(&self, mailbox: &str, agent: WakeAgent) -> Option<SessionId> {
        SessionId::parse(&self.newest(mailbox, agent)?.id)
    }

    /// A run of `agent` for `mailbox` failed or named no session: no
    /// session of that agent there is resumed again (the next run starts
    /// a new one), durably. A session live at `now` (its person opened it
    /// again meanwhile) is kept: custody needs it. How many were
    /// forgotten.
    pub(in crate::mail) fn forget(
        &mut self,
        store: &dyn Store,
        mailbox: &str,
        agent: WakeAgent,
        now: Timestamp,
    ) -> Result<usize, StoreError> {
        let Some(list) = self.sessions.get_mut(mailbox) else {
            return Ok(0);
        };
        let mut forgotten = 0;
        // One at a time, durably: a store that fails keeps the rest.
        while let Some(at) = list
            .iter()
            .position(|s| s.agent == agent && !is_live(s, now))
        {
            store.put_session(&list[at], true)?;
            list.remove(at);
            forgotten += 1;
        }
        Ok(forgotten)
    }

    /// A live session of `mailbox`, if any (of any agent: two processes on
    /// one folder's transcript is what custody forbids).
    pub(in crate::mail) fn live(&self, mailbox: &str, now: Timestamp) -> Option<&SessionRecord> {
        self.sessions
            .get(mailbox)?
            .iter()
            .rev()
            .find(|s| is_live(s, now))
    }

    /// `wake set`'s answer for `mailbox`.
    pub(in crate::mail) fn view(&self, mailbox: &str, now: Timestamp) -> WakeView {
        WakeView {
            mailbox: mailbox.to_owned(),
            wake: self.agent(mailbox),
            budget: self.budget(mailbox),
            max_budget_usd: self.max_budget_usd(mailbox),
            sessions: self
                .sessions
                .get(mailbox)
                .map(|l| l.iter().rev().map(|s| session_view(s, now)).collect())
                .unwrap_or_default(),
        }
    }
}

impl Wakes {
    /// `wake test`: the command a run for `mailbox` would start now, with
    /// its folder's binding, its unread mail and whether a session's MCP
    /// server is attached to it; runs nothing.
    pub(in crate::mail) fn test(
        &self,
        mailbox: &str,
        folder: Option<&FolderBinding>,
        unread: &[MessageView],
        attached: bool,
        now: Timestamp,
    ) -> WakeTestView {
        let agent = self.agent(mailbox);
        // Tainted mail starts no run and is never shown to one: it waits
        // for its person's own session.
        let shown: Vec<MessageView> = unread.iter().filter(|m| !m.taint).cloned().collect();
        let command = agent.zip(folder).map(|(agent, f)| {
            let session = self.resumable(mailbox, agent);
            let run = Run {
                agent,
                mailbox,
                session: session.as_ref(),
                max_budget_usd: self.max_budget_usd(mailbox),
                cwd: Path::new(&f.path),
                home: &self.home,
                run_id: "RUN_ID",
            };
            wake::command(&self.rules, &run, &wake::prompt(mailbox, &shown))
        });
        let why_not = if agent.is_none() {
            Some(format!(
                "wake is off for {mailbox}; turn it on with `agentmesh wake set {mailbox} claude` (or codex)"
            ))
        } else if folder.is_none_or(|f| !f.allowed || f.path.is_empty()) {
            Some(format!(
                "{mailbox} has no allowed folder to run in; `agentmesh allow PATH --mailbox {mailbox}`"
            ))
        } else if let Some(s) = self.live(mailbox, now) {
            Some(format!(
                "a session is live ({} {}, its last hook {}): its hooks and push deliver the mail, and no run resumes a live session",
                s.agent.name(),
                s.id,
                api::rfc3339_ms(s.seen)
            ))
        } else if attached {
            Some(format!(
                "a session's agentmesh mcp server is attached to {mailbox}: push delivers the mail, and no run starts while one is"
            ))
        } else if shown.is_empty() {
            Some(if unread.is_empty() {
                "no unread mail: a run starts when mail arrives".to_owned()
            } else {
                "its unread mail is all tainted: tainted mail starts no run and waits for its person's own session".to_owned()
            })
        } else {
            None
        };
        WakeTestView {
            mailbox: mailbox.to_owned(),
            wake: agent,
            command,
            messages: shown.iter().map(|m| m.id.clone()).collect(),
            would_run: why_not.is_none(),
            why_not,
        }
    }
}

/// `now`'s day on this machine's local calendar (`YYYY-MM-DD`), and the
/// local midnight that ends it.
pub(in crate::mail) fn local_day(now: Timestamp) -> (String, Timestamp) {
    use chrono::TimeZone;
    let ms = i64::try_from(now.as_unix_millis()).unwrap_or(i64::MAX);
    let Some(t) = chrono::Local.timestamp_millis_opt(ms).earliest() else {
        return (
            "unknown".into(),
            now.saturating_add(Duration::from_secs(86_400)),
        );
    };
    let day = t.date_naive();
    let next = day
        .succ_opt()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        // A midnight a clock change skips: the day ends when it resumes.
        .and_then(|m| {
            chrono::Local
                .from_local_datetime(&m)
                .earliest()
                .or_else(|| {
                    chrono::Local
                        .from_local_datetime(&(m + chrono::Duration::hours(1)))
                        .earliest()
                })
        })
        .map_or(now.saturating_add(Duration::from_secs(86_400)), |m| {
            Timestamp::from_unix_millis(u64::try_from(m.timestamp_millis()).unwrap_or(0))
        });
    (day.format("%Y-%m-%d").to_string(), next)
}

/// Whether `s` is live at `now`.
fn is_live(s: &SessionRecord, now: Timestamp) -> bool {
    s.ended.is_none() && now.as_unix_millis().saturating_sub(s.seen) < LIVE_FOR.as_millis() as u64
}

/// A session as clients see it.
pub(in crate::mail) fn session_view(s: &SessionRecord, now: Timestamp) -> SessionView {
    SessionView {
        agent: s.agent,
        id: s.id.clone(),
        started: api::rfc3339_ms(s.started),
        seen: api::rfc3339_ms(s.seen),
        ended: s.ended.map(api::rfc3339_ms),
        live: is_live(s, now),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

    use super::*;
    use crate::store::{BusStore, SledStore};

    #[test]
    fn a_session_is_live_from_its_start_to_its_end_or_twelve_hours_of_silence() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path(), 1 << 20).unwrap();
        let mut w = Wakes::load(&store, WakeRules::default(), PathBuf::from("/h")).unwrap();
        let t = |ms: u64| Timestamp::from_unix_millis(1_000_000 + ms);
        let hour = 3_600_000;
        w.session(
            &store,
            "api",
            WakeAgent::Claude,
            "s1",
            SessionEvent::Start,
            t(0),
        )
        .unwrap();
        assert_eq!(w.live("api", t(hour)).unwrap().id, "s1");
        // Twelve hours with no hook: not live, still the one to resume.
        assert!(w.live("api", t(12 * hour)).is_none());
        assert_eq!(w.newest("api", WakeAgent::Claude).unwrap().id, "s1");
        w.session(
            &store,
            "api",
            WakeAgent::Claude,
            "s1",
            SessionEvent::Seen,
            t(12 * hour),
        )
        .unwrap();
        assert!(w.live("api", t(13 * hour)).is_some());
        w.session(
            &store,
            "api",
            WakeAgent::Claude,
            "s1",
            SessionEvent::End,
            t(13 * hour),
        )
        .unwrap();
        assert!(w.live("api", t(13 * hour)).is_none());
        // Kept across a restart, and bounded.
        for i in 0..20 {
            let id = format!("x{i}");
            w.session(
                &store,
                "api",
                WakeAgent::Codex,
                &id,
                SessionEvent::Start,
                t(14 * hour + i),
            )
            .unwrap();
        }
        let again = Wakes::load(&store, WakeRules::default(), PathBuf::from("/h")).unwrap();
        assert_eq!(again.sessions["api"].len(), MAX_SESSIONS);
        assert_eq!(again.newest("api", WakeAgent::Codex).unwrap().id, "x19");
        assert!(again.newest("api", WakeAgent::Claude).is_none());
        assert_eq!(store.sessions().unwrap().len(), MAX_SESSIONS);
    }

    #[test]
    fn a_budget_counts_runs_broadcasts_and_stops_until_local_midnight() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path(), 1 << 20).unwrap();
        let mut w = Wakes::load(&store, WakeRules::default(), PathBuf::from("/h")).unwrap();
        w.set(&store, "api", Some(WakeAgent::Claude), Some(3), None)
            .unwrap();
        let now = Timestamp::from_unix_millis(1_796_000_000_000);
        let (_, midnight) = local_day(now);
        assert!(
            midnight > now && midnight.as_unix_millis() - now.as_unix_millis() <= 25 * 3_600_000
        );
        assert_eq!(
            (w.left("api", now), w.deferred_until("api", now)),
            (3, None)
        );
        w.spend(&store, "api", Spend::Run, now).unwrap();
        w.spend(&store, "api", Spend::Broadcast, now).unwrap();
        assert_eq!(w.left("api", now), 1);
        w.spend(&store, "api", Spend::Stop, now).unwrap();
        assert_eq!(w.left("api", now), 0);
        assert_eq!(w.deferred_until("api", now), Some(midnight));
        // A run that never started is given back; only a run is.
        w.refund_run(&store, "api", now).unwrap();
        assert_eq!(w.left("api", now), 1);
        w.refund_run(&store, "api", now).unwrap();
        assert_eq!(w.left("api", now), 1, "no run left to give back");
        w.spend(&store, "api", Spend::Run, now).unwrap();
        // Logged once a day.
        assert!(w.log_spent("api", now));
        assert!(!w.log_spent("api", now));
        // Kept across a restart.
        let again = Wakes::load(&store, WakeRules::default(), PathBuf::from("/h")).unwrap();
        assert_eq!(again.left("api", now), 0);
        // The next local day starts afresh.
        let tomorrow = midnight.saturating_add(Duration::from_secs(1));
        assert_eq!(
            (
                again.left("api", tomorrow),
                again.deferred_until("api", tomorrow)
            ),
            (3, None)
        );
        // A budget of 0 is never deferred: no midnight changes it.
        w.set(&store, "web", None, Some(0), None).unwrap();
        assert_eq!(
            (w.left("web", now), w.deferred_until("web", now)),
            (0, None)
        );
    }

    #[test]
    fn wake_settings_stick_and_off_keeps_a_budget() {
        let dir = tempfile::tempdir().unwrap();
        let store = SledStore::open(dir.path(), 1 << 20).unwrap();
        let mut w = Wakes::load(&store, WakeRules::default(), PathBuf::from("/h")).unwrap();
        w.set(&store, "api", Some(WakeAgent::Claude), Some(5), None)
            .unwrap();
        w.set(&store, "api", None, None, None).unwrap();
        let again = Wakes::load(&store, WakeRules::default(), PathBuf::from("/h")).unwrap();
        assert_eq!(again.agent("api"), None);
        assert_eq!(again.budget("api"), 5);
        assert_eq!(again.budget("web"), 20);
        assert_eq!(again.max_budget_usd("api"), 0.5);
        let e = w
            .set(&store, "@", Some(WakeAgent::Codex), None, None)
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::BadMailbox);
        let e = w
            .set(&store, "api", Some(WakeAgent::Codex), None, Some(-1.0))
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::BadInput);
    }
}
