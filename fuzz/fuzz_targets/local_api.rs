//! The local API's input: the line codec over bytes arriving in any
//! pieces, and every line through the frame parser (strict JSON, then the
//! typed request).
#![no_main]

use agentmesh_node::api::{ClientFrame, DaemonFrame, MAX_FRAME_BYTES};
use agentmesh_node::frames::{Line, LineCodec};
use agentmesh_node::server::parse_frame;
use libfuzzer_sys::fuzz_target;
use tokio_util::bytes::BytesMut;
use tokio_util::codec::Decoder;

/// The lines a codec of `max` reads from `data` arriving `step` bytes at
/// a time, then its end.
fn lines(max: usize, data: &[u8], step: usize) -> Vec<Line> {
    let mut codec = LineCodec::new(max);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for piece in data.chunks(step.max(1)) {
        buf.extend_from_slice(piece);
        while let Some(line) = codec.decode(&mut buf).expect("the codec never fails") {
            out.push(line);
        }
        // What it buffers stays bounded by the frame limit, whatever came.
        assert!(buf.len() <= max, "buffered {} with max {max}", buf.len());
    }
    while let Some(line) = codec.decode_eof(&mut buf).expect("the codec never fails") {
        out.push(line);
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let [max, step, rest @ ..] = data else { return };
    // A small limit, so lines over it are common.
    let max = usize::from(*max % 64) + 1;
    let whole = lines(max, rest, rest.len());
    assert_eq!(
        whole,
        lines(max, rest, usize::from(*step % 16) + 1),
        "lines must not depend on how the bytes arrived"
    );
    for line in &whole {
        if let Line::Text(t) = line {
            assert!(t.len() <= max, "a line over the limit came through");
        }
    }
    // The daemon's own limit, every line through the parser.
    for line in lines(MAX_FRAME_BYTES, rest, rest.len()) {
        let Line::Text(text) = line else { continue };
        match parse_frame(&text) {
            Ok(frame) => {
                // What was accepted means the same written out again.
                let again = serde_json::to_string(&frame).expect("a frame can be written");
                let back: ClientFrame = parse_frame(&again).expect("a written frame parses");
                assert_eq!(back, frame, "a frame must read back as it was: {again}");
            }
            Err(DaemonFrame::Error { message, .. }) => assert!(!message.is_empty()),
            Err(other) => panic!("a refused frame is answered with an error frame, not {other:?}"),
        }
    }
});
