//! Where `serve`'s engine time comes from. The driver ([`crate::driver`]) computes in
//! engine time (integer ns since the server started, what `sim::delivery` computes in)
//! and asks a [`Clock`] to wait for the next thing it has to do.
//!
//! * [`WallClock`]: production. `time_scale` engine seconds per wall second; the driver
//!   thread sleeps (a thread's sleep is good to tens of microseconds; tokio's timer rounds
//!   up to the millisecond, a 5–10% bias on 10 ms steps).
//! * [`VirtualClock`]: tests. Time stands still while anything is in flight (counted with
//!   [`Clock::hold`] / [`Clock::release`]) and then jumps to the driver's next event, so a
//!   run is exact (the simulator's numbers) and takes no wall time. A client on it must
//!   count what it sends and what it receives (see [`VirtualClock`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::driver::{Inbox, Input};

/// The inbox is closed: every sender is gone (the server stopped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

/// Engine time for the driver.
pub trait Clock: Send + Sync {
    /// Engine time now, ns since the server started.
    fn now_ns(&self) -> u64;
    /// The driver waits: returns the next message of `inbox`, or `Ok(None)` once engine
    /// time has reached `until` (None: no deadline, wait for a message).
    fn wait(&self, inbox: &Inbox, until: Option<u64>) -> Result<Option<Input>, Closed>;
    /// Something is in flight (a request on its way to the driver, a token on its way to
    /// a client): a virtual clock stands still until it is [`Clock::release`]d. The wall
    /// clock ignores both.
    fn hold(&self) {}
    fn release(&self) {}
}

/// The wall clock, `scale` engine seconds per wall second from `base`.
#[derive(Clone, Copy, Debug)]
pub struct WallClock {
    base: Instant,
    scale: f64,
}

impl WallClock {
    /// Starts now. `scale` must be positive and finite (the binary bounds it).
    pub fn new(scale: f64) -> WallClock {
        WallClock { base: Instant::now(), scale }
    }

    fn instant(&self, ns: u64) -> Instant {
        let s = (ns as f64 / 1e9 / self.scale).min(1e9);
        self.base + Duration::from_secs_f64(s)
    }
}

impl Clock for WallClock {
    fn now_ns(&self) -> u64 {
        let s = self.base.elapsed().as_secs_f64() * self.scale * 1e9;
        s.min(u64::MAX as f64 / 2.0) as u64
    }

    fn wait(&self, inbox: &Inbox, until: Option<u64>) -> Result<Option<Input>, Closed> {
        let Some(until) = until else { return inbox.take().map(Some) };
        let at = self.instant(until);
        loop {
            let now = Instant::now();
            if now >= at {
                return Ok(None);
            }
            if let Some(m) = inbox.take_timeout(at - now)? {
                return Ok(Some(m));
            }
        }
    }
}

/// A clock that advances only when nothing is in flight, straight to the driver's next
/// event. The protocol, for exact times: the driver holds once per token it hands to a
/// stream (a client on this clock releases once per token chunk it has read and acted
/// on; a non-streaming handler releases as it collects them); a client holds before it
/// sends a request and releases once the response's head has come (the request is then
/// in the driver's inbox). A hold leaked (a client that went away) is dropped after
/// [`VirtualClock::STALL`] of wall time with a warning, so a test cannot hang on it.
#[derive(Debug, Default)]
pub struct VirtualClock {
    now: AtomicU64,
    holds: Mutex<u64>,
    changed: Condvar,
}

impl VirtualClock {
    /// How long (wall time) the clock waits for holds to be released before it gives up on them.
    pub const STALL: Duration = Duration::from_secs(10);

    pub fn new() -> VirtualClock {
        VirtualClock::default()
    }
}

impl Clock for VirtualClock {
    fn now_ns(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }

    fn wait(&self, inbox: &Inbox, until: Option<u64>) -> Result<Option<Input>, Closed> {
        let mut since = Instant::now();
        let mut last = u64::MAX;
        loop {
            if let Some(m) = inbox.try_take()? {
                return Ok(Some(m));
            }
            let mut holds = self.holds.lock().expect("virtual clock");
            if *holds == 0 {
                // Whatever was released put its message in the inbox first.
                if let Some(m) = inbox.try_take()? {
                    return Ok(Some(m));
                }
                match until {
                    Some(t) => {
                        self.now.fetch_max(t, Ordering::SeqCst);
                        return Ok(None);
                    }
                    None => {
                        drop(holds);
                        return inbox.take().map(Some);
                    }
                }
            }
            if *holds != last {
                last = *holds;
                since = Instant::now();
            } else if since.elapsed() > VirtualClock::STALL {
                eprintln!(
                    "servesim serve: virtual clock: {} holds not released in {:?}; moving on",
                    *holds,
                    VirtualClock::STALL
                );
                *holds = 0;
                continue;
            }
            holds = self.changed.wait_timeout(holds, Duration::from_millis(5)).expect("virtual clock").0;
            drop(holds);
        }
    }

    fn hold(&self) {
        *self.holds.lock().expect("virtual clock") += 1;
    }

    fn release(&self) {
        let mut h = self.holds.lock().expect("virtual clock");
        *h = h.saturating_sub(1);
        self.changed.notify_all();
    }
}
