//! A letter's life: the mailroom that seals it, the courier that carries it and keeps its outbox, the inbox that receives, receipts and what carried mail owes its sender, carrying for members that are offline, the unread index, the pages of the inbox, and fan-out to attached clients.

pub(in crate::mail) mod arrive;
pub(in crate::mail) mod carrying;
pub(in crate::mail) mod courier;
pub(in crate::mail) mod fanout;
pub(in crate::mail) mod inbox;
pub(in crate::mail) mod mailroom;
pub(in crate::mail) mod ops;
pub(in crate::mail) mod owed;
pub(in crate::mail) mod pages;
pub(in crate::mail) mod receipts;
pub(in crate::mail) mod serve;
pub(in crate::mail) mod unread;
pub(in crate::mail) mod verdict;

/// A letter's life, its parts.
#[derive(Debug)]
pub(in crate::mail) struct Post {
    pub(in crate::mail) mailroom: mailroom::Mailroom,
    pub(in crate::mail) courier: courier::Courier,
    pub(in crate::mail) inbox: inbox::Inbox,
    pub(in crate::mail) unread: unread::Unread,
    /// Which mailboxes tell senders their mail was read.
    pub(in crate::mail) receipts: receipts::Receipts,
    /// What this machine carries for members that are offline.
    pub(in crate::mail) carrying: carrying::Carrying,
    pub(in crate::mail) fanout: fanout::Fanout,
}
