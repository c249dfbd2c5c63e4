//! slotclock: prints what the gang runtime library sees of this process's
//! slot clock, one JSON line per sample, to check a node by hand or in a
//! test (is the clock served, which gang, does the deadline move).
//!
//!   slotclock [--samples N] [--interval-ms MS]
//!
//! Without a clock (no scheduler, not in a gang) it says why, and exits 1.

use std::time::Duration;

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut samples, mut interval_ms) = (1u32, 10u64);
    while let Some(a) = args.next() {
        let mut val = || {
            args.next().unwrap_or_else(|| {
                eprintln!("usage: slotclock [--samples N] [--interval-ms MS]");
                std::process::exit(2)
            })
        };
        match a.as_str() {
            "--samples" => samples = val().parse().unwrap_or(1),
            "--interval-ms" => interval_ms = val().parse().unwrap_or(10),
            _ => {
                eprintln!("usage: slotclock [--samples N] [--interval-ms MS]");
                std::process::exit(2)
            }
        }
    }
    let Some(gang) = gangrt::gang_id() else {
        let why = match gangrt::env::clock_socket() {
            None => "GANG_CLOCK=off".to_string(),
            // Ask once more, to tell why.
            Some(path) => match gangrt::clock_socket::open_clock(&path) {
                gangrt::clock_socket::ClockOpen::NoGang(why) => why,
                gangrt::clock_socket::ClockOpen::Unavailable(why) => why,
                gangrt::clock_socket::ClockOpen::Mapped(_) => "mapped at the second try".into(),
            },
        };
        let why = why.replace(['"', '\\'], "'");
        println!("{{\"clock\":false,\"why\":\"{why}\"}}");
        std::process::exit(1);
    };
    for i in 0..samples.max(1) {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(interval_ms));
        }
        let now = gangrt::monotonic_ns();
        match gangrt::slot_snapshot() {
            Some(s) => println!(
                "{{\"clock\":true,\"gang\":{gang},\"now_ns\":{now},\"generation\":{},\"slot\":{},\"nr_slots\":{},\"slot_start_ns\":{},\"slot_end_ns\":{},\"yield_lead_ns\":{},\"running_gangs\":{},\"next_gangs\":{}}}",
                s.generation, s.slot, s.nr_slots, s.slot_start_ns, s.slot_end_ns, s.yield_lead_ns, s.running_gangs, s.next_gangs
            ),
            None => println!("{{\"clock\":true,\"gang\":{gang},\"now_ns\":{now},\"torn\":true}}"),
        }
    }
}
