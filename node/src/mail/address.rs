//! Mail's addresses: `MAILBOX@MACHINE`, `MAILBOX@` (this machine),
//! `@MACHINE` (its owner's mailbox), and mailbox names.

use agentmesh_protocol::Name;

use crate::api::{ApiError, err};
use crate::codes::ErrorCode;

/// `mailbox@machine`, or `@machine` for the owner's mailbox.
pub fn address(mailbox: Option<&str>, machine: &str) -> String {
    format!("{}@{machine}", mailbox.unwrap_or(""))
}

/// Parses `MAILBOX@MACHINE` or `@MACHINE`; `MAILBOX@` (no machine) is a
/// mailbox on this machine, and the machine is `None`.
pub fn parse_address(to: &str) -> Result<(Option<Name>, Option<Name>), ApiError> {
    let Some((mailbox, machine)) = to.rsplit_once('@') else {
        return err(
            ErrorCode::BadAddress,
            format!(
                "{to:?} is not an address; write MAILBOX@MACHINE (MAILBOX@ for a mailbox on this machine), or @MACHINE for the machine's owner"
            ),
        );
    };
    let machine = if machine.is_empty() {
        None
    } else {
        Some(
            Name::parse("machine name", machine)
                .map_err(|e| ApiError::new(ErrorCode::BadAddress, e.to_string()))?,
        )
    };
    let mailbox = if mailbox.is_empty() {
        None
    } else {
        Some(mailbox_name(mailbox)?)
    };
    Ok((mailbox, machine))
}

/// A mailbox name, or the `bad_mailbox` error a client sees.
pub(super) fn mailbox_name(m: &str) -> Result<Name, ApiError> {
    Name::parse("mailbox name", m).map_err(|e| ApiError::new(ErrorCode::BadMailbox, e.to_string()))
}
