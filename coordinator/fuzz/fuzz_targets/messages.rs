//! Any payload, framed, into the decoder of each message family (the first
//! byte picks it): an error or a message, never a panic; and every message
//! that decodes encodes again to one that decodes to the same value.

#![no_main]

use gang_wire::proto::{FromAgent, FromClient, Message, ToAgent, ToClient};
use gang_coordinator_fuzz::{assert_round_trip, decode_payload};
use libfuzzer_sys::fuzz_target;

fn check<M: Message + PartialEq + std::fmt::Debug>(payload: &[u8]) {
    if let Some(Ok(msg)) = decode_payload::<M>(payload) {
        assert_round_trip(&msg);
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&family, payload)) = input.split_first() else {
        return;
    };
    match family & 3 {
        0 => check::<FromAgent>(payload),
        1 => check::<ToAgent>(payload),
        2 => check::<FromClient>(payload),
        _ => check::<ToClient>(payload),
    }
});
