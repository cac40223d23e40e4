//! loom model of the keyed timer (`--cfg purgatorio_loom`): `set` racing
//! expiry and `remove` on one key. Every value comes out exactly once (to the
//! callback, back from `set` or `remove`, or from the final drain), and none
//! reaches the callback before its deadline.

use std::sync::Arc;
use std::time::Duration;

use loom::thread;

use super::{builder, model};
use crate::clock::ManualClock;
use crate::keyed::KeyedTimer;
use crate::sync::Mutex;

#[test]
fn set_races_expiry_and_remove() {
    model("keyed_set_races_expiry_and_remove", || {
        let clock = ManualClock::new();
        let expired = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&expired);
        let keyed = KeyedTimer::with_timer(builder(&clock), move |_key: u8, value: u32| {
            seen.lock().push(value)
        })
        .expect("valid keyed timer");
        assert_eq!(keyed.set(7, 1, Duration::from_millis(1)), Ok(None));
        clock.advance(Duration::from_millis(1));

        let expirer = keyed.clone();
        let expiring = thread::spawn(move || expirer.run_due_here());
        let setter = keyed.clone();
        let setting = thread::spawn(move || {
            setter
                .set(7, 2, Duration::from_millis(2))
                .expect("timer running")
        });
        let removed = keyed.remove(&7);
        expiring.join().unwrap();
        let replaced = setting.join().unwrap();

        let mut out: Vec<u32> = expired.lock().clone();
        // Value 2 is due at tick 3; the clock is at tick 1.
        assert!(!out.contains(&2), "value 2 expired early");
        out.extend(replaced);
        out.extend(removed);
        out.extend(keyed.drain().into_iter().map(|(_, value)| value));
        out.sort_unstable();
        assert_eq!(out, [1, 2], "each value exactly once");
    });
}
