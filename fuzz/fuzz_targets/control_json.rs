//! One line on the daemon's control socket (any local user may connect):
//! a request or an error, never a panic; and a request that parses writes
//! back to JSON that parses to the same request (a float may move by its
//! last bit: serde_json parses fast, not exactly).

#![no_main]

use libfuzzer_sys::fuzz_target;
use scx_gang::control::Request;

fn same(a: &Request, b: &Request) -> bool {
    match (a, b) {
        (Request::Trace { seconds: x }, Request::Trace { seconds: y }) => {
            x == y || (x - y).abs() <= x.abs().max(y.abs()) * 4.0 * f64::EPSILON
        }
        _ => a == b,
    }
}

fuzz_target!(|line: &[u8]| {
    // The socket thread reads the line as a String: not UTF-8 never parses.
    let Ok(text) = std::str::from_utf8(line) else {
        return;
    };
    let Ok(request) = serde_json::from_str::<Request>(text) else {
        return;
    };
    let json = serde_json::to_string(&request).expect("a request writes");
    let again: Request = serde_json::from_str(&json).expect("a written request parses");
    assert!(same(&again, &request), "{request:?} -> {json} -> {again:?}");
});
