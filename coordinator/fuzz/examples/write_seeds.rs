//! Writes the seed corpora with the real encoders: each seed is what gangd,
//! an agent, a front end or a rank really sends. frame_decoder's seeds (a
//! family/chunk byte and a frame pair) are re-encoded in the current
//! protocol version from the messages they hold.
//!
//!     cd coordinator/fuzz && cargo run --example write_seeds
//!
//! Targets whose first input byte selects something get that byte in front.

use std::fs;
use std::path::Path;

use gang_wire::pmi::wire::Line;
use gang_wire::proto::{
    encode, FromAgent, FromClient, JobId, LiveJob, Message, Placement, ToAgent, ToClient,
    HEADER_LEN,
};
use gang_wire::trace::{TraceEvent, TraceMeta};

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir = Path::new("seeds").join(target);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(name), bytes).unwrap();
}

fn payload<M: Message>(msg: &M) -> Vec<u8> {
    encode(msg).unwrap()[HEADER_LEN..].to_vec()
}

fn with_selector(selector: u8, bytes: &[u8]) -> Vec<u8> {
    [&[selector][..], bytes].concat()
}

fn hello() -> FromAgent {
    FromAgent::Hello {
        nr_cpus: 8,
        housekeeping_cpus: "0".into(),
        agent_version: "0.1.0".into(),
        jobs: vec![LiveJob {
            job: JobId(3),
            name: "lu".into(),
            size: 4,
            uid: 1000,
            gid: 1000,
            ranks: vec![0, 1],
        }],
        schedule: vec![
            vec![Placement {
                job: JobId(3),
                cpus: "1-2".into(),
            }],
            vec![Placement {
                job: JobId(4),
                cpus: "1-4,7".into(),
            }],
        ],
    }
}

/// The first message of each frame_decoder seed, decoded from its payload
/// (whatever protocol version its header names) and encoded again; the
/// seed itself is rewritten as two such frames of the current version.
fn frame_seeds<M: Message>(family: u8) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut paths: Vec<_> = fs::read_dir("seeds/frame_decoder")
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    for path in paths {
        let bytes = fs::read(&path).unwrap();
        if bytes[0] & 3 != family {
            continue;
        }
        let len = u32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize;
        let msg: M = serde_json::from_slice(&bytes[1 + HEADER_LEN..1 + HEADER_LEN + len]).unwrap();
        let frame = encode(&msg).unwrap();
        fs::write(&path, [&bytes[..1], &frame[..], &frame[..]].concat()).unwrap();
        out.push(with_selector(family, &frame[HEADER_LEN..]));
    }
    out
}

fn main() {
    let mut n = 0;
    let mut messages = frame_seeds::<FromAgent>(0);
    messages.extend(frame_seeds::<ToAgent>(1));
    messages.extend(frame_seeds::<FromClient>(2));
    messages.extend(frame_seeds::<ToClient>(3));
    messages.push(with_selector(0, &payload(&hello())));
    for m in messages {
        write("messages", &format!("seed{n}"), &m);
        n += 1;
    }

    write("agent_hello", "hello", &payload(&hello()));
    let fresh = FromAgent::Hello {
        nr_cpus: 4,
        housekeeping_cpus: String::new(),
        agent_version: "0.1.0".into(),
        jobs: vec![],
        schedule: vec![],
    };
    write("agent_hello", "fresh", &payload(&fresh));

    // Selector: knob index (see knob_writes.rs NAMES), high bit 0 = offset 0.
    for (i, value) in [
        (0u8, "250\n"),
        (1, "8"),
        (2, "best_fit"),
        (3, "0"),
        (4, "off\n"),
        (5, "50"),
    ] {
        write(
            "knob_writes",
            &format!("seed{i}"),
            &with_selector(i, value.as_bytes()),
        );
    }

    let pmi = [
        Line::new("init")
            .with("pmi_version", 1)
            .with("pmi_subversion", 1),
        Line::new("initack").with("pmiid", 0),
        Line::new("get_maxes"),
        Line::new("put")
            .with("kvsname", "kvs_1")
            .with("key", "P0-businesscard")
            .with("value", "port#40001$"),
        Line::new("barrier_in"),
        Line::new("get")
            .with("kvsname", "kvs_1")
            .with("key", "P1-businesscard"),
        Line::new("finalize"),
    ];
    for (i, line) in pmi.iter().enumerate() {
        write("pmi_wire", &format!("seed{i}"), line.format().as_bytes());
    }

    let meta = TraceMeta {
        nr_cpus: 2,
        gang_names: [(0, "lu".to_string()), (1, "ep".to_string())].into(),
        start_ns: 1_000,
        end_ns: 90_000,
        node: "n1".into(),
    };
    let events = vec![
        TraceEvent::switch(1_000, 1, 0, 0),
        TraceEvent::owner(1_100, 0, 0),
        TraceEvent::run(1_200, 0, 0, 0),
        TraceEvent::switch(50_000, 2, 1, 1),
        TraceEvent::owner(50_100, 1, 1),
        TraceEvent::run(50_200, 1, 1, 1),
    ];
    // What a node sends: scx_gang's RawTrace { meta, events } as JSON.
    let raw = serde_json::json!({ "meta": meta, "events": events });
    write("trace_json", "trace", &serde_json::to_vec(&raw).unwrap());
    let empty = serde_json::json!({ "meta": TraceMeta::default(), "events": [] });
    write("trace_json", "empty", &serde_json::to_vec(&empty).unwrap());
}
