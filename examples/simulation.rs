//! A deterministic discrete-event simulation on caller-supplied time.
//!
//! 10,000 clients send requests to a simulated server whose response latency
//! is random (fixed seed). Each request arms a timeout on a `LocalTimer`; a
//! response that arrives in time cancels it, a timeout retries with
//! exponential backoff, up to three attempts. Time is virtual: the loop jumps
//! straight to the next event, whether that is a response or the timer's
//! next expiration, so an hour of simulated traffic runs in milliseconds and
//! every run prints the same numbers.
//!
//! ```text
//! cargo run --release --example simulation
//! ```

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

use clap::Parser;
use purgatorio::{LocalTimer, TimerKey};

/// Requests in flight at the start.
const CLIENTS: u64 = 10_000;
/// Timeout of the first attempt; doubled on each retry.
const TIMEOUT: Duration = Duration::from_millis(200);
/// Attempts per request before giving up.
const ATTEMPTS: u32 = 3;

/// What a timer carries: which request, which attempt.
#[derive(Clone, Copy, Debug)]
struct Attempt {
    request: u64,
    attempt: u32,
}

/// A tiny deterministic RNG (xorshift64*), so the example needs nothing else.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A server latency: mostly fast, with a heavy tail.
    fn latency(&mut self) -> Duration {
        let r = self.next() % 1000;
        let ms = match r {
            0..=899 => 5 + r % 60,      // 90 %: 5–64 ms
            900..=979 => 100 + r % 150, //  8 %: 100–249 ms
            _ => 300 + (r % 20) * 50,   //  2 %: 300–1250 ms
        };
        Duration::from_millis(ms)
    }
}

/// Responses in flight, earliest arrival first: (arrival, request, attempt).
type Network = BinaryHeap<Reverse<(Duration, u64, u32)>>;

/// Sends an attempt at the timer's current time: its response is put on the
/// network and its timeout armed. Returns the attempt number and the key.
fn send(
    a: Attempt,
    timer: &mut LocalTimer<Attempt>,
    network: &mut Network,
    rng: &mut Rng,
) -> (u32, TimerKey) {
    network.push(Reverse((timer.now() + rng.latency(), a.request, a.attempt)));
    let timeout = TIMEOUT * 2u32.pow(a.attempt);
    (a.attempt, timer.schedule(timeout, a))
}

/// A deterministic discrete-event simulation on caller-supplied time: 10,000
/// clients whose requests time out and retry with backoff on a `LocalTimer`.
/// Takes no options; every run prints the same numbers.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {}

fn main() {
    Args::parse();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut timer: LocalTimer<Attempt> = LocalTimer::new();
    let mut network = Network::new();
    // The timeout armed for each request's current attempt.
    let mut armed: HashMap<u64, (u32, TimerKey)> = HashMap::new();
    let (mut completed, mut timeouts, mut failed, mut late_responses) = (0u64, 0u64, 0u64, 0u64);
    let mut wakeups = 0u64;

    for request in 0..CLIENTS {
        let a = Attempt {
            request,
            attempt: 0,
        };
        let key = send(a, &mut timer, &mut network, &mut rng);
        armed.insert(request, key);
    }

    let mut now = Duration::ZERO;
    loop {
        // The next event: a response arriving, or a timeout coming due.
        let next_response = network.peek().map(|Reverse((at, _, _))| *at);
        let next_timeout = timer.next_expiration();
        let Some(at) = [next_response, next_timeout].into_iter().flatten().min() else {
            break;
        };
        now = at;
        wakeups += 1;
        while let Some(&Reverse((arrival, request, attempt))) = network.peek() {
            if arrival > now {
                break;
            }
            network.pop();
            match armed.get(&request) {
                Some(&(current, key)) if current == attempt => {
                    // In time: the timeout is cancelled, O(1).
                    assert!(timer.cancel(key).is_some());
                    armed.remove(&request);
                    completed += 1;
                }
                _ => late_responses += 1, // that attempt already timed out
            }
        }
        let expired: Vec<Attempt> = timer.advance(now).map(|e| e.into_inner()).collect();
        for a in expired {
            timeouts += 1;
            if a.attempt + 1 < ATTEMPTS {
                let retry = Attempt {
                    request: a.request,
                    attempt: a.attempt + 1,
                };
                let key = send(retry, &mut timer, &mut network, &mut rng);
                armed.insert(a.request, key);
            } else {
                armed.remove(&a.request);
                failed += 1;
            }
        }
    }

    assert_eq!(
        completed + failed,
        CLIENTS,
        "every request ends exactly once"
    );
    assert!(timer.is_empty() && armed.is_empty());
    println!(
        "simulated {:.3} s of virtual time in {wakeups} steps",
        now.as_secs_f64()
    );
    println!("requests:       {CLIENTS}");
    println!("completed:      {completed}");
    println!("failed:         {failed} (after {ATTEMPTS} attempts)");
    println!("timeouts:       {timeouts} (each retried or failed)");
    println!("late responses: {late_responses} (ignored: their attempt had timed out)");
}
