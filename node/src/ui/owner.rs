//! Whose is a connection to the web page: the user that owns the client's
//! socket. The page serves only the daemon's own user, as the local API
//! socket does (there by the socket's peer credentials; a TCP socket has
//! none, so here by the kernel's socket table).
//!
//! ```text
//!  accepted 127.0.0.1:PORT <- 127.0.0.1:P
//!   ── /proc/net/tcp (then tcp6, for an IPv4-mapped client): the socket
//!      whose local address is 127.0.0.1:P and remote 127.0.0.1:PORT ── its uid
//!   ── found, this user's ─────────── served
//!   ── found, another's, or none ──── closed before a byte is read (none:
//!                                     looked for twice, as the table is
//!                                     not read in one step)
//!   ── the table is there and can't be read ── closed (fails closed)
//!   ── there is no such table ─────────────── served (not Linux: the
//!                                     sign-in ticket alone guards it)
//! ```

use std::net::SocketAddr;

/// What the socket table says of a connection's client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// Its socket belongs to this user id.
    Uid(u32),
    /// No live socket of the table is its (it closed already).
    Gone,
    /// The table is there but could not be read: why.
    Unreadable(String),
    /// This system has no such table.
    Unknown,
}

/// The owner of the client socket at `peer` connected to `local`.
#[cfg(target_os = "linux")]
pub fn of(local: SocketAddr, peer: SocketAddr) -> Owner {
    if !std::path::Path::new("/proc/net/tcp").exists() {
        return Owner::Unknown;
    }
    // The kernel writes the table a page at a time: a socket can move
    // between two reads' pages and be missed once.
    match look(local, peer) {
        Owner::Gone => look(local, peer),
        found => found,
    }
}

#[cfg(target_os = "linux")]
fn look(local: SocketAddr, peer: SocketAddr) -> Owner {
    use procfs::net::TcpState;
    let mapped = |a: SocketAddr| match a {
        SocketAddr::V6(v6) => v6
            .ip()
            .to_ipv4_mapped()
            .map_or(a, |ip| SocketAddr::from((ip, v6.port()))),
        v4 => v4,
    };
    let find = |table: Vec<procfs::net::TcpNetEntry>| {
        table.into_iter().find(|e| {
            mapped(e.local_address) == peer
                && mapped(e.remote_address) == local
                // A socket in TIME_WAIT has no owner left (its uid reads 0).
                && e.state != TcpState::TimeWait
        })
    };
    let v4 = match procfs::net::tcp() {
        Ok(t) => t,
        Err(e) => return Owner::Unreadable(format!("/proc/net/tcp: {e}")),
    };
    if let Some(e) = find(v4) {
        return Owner::Uid(e.uid);
    }
    // No tcp6 table (IPv6 off) holds nothing to find.
    match procfs::net::tcp6().ok().and_then(find) {
        Some(e) => Owner::Uid(e.uid),
        None => Owner::Gone,
    }
}

/// The owner of the client socket at `peer` connected to `local`: not
/// known on this system.
#[cfg(not(target_os = "linux"))]
pub fn of(_local: SocketAddr, _peer: SocketAddr) -> Owner {
    Owner::Unknown
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_connection_of_this_process_is_this_users() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(local).unwrap();
        let (_server, peer) = listener.accept().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        let me = nix::unistd::geteuid().as_raw();
        assert_eq!(of(local, peer), Owner::Uid(me));
        // An address no client is connected from: no owner.
        let other: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(of(local, other), Owner::Gone);
    }
}
