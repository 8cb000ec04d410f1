//! What the fuzz targets share: reading bytes as a request or a response
//! of one of the daemon's protocols, through the codec the daemon reads
//! them with, and checking that what it accepts reads back the same.

use agentmesh_node::net::codec::{Codec, Limits};
use futures::executor::block_on;
use libp2p::StreamProtocol;
use libp2p::request_response::Codec as _;
use serde::{Serialize, de::DeserializeOwned};

/// `data` read as a request and as a response of `protocol`, bounded by
/// `limits`, as the daemon reads them; each one accepted is written and
/// read again, and must come back equal.
pub fn read_both<Req, Resp>(
    protocol: &'static str,
    limits: Limits,
    data: &[u8],
) -> (Option<Req>, Option<Resp>)
where
    Req: Send + Serialize + DeserializeOwned + PartialEq + std::fmt::Debug + Clone,
    Resp: Send + Serialize + DeserializeOwned + PartialEq + std::fmt::Debug + Clone,
{
    let protocol = StreamProtocol::new(protocol);
    let mut codec = Codec::<Req, Resp>::new(limits);
    // What is written again is read back without the size limit: fields
    // left out and defaulted are written out, so it may be larger.
    let mut unbounded = Codec::<Req, Resp>::new(Limits {
        request: usize::MAX / 2,
        response: usize::MAX / 2,
        inbound_budget: usize::MAX / 2,
    });
    block_on(async {
        let request = codec.read_request(&protocol, &mut &data[..]).await.ok();
        if let Some(r) = &request {
            let mut written = Vec::new();
            codec
                .write_request(&protocol, &mut written, r.clone())
                .await
                .expect("a request read can be written");
            let again = unbounded
                .read_request(&protocol, &mut &written[..])
                .await
                .expect("a request written reads back");
            assert_eq!(&again, r, "a request must read back as it was");
        }
        let response = codec.read_response(&protocol, &mut &data[..]).await.ok();
        if let Some(r) = &response {
            let mut written = Vec::new();
            codec
                .write_response(&protocol, &mut written, r.clone())
                .await
                .expect("a response read can be written");
            let again = unbounded
                .read_response(&protocol, &mut &written[..])
                .await
                .expect("a response written reads back");
            assert_eq!(&again, r, "a response must read back as it was");
        }
        (request, response)
    })
}
