//! The slot clock handshake, both ends. A rank reads the daemon's answer
//! (gangrt::clock_socket::parse_answer: the first input byte is how many
//! fds came with it): a greeting or an error, never a panic; `gang <id>` is
//! accepted only below 64 and with exactly one fd. The daemon reads the
//! rank's cgroup path (clock::gang_of: the rest of the input as the "0::"
//! line, which a user with a delegated cgroup names at will): the gang it
//! finds is one plain directory name below the gang root, never "..",
//! never a path.

#![no_main]

use std::path::Path;

use gangrt::clock_socket::{parse_answer, Greeting};
use libfuzzer_sys::fuzz_target;
use scx_gang::clock::gang_of;

fuzz_target!(|input: &[u8]| {
    let Some((&fds, data)) = input.split_first() else {
        return;
    };
    let fds = usize::from(fds % 4);
    match parse_answer(data, fds) {
        Ok(Greeting::Gang(id)) => {
            assert!(id < 64);
            assert_eq!(fds, 1);
            assert!(data.starts_with(b"gang "));
        }
        Ok(Greeting::NoGang(reason)) => {
            assert!(data.starts_with(b"none"));
            assert!(reason.len() < data.len());
            assert!(!reason.contains('\n'));
        }
        Err(e) => assert!(!e.is_empty()),
    }
    let cgroup = String::from_utf8_lossy(data);
    if let Some(gang) = gang_of(&cgroup, Path::new("gangs")) {
        assert!(!gang.is_empty() && !gang.contains('/'), "{gang:?}");
        assert!(gang != "." && gang != "..", "{gang:?}");
        assert!(
            Path::new(cgroup.trim()).starts_with("/gangs"),
            "{cgroup:?} -> {gang:?}"
        );
    }
});
