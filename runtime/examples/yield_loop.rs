//! Computes in grains and offers a yield point after each one, then says
//! how often it yielded. Runs anywhere; under scx_gang (in a gang) it
//! yields near the end of each of its gang's slots.
//!
//! `cargo run -p gang-runtime --example yield_loop -- [SECONDS] [GRAIN_US]`

use std::time::{Duration, Instant};

fn grain(us: u64) -> u64 {
    // Busy work of about `us` microseconds.
    let end = Instant::now() + Duration::from_micros(us);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    while Instant::now() < end {
        for _ in 0..64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
    }
    x
}

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1.0);
    let grain_us: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(500);
    match gangrt::gang_id() {
        Some(g) => println!("gang {g}, slot {:?}", gangrt::slot_remaining()),
        None => println!("no slot clock (no scx_gang, no gang, or GANG_CLOCK=off): never yields"),
    }
    let start = Instant::now();
    let (mut iterations, mut yields, mut sink) = (0u64, 0u64, 0u64);
    while start.elapsed().as_secs_f64() < seconds {
        sink ^= grain(grain_us);
        iterations += 1;
        if gangrt::yield_point() {
            yields += 1;
        }
    }
    println!(
        "{iterations} iterations of {grain_us} us in {:.2} s, {yields} yields (process total {}) [{sink:x}]",
        start.elapsed().as_secs_f64(),
        gangrt::yield_count()
    );
}
