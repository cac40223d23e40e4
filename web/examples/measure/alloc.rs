//! `measure alloc`: what one parked GET allocates, in the purgatory service
//! and in the `tokio::sync::watch` one, counted by this program's global
//! allocator (not RSS: exact, and without the connection both share).
//!
//! In process, no sockets: each service's router is called `count` times
//! with `GET /keys/hot?index=1&wait=10m` and each answer's future polled
//! once, so that every GET is parked; the heap's growth per parked GET is
//! what the handler's future, its key and its entry in the purgatory (or
//! its receiver and sleep) cost. One GET more is then traced: the size of
//! every allocation it makes, in order.

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};
use std::task::{Context, Waker};

use axum::body::Body;
use axum::http::Request;
use axum::response::Response;
use axum::Router;
use purgatorio_web::long_poll::LongPoll;
use purgatorio_web::{shared_timer, BoxError};
use tower::ServiceExt;

/// What to run.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// How many GETs park.
    #[arg(long, default_value_t = 10_000)]
    count: usize,
}

/// The allocator of this program: the system's, counting while
/// [`COUNTING`] is set (one relaxed load per call otherwise, so the other
/// measurements are unaffected).
struct Counting;

/// Whether allocations are counted.
static COUNTING: AtomicBool = AtomicBool::new(false);
/// Bytes allocated less bytes freed while counting.
static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);
/// Allocations made while counting (a `realloc` counts one).
/// The size from which an allocation is taken for a growing table's (a
/// watch list, the wheel's arena, a `Vec` of the test itself excluded).
const TABLE_BYTES: usize = 4096;
/// Bytes in allocations of at least [`TABLE_BYTES`], net, while counting.
static IN_TABLES: AtomicIsize = AtomicIsize::new(0);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
/// How many sizes the trace holds.
const TRACED: usize = 64;
/// Whether the sizes of allocations are traced.
static TRACING: AtomicBool = AtomicBool::new(false);
/// The sizes of the traced allocations, in order.
static TRACE: [AtomicUsize; TRACED] = [const { AtomicUsize::new(0) }; TRACED];
/// How many allocations were traced.
static TRACE_LEN: AtomicUsize = AtomicUsize::new(0);

impl Counting {
    /// Counts an allocation of `size` bytes that replaced one of `freed`.
    fn allocated(size: usize, freed: usize) {
        if !COUNTING.load(Ordering::Relaxed) {
            return;
        }
        LIVE_BYTES.fetch_add(size as isize - freed as isize, Ordering::Relaxed);
        if size >= TABLE_BYTES {
            IN_TABLES.fetch_add(size as isize - freed as isize, Ordering::Relaxed);
        }
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        if TRACING.load(Ordering::Relaxed) {
            let i = TRACE_LEN.fetch_add(1, Ordering::Relaxed);
            if let Some(slot) = TRACE.get(i) {
                slot.store(size, Ordering::Relaxed);
            }
        }
    }
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds
// `GlobalAlloc`'s contract; the counting touches only atomics and never
// allocates.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Counting::allocated(layout.size(), 0);
        // SAFETY: the caller's `layout` is passed on as given.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
            if layout.size() >= TABLE_BYTES {
                IN_TABLES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
            }
        }
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Counting::allocated(layout.size(), 0);
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Counting::allocated(new_size, layout.size());
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The GET every parked request sends.
const PARK: &str = "/keys/hot?index=1&wait=10m";

/// A pending answer, as hyper holds it (boxed here, as hyper's HTTP/2
/// streams and axum's routes do).
type Pending = Pin<Box<dyn Future<Output = Result<Response, std::convert::Infallible>> + Send>>;

/// `router`'s answer to `method path`, polled once.
fn call(router: &Router, method: &str, path: &str, body: &'static str) -> (Pending, bool) {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .body(Body::from(body))
        .expect("a valid request");
    let mut answer: Pending = Box::pin(router.clone().oneshot(request));
    let ready = answer
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
        .is_ready();
    (answer, ready)
}

/// One service's figures.
struct Counted {
    /// Heap growth per parked GET, bytes.
    bytes_per_get: f64,
    /// Of which in growing tables, bytes.
    in_tables_per_get: f64,
    /// Allocations per parked GET (a `realloc` counts one).
    allocations_per_get: f64,
    /// The sizes allocated by one more GET, in order.
    trace: Vec<usize>,
}

/// Parks `count` GETs on `router` (whose key `hot` is at index 1), then one
/// more, traced.
fn count_parked(router: &Router, count: usize) -> Result<Counted, BoxError> {
    let (_, ready) = call(router, "PUT", "/keys/hot", "v1");
    if !ready {
        return Err("the PUT did not answer at once".into());
    }
    let mut parked = Vec::with_capacity(count + 1);
    LIVE_BYTES.store(0, Ordering::Relaxed);
    IN_TABLES.store(0, Ordering::Relaxed);
    ALLOCATIONS.store(0, Ordering::Relaxed);
    COUNTING.store(true, Ordering::SeqCst);
    for _ in 0..count {
        let (answer, ready) = call(router, "GET", PARK, "");
        if ready {
            return Err("a GET answered at once".into());
        }
        parked.push(answer);
    }
    COUNTING.store(false, Ordering::SeqCst);
    let bytes = LIVE_BYTES.load(Ordering::Relaxed);
    let in_tables = IN_TABLES.swap(0, Ordering::Relaxed);
    let allocations = ALLOCATIONS.load(Ordering::Relaxed);
    TRACE_LEN.store(0, Ordering::Relaxed);
    TRACING.store(true, Ordering::SeqCst);
    COUNTING.store(true, Ordering::SeqCst);
    let (answer, _) = call(router, "GET", PARK, "");
    COUNTING.store(false, Ordering::SeqCst);
    TRACING.store(false, Ordering::SeqCst);
    parked.push(answer);
    let traced = TRACE_LEN.load(Ordering::Relaxed).min(TRACED);
    let trace = TRACE[..traced]
        .iter()
        .map(|size| size.load(Ordering::Relaxed))
        .collect();
    // The parked GETs are withdrawn here, outside the counting.
    drop(parked);
    Ok(Counted {
        bytes_per_get: bytes as f64 / count as f64,
        in_tables_per_get: in_tables as f64 / count as f64,
        allocations_per_get: allocations as f64 / count as f64,
        trace,
    })
}

pub fn run(args: &Args) -> Result<(), BoxError> {
    // The watch service's `tokio::time::timeout` needs a runtime's timer.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()?;
    let _entered = runtime.enter();
    let services = [
        ("purgatory", LongPoll::new(shared_timer())?.router()),
        ("watch", crate::watch::WatchLongPoll::default().router()),
        (
            "watch, strings freed before waiting",
            crate::watch::WatchLongPoll::default().lean_router(),
        ),
    ];

    println!("| service | parked | heap B/GET | of which in tables | allocations/GET | one more GET allocates (bytes, in order) |");
    println!("|---|---|---|---|---|---|");
    for (name, router) in services {
        let counted = count_parked(&router, args.count)?;
        let trace: Vec<String> = counted.trace.iter().map(usize::to_string).collect();
        println!(
            "| {name} | {} | {:.1} | {:.1} | {:.2} | {} |",
            args.count,
            counted.bytes_per_get,
            counted.in_tables_per_get,
            counted.allocations_per_get,
            trace.join(", "),
        );
    }
    println!();
    println!(
        "A parked GET's future of ours (`Fetching`): {} bytes; its operation in the purgatory holds a `Fetch` of {} bytes.",
        std::mem::size_of::<purgatorio_web::long_poll::Fetching>(),
        std::mem::size_of::<purgatorio_web::long_poll::Fetch>(),
    );
    Ok(())
}
