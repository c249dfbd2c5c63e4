//! Records of the BPF scheduler's ring buffers (events::decode_event,
//! decode_notice): a record is decoded only when it is long enough and of a
//! known kind, never a panic or an out-of-bounds read; a decoded event has
//! exactly the fields of `struct gang_event` at their offsets, so encoding
//! it back gives the record's first bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use scx_gang::bpf_intf::{gang_event, gang_notice};
use scx_gang::events::{decode_event, decode_notice};
use gang_wire::trace::EventKind;

fn encode(e: &gang_wire::trace::TraceEvent) -> Vec<u8> {
    let kind = match e.kind {
        EventKind::Switch => 1u32,
        EventKind::Owner => 2,
        EventKind::Run => 3,
        EventKind::Stall => 4,
    };
    let mut out = Vec::new();
    out.extend_from_slice(&e.ts_ns.to_ne_bytes());
    out.extend_from_slice(&e.gen.to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&e.cpu.to_ne_bytes());
    out.extend_from_slice(&e.gang.to_ne_bytes());
    out.extend_from_slice(&e.slot.to_ne_bytes());
    out.extend_from_slice(&e.cause.to_ne_bytes());
    out.extend_from_slice(&e.flags.to_ne_bytes());
    out
}

fuzz_target!(|data: &[u8]| {
    let size = std::mem::size_of::<gang_event>();
    match decode_event(data) {
        Some(e) => {
            assert!(data.len() >= size);
            assert_eq!(encode(&e), data[..size]);
            assert_eq!(
                EventKind::from_raw(u32::from_ne_bytes(data[16..20].try_into().unwrap())),
                Some(e.kind)
            );
        }
        None => assert!(
            data.len() < size
                || EventKind::from_raw(u32::from_ne_bytes(data[16..20].try_into().unwrap()))
                    .is_none()
        ),
    }
    let notice = decode_notice(data);
    assert_eq!(
        notice.is_some(),
        data.len() >= std::mem::size_of::<gang_notice>()
    );
    if let Some(n) = notice {
        assert_eq!(n.generation.to_ne_bytes(), data[..8]);
        assert_eq!(n.kind.to_ne_bytes(), data[8..12]);
        assert_eq!(n.gang.to_ne_bytes(), data[12..16]);
    }
});
