//! Whether mail wakes a run, as a function of the facts: the rules of
//! `waking` in the order they apply, with nothing read or written here.
//! The actor gathers the facts (the cheap ones first: unread mail is read
//! only once the gate passes) and carries the decision out.

/// Why no run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::mail) enum Skip {
    /// Wake is off for the mailbox.
    Off,
    /// A run of it is running: its end looks again.
    Running,
    /// Its folder is not opted in (or it has none).
    NoFolder,
    /// A session of it is live, or an MCP server is attached: custody is
    /// its person's, and push and hooks deliver.
    Custody,
    /// Nothing unread to show.
    NoMail,
    /// What is unread is all tainted: it waits for its person's session.
    Tainted,
    /// Today's budget is spent.
    BudgetSpent,
}

/// What becomes of a mailbox that may wake a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::mail) enum Decision {
    /// No run, and why.
    Skip(Skip),
    /// A run, once a slot is free (`wake.max_runs` are running).
    Queue,
    /// A run now.
    Start,
}

/// What is known before the mailbox's unread mail is read.
#[derive(Debug, Clone, Copy, Default)]
pub(in crate::mail) struct Gate {
    /// Wake is on for it.
    pub on: bool,
    /// A run of it is running.
    pub running: bool,
    /// Its folder is opted in.
    pub folder: bool,
    /// A session of it is live (as of now), or an MCP server attached.
    pub custody: bool,
}

/// Everything the decision reads.
#[derive(Debug, Clone, Copy, Default)]
pub(in crate::mail) struct Facts {
    pub gate: Gate,
    /// Unread messages a run would show (untainted).
    pub shown: usize,
    /// Tainted unread mail waits.
    pub tainted: bool,
    /// Runs left in today's budget (as of now).
    pub left: u32,
    /// A run slot is free.
    pub slot: bool,
}

/// Why no run starts, from what is known before the unread mail is read;
/// `None`: read it and decide.
pub(in crate::mail) fn gate(g: Gate) -> Option<Skip> {
    if !g.on {
        Some(Skip::Off)
    } else if g.running {
        Some(Skip::Running)
    } else if !g.folder {
        Some(Skip::NoFolder)
    } else if g.custody {
        Some(Skip::Custody)
    } else {
        None
    }
}

/// Whether a run starts, waits for a slot, or why not.
pub(in crate::mail) fn decide(f: Facts) -> Decision {
    if let Some(skip) = gate(f.gate) {
        return Decision::Skip(skip);
    }
    if f.shown == 0 {
        return Decision::Skip(if f.tainted {
            Skip::Tainted
        } else {
            Skip::NoMail
        });
    }
    if f.left == 0 {
        return Decision::Skip(Skip::BudgetSpent);
    }
    if !f.slot {
        return Decision::Queue;
    }
    Decision::Start
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready() -> Facts {
        Facts {
            gate: Gate {
                on: true,
                running: false,
                folder: true,
                custody: false,
            },
            shown: 2,
            tainted: false,
            left: 3,
            slot: true,
        }
    }

    #[test]
    fn a_mailbox_with_mail_budget_and_a_slot_starts_a_run() {
        assert_eq!(decide(ready()), Decision::Start);
        assert_eq!(gate(ready().gate), None);
    }

    #[test]
    fn each_rule_stops_it_in_order() {
        let mut f = ready();
        f.slot = false;
        assert_eq!(decide(f), Decision::Queue);
        f.left = 0;
        assert_eq!(decide(f), Decision::Skip(Skip::BudgetSpent));
        f.shown = 0;
        assert_eq!(decide(f), Decision::Skip(Skip::NoMail));
        f.tainted = true;
        assert_eq!(decide(f), Decision::Skip(Skip::Tainted));
        f.gate.custody = true;
        assert_eq!(decide(f), Decision::Skip(Skip::Custody));
        f.gate.folder = false;
        assert_eq!(decide(f), Decision::Skip(Skip::NoFolder));
        f.gate.running = true;
        assert_eq!(decide(f), Decision::Skip(Skip::Running));
        f.gate.on = false;
        assert_eq!(decide(f), Decision::Skip(Skip::Off));
    }

    #[test]
    fn tainted_mail_beside_untainted_mail_still_wakes() {
        let f = Facts {
            tainted: true,
            ..ready()
        };
        assert_eq!(decide(f), Decision::Start);
    }

    #[test]
    fn a_spent_budget_is_told_only_when_there_is_mail_to_show() {
        let f = Facts {
            shown: 0,
            left: 0,
            ..ready()
        };
        assert_eq!(decide(f), Decision::Skip(Skip::NoMail));
    }
}
