//! Writes the seed corpora of the node's fuzz targets with the real
//! encoders: requests as `scx_gang trace` and the agent serialize them, knob
//! values as `echo` writes them, ring-buffer records laid out as
//! `struct gang_event`/`gang_notice` of bpf/intf.h, and the daemon's clock
//! answers. The sock_diag seeds come from the kernel itself
//! (seeds/capture_sock_diag.py).
//!
//!     cd fuzz && BPF_CLANG=clang-19 cargo run --example write_seeds

use std::fs;
use std::path::Path;

use scx_gang::bpf_intf::{gang_event, gang_notice};
use scx_gang::control::{GangCpus, Request};

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new("seeds").join(target);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(name), bytes).unwrap();
}

/// A plain C struct as the bytes BPF writes into the ring.
fn bytes_of<T: Copy>(value: &T) -> Vec<u8> {
    // SAFETY: T is a bindgen struct of integers, read as its bytes.
    unsafe {
        std::slice::from_raw_parts((value as *const T).cast::<u8>(), std::mem::size_of::<T>())
    }
    .to_vec()
}

fn main() {
    let place = |gang: &str, cpus: &str| GangCpus {
        gang: gang.into(),
        cpus: cpus.into(),
    };
    let requests = [
        Request::Trace { seconds: 2.5 },
        Request::Schedule {
            slots: vec![vec![place("job3", "0-1")], vec![place("job4", "2-3")]],
        },
        Request::Switch {
            slot: 1,
            gen: 7,
            slot_ms: 100,
            at_ns: 0,
        },
        Request::Standalone,
        Request::Freeze {
            gen: 8,
            drain_timeout_ms: 200,
            to_slot: Some(1),
        },
        Request::Column {
            slots: vec![vec![], vec![place("job3", "1")]],
        },
        Request::Autonomous,
        Request::Unplan,
    ];
    for (i, r) in requests.iter().enumerate() {
        let mut line = serde_json::to_vec(r).unwrap();
        line.push(b'\n');
        write("control_json", &format!("seed{i}"), &line);
    }

    // Selector: knob index (node_knobs.rs NAMES), then nr_cpus - 1.
    for (i, value) in [
        (0u8, "50\n"),
        (1, "1"),
        (2, "10"),
        (3, "5000"),
        (4, "0-1\n"),
    ] {
        write(
            "node_knobs",
            &format!("seed{i}"),
            &[&[i, 7][..], value.as_bytes()].concat(),
        );
    }

    for (kind, name) in [(1u32, "switch"), (2, "owner"), (3, "run")] {
        let e = gang_event {
            ts: 123_456_789,
            generation: 4,
            kind,
            cpu: if kind == 1 { -1 } else { 2 },
            gang: if kind == 1 { -1 } else { 1 },
            slot: 1,
            cause: 0,
            flags: if kind == 3 { 1 } else { 0 },
        };
        write("ring_records", name, &bytes_of(&e));
    }
    let n = gang_notice {
        generation: 9,
        kind: 1,
        gang: 3,
    };
    write("ring_records", "notice", &bytes_of(&n));

    // First byte: the number of fds that came with the answer.
    write("clock_answer", "gang", b"\x01gang 3\n");
    write(
        "clock_answer",
        "none",
        b"\x00none not in a gang (cgroup /user.slice)\n",
    );
    write("clock_answer", "cgroup", b"\x00/gangs/job3/rank0\n");

    // A directory of three nodes, then a job over them, one run.
    write(
        "peer_map",
        "three_nodes",
        concat!(
            r#"{"type":"node_directory","you":1,"reset":true,"nodes":[]}"#,
            "\n",
            r#"{"type":"node_directory","nodes":[[0,"n0","10.0.0.1"],[1,"n1","10.0.0.2"],[2,"n2","fd00::3"]]}"#,
            "\n",
            r#"{"type":"job_peers","job":4,"map":{"size":12,"runs":[[0,3,0,4,20000]]}}"#,
            "\n",
            r#"{"type":"pmi_start","job":4,"kvsname":"kvs_4_0","preset":[],"map":{"size":12,"runs":[[0,3,0,4,20000]]}}"#,
            "\n",
        )
        .as_bytes(),
    );
}
