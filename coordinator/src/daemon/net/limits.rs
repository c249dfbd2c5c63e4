//! What one peer may cost gangd before it is trusted, and how the accept
//! loops behave when the process runs out of descriptors.
//!
//! Every connection costs a thread and a few descriptors. An attacker who
//! can reach the agent port has no certificate, and a user of the front-end
//! socket is anyone on the head node, so both are capped:
//!
//! - [`Caps`] counts live connections per key (an IP address for TLS
//!   handshakes in flight, a uid for front ends) and in all; a connection
//!   past either cap is closed at once, with a log line that is itself
//!   rate-limited ([`Throttle`]).
//! - The whole handshake of an agent (TLS and Hello) and a front end's
//!   first request run under one deadline each, not a timeout per read
//!   (one byte every few seconds cannot hold a slot).
//! - [`AcceptBackoff`]: when accept(2) fails (EMFILE, ENFILE, ENOMEM) the
//!   loop sleeps, 10 ms doubling up to 1 s, and logs once per streak
//!   instead of spinning and flooding the log.
//! - gangd raises its soft RLIMIT_NOFILE to the hard limit at start
//!   ([`raise_nofile`]).

use std::collections::HashMap;
use std::hash::Hash;
use std::io;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use log::{info, warn};

/// TLS handshakes in flight from one address.
pub const HANDSHAKES_PER_ADDR: usize = 8;
/// TLS handshakes in flight in all.
pub const HANDSHAKES_TOTAL: usize = 128;
/// A node has this long from its TCP connection to its Hello.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);
/// Front-end connections of one user.
pub const CLIENTS_PER_UID: usize = 64;
/// Front-end connections in all.
pub const CLIENTS_TOTAL: usize = 2048;
/// A front end has this long from connecting to its first request.
pub const FIRST_REQUEST_DEADLINE: Duration = Duration::from_secs(10);

struct Counts<K> {
    per_key: HashMap<K, usize>,
    total: usize,
}

/// Live connections per key and in all, with caps on both.
pub struct Caps<K: Eq + Hash + Clone> {
    counts: Arc<Mutex<Counts<K>>>,
    per_key: usize,
    total: usize,
}

impl<K: Eq + Hash + Clone> Clone for Caps<K> {
    fn clone(&self) -> Self {
        Self {
            counts: self.counts.clone(),
            per_key: self.per_key,
            total: self.total,
        }
    }
}

/// Why a connection was not admitted.
#[derive(Debug, PartialEq, Eq)]
pub enum Over {
    Key(usize),
    Total(usize),
}

impl std::fmt::Display for Over {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Over::Key(n) => write!(f, "{n} connections from the same peer already"),
            Over::Total(n) => write!(f, "{n} connections in all already"),
        }
    }
}

/// A connection counted in its [`Caps`]; dropping it frees its place.
pub struct Held<K: Eq + Hash + Clone> {
    counts: Arc<Mutex<Counts<K>>>,
    key: K,
}

impl<K: Eq + Hash + Clone> Drop for Held<K> {
    fn drop(&mut self) {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        c.total -= 1;
        if let Some(n) = c.per_key.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                c.per_key.remove(&self.key);
            }
        }
    }
}

impl<K: Eq + Hash + Clone> Caps<K> {
    pub fn new(per_key: usize, total: usize) -> Self {
        Self {
            counts: Arc::new(Mutex::new(Counts {
                per_key: HashMap::new(),
                total: 0,
            })),
            per_key,
            total,
        }
    }

    /// Counts one more connection of `key`, or says which cap it is over.
    pub fn admit(&self, key: K) -> Result<Held<K>, Over> {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if c.total >= self.total {
            return Err(Over::Total(c.total));
        }
        let n = c.per_key.entry(key.clone()).or_insert(0);
        if *n >= self.per_key {
            return Err(Over::Key(*n));
        }
        *n += 1;
        c.total += 1;
        Ok(Held {
            counts: self.counts.clone(),
            key,
        })
    }

    /// Connections counted now (for tests and logs).
    pub fn live(&self) -> usize {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).total
    }
}

/// Lets one log line through per `every`, and counts what it held back.
pub struct Throttle {
    every: Duration,
    last: Option<Instant>,
    held: u64,
}

impl Throttle {
    pub fn new(every: Duration) -> Self {
        Self {
            every,
            last: None,
            held: 0,
        }
    }

    /// Some(lines held back since the last one) if a line may go now.
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(t) if now.duration_since(t) < self.every => {
                self.held += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held))
            }
        }
    }
}

/// The accept loop's reaction to errors: pause, longer while they last.
pub struct AcceptBackoff {
    name: &'static str,
    pause: Duration,
    failures: u64,
}

const FIRST_PAUSE: Duration = Duration::from_millis(10);
const MAX_PAUSE: Duration = Duration::from_secs(1);

impl AcceptBackoff {
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            pause: FIRST_PAUSE,
            failures: 0,
        }
    }

    /// After a failed accept: logs the first of a streak, returns the pause.
    pub fn failed(&mut self, e: &io::Error) -> Duration {
        if self.failures == 0 {
            warn!(
                "accepting {} connections: {e}; backing off until it works again",
                self.name
            );
        }
        self.failures += 1;
        let pause = self.pause;
        self.pause = (self.pause * 2).min(MAX_PAUSE);
        pause
    }

    /// After a successful accept: ends a streak (with a summary line).
    pub fn succeeded(&mut self) {
        if self.failures > 0 {
            info!(
                "accepting {} connections again after {} failures",
                self.name, self.failures
            );
        }
        self.failures = 0;
        self.pause = FIRST_PAUSE;
    }

    /// `failed` and sleep.
    pub fn wait(&mut self, e: &io::Error) {
        thread::sleep(self.failed(e));
    }
}

/// Raises the soft limit on open files to the hard limit: every agent and
/// front end holds descriptors. Returns the new soft limit.
pub fn raise_nofile() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(io::Error::last_os_error());
        }
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(lim.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_gets_at_most_its_cap_and_a_place_frees_on_drop() {
        let caps = Caps::new(2, 10);
        let a1 = caps.admit("a").unwrap();
        let _a2 = caps.admit("a").unwrap();
        assert_eq!(caps.admit("a").err(), Some(Over::Key(2)));
        let _b = caps.admit("b").unwrap();
        assert_eq!(caps.live(), 3);
        drop(a1);
        assert!(caps.admit("a").is_ok(), "the dropped place is free again");
    }

    #[test]
    fn the_total_cap_holds_across_keys() {
        let caps = Caps::new(5, 3);
        let held: Vec<_> = (0..3).map(|i| caps.admit(i).unwrap()).collect();
        assert_eq!(caps.admit(99).err(), Some(Over::Total(3)));
        drop(held);
        assert_eq!(caps.live(), 0);
        assert!(caps.admit(99).is_ok());
    }

    #[test]
    fn the_throttle_lets_one_line_through_per_period_and_counts_the_rest() {
        let mut t = Throttle::new(Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(t.allow(t0), Some(0));
        assert_eq!(t.allow(t0 + Duration::from_millis(10)), None);
        assert_eq!(t.allow(t0 + Duration::from_millis(500)), None);
        assert_eq!(t.allow(t0 + Duration::from_millis(1001)), Some(2));
    }

    #[test]
    fn accept_errors_back_off_doubling_to_a_second_and_reset_on_success() {
        let mut b = AcceptBackoff::new("test");
        let e = io::Error::from_raw_os_error(libc::EMFILE);
        let pauses: Vec<u128> = (0..9).map(|_| b.failed(&e).as_millis()).collect();
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        b.succeeded();
        assert_eq!(b.failed(&e).as_millis(), 10);
    }

    #[test]
    fn the_soft_open_file_limit_is_raised_to_the_hard_one() {
        let soft = raise_nofile().unwrap();
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
        assert_eq!(soft, lim.rlim_cur);
        assert_eq!(lim.rlim_cur, lim.rlim_max);
    }
}
