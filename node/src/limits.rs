//! Bounded per-key rate windows: how the daemon keeps a decision visible
//! without letting a flood of the same decision fill the disk or the log.
//!
//! A [`RateWindow`] lets the first `per_window` events of a key through in
//! each window and counts the rest; when a window with suppressed events
//! ends, [`RateWindow::closed`] says how many, so the caller writes one
//! summary ("and 24,831 more like it"). It holds at most `max_keys` keys,
//! so a flood of distinct keys is bounded too: past it, new keys are
//! counted in one overflow tally. Time is an argument (a [`Duration`]
//! since any fixed point the caller picks: the daemon's start, or the
//! calendar clock when tests move it), so it is tested on a clock the test
//! moves.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

/// A point in time, as the caller counts it.
type Instant = Duration;

fn since(now: Instant, then: Instant) -> Duration {
    now.saturating_sub(then)
}

/// One key's current window.
#[derive(Debug, Clone, Copy)]
struct Slot {
    started: Instant,
    passed: u32,
    suppressed: u64,
}

/// Events per key per window, bounded in keys.
#[derive(Debug)]
pub struct RateWindow<K> {
    window: Duration,
    per_window: u32,
    max_keys: usize,
    slots: HashMap<K, Slot>,
    /// Events of new keys turned away while every slot was taken, since
    /// the last [`RateWindow::closed`].
    overflow: u64,
    /// When every slot is taken, a new key takes the slot of the key whose
    /// window started longest ago instead of being turned away.
    evicting: bool,
}

impl<K: Eq + Hash + Clone> RateWindow<K> {
    /// Windows of `window`, `per_window` events let through in each, at
    /// most `max_keys` keys remembered.
    pub fn new(window: Duration, per_window: u32, max_keys: usize) -> Self {
        RateWindow {
            window,
            per_window,
            max_keys,
            slots: HashMap::new(),
            overflow: 0,
            evicting: false,
        }
    }

    /// Like [`RateWindow::new`], but a new key past `max_keys` takes the
    /// slot of the key whose window started longest ago: for limits where
    /// a flood of fresh keys must not lock a real one out (the founder's
    /// join desk), rather than for counting.
    pub fn evicting(window: Duration, per_window: u32, max_keys: usize) -> Self {
        RateWindow {
            evicting: true,
            ..RateWindow::new(window, per_window, max_keys)
        }
    }

    /// Whether an event of `key` at `now` passes; if not, it is counted.
    pub fn check(&mut self, key: &K, now: Instant) -> bool {
        if let Some(slot) = self.slots.get_mut(key) {
            if since(now, slot.started) >= self.window && (slot.suppressed == 0 || self.evicting) {
                // A quiet window ended (or, evicting, any window: nothing
                // is reported): a fresh one starts.
                *slot = Slot {
                    started: now,
                    passed: 0,
                    suppressed: 0,
                };
            }
            if slot.passed < self.per_window && since(now, slot.started) < self.window {
                slot.passed += 1;
                return true;
            }
            slot.suppressed += 1;
            return false;
        }
        if self.slots.len() >= self.max_keys {
            let window = self.window;
            self.slots
                .retain(|_, s| since(now, s.started) < window || s.suppressed > 0);
            if self.slots.len() >= self.max_keys && self.evicting {
                let oldest = self
                    .slots
                    .iter()
                    .min_by_key(|(_, s)| s.started)
                    .map(|(k, _)| k.clone());
                if let Some(k) = oldest {
                    self.slots.remove(&k);
                }
            }
            if self.slots.len() >= self.max_keys {
                self.overflow += 1;
                return false;
            }
        }
        if self.per_window == 0 {
            self.slots.insert(
                key.clone(),
                Slot {
                    started: now,
                    passed: 0,
                    suppressed: 1,
                },
            );
            return false;
        }
        self.slots.insert(
            key.clone(),
            Slot {
                started: now,
                passed: 1,
                suppressed: 0,
            },
        );
        true
    }

    /// Ends every window that is over: returns the keys whose window
    /// suppressed events, with how many, and forgets finished windows.
    /// The second value counts events of keys that found no free slot.
    pub fn closed(&mut self, now: Instant) -> (Vec<(K, u64)>, u64) {
        let window = self.window;
        let mut out = vec![];
        self.slots.retain(|k, s| {
            if since(now, s.started) < window {
                return true;
            }
            if s.suppressed > 0 {
                out.push((k.clone(), s.suppressed));
            }
            false
        });
        (out, std::mem::take(&mut self.overflow))
    }

    /// Keys remembered now.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_events_pass_the_rest_are_counted_and_reported_once() {
        let t0 = Duration::from_secs(1_000);
        let mut w = RateWindow::new(Duration::from_secs(60), 1, 16);
        let key = ("peer".to_owned(), "Malformed");
        assert!(w.check(&key, t0));
        for i in 0..24_831 {
            assert!(!w.check(&key, t0 + Duration::from_millis(i % 59_000)));
        }
        // Another key has its own window.
        assert!(w.check(&("peer".to_owned(), "revoked"), t0));
        // Nothing is reported before the window ends.
        assert_eq!(w.closed(t0 + Duration::from_secs(59)).0, vec![]);
        let (closed, overflow) = w.closed(t0 + Duration::from_secs(60));
        assert_eq!(closed, vec![(key.clone(), 24_831)]);
        assert_eq!(overflow, 0);
        assert!(w.is_empty(), "finished windows are forgotten");
        // A new window lets one through again.
        assert!(w.check(&key, t0 + Duration::from_secs(61)));
    }

    #[test]
    fn keys_are_bounded_and_overflow_is_counted() {
        let t0 = Duration::from_secs(1_000);
        let mut w = RateWindow::new(Duration::from_secs(10), 1, 3);
        for k in 0..3u32 {
            assert!(w.check(&k, t0));
        }
        assert!(!w.check(&99, t0), "no slot for a fourth key");
        assert!(!w.check(&100, t0));
        assert_eq!(w.len(), 3);
        let (closed, overflow) = w.closed(t0 + Duration::from_secs(10));
        assert!(closed.is_empty());
        assert_eq!(overflow, 2);
        // Slots of finished windows are free again.
        assert!(w.check(&99, t0 + Duration::from_secs(11)));
    }

    #[test]
    fn an_evicting_window_makes_room_for_a_new_key() {
        let t0 = Duration::from_secs(1_000);
        let mut w = RateWindow::evicting(Duration::from_secs(60), 1, 3);
        for k in 0..3u32 {
            assert!(w.check(&k, t0 + Duration::from_secs(u64::from(k))));
        }
        assert!(
            w.check(&99, t0 + Duration::from_secs(5)),
            "a new key gets a slot"
        );
        assert_eq!(w.len(), 3);
        // The oldest (0) was forgotten; the others keep their windows.
        assert!(!w.check(&1, t0 + Duration::from_secs(6)));
        assert!(w.check(&0, t0 + Duration::from_secs(7)), "0 starts afresh");
    }

    #[test]
    fn a_quiet_key_starts_a_fresh_window_without_a_report() {
        let t0 = Duration::from_secs(1_000);
        let mut w = RateWindow::new(Duration::from_secs(5), 2, 8);
        assert!(w.check(&"a", t0));
        assert!(w.check(&"a", t0 + Duration::from_secs(1)));
        assert!(w.check(&"a", t0 + Duration::from_secs(6)));
        assert_eq!(w.closed(t0 + Duration::from_secs(20)).0, vec![]);
    }
}
