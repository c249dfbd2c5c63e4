//! Helpers the fuzz targets of gang-coordinator share: framing a fuzzed
//! payload the way the wire does (so targets fuzz the JSON, not a length
//! header the fuzzer would have to guess), decoding it with the real
//! decoder, and the round-trip property every message family must have.

use gang_wire::proto::{
    encode, FrameDecoder, FrameError, Message, HEADER_LEN, MAGIC, MAX_PAYLOAD, PROTOCOL_VERSION,
};

/// `payload` behind a valid header of `M`'s channel.
pub fn frame_of<M: Message>(payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(HEADER_LEN + payload.len());
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
    frame.push(M::CHANNEL as u8);
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// `payload` decoded as one `M` by the frame decoder gangd and the agents
/// use; `None` if it is too long for a frame.
pub fn decode_payload<M: Message>(payload: &[u8]) -> Option<Result<M, FrameError>> {
    if payload.len() > MAX_PAYLOAD {
        return None;
    }
    let mut decoder = FrameDecoder::<M>::new();
    Some(decoder.feed(&frame_of::<M>(payload)).map(|mut msgs| {
        assert_eq!(msgs.len(), 1, "one whole frame is one message");
        msgs.pop().unwrap()
    }))
}

/// decode(encode(msg)) == msg, whenever msg still fits a frame.
pub fn assert_round_trip<M: Message + PartialEq + std::fmt::Debug>(msg: &M) {
    let frame = match encode(msg) {
        Ok(f) => f,
        Err(FrameError::Oversized { .. }) => return,
        Err(e) => panic!("a decoded message does not encode: {e:?}"),
    };
    let again = decode_payload::<M>(&frame[HEADER_LEN..])
        .expect("encode keeps frames under the limit")
        .expect("an encoded message decodes");
    assert_eq!(&again, msg);
}
