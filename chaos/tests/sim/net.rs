//! tonic over turmoil's simulated TCP: the replicas' real Raft client and server, on a network
//! the simulation can partition, slow down and cut.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use starling_raft::{Connector, network::PeerIo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;
use turmoil::net::{TcpListener, TcpStream};

/// The port every replica's gRPC server (the Raft and Node services) listens on.
pub const RAFT_PORT: u16 = 7000;

/// Dials peers over the simulated network ([`starling_raft::NetworkConfig::connector`]).
pub fn connector() -> Connector {
    Connector::new(|authority| {
        Box::pin(async move {
            let stream = TcpStream::connect(authority).await?;
            Ok(Box::new(stream) as Box<dyn PeerIo>)
        })
    })
}

/// The accepted connections of `listener`, as tonic's `serve_with_incoming` takes them.
pub fn incoming(listener: TcpListener) -> impl Stream<Item = io::Result<Accepted>> {
    futures::stream::unfold(listener, |listener| async move {
        let next = listener.accept().await.map(|(stream, _)| Accepted(stream));
        Some((next, listener))
    })
}

/// One accepted simulated connection.
pub struct Accepted(TcpStream);

impl Connected for Accepted {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for Accepted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Accepted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
