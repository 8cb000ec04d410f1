//! This machine's mailboxes as requests name them: the mailbox a message
//! is sent from (`send --from`), and the one `inbox --mailbox` reads, are
//! checked against the mailboxes that exist here, and a name typed wrong
//! gets the nearest real one suggested. A message sent from a mailbox
//! that does not exist could never be answered: the reply would be
//! refused as addressed to no mailbox.
//!
//! ```text
//!  "@", "NAME@", "NAME@this-machine", "NAME" ── the owner's, or NAME
//!  NAME ── the client's own (attached) mailbox: as it is (an agent's
//!          session may not receive yet; its tools say so)
//!       ── bound and opted in: yes    opted out: folder_not_allowed
//!       ── no such mailbox: no_mailbox, "did you mean …?"
//! ```

use crate::api::{ApiError, err};
use crate::codes::ErrorCode;
use crate::mail::address::{mailbox_name, parse_address};
use crate::mail::consent::Consent;

/// The mailbox a message is sent from, as a client named it: `None` for
/// the owner's (`@`). `attached` is the mailbox the client attached to.
pub(in crate::mail) fn sending_from(
    given: &str,
    attached: Option<&str>,
    consent: &Consent,
    machine: &str,
) -> Result<Option<String>, ApiError> {
    let name = match given.trim() {
        "@" => return Ok(None),
        m if m.contains('@') => match parse_address(m)? {
            (mailbox, None) => mailbox,
            (mailbox, Some(other)) if other.as_str() == machine => mailbox,
            (_, Some(other)) => {
                return err(
                    ErrorCode::BadMailbox,
                    format!(
                        "mail is sent from a mailbox on this machine ({machine}), not from {other}; give the mailbox's name (`agentmesh mailboxes` lists them)"
                    ),
                );
            }
        },
        m => Some(mailbox_name(m)?),
    };
    let Some(name) = name.map(|n| n.to_string()) else {
        return Ok(None);
    };
    if attached == Some(name.as_str()) {
        return Ok(Some(name));
    }
    match consent.binding(&name) {
        Some(b) if b.allowed => Ok(Some(name)),
        Some(b) => err(
            ErrorCode::FolderNotAllowed,
            format!(
                "mailbox {name} is opted out of receiving (its folder {} was denied), so a reply to what it sends would be refused; a person opts it in again with `agentmesh allow {}`, or send from another mailbox",
                b.path, b.path
            ),
        ),
        None => Err(no_such(
            &name,
            consent
                .bindings()
                .filter(|b| b.allowed)
                .map(|b| b.mailbox.as_str()),
            "to send from, so a reply to it would be refused",
        )),
    }
}

/// Checks that `mailbox` (a name, or `@` for the owner's) is a mailbox
/// of this machine, opted in or out: `inbox --mailbox` reads it.
pub(in crate::mail) fn existing(mailbox: &str, consent: &Consent) -> Result<(), ApiError> {
    if mailbox == "@" {
        return Ok(());
    }
    // Not a mailbox name at all is said as such (`bad_mailbox`), before
    // whether one of that name exists.
    mailbox_name(mailbox)?;
    if consent.binding(mailbox).is_some() {
        return Ok(());
    }
    Err(no_such(
        mailbox,
        consent.bindings().map(|b| b.mailbox.as_str()),
        "",
    ))
}

/// The opted-in mailbox of this machine nearest `name`, if one is near
/// enough to be a slip of the keyboard: what a refusal of mail to a
/// mailbox that does not exist suggests to its sender.
pub(in crate::mail) fn near(name: &str, consent: &Consent) -> Option<String> {
    let names: Vec<&str> = consent
        .bindings()
        .filter(|b| b.allowed)
        .map(|b| b.mailbox.as_str())
        .collect();
    nearest(name, &names).map(str::to_owned)
}

/// The `no_mailbox` error for `name`, suggesting the nearest of
/// `candidates` if one is near enough to be a slip of the keyboard.
fn no_such<'a>(name: &str, candidates: impl Iterator<Item = &'a str>, why: &str) -> ApiError {
    let candidates: Vec<&str> = candidates.collect();
    let hint = match nearest(name, &candidates) {
        Some(near) => format!(" (did you mean {near}?)"),
        None => String::new(),
    };
    let why = if why.is_empty() {
        String::new()
    } else {
        format!(" {why}")
    };
    let known = if candidates.is_empty() {
        "it has none but the owner's (@)".to_owned()
    } else {
        "`agentmesh mailboxes` lists them".to_owned()
    };
    ApiError::new(
        ErrorCode::NoMailbox,
        format!(
            "this machine has no mailbox {name}{hint}{why}; {known}, and a person makes one with `agentmesh allow FOLDER --mailbox {name}`"
        ),
    )
}

/// The candidate nearest `name` by edit distance (a swap of two letters
/// counts as one edit), if it is within a third of the name's length (at
/// least one edit): `apu` is `api`, `web` is not `api`.
fn nearest<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let room = (name.chars().count() / 3).max(1);
    candidates
        .iter()
        .map(|c| (strsim::damerau_levenshtein(name, c), *c))
        .filter(|(d, _)| *d <= room)
        .min()
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_near_name_is_suggested_and_a_far_one_is_not() {
        let names = ["api", "planner", "reviewer"];
        assert_eq!(nearest("apu", &names), Some("api"));
        assert_eq!(nearest("paln", &names), None, "two edits in four letters");
        assert_eq!(nearest("planer", &names), Some("planner"));
        assert_eq!(nearest("reveiwer", &names), Some("reviewer"));
        assert_eq!(nearest("web", &names), None);
        assert_eq!(nearest("api", &[]), None);
    }
}
