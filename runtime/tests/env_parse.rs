//! GANG_WAIT parsing: every documented form, and clear errors for the rest.

use gangrt::env::{parse_wait_policy, wait_policy_from, MAX_SPIN_US};
use gangrt::WaitPolicy;
use proptest::prelude::*;
use std::ffi::OsStr;
use std::time::Duration;

fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}

#[test]
fn good_values() {
    assert_eq!(parse_wait_policy("block"), Ok(WaitPolicy::Block));
    assert_eq!(parse_wait_policy("adaptive"), Ok(WaitPolicy::Adaptive));
    assert_eq!(parse_wait_policy("spin"), Ok(WaitPolicy::Spin(us(200))));
    assert_eq!(parse_wait_policy("spin:50"), Ok(WaitPolicy::Spin(us(50))));
    assert_eq!(parse_wait_policy("spin:0"), Ok(WaitPolicy::Spin(us(0))));
    assert_eq!(parse_wait_policy("inslot"), Ok(WaitPolicy::InSlot(us(200))));
    assert_eq!(
        parse_wait_policy("inslot:1000"),
        Ok(WaitPolicy::InSlot(us(1000)))
    );
    assert_eq!(parse_wait_policy(" spin:7\n"), Ok(WaitPolicy::Spin(us(7))));
    assert_eq!(
        parse_wait_policy("spin:1000000"),
        Ok(WaitPolicy::Spin(us(MAX_SPIN_US)))
    );
}

#[test]
fn bad_values() {
    for bad in [
        "",
        "Block",
        "spinning",
        "spin:",
        "spin:-1",
        "spin:+5",
        "spin:1.5",
        "spin:10us",
        "spin:1000001",
        "spin:99999999999999999999999",
        "block:10",
        "adaptive:5",
        "inslot:x",
        "spin:5:6",
        "yield",
    ] {
        let e = parse_wait_policy(bad).expect_err(bad);
        let msg = e.to_string();
        assert!(msg.contains("GANG_WAIT"), "{msg}");
        assert!(
            msg.contains("expected block, spin[:US], adaptive or inslot[:US]"),
            "{msg}"
        );
    }
}

#[test]
fn unset_or_empty_is_block() {
    assert_eq!(wait_policy_from(None), Ok(WaitPolicy::Block));
    assert_eq!(
        wait_policy_from(Some(OsStr::new(""))),
        Ok(WaitPolicy::Block)
    );
    assert_eq!(
        wait_policy_from(Some(OsStr::new("spin:3"))),
        Ok(WaitPolicy::Spin(us(3)))
    );
    assert!(wait_policy_from(Some(OsStr::new("fast"))).is_err());
}

proptest! {
    #[test]
    fn spin_limits_round_trip(n in 0u64..=MAX_SPIN_US) {
        prop_assert_eq!(parse_wait_policy(&format!("spin:{n}")), Ok(WaitPolicy::Spin(us(n))));
        prop_assert_eq!(parse_wait_policy(&format!("inslot:{n}")), Ok(WaitPolicy::InSlot(us(n))));
    }

    #[test]
    fn arbitrary_strings_never_panic(s in ".{0,20}") {
        let _ = parse_wait_policy(&s);
    }
}
