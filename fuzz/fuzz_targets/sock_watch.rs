//! The socket watch's iterator output as the drain check parses it
//! (sock_watch::parse_records): whole records or an error, never a panic
//! or a read out of bounds (records are copied out of the bytes
//! unaligned; ASan watches); exactly one socket per 32-byte record.

#![no_main]

use libfuzzer_sys::fuzz_target;
use scx_gang::sock_watch::parse_records;

/// struct sock_watch_record (bpf/intf.h).
const RECORD: usize = 32;

fuzz_target!(|data: &[u8]| {
    match parse_records(data) {
        Ok(sockets) => assert_eq!(sockets.len() * RECORD, data.len()),
        Err(_) => assert_ne!(data.len() % RECORD, 0),
    }
});
