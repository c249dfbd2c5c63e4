//! The library's environment variables, parsed in one place.
//!
//! A job is configured by its launcher, not by code changes: `GANG_CLOCK`,
//! `GANG_CLOCK_SOCKET`, `GANG_YIELD` and `GANG_WAIT` select what the
//! library does. The parsers here are pure functions of the values, so
//! tests never depend on (or race over) the process environment; the
//! readers of the real environment are thin wrappers, read once.
//!
//! The bottom layer of the library: it imports nothing of the crate (a
//! test in `lib.rs` checks it). So [`WaitPolicy`], the value `GANG_WAIT`
//! names, is defined here, next to its parser; `wait.rs` (the top layer)
//! re-exports it and implements what each policy does.

use std::ffi::OsStr;
use std::fmt;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// Path of the daemon's clock socket.
pub const CLOCK_SOCKET_ENV: &str = "GANG_CLOCK_SOCKET";
/// Where scx_gang serves the clock unless told otherwise.
pub const DEFAULT_CLOCK_SOCKET: &str = "/run/scx_gang-clock.sock";
/// `off` (or `0`, `no`, `false`): do not ask for a clock at all.
pub const CLOCK_ENV: &str = "GANG_CLOCK";
/// `off` (or `0`, `no`, `false`): yield_point() never yields.
pub const YIELD_ENV: &str = "GANG_YIELD";
/// Default wait policy: `block` | `spin[:US]` | `adaptive` | `inslot[:US]`.
pub const WAIT_ENV: &str = "GANG_WAIT";
/// Spin limit of `spin` and `inslot` when no `:US` is given.
pub const DEFAULT_SPIN_US: u64 = 200;
/// Longest spin accepted in `GANG_WAIT` (1 s): beyond it a "spin" is a
/// busy loop holding the CPU for a whole slot, almost surely a typo.
pub const MAX_SPIN_US: u64 = 1_000_000;

/// Is this switch value one of the "off" spellings?
pub fn is_off(value: Option<&OsStr>) -> bool {
    matches!(
        value
            .and_then(OsStr::to_str)
            .map(|v| v.trim().to_ascii_lowercase())
            .as_deref(),
        Some("off" | "0" | "no" | "false")
    )
}

/// The clock socket to ask, from the values of `GANG_CLOCK` and
/// `GANG_CLOCK_SOCKET`; `None` when the clock is turned off.
pub fn clock_socket_from(clock: Option<&OsStr>, socket: Option<&OsStr>) -> Option<PathBuf> {
    if is_off(clock) {
        return None;
    }
    match socket {
        Some(s) if !s.is_empty() => Some(PathBuf::from(s)),
        _ => Some(PathBuf::from(DEFAULT_CLOCK_SOCKET)),
    }
}

/// The clock socket of this process's environment (`None`: clock off).
pub fn clock_socket() -> Option<PathBuf> {
    clock_socket_from(
        std::env::var_os(CLOCK_ENV).as_deref(),
        std::env::var_os(CLOCK_SOCKET_ENV).as_deref(),
    )
}

/// Whether yield_point() may yield (`GANG_YIELD`), read once.
pub fn yield_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| !is_off(std::env::var_os(YIELD_ENV).as_deref()))
}

/// How to wait for an fd to become readable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitPolicy {
    /// Block at once.
    Block,
    /// Spin this long (two-phase fixed spin-block), then block.
    Spin(Duration),
    /// Spin for a time adapted per fd from recent waits, then block.
    Adaptive,
    /// Spin (at most this long) only while my gang owns the slot; block at
    /// once outside it or when the slot ends mid-spin. Without a clock,
    /// the same as `Spin`.
    InSlot(Duration),
}

/// A `GANG_WAIT` value that is not a policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WaitPolicyError {
    pub value: String,
    pub reason: String,
}

impl fmt::Display for WaitPolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{WAIT_ENV}={:?}: {} (expected block, spin[:US], adaptive or inslot[:US], \
             US in 0..={MAX_SPIN_US})",
            self.value, self.reason
        )
    }
}

impl std::error::Error for WaitPolicyError {}

/// Parses a wait policy: `block`, `spin`, `spin:US`, `adaptive`, `inslot`,
/// `inslot:US` (US: spin limit in microseconds, default
/// [`DEFAULT_SPIN_US`]). Surrounding blanks are ignored, nothing else is.
pub fn parse_wait_policy(value: &str) -> Result<WaitPolicy, WaitPolicyError> {
    let err = |reason: &str| WaitPolicyError {
        value: value.to_string(),
        reason: reason.to_string(),
    };
    let v = value.trim();
    let (name, us) = match v.split_once(':') {
        None => (v, None),
        Some((n, u)) => (n, Some(u)),
    };
    let limit = |us: Option<&str>| -> Result<Duration, WaitPolicyError> {
        let us = match us {
            None => DEFAULT_SPIN_US,
            Some(u) => {
                if u.is_empty() || !u.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err("the spin limit must be a number of microseconds"));
                }
                u.parse::<u64>().map_err(|_| err("spin limit too large"))?
            }
        };
        if us > MAX_SPIN_US {
            return Err(err("spin limit too large"));
        }
        Ok(Duration::from_micros(us))
    };
    match name {
        "block" | "adaptive" if us.is_some() => Err(err("this policy takes no spin limit")),
        "block" => Ok(WaitPolicy::Block),
        "adaptive" => Ok(WaitPolicy::Adaptive),
        "spin" => Ok(WaitPolicy::Spin(limit(us)?)),
        "inslot" => Ok(WaitPolicy::InSlot(limit(us)?)),
        _ => Err(err("unknown policy")),
    }
}

/// The default policy for a `GANG_WAIT` value: unset or empty means
/// `block` (the safe choice for a program not run by a gang scheduler).
pub fn wait_policy_from(value: Option<&OsStr>) -> Result<WaitPolicy, WaitPolicyError> {
    match value {
        None => Ok(WaitPolicy::Block),
        Some(v) => match v.to_str() {
            None => Err(WaitPolicyError {
                value: v.to_string_lossy().into(),
                reason: "not UTF-8".into(),
            }),
            Some(s) if s.trim().is_empty() => Ok(WaitPolicy::Block),
            Some(s) => parse_wait_policy(s),
        },
    }
}

/// This process's default wait policy (`GANG_WAIT`), read once.
pub fn default_wait_policy() -> Result<WaitPolicy, WaitPolicyError> {
    static POLICY: OnceLock<Result<WaitPolicy, WaitPolicyError>> = OnceLock::new();
    POLICY
        .get_or_init(|| wait_policy_from(std::env::var_os(WAIT_ENV).as_deref()))
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    #[test]
    fn clock_switches() {
        let off = OsString::from("off");
        let sock = OsString::from("/tmp/x.sock");
        assert_eq!(
            clock_socket_from(None, None),
            Some(PathBuf::from(DEFAULT_CLOCK_SOCKET))
        );
        assert_eq!(
            clock_socket_from(None, Some(&sock)),
            Some(PathBuf::from("/tmp/x.sock"))
        );
        assert_eq!(clock_socket_from(Some(&off), Some(&sock)), None);
        assert_eq!(clock_socket_from(Some(OsStr::new("OFF")), None), None);
        assert_eq!(
            clock_socket_from(Some(OsStr::new("on")), None),
            Some(PathBuf::from(DEFAULT_CLOCK_SOCKET))
        );
        assert!(is_off(Some(OsStr::new("0"))));
        assert!(!is_off(Some(OsStr::new("1"))));
        assert!(!is_off(None));
    }
}
