//! The node directory and a job's peer map as the agent takes them off
//! gangd's link (gang-wire's proto/directory.rs and proto/peers.rs, what
//! agent/handler.rs does with NodeDirectory, JobPeers and PmiStart's map).
//! The input is JSON lines, each a ToAgent message: a NodeDirectory is
//! applied to the node's directory (Ok, or Err and nothing changed); a
//! JobPeers map (and PmiStart's, the same map since protocol 3) is
//! expanded against it, and PmiStart's layout taken from it: either a list
//! of exactly `size` "host:port" entries, a layout naming every rank once
//! and this node's ranks (by its own id, what StartJob starts) among
//! them, or an error saying so, never a panic and never more than the
//! bounds of peers.rs.

#![no_main]

use gang_wire::proto::peers::MAX_PEERS_LEN;
use gang_wire::proto::{Directory, ToAgent};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let mut dir = Directory::default();
    for line in input.split(|&b| b == b'\n') {
        let Ok(msg) = serde_json::from_slice::<ToAgent>(line) else {
            continue;
        };
        match msg {
            ToAgent::NodeDirectory { you, reset, nodes } => {
                let before = (dir.me(), dir.len());
                if let Err(e) = dir.apply(you, reset, &nodes) {
                    assert!(e.starts_with("node directory"), "{e}");
                    assert_eq!((dir.me(), dir.len()), before, "nothing applied");
                }
            }
            ToAgent::JobPeers { map, .. } | ToAgent::PmiStart { map, .. } => match map.expand(&dir)
            {
                Ok(list) => {
                    assert!(list.len() <= MAX_PEERS_LEN);
                    let n = if list.is_empty() {
                        0
                    } else {
                        list.split(',').count()
                    };
                    assert_eq!(n, map.size as usize);
                    let layout = map.layout(&dir).expect("a map that expands has a layout");
                    let mut ranks: Vec<u32> = layout.into_iter().flat_map(|(_, r)| r).collect();
                    ranks.sort_unstable();
                    assert!(ranks.iter().copied().eq(0..map.size));
                    if let Some(me) = dir.me() {
                        let mine = map.ranks_of(me);
                        assert!(mine.windows(2).all(|w| w[0].0 < w[1].0));
                        assert!(mine.iter().all(|&(r, _)| r < map.size));
                    }
                }
                Err(e) => {
                    assert!(e.starts_with("peer table"), "{e}");
                    assert!(map.layout(&dir).is_err());
                }
            },
            _ => {}
        }
    }
});
