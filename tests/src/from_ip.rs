//! A TCP transport that dials from a chosen local address, so that a relay
//! on loopback sees its clients come from many sources (127.0.0.2,
//! 127.0.1.7, …). Used by `agentmesh-bench relay` and by the relay's own
//! hostile-client tests (`relay/tests/hostile.rs`, which includes this
//! file by path).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::FutureExt;
use futures::future::BoxFuture;
use libp2p::core::Transport;
use libp2p::core::muxing::StreamMuxerBox;
use libp2p::core::transport::{Boxed, DialOpts, ListenerId, TransportError, TransportEvent};
use libp2p::core::upgrade::Version;
use libp2p::multiaddr::Protocol;
use libp2p::{Multiaddr, PeerId, identity, noise, tcp, yamux};

/// [`FromIp`] upgraded as libp2p's TCP transport is (Noise, yamux), for
/// `SwarmBuilder::with_other_transport`.
pub fn upgraded(
    ip: IpAddr,
    key: &identity::Keypair,
) -> Result<Boxed<(PeerId, StreamMuxerBox)>, Box<dyn std::error::Error + Send + Sync>> {
    Ok(FromIp(ip)
        .upgrade(Version::V1Lazy)
        .authenticate(noise::Config::new(key)?)
        .multiplex(yamux::Config::default())
        .map(|(peer, muxer), _| (peer, StreamMuxerBox::new(muxer)))
        .boxed())
}

/// A TCP transport that dials from `ip` (127.0.0.2, say), so that the relay
/// sees the connection come from that address; it does not listen.
#[derive(Debug)]
pub struct FromIp(pub IpAddr);

impl Transport for FromIp {
    type Output = tcp::tokio::TcpStream;
    type Error = io::Error;
    type ListenerUpgrade = futures::future::Pending<io::Result<Self::Output>>;
    type Dial = BoxFuture<'static, io::Result<Self::Output>>;

    fn listen_on(
        &mut self,
        _: ListenerId,
        addr: Multiaddr,
    ) -> Result<(), TransportError<io::Error>> {
        Err(TransportError::MultiaddrNotSupported(addr))
    }

    fn remove_listener(&mut self, _: ListenerId) -> bool {
        false
    }

    fn dial(
        &mut self,
        addr: Multiaddr,
        _: DialOpts,
    ) -> Result<Self::Dial, TransportError<io::Error>> {
        let mut parts = addr.iter();
        let to = match (parts.next(), parts.next()) {
            (Some(Protocol::Ip4(ip)), Some(Protocol::Tcp(port))) => SocketAddr::from((ip, port)),
            _ => return Err(TransportError::MultiaddrNotSupported(addr)),
        };
        // A circuit address is the relay client transport's.
        if parts.any(|p| matches!(p, Protocol::P2pCircuit)) {
            return Err(TransportError::MultiaddrNotSupported(addr));
        }
        let from = self.0;
        Ok(async move {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(SocketAddr::new(from, 0))?;
            let stream = socket.connect(to).await?;
            stream.set_nodelay(true)?;
            Ok(tcp::tokio::TcpStream(stream))
        }
        .boxed())
    }

    fn poll(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<TransportEvent<Self::ListenerUpgrade, Self::Error>> {
        Poll::Pending
    }
}
