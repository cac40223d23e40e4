//! Idle sessions expire unless a heartbeat resets them, on keyed timers.
//!
//! ```text
//! cargo run --example session_timeouts
//! ```
//!
//! Six clients connect with a 300 ms idle timeout. Each sends a heartbeat
//! every 100 ms until it goes quiet (client `i` goes quiet after `i × 200`
//! ms; client 0 never does). A heartbeat is `KeyedTimer::reset`: O(1), no
//! allocation. A quiet client's session expires 300 ms after its last
//! heartbeat, never earlier; the expiry callback gets the session's key and
//! value.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use purgatorio::KeyedTimer;

/// How long a session may stay silent.
const IDLE_TIMEOUT: Duration = Duration::from_millis(300);
/// How often a live client sends a heartbeat.
const HEARTBEAT: Duration = Duration::from_millis(100);
/// How long the example runs.
const RUN_FOR: Duration = Duration::from_millis(1500);

/// What the server knows of a session.
#[derive(Debug)]
struct Session {
    user: String,
    last_heartbeat: Instant,
}

/// Idle sessions expiring unless a heartbeat resets them, on keyed timers:
/// six clients, a 300 ms idle timeout, 1.5 s of real time. Takes no options.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    Args::parse();
    let start = Instant::now();
    let (tx, rx) = mpsc::channel();
    let sessions = KeyedTimer::new(move |id: u32, session: Session| {
        let _ = tx.send((id, session, Instant::now()));
    })?;

    let clients = 6u32;
    for id in 0..clients {
        let session = Session {
            user: format!("user-{id}"),
            last_heartbeat: Instant::now(),
        };
        sessions.set(id, session, IDLE_TIMEOUT)?;
    }
    // Each client's last heartbeat time, to check the expiry against.
    let mut last_beat = vec![start; clients as usize];
    while start.elapsed() < RUN_FOR {
        thread::sleep(HEARTBEAT);
        for id in 0..clients {
            let quiet_after = Duration::from_millis(200) * id;
            if id == 0 || start.elapsed() < quiet_after {
                // Taken before the reset, so the measured idle time is never
                // shorter than the real one.
                let beat = Instant::now();
                if sessions.reset(&id, IDLE_TIMEOUT) {
                    last_beat[id as usize] = beat;
                }
            }
        }
        while let Ok((id, session, at)) = rx.try_recv() {
            let idle = at - session.last_heartbeat.max(last_beat[id as usize]);
            assert!(
                idle >= IDLE_TIMEOUT,
                "session {id} expired after only {idle:?}"
            );
            println!(
                "{:>5} ms  session {id} ({}) expired after {} ms idle",
                start.elapsed().as_millis(),
                session.user,
                idle.as_millis()
            );
        }
    }
    let alive: Vec<u32> = (0..clients).filter(|id| sessions.contains(id)).collect();
    println!(
        "{:>5} ms  still connected: {alive:?}",
        start.elapsed().as_millis()
    );
    assert_eq!(alive, vec![0], "only the client that kept beating is left");
    Ok(())
}
