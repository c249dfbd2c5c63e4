//! A write(2) to one of the node's knob files: the first byte picks the
//! knob (and whether the write is at offset 0), the second the node's CPU
//! count, the rest is the data. knobfs turns it into a value or an error,
//! NodeKnobs::set accepts or refuses it without panicking and changes
//! nothing when it refuses; an accepted value reads back as text that is
//! accepted again and reads back the same.

#![no_main]

use libfuzzer_sys::fuzz_target;
use gang_wire::knobfs::written_value;
use scx_gang::knobs::NodeKnobs;

const NAMES: [&str; 8] = [
    "slot_ms",
    "clock_fault_us",
    "fill",
    "min_other_share_pct",
    "yield_lead_us",
    "housekeeping_cpus",
    "status",
    "no_such_knob",
];

fuzz_target!(|input: &[u8]| {
    let [pick, cpus, data @ ..] = input else {
        return;
    };
    let name = NAMES[usize::from(*pick) % NAMES.len()];
    let nr_cpus = u32::from(*cpus) + 1;
    let Ok(value) = written_value(u64::from(pick >> 7), data) else {
        return;
    };
    let mut knobs = NodeKnobs::new();
    let before: Vec<_> = NAMES.iter().map(|n| knobs.get(n)).collect();
    if knobs.set(name, value, nr_cpus).is_err() {
        let after: Vec<_> = NAMES.iter().map(|n| knobs.get(n)).collect();
        assert_eq!(before, after, "a refused write changed a knob");
        return;
    }
    let shown = knobs.get(name).expect("a writable knob reads back");
    let mut again = NodeKnobs::new();
    again
        .set(name, &shown, nr_cpus)
        .unwrap_or_else(|e| panic!("{name}: {shown:?} read back but is refused: {e}"));
    assert_eq!(again.get(name).as_deref(), Some(shown.as_str()));
});
