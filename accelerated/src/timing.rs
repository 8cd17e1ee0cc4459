//! Where a training step's time goes: wall-clock seconds per named part (the step's phases,
//! the fused block's products, attention, copies, row-wise passes), summed over the calls,
//! switched on for one run (`fire-lm train --timings W`, [`crate::train::Options::timings_after`]).
//!
//! A profiler attributes samples to functions, and in an optimised build the block's parts are
//! inlined into one or two of them (the products, the copies and the row-wise passes all show
//! as `rayon`'s or `pulp`'s closures); these timers name the parts as the block's code does.
//! The timers belong to a thread: a training run times the parts it runs on its own thread,
//! which is every part (candle calls the block's forward and backward on the caller's thread;
//! their parallel work is inside the timed calls), and runs on other threads neither see nor
//! disturb them. Off, a part costs a thread-local flag check.

use std::cell::{Cell, RefCell};
use std::time::Instant;

thread_local! {
    static ENABLED: Cell<bool> = const { Cell::new(false) };
    /// This thread's parts in the order they were first timed: (name, seconds, calls).
    static PARTS: RefCell<Vec<(&'static str, f64, u64)>> = const { RefCell::new(Vec::new()) };
}

/// One part's totals since the last [`reset`].
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    /// The part's name, as the code that timed it gave it.
    pub name: &'static str,
    /// Wall-clock seconds over all its calls.
    pub seconds: f64,
    /// How many times it ran.
    pub calls: u64,
}

/// Turns this thread's timers on or off.
pub fn enable(on: bool) {
    ENABLED.with(|e| e.set(on));
}

/// Whether this thread's timers are on.
pub fn enabled() -> bool {
    ENABLED.with(Cell::get)
}

/// Runs `f`, adding its wall-clock time to `part` when this thread's timers are on.
#[inline]
pub fn time<R>(part: &'static str, f: impl FnOnce() -> R) -> R {
    if !enabled() {
        return f();
    }
    let start = Instant::now();
    let out = f();
    add(part, start.elapsed().as_secs_f64());
    out
}

/// Adds `seconds` and one call to `part` (when this thread's timers are on).
pub fn add(part: &'static str, seconds: f64) {
    if !enabled() {
        return;
    }
    PARTS.with(|parts| {
        let mut parts = parts.borrow_mut();
        match parts.iter_mut().find(|(name, _, _)| *name == part) {
            Some((_, s, n)) => {
                *s += seconds;
                *n += 1;
            }
            None => parts.push((part, seconds, 1)),
        }
    });
}

/// Forgets this thread's totals.
pub fn reset() {
    PARTS.with(|parts| parts.borrow_mut().clear());
}

/// This thread's totals since the last [`reset`], in the order the parts were first timed.
pub fn parts() -> Vec<Part> {
    PARTS.with(|parts| {
        parts
            .borrow()
            .iter()
            .map(|&(name, seconds, calls)| Part {
                name,
                seconds,
                calls,
            })
            .collect()
    })
}

/// The parts as a markdown table per step: seconds, share of the part named `whole` (the step),
/// calls. `steps` ≥ 1.
pub fn table(parts: &[Part], steps: u64, whole: &str) -> String {
    let steps = steps.max(1) as f64;
    let total = parts
        .iter()
        .find(|p| p.name == whole)
        .map_or(0.0, |p| p.seconds);
    let mut out =
        String::from("| part | s/step | share of the step | calls/step |\n|---|---|---|---|\n");
    for p in parts {
        let share = if total > 0.0 {
            format!("{:.1} %", 100.0 * p.seconds / total)
        } else {
            "?".into()
        };
        let calls = p.calls as f64 / steps;
        // Whole numbers as they are, a part that runs once in a while to three places.
        let calls = if calls.fract() == 0.0 {
            format!("{calls}")
        } else {
            format!("{calls:.3}")
        };
        out += &format!(
            "| {} | {:.4} | {share} | {calls} |\n",
            p.name,
            p.seconds / steps
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_summed_in_first_seen_order_only_while_enabled() {
        let mine = |p: Vec<Part>| -> Vec<Part> {
            p.into_iter()
                .filter(|p| p.name.starts_with("timing test"))
                .collect()
        };
        enable(false);
        assert_eq!(time("timing test: off", || 7), 7);
        assert!(mine(parts()).is_empty());
        enable(true);
        time("timing test: b", || {
            std::thread::sleep(std::time::Duration::from_millis(2))
        });
        add("timing test: a", 0.5);
        add("timing test: b", 0.25);
        add("timing test: a", 0.5);
        enable(false);
        add("timing test: a", 100.0);
        let p = mine(parts());
        assert_eq!(
            p.iter().map(|p| (p.name, p.calls)).collect::<Vec<_>>(),
            [("timing test: b", 2), ("timing test: a", 2)]
        );
        assert_eq!(p[1].seconds, 1.0);
        assert!(
            p[0].seconds >= 0.252 && p[0].seconds < 10.0,
            "{}",
            p[0].seconds
        );
        reset();
        assert!(mine(parts()).is_empty());
        // Another thread has timers of its own, off.
        enable(true);
        add("timing test: here", 1.0);
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(!enabled());
                add("timing test: there", 1.0);
                assert!(parts().is_empty());
            });
        });
        assert_eq!(mine(parts()).len(), 1);
        enable(false);
        reset();
    }

    #[test]
    fn the_table_gives_each_part_per_step_and_as_a_share_of_the_whole() {
        let part = |name, seconds, calls| Part {
            name,
            seconds,
            calls,
        };
        let t = table(
            &[part("step: forward", 0.5, 2), part("step", 2.0, 2)],
            2,
            "step",
        );
        assert_eq!(
            t,
            "| part | s/step | share of the step | calls/step |\n|---|---|---|---|\n\
             | step: forward | 0.2500 | 25.0 % | 1 |\n| step | 1.0000 | 100.0 % | 1 |\n"
        );
        assert!(table(&[part("x", 1.0, 1)], 1, "step").contains("| x | 1.0000 | ? | 1 |"));
        assert!(table(&[part("x", 1.0, 1)], 12, "x").contains("| x | 0.0833 | 100.0 % | 0.083 |"));
    }
}
