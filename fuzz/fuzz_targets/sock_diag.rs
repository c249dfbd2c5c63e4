//! One datagram of a sock_diag dump as the drain check parses it
//! (drain::parse_messages): done, more to come, or an error, never a panic
//! or a read out of bounds (the parser copies C structs out of the bytes;
//! ASan watches); at most one socket per netlink header's worth of bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use scx_gang::drain::parse_messages;

/// struct nlmsghdr.
const NLMSG_HDRLEN: usize = 16;

fuzz_target!(|data: &[u8]| {
    let mut sockets = Vec::new();
    let _ = parse_messages(data, &mut sockets);
    assert!(sockets.len() <= data.len() / NLMSG_HDRLEN);
});
