//! A letter's life: the mailroom that seals it, the courier that carries it and keeps its outbox, the inbox that receives, receipts and what carried mail owes its sender, carrying for members that are offline, the unread index, the pages of the inbox, and fan-out to attached clients.

pub(in crate::mail) mod carrying;
pub(in crate::mail) mod courier;
pub(in crate::mail) mod fanout;
pub(in crate::mail) mod inbox;
pub(in crate::mail) mod mailroom;
pub(in crate::mail) mod ops;
pub(in crate::mail) mod owed;
pub(in crate::mail) mod pages;
pub(in crate::mail) mod receipts;
pub(in crate::mail) mod unread;
