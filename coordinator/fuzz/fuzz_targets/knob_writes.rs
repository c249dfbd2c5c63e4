//! A write(2) to one of gangd's knob files: the first byte picks the knob
//! and whether the write is at offset 0, the rest is the data. Properties:
//! knobfs turns any bytes into a trimmed value of bounded length or an
//! error; a value the knob accepts reads back as text that the knob accepts
//! again and that reads back the same (get(with(get(v))) == get(v)).

#![no_main]

use gang_coordinator::knobs::ClusterKnobs;
use gang_wire::knobfs::written_value;
use libfuzzer_sys::fuzz_target;

const NAMES: [&str; 8] = [
    "slot_ms",
    "mpl_max",
    "policy",
    "fill",
    "barrier",
    "drain_timeout_ms",
    "status",
    "no_such_knob",
];

fuzz_target!(|input: &[u8]| {
    let Some((&pick, data)) = input.split_first() else {
        return;
    };
    let name = NAMES[usize::from(pick) % NAMES.len()];
    let offset = u64::from(pick >> 7);
    let Ok(value) = written_value(offset, data) else {
        return;
    };
    assert!(value.len() <= data.len() && value.len() <= 4096);
    assert_eq!(value, value.trim());
    let Ok(knobs) = ClusterKnobs::default().with(name, value) else {
        return;
    };
    let shown = knobs.get(name).expect("a writable knob reads back");
    let again = ClusterKnobs::default()
        .with(name, &shown)
        .unwrap_or_else(|e| panic!("{name}: {shown:?} read back but is refused: {e}"));
    assert_eq!(again.get(name).as_deref(), Some(shown.as_str()));
});
