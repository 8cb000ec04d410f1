//! What the senders of carried mail are owed: the answer to a carried
//! batch goes to its carrier, so each envelope's sender is told by
//! receipt what became of its message (docs/protocol.md §5.12, §10b).
//!
//! ```text
//!  carried envelope's outcome ── stored (delivered / held, deferred): a receipt
//!                             ── refused, about the message itself: a receipt, once
//!                             ── refused for the carrier, the bytes, the id; busy;
//!                                duplicate: nothing
//! ```

use std::collections::{HashSet, VecDeque};

use agentmesh_protocol::Timestamp;
use agentmesh_protocol::envelope::Envelope;
use agentmesh_protocol::receipt::{ReceiptEntry, ReceiptState};

use crate::mail::post::receipts::Debt;
use crate::wire::MailOutcome;

/// Refusals a carried message's sender is told of: what this machine's
/// own rules decided about the message itself, once it opened (so its
/// sender's signature covered the bytes as they came). Nothing about the
/// carrier (revoked, not a member), the bytes (changed on the way, late,
/// for another machine) or the id (another sender's message has it) is
/// told: those say nothing of the message its sender sent, and the
/// sender keeps delivering its own copy.
const TOLD_REFUSALS: [&str; 4] = [
    "no_mailbox",
    "folder_not_allowed",
    "held_full",
    "MalformedBody",
];

/// Refusals of carried mail remembered as told (see [`Owed`]).
const MAX_REFUSALS_TOLD: usize = 4096;

/// A carried message whose refusal was told: (sender, id).
type Told = (String, String);

/// The refusals of carried messages their senders were already told, by
/// (sender, id), newest last, at most [`MAX_REFUSALS_TOLD`]: a carrier
/// that brings one again makes no second receipt.
#[derive(Debug, Default)]
pub(in crate::mail) struct Owed {
    told: HashSet<Told>,
    order: VecDeque<Told>,
}

impl Owed {
    /// The receipt owed to `debt`'s sender for its carried message's
    /// `outcome` at `now`, if any.
    pub(in crate::mail) fn owed(
        &mut self,
        debt: Debt,
        outcome: &MailOutcome,
        now: Timestamp,
    ) -> Option<(Debt, Vec<ReceiptEntry>)> {
        let entries = receipted(outcome, now)?;
        if matches!(outcome, MailOutcome::Refused { .. }) && !self.first_told(&debt) {
            return None;
        }
        Some((debt, entries))
    }

    /// The refusal of `debt` was not told after all (its receipt could
    /// not be made): a carrier that brings it again may have it told.
    pub(in crate::mail) fn untell(&mut self, debt: &Debt) {
        let key = (debt.from_peer.clone(), debt.id.clone());
        if self.told.remove(&key) {
            self.order.retain(|k| *k != key);
        }
    }

    /// Whether the refusal of `debt` is news to its sender (remembered as
    /// told from now on).
    fn first_told(&mut self, debt: &Debt) -> bool {
        let key = (debt.from_peer.clone(), debt.id.clone());
        if !self.told.insert(key.clone()) {
            return false;
        }
        self.order.push_back(key);
        if self.order.len() > MAX_REFUSALS_TOLD
            && let Some(old) = self.order.pop_front()
        {
            self.told.remove(&old);
        }
        true
    }
}

/// Whom a receipt for a carried envelope refused with `code` goes to:
/// its sender, as its header says, when the refusal is one it is told
/// of ([`TOLD_REFUSALS`]).
pub(in crate::mail) fn refused(code: &str, bytes: &[u8]) -> Option<Debt> {
    if !TOLD_REFUSALS.contains(&code) {
        return None;
    }
    let h = Envelope::from_wire(bytes).ok()?.header;
    Some(Debt {
        id: h.id.to_string(),
        from_peer: h.from.to_string(),
        thread: h.thread.to_string(),
        kind: h.kind.into(),
    })
}

/// What a carried envelope's sender is told of `outcome` at `now`: stored
/// (delivered or held, and deferred), or refused with its code. Nothing
/// for busy (the carrier brings it again) or a duplicate (told before).
fn receipted(outcome: &MailOutcome, now: Timestamp) -> Option<Vec<ReceiptEntry>> {
    match outcome {
        MailOutcome::Accepted {
            held,
            deferred_until,
        } => {
            let state = if *held {
                ReceiptState::Held
            } else {
                ReceiptState::Delivered
            };
            let mut entries = vec![ReceiptEntry::new(state, now)];
            if let Some(t) = deferred_until {
                entries.push(ReceiptEntry {
                    until: Some(Timestamp::from_unix_millis(*t)),
                    ..ReceiptEntry::new(ReceiptState::Deferred, now)
                });
            }
            Some(entries)
        }
        MailOutcome::Refused { code, reason } => Some(vec![ReceiptEntry {
            code: Some(code.clone()),
            reason: Some(reason.clone()),
            ..ReceiptEntry::new(ReceiptState::Refused, now)
        }]),
        MailOutcome::Duplicate | MailOutcome::Busy => None,
    }
}
