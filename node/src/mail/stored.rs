//! The inbox and the outbox read from the store of a home whose daemon is
//! not running (`agentmesh inbox` and `outbox` with the daemon down): what
//! the store holds, without what only a running daemon knows (retries,
//! whether a machine is offline). Nothing is written: no message is
//! marked read.

use crate::api::{ApiError, MessageView, OutboxView};
use crate::store::Store;

/// Every message of `mailbox` (`@`: the owner's; `None`: all), only the
/// unread ones if `unread`, oldest first.
pub(crate) fn inbox(
    store: &dyn Store,
    mailbox: Option<&str>,
    unread: bool,
) -> Result<Vec<MessageView>, ApiError> {
    let mut all = vec![];
    let mut after = 0;
    loop {
        let page = super::post::pages::inbox_page(
            store,
            mailbox,
            unread,
            after,
            super::post::pages::MAX_INBOX_PAGE,
        )?;
        all.extend(page.messages);
        match page.next_after_seq {
            Some(n) if n > after => after = n,
            _ => return Ok(all),
        }
    }
}

/// `outbox`: what is on its way and the newest of what is done, oldest
/// first; `me` is this machine's name.
pub(crate) fn outbox(store: &dyn Store, me: &str) -> Result<Vec<OutboxView>, ApiError> {
    super::post::ops::stored_outbox(store, me, crate::clock::now())
}
