//! The agent ↔ PMIx server vocabulary (gang_wire::pmix) from outside:
//! every message through a frame and back, what a broken peer sends, the
//! fence chunks and their bound, the server's port, and the job check.

use gang_wire::pmix::*;
use gang_wire::proto::{encode as frame, read_frame, FrameDecoder, FrameError, MAX_PAYLOAD};
use proptest::prelude::*;

fn job(ranks_by_node: Vec<Vec<u32>>, size: u32) -> PmixJob {
    PmixJob {
        nspace: "gang.7".into(),
        size,
        nodes: (0..ranks_by_node.len()).map(|i| format!("n{i}")).collect(),
        ranks_by_node,
        this_node: 0,
        uid: 1000,
        gid: 1000,
    }
}

fn round_trip<M: gang_wire::proto::Message + PartialEq + std::fmt::Debug>(msg: &M) {
    let f = frame(msg).unwrap();
    assert!(f.len() <= MAX_PAYLOAD);
    assert_eq!(read_frame::<M>(&mut &f[..]).unwrap().as_ref(), Some(msg));
    let mut d = FrameDecoder::<M>::new();
    assert_eq!(
        d.feed(&f).unwrap(),
        vec![serde_json::from_slice::<M>(&f[11..]).unwrap()]
    );
}

// --- messages ---

#[test]
fn every_message_to_the_server_round_trips() {
    for m in [
        ToPmix::Job {
            job: job(vec![vec![0, 2], vec![1]], 3),
        },
        ToPmix::ForkEnv { rank: 2 },
        ToPmix::FenceChunk {
            id: 4,
            data: encode(b"blob"),
        },
        ToPmix::FenceDone { id: 4, error: None },
        ToPmix::FenceDone {
            id: 5,
            error: Some("node n1 lost".into()),
        },
    ] {
        round_trip(&m);
    }
}

#[test]
fn every_message_from_the_server_round_trips() {
    for m in [
        FromPmix::Ready {
            uri: "pmix-server.12;tcp4://127.0.0.1:4567".into(),
        },
        FromPmix::Env {
            rank: 1,
            env: vec![("PMIX_RANK".into(), "1".into())],
            error: None,
        },
        FromPmix::Env {
            rank: 9,
            env: vec![],
            error: Some("not a local rank".into()),
        },
        FromPmix::FenceChunk {
            id: 0,
            data: encode(&[0, 255, 7]),
        },
        FromPmix::Fence {
            id: 0,
            collect: true,
        },
        FromPmix::Abort {
            rank: 0,
            status: 3,
            message: "MPI_Abort".into(),
        },
        FromPmix::Finalized { rank: 1 },
        FromPmix::Failed {
            error: "PMIx_server_init: PMIX_ERROR".into(),
        },
    ] {
        round_trip(&m);
    }
}

#[test]
fn the_wire_names_are_the_documented_ones() {
    let text = |m: &FromPmix| String::from_utf8(frame(m).unwrap()[11..].to_vec()).unwrap();
    assert_eq!(
        text(&FromPmix::Fence {
            id: 2,
            collect: false
        }),
        r#"{"type":"fence","id":2,"collect":false}"#
    );
    let text = |m: &ToPmix| String::from_utf8(frame(m).unwrap()[11..].to_vec()).unwrap();
    assert_eq!(
        text(&ToPmix::ForkEnv { rank: 3 }),
        r#"{"type":"fork_env","rank":3}"#
    );
}

#[test]
fn a_frame_of_the_other_direction_or_another_link_is_refused() {
    let f = frame(&FromPmix::Finalized { rank: 0 }).unwrap();
    assert!(matches!(
        read_frame::<ToPmix>(&mut &f[..]),
        Err(FrameError::WrongChannel {
            got: 6,
            expected: 5
        })
    ));
    assert_eq!(
        read_frame::<ToPmix>(&mut &f[..]).unwrap_err().to_string(),
        "frame of channel 6 (PMIx server to agent) where channel 5 (agent to PMIx server) was expected"
    );
    let mut f = frame(&ToPmix::ForkEnv { rank: 0 }).unwrap();
    f[6] = 2; // gangd to agent
    assert!(matches!(
        read_frame::<ToPmix>(&mut &f[..]),
        Err(FrameError::WrongChannel {
            got: 2,
            expected: 5
        })
    ));
}

/// A frame of channel ToPmix around `payload`.
fn to_pmix_frame(payload: &[u8]) -> Vec<u8> {
    let mut f = frame(&ToPmix::ForkEnv { rank: 0 }).unwrap();
    f.truncate(7);
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[test]
fn malformed_frames_are_errors() {
    let bad = |p: &[u8]| read_frame::<ToPmix>(&mut &to_pmix_frame(p)[..]).unwrap_err();
    assert!(matches!(
        bad(br#"{"type":"fork_env","rank":-1}"#),
        FrameError::Malformed(_)
    ));
    assert!(matches!(
        bad(br#"{"type":"fork_env"}"#),
        FrameError::Malformed(_)
    ));
    assert!(matches!(
        bad(br#"{"type":"job","job":{"nspace":"x"}}"#),
        FrameError::Malformed(_)
    ));
    assert!(matches!(bad(b"\xff\xfe"), FrameError::Malformed(_)));
    assert_eq!(
        bad(br#"{"type":"spawn","rank":0}"#),
        FrameError::UnknownMessageType("spawn".into())
    );
    // Cut short: the header announces more than arrives.
    let mut f = to_pmix_frame(br#"{"type":"fork_env","rank":1}"#);
    f.truncate(f.len() - 3);
    assert!(matches!(
        read_frame::<ToPmix>(&mut &f[..]),
        Err(FrameError::Truncated { .. })
    ));
    // A length over the bound is refused from the header alone.
    let mut f = to_pmix_frame(b"");
    f[7..11].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(
        read_frame::<ToPmix>(&mut &f[..]),
        Err(FrameError::Oversized { .. })
    ));
}

// --- fence chunks ---

#[test]
fn a_full_chunk_fits_a_frame_with_room_to_spare() {
    let data = vec![0xa5u8; FENCE_CHUNK];
    let chunks: Vec<String> = fence_chunks(&data).collect();
    assert_eq!(chunks.len(), 1);
    let id = u64::MAX;
    let f = frame(&FromPmix::FenceChunk {
        id,
        data: chunks[0].clone(),
    })
    .unwrap();
    assert!(f.len() < MAX_PAYLOAD * 3 / 4, "{} bytes", f.len());
}

#[test]
fn data_is_cut_into_chunks_and_joined_back() {
    let data: Vec<u8> = (0..FENCE_CHUNK * 2 + 3).map(|i| (i * 7) as u8).collect();
    let chunks: Vec<String> = fence_chunks(&data).collect();
    assert_eq!(chunks.len(), 3);
    let mut a = Assembly::new(data.len());
    for c in &chunks {
        a.chunk(1, c).unwrap();
    }
    assert_eq!(a.open(), 1);
    assert_eq!(a.finish(1).unwrap(), data);
    assert_eq!(a.open(), 0);
    assert_eq!(fence_chunks(&[]).count(), 0, "no data, no chunk");
    assert_eq!(
        a.finish(2).unwrap(),
        Vec::<u8>::new(),
        "a fence without chunks is empty"
    );
}

#[test]
fn fences_are_kept_apart_by_id() {
    let mut a = Assembly::new(100);
    a.chunk(0, &encode(b"a0")).unwrap();
    a.chunk(1, &encode(b"b")).unwrap();
    a.chunk(0, &encode(b"a1")).unwrap();
    assert_eq!(a.finish(1).unwrap(), b"b");
    assert_eq!(a.finish(0).unwrap(), b"a0a1");
}

#[test]
fn a_fence_over_its_bound_fails_and_holds_nothing_more() {
    let mut a = Assembly::new(10);
    a.chunk(3, &encode(b"12345678")).unwrap();
    assert!(a
        .chunk(3, &encode(b"abc"))
        .unwrap_err()
        .contains("over 10 bytes"));
    // Later chunks are dropped: the fence failed at its bound.
    a.chunk(3, &encode(b"x")).unwrap();
    assert!(a.finish(3).unwrap_err().contains("over 10 bytes"));
    // The bound is checked before decoding: a huge chunk costs nothing.
    let mut a = Assembly::new(max_fence_bytes(1));
    assert!(a
        .chunk(0, &"A".repeat(max_fence_bytes(1) / 3 * 4 + 8))
        .is_err());
}

#[test]
fn a_bad_chunk_fails_its_fence() {
    let mut a = Assembly::new(100);
    assert!(a.chunk(0, "not base64!").is_err());
    assert!(a.finish(0).is_err());
}

#[test]
fn the_fence_bound_grows_with_the_ranks_and_never_overflows() {
    assert_eq!(max_fence_bytes(0), MAX_FENCE_BYTES_PER_RANK);
    assert_eq!(max_fence_bytes(3), 3 * MAX_FENCE_BYTES_PER_RANK);
    assert_eq!(max_fence_bytes(usize::MAX), usize::MAX);
}

#[test]
fn encoding_uses_url_safe_characters_only_and_no_padding() {
    assert_eq!(encode(&[0xfb, 0xff]), "-_8");
    assert_eq!(encode(b""), "");
    assert_eq!(decode("-_8").unwrap(), vec![0xfb, 0xff]);
    for bad in ["-_8=", "+/8", "a b", "A", "-_9"] {
        assert!(decode(bad).is_err(), "{bad:?} decoded");
    }
}

proptest! {
    #[test]
    fn decode_inverts_encode(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let s = encode(&bytes);
        prop_assert!(s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        prop_assert_eq!(decode(&s).unwrap(), bytes);
    }

    /// Whatever decodes is canonical: it is what encode would have made.
    #[test]
    fn only_canonical_text_decodes(s in "[A-Za-z0-9_=+/ -]{0,12}") {
        if let Ok(bytes) = decode(&s) {
            prop_assert_eq!(encode(&bytes), s);
        }
    }
}

#[test]
fn every_short_byte_string_round_trips() {
    // Exhaustive over 0..=2 bytes: every padding case and every tail.
    let mut all = vec![vec![]];
    all.extend((0..=255u8).map(|a| vec![a]));
    all.extend((0..=255u8).flat_map(|a| (0..=255u8).map(move |b| vec![a, b])));
    for bytes in all {
        assert_eq!(decode(&encode(&bytes)).unwrap(), bytes);
    }
}

// --- the server's port ---

#[test]
fn the_port_is_read_from_the_server_uri() {
    assert_eq!(
        port_of_uri("pmix-server.123;tcp4://127.0.0.1:4567"),
        Some(4567)
    );
    assert_eq!(port_of_uri("pmix-server.9;tcp6://[::1]:80"), Some(80));
    for bad in [
        "",
        "pmix-server.123",
        "pmix-server.123;tcp4://127.0.0.1",
        "pmix-server.123;tcp4://127.0.0.1:",
        "pmix-server.123;tcp4://127.0.0.1:65536",
        "pmix-server.123;tcp4://127.0.0.1:+45",
        "pmix-server.123;tcp4://:45",
        "pmix-server.123;usock://tmp/x:45",
        "pmix-server.123;127.0.0.1:45",
    ] {
        assert_eq!(port_of_uri(bad), None, "{bad:?}");
    }
}

// --- the job ---

#[test]
fn local_ranks_are_places_on_the_node() {
    let l = job(vec![vec![0, 2], vec![1, 3]], 4).layout().unwrap();
    assert_eq!(l.node_of, vec![0, 1, 0, 1]);
    assert_eq!(l.local_rank, vec![0, 0, 1, 1]);
    assert_eq!(job(vec![vec![0, 2], vec![1, 3]], 4).local_ranks(), &[0, 2]);
}

#[test]
fn maps_list_nodes_and_their_ranks_in_order() {
    let s = job(vec![vec![0, 2], vec![1, 3]], 4);
    assert_eq!(s.node_list(), "n0,n1");
    assert_eq!(s.proc_list(), "0,2;1,3");
}

#[test]
fn a_rank_twice_missing_or_out_of_range_is_refused() {
    assert!(job(vec![vec![0, 1], vec![1]], 2).layout().is_err());
    assert!(job(vec![vec![0]], 2).layout().is_err());
    assert!(job(vec![vec![0, 5]], 2).layout().is_err());
    assert!(job(vec![vec![0, 1], vec![1]], 3).layout().is_err());
}

#[test]
fn a_claimed_size_is_not_believed_before_the_ranks_are_counted() {
    // Would be 4 G entries of node_of if allocated first.
    let e = job(vec![vec![0]], u32::MAX).layout().unwrap_err();
    assert!(e.contains("1 placed"), "{e}");
}

#[test]
fn bad_names_and_shapes_are_refused() {
    let mut s = job(vec![vec![0]], 1);
    s.nodes[0] = "a,b".into();
    assert!(s.layout().is_err());
    let mut s = job(vec![vec![0]], 1);
    s.nspace = "x".repeat(256);
    assert!(s.layout().is_err());
    let mut s = job(vec![vec![0]], 1);
    s.this_node = 1;
    assert!(s.layout().is_err());
    assert!(s.local_ranks().is_empty(), "no panic on a bad this_node");
    let mut s = job(vec![vec![0]], 1);
    s.nodes.push("n1".into());
    assert!(s.layout().is_err());
    assert!(job(vec![vec![]], 0).layout().is_err());
}
