//! Connections: the accept loop, and one task per connection that reads a
//! request, serves it (waiting where it waits) and writes its answer, one
//! request at a time as Kafka does. While a request is served, one
//! `select!` watches the client: if it goes away, the request's future is
//! dropped, and with it the request's wait.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

use crate::api::{self, Reply, RequestError};
use crate::broker::Broker;
use crate::wire::{stream, EncodeError, Frame, FrameError, Frames};

/// How long the accept loop pauses after a failed accept (out of file
/// descriptors, say) before it tries again.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Why a connection closed, other than the client closing it.
#[derive(Debug)]
pub enum Closed {
    /// A frame out of bounds, or the socket failed.
    Frame(FrameError),
    /// A request Kafka would close the connection over.
    Request(RequestError),
    /// An answer we could not encode (a bug of ours).
    Encode(EncodeError),
    /// The answer could not be written.
    Write(std::io::Error),
}

/// Accepts connections for the broker's life.
pub async fn accept(listener: TcpListener, broker: Arc<Broker>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve(Arc::clone(&broker), stream));
            }
            // Out of file descriptors, say: the connections already open
            // go on; try again shortly.
            Err(_) => tokio::time::sleep(ACCEPT_BACKOFF).await,
        }
    }
}

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Closed::Frame(e) => write!(f, "{e}"),
            Closed::Request(e) => write!(f, "{e}"),
            Closed::Encode(e) => write!(f, "{e}"),
            Closed::Write(e) => write!(f, "cannot write an answer: {e}"),
        }
    }
}

impl std::error::Error for Closed {}

/// Serves one connection until it closes; counts the connections closed
/// over what the client sent, and reports our own encoding bugs.
async fn serve(broker: Arc<Broker>, stream: TcpStream) {
    match run(&broker, stream).await {
        Err(Closed::Write(e)) if e.kind() == std::io::ErrorKind::TimedOut => {
            broker.write_stalled.fetch_add(1, Ordering::Relaxed);
        }
        Ok(()) | Err(Closed::Write(_)) => {}
        Err(e @ Closed::Encode(_)) => {
            broker.encode_errors.fetch_add(1, Ordering::Relaxed);
            eprintln!("error: {e}");
        }
        Err(Closed::Frame(FrameError::Idle(_))) => {
            broker.idle_closed.fetch_add(1, Ordering::Relaxed);
        }
        Err(Closed::Frame(FrameError::Stalled(_))) => {
            broker.stalled_closed.fetch_add(1, Ordering::Relaxed);
        }
        Err(Closed::Frame(_) | Closed::Request(_)) => {
            broker.refused.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Reads, serves and answers requests until the client goes away (`Ok`) or
/// something closes the connection (`Err`, only this connection).
async fn run(broker: &Arc<Broker>, stream: TcpStream) -> Result<(), Closed> {
    let _ = stream.set_nodelay(true);
    let peer = stream
        .peer_addr()
        .map_err(|e| Closed::Frame(FrameError::Io(e)))?;
    let (reader, mut writer) = stream.into_split();
    let mut frames = Frames::new(reader, broker.limits.clone());
    while let Some(Frame { bytes, charge }) = frames.next().await.map_err(Closed::Frame)? {
        let reply = tokio::select! {
            biased;
            reply = api::serve(broker, peer, bytes) => reply.map_err(Closed::Request)?,
            () = frames.closed() => return Ok(()),
        };
        // Kafka's muting: nothing more is read until the answer is
        // written; an answer that makes no progress closes the connection.
        if let Reply::Answer(answer) = reply {
            let parts = answer.encode_parts().map_err(Closed::Encode)?;
            stream::write(&mut writer, &parts, broker.limits.write_timeout)
                .await
                .map_err(Closed::Write)?;
        }
        // The request is answered: its bytes leave the budget.
        drop(charge);
    }
    Ok(())
}
