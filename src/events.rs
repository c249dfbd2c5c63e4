//! The BPF scheduler's ring-buffer records, decoded: trace events
//! (`struct gang_event`, the `events` ring) and yield notices
//! (`struct gang_notice`, the `notices` ring), both laid out by bpf/intf.h.
//!
//! Pure functions of the record's bytes, so they are tested and fuzzed
//! without BPF (fuzz/fuzz_targets/ring_records.rs): a record shorter than
//! its struct, or of an unknown kind, is `None`, never a panic; bytes past
//! the struct are ignored.

use crate::bpf_intf::*;
use gang_wire::trace::{EventKind, TraceEvent};

/// A yield notice, if `data` is long enough to hold one.
pub fn decode_notice(data: &[u8]) -> Option<gang_notice> {
    (data.len() >= std::mem::size_of::<gang_notice>())
        // SAFETY: gang_notice is plain integers (any bit pattern is valid)
        // and `data` holds at least its size; the read is unaligned.
        .then(|| unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) })
}

/// A trace event, if `data` holds a whole record of a known kind.
pub fn decode_event(data: &[u8]) -> Option<TraceEvent> {
    if data.len() < std::mem::size_of::<gang_event>() {
        return None;
    }
    // SAFETY: as in decode_notice: plain integers, length checked above.
    let e: gang_event = unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) };
    let kind = match e.kind {
        k if k == gang_event_kind_EV_SWITCH => EventKind::Switch,
        k if k == gang_event_kind_EV_OWNER => EventKind::Owner,
        k if k == gang_event_kind_EV_RUN => EventKind::Run,
        k if k == gang_event_kind_EV_STALL => EventKind::Stall,
        _ => return None,
    };
    Some(TraceEvent {
        ts_ns: e.ts,
        gen: e.generation,
        kind,
        cpu: e.cpu,
        gang: e.gang,
        slot: e.slot,
        cause: e.cause,
        flags: e.flags,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32) -> Vec<u8> {
        let e = gang_event {
            ts: 7,
            generation: 3,
            kind,
            cpu: 2,
            gang: 5,
            slot: 1,
            cause: 0,
            flags: 4,
        };
        // SAFETY: reading a plain C struct as its bytes.
        unsafe {
            std::slice::from_raw_parts(
                (&e as *const gang_event).cast::<u8>(),
                std::mem::size_of_val(&e),
            )
        }
        .to_vec()
    }

    #[test]
    fn a_whole_record_of_a_known_kind_is_an_event() {
        let e = decode_event(&record(gang_event_kind_EV_RUN)).unwrap();
        assert_eq!(
            (e.ts_ns, e.gen, e.cpu, e.gang, e.slot, e.flags),
            (7, 3, 2, 5, 1, 4)
        );
        assert_eq!(e.kind, EventKind::Run);
    }

    #[test]
    fn the_wire_crates_mirrors_of_the_run_flags_match_the_bpf_header() {
        use gang_wire::trace;
        assert_eq!(gang_run_flags_RUN_FILL, trace::RUN_FILL);
        assert_eq!(gang_run_flags_RUN_FINISH, trace::RUN_FINISH);
        assert_eq!(gang_ids_GANG_NONE, trace::GANG_NONE);
        assert_eq!(gang_ids_GANG_OTHER, trace::GANG_OTHER);
        assert_eq!(gang_ids_GANG_IDLE, trace::GANG_IDLE);
    }

    #[test]
    fn short_records_and_unknown_kinds_are_none() {
        let r = record(gang_event_kind_EV_SWITCH);
        assert!(decode_event(&r[..r.len() - 1]).is_none());
        assert!(decode_event(&record(99)).is_none());
        assert!(decode_notice(&[0; 3]).is_none());
        assert!(decode_notice(&[0; 16]).is_some());
    }
}
