//! One PMI-1 line as a rank sends it to gangd's PMI server: parse_request
//! answers a request or an error (with the command when one was read),
//! never a panic; a line that parses formats back to a line that parses to
//! the same command and tokens.

#![no_main]

use gang_wire::pmi::wire::{parse_line, parse_request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let _ = parse_request(bytes);
    if let Ok(line) = parse_line(bytes) {
        let text = line.format();
        let text = text.strip_suffix('\n').expect("format ends a line");
        assert!(text.len() <= bytes.len(), "formatting never grows a line");
        assert_eq!(parse_line(text.as_bytes()), Ok(line));
    }
});
