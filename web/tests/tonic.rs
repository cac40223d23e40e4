//! `TimeoutLayer` under tonic, as `tower::timeout::TimeoutLayer` is used
//! there (`Server::builder().layer(..)`): a real gRPC server (tonic-health's
//! generated `Health` service, with a `check` of our own) and a real tonic
//! client, on a loopback port.
//!
//! What tonic does with the layer's error: `Status::from_error` does not
//! know tower's `Elapsed` (it knows tonic's own `TimeoutExpired`, from
//! `Server::timeout`, as CANCELLED; `Elapsed` alone is UNKNOWN), so the
//! server resets the stream and the client reads INTERNAL, the same as
//! under tower's layer. To answer DEADLINE_EXCEEDED, map the error to a
//! `Status` outside the layer (`ServiceBuilder::map_err`), as with tower's.
//!
//! Our layer's time is a `ManualClock`'s: a late answer times out when the
//! test advances the clock past the timeout, after the request has reached
//! the service. Every wait is bounded.

use std::net::SocketAddr;
use std::time::Duration;

use purgatorio::{Executor, ManualClock, Timer};
use purgatorio_web::{BoxError, Elapsed, TimeoutLayer};
use tokio::sync::mpsc;
use tonic::codegen::tokio_stream;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Code, Request, Response, Status};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{
    health_check_response::ServingStatus, HealthCheckRequest, HealthCheckResponse,
};
use tower::ServiceBuilder;

/// The timeout of the layers under test.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The longest any step of a test may take (the tests never wait for it
/// unless something is broken).
const LIMIT: Duration = Duration::from_secs(20);

/// The service asked for in a `check` that never answers.
const LATE: &str = "late";

/// A `Health` whose `check` answers SERVING at once, except for [`LATE`]:
/// that one says it arrived and then never answers.
struct Checks {
    /// Told when a late `check` arrives (the layer's sleep is made by then).
    arrived: mpsc::UnboundedSender<()>,
}

#[tonic::codegen::async_trait]
impl Health for Checks {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        if request.get_ref().service == LATE {
            let _ = self.arrived.send(());
            std::future::pending::<()>().await;
        }
        Ok(Response::new(HealthCheckResponse {
            status: ServingStatus::Serving.into(),
        }))
    }

    type WatchStream = tokio_stream::Empty<Result<HealthCheckResponse, Status>>;

    async fn watch(
        &self,
        _: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("not here"))
    }
}

/// A tonic server of [`Checks`] under `$layer`, on a loopback port: its
/// address, and the channel on which late checks arrive. (A macro: the
/// bounds of `Server::layer` for three layer types would be longer.)
macro_rules! serve {
    ($layer:expr) => {{
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (arrived, arrivals) = mpsc::unbounded_channel();
        let server = Server::builder()
            .layer($layer)
            .add_service(HealthServer::new(Checks { arrived }))
            .serve_with_incoming(TcpIncoming::from(listener));
        // Stopped with the test's runtime.
        tokio::spawn(server);
        (addr, arrivals)
    }};
}

/// A timer on a manual clock, with its own driver thread: the test moves
/// the clock, the driver fires what is due.
fn manual_timer() -> Result<(ManualClock, Timer), BoxError> {
    let clock = ManualClock::new();
    let timer = Timer::builder()
        .clock(clock.clone())
        .executor(Executor::Inline)
        .build()?;
    Ok((clock, timer))
}

/// `check(service)` from a new client of `addr`: its status code (OK for
/// an answer), bounded by [`LIMIT`].
async fn check(addr: SocketAddr, service: &str) -> Result<Code, BoxError> {
    let channel = Channel::from_shared(format!("http://{addr}"))?;
    let mut client = HealthClient::new(tokio::time::timeout(LIMIT, channel.connect()).await??);
    let request = HealthCheckRequest {
        service: service.into(),
    };
    let answer = tokio::time::timeout(LIMIT, client.check(request)).await?;
    Ok(match answer {
        Ok(response) => {
            assert_eq!(response.get_ref().status, i32::from(ServingStatus::Serving));
            Code::Ok
        }
        Err(status) => status.code(),
    })
}

/// A late `check` through a layer on `timer`: sent, awaited until it has
/// reached the service, then the clock moves past the timeout. Its code.
async fn late_check(
    addr: SocketAddr,
    arrivals: &mut mpsc::UnboundedReceiver<()>,
    clock: &ManualClock,
) -> Result<Code, BoxError> {
    let late = tokio::spawn(async move { check(addr, LATE).await });
    tokio::time::timeout(LIMIT, arrivals.recv())
        .await?
        .ok_or("the server went away")?;
    clock.advance(TIMEOUT);
    tokio::time::timeout(LIMIT, late).await??
}

/// Our layer's error as a gRPC status: DEADLINE_EXCEEDED for a timeout.
fn to_status(err: BoxError) -> Status {
    if err.is::<Elapsed>() {
        Status::deadline_exceeded(err.to_string())
    } else {
        Status::from_error(err)
    }
}

#[tokio::test]
async fn an_answer_in_time_passes() -> Result<(), BoxError> {
    let (_clock, timer) = manual_timer()?;
    let (addr, _arrivals) = serve!(TimeoutLayer::with_timer(&timer, TIMEOUT));
    assert_eq!(check(addr, "fast").await?, Code::Ok);
    Ok(())
}

#[tokio::test]
async fn a_late_answer_is_what_towers_layer_gives() -> Result<(), BoxError> {
    // Tower's layer on tokio's clock: a short real timeout, which the late
    // check can only reach (it never answers).
    let (tower_addr, _arrivals) =
        serve!(tower::timeout::TimeoutLayer::new(Duration::from_millis(50)));
    let towers = check(tower_addr, LATE).await?;
    // The server resets the stream (tonic does not know tower's
    // `Elapsed`), and the client reads the reset as INTERNAL.
    assert_eq!(towers, Code::Internal);

    let (clock, timer) = manual_timer()?;
    let (addr, mut arrivals) = serve!(TimeoutLayer::with_timer(&timer, TIMEOUT));
    let ours = late_check(addr, &mut arrivals, &clock).await?;
    assert_eq!(ours, towers, "the same status as under tower's layer");
    assert_eq!(
        tonic::Status::from_error(Box::new(Elapsed::new())).code(),
        Code::Unknown
    );
    // And the connection still serves.
    assert_eq!(check(addr, "fast").await?, Code::Ok);
    Ok(())
}

#[tokio::test]
async fn a_late_answer_mapped_to_a_status_is_deadline_exceeded() -> Result<(), BoxError> {
    let (clock, timer) = manual_timer()?;
    let layer = ServiceBuilder::new()
        .map_err(to_status)
        .layer(TimeoutLayer::with_timer(&timer, TIMEOUT));
    let (addr, mut arrivals) = serve!(layer);
    assert_eq!(
        late_check(addr, &mut arrivals, &clock).await?,
        Code::DeadlineExceeded
    );
    assert_eq!(check(addr, "fast").await?, Code::Ok);
    Ok(())
}
