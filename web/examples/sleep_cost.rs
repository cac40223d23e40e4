//! What one timeout that registers and is cancelled costs, on one thread:
//! a 30 s sleep made, polled once (it registers), dropped (it cancels),
//! beside 64 sleeps pending; purgatorio's `Timer` or tokio's timer.
//!
//! ```text
//! cargo build --release -p purgatorio-web --example sleep_cost
//! valgrind --tool=callgrind target/release/examples/sleep_cost ours 200000
//! valgrind --tool=callgrind target/release/examples/sleep_cost tokio 200000
//! ```
//!
//! Instructions per timeout: the difference between runs of 200,000 and
//! 100,000, over 100,000. Without valgrind it prints the wall time per
//! timeout.

use std::future::Future;
use std::pin::{pin, Pin};
use std::process::ExitCode;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

/// Polls `sleep` once: it must be pending (it registers).
fn register<F: Future>(sleep: Pin<&mut F>, cx: &mut Context<'_>) {
    assert!(sleep.poll(cx).is_pending(), "a 30 s sleep was ready");
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(subject), count) = (args.next(), args.next()) else {
        eprintln!("usage: sleep_cost ours|tokio [COUNT]");
        return ExitCode::FAILURE;
    };
    let Ok(count) = count.as_deref().unwrap_or("1000000").parse::<u32>() else {
        eprintln!("error: COUNT is a whole number");
        return ExitCode::FAILURE;
    };
    let mut cx = Context::from_waker(Waker::noop());
    let started = Instant::now();
    match subject.as_str() {
        "ours" => {
            let timer = purgatorio::Timer::builder().build().expect("a timer");
            let mut pending: Vec<_> = (0..64)
                .map(|i| Box::pin(timer.sleep(Duration::from_secs(10 + i))))
                .collect();
            pending
                .iter_mut()
                .for_each(|s| register(s.as_mut(), &mut cx));
            for _ in 0..count {
                register(pin!(timer.sleep(Duration::from_secs(30))), &mut cx);
            }
        }
        "tokio" => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("a runtime");
            let _entered = runtime.enter();
            let mut pending: Vec<_> = (0..64)
                .map(|i| Box::pin(tokio::time::sleep(Duration::from_secs(10 + i))))
                .collect();
            pending
                .iter_mut()
                .for_each(|s| register(s.as_mut(), &mut cx));
            for _ in 0..count {
                register(pin!(tokio::time::sleep(Duration::from_secs(30))), &mut cx);
            }
        }
        other => {
            eprintln!("error: {other}: the subject is ours or tokio");
            return ExitCode::FAILURE;
        }
    }
    let per = started.elapsed().as_nanos() as f64 / f64::from(count.max(1));
    println!("{subject}: {per:.1} ns per timeout made, registered and cancelled");
    ExitCode::SUCCESS
}
