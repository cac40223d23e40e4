//! The test harness's own promise: a `redis-server` started on a port that
//! another process took between the look for a free port and the bind is
//! started again on another port, and never mistaken for the process that
//! holds the port.

mod common;

use std::net::TcpListener;

use common::Server;
use purgatorio_testkit::{free_port, redis_pid};

#[test]
fn a_port_taken_before_the_bind_is_given_up_for_another() {
    // Held by a listener that answers nothing: redis-server cannot bind it
    // and exits.
    let held = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = held.local_addr().unwrap().port();
    let server = Server::start_on("volatile", [taken, free_port()]);
    assert_ne!(server.port, taken);
    assert_eq!(redis_pid(server.port), Some(server.pid()));

    // Held by another redis-server, which answers: a PING would take it for
    // the new one.
    let stranger = Server::start_volatile();
    let server = Server::start_on("volatile", [stranger.port, free_port()]);
    assert_ne!(server.port, stranger.port);
    assert_eq!(redis_pid(server.port), Some(server.pid()));
    assert_eq!(redis_pid(stranger.port), Some(stranger.pid()));
}
