//! A node's trace as gangd reads it from the node's trace chunks
//! (RawTrace JSON, trace::cluster::parse_node): an error or a trace, never a
//! panic; the events kept plus those counted unreadable are at most one per
//! two bytes of input; and a trace written back as JSON reads back the same.

#![no_main]

use gang_wire::trace::cluster::parse_node;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(t) = parse_node("n", 0, data) else {
        return;
    };
    let elements = t.events.len() as u64 + t.unreadable_events;
    assert!(
        elements <= data.len() as u64 / 2 + 1,
        "{elements} events from {} bytes",
        data.len()
    );
    let json =
        serde_json::to_vec(&serde_json::json!({ "meta": t.meta, "events": t.events })).unwrap();
    let again = parse_node("n", 0, &json).expect("a written trace reads back");
    assert_eq!(again.meta, t.meta);
    assert_eq!(again.events, t.events);
    assert_eq!(again.unreadable_events, 0);
});
