//! Arbitrary bytes into both decoders of every message family, fed in
//! chunks whose sizes the input picks: no panic, no frame larger than the
//! limit held, and the blocking reader agrees with the incremental decoder
//! on the first frame.

#![no_main]

use std::io::Cursor;

use gang_wire::proto::{
    read_frame, FrameDecoder, FromAgent, FromClient, Message, ToAgent, ToClient, HEADER_LEN, MAX_PAYLOAD,
};
use libfuzzer_sys::fuzz_target;

fn check<M: Message + PartialEq + std::fmt::Debug>(chunking: u8, data: &[u8]) {
    let mut decoder = FrameDecoder::<M>::new();
    let mut first: Option<Result<M, _>> = None;
    let chunk = usize::from(chunking).max(1);
    for piece in data.chunks(chunk) {
        match decoder.feed(piece) {
            Ok(msgs) => {
                if first.is_none() {
                    first = msgs.into_iter().next().map(Ok);
                }
            }
            Err(e) => {
                first.get_or_insert(Err(e));
                break;
            }
        }
        assert!(decoder.buffered() <= HEADER_LEN + MAX_PAYLOAD);
    }
    let blocking = read_frame::<M>(&mut Cursor::new(data));
    // The blocking reader stops after one frame, so compare only when the
    // incremental decoder completed a frame or failed on the first one.
    match (&first, blocking) {
        (Some(Ok(a)), Ok(Some(b))) => assert_eq!(a, &b),
        (Some(Err(a)), Err(b)) => assert_eq!(a, &b),
        _ => {}
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&selector, data)) = input.split_first() else { return };
    // Low two bits pick the family, the rest the chunk size.
    let chunking = selector >> 2;
    match selector & 3 {
        0 => check::<FromAgent>(chunking, data),
        1 => check::<ToAgent>(chunking, data),
        2 => check::<FromClient>(chunking, data),
        _ => check::<ToClient>(chunking, data),
    }
});
