//! The catalog's 64 KiB request limit holds for the message a compressed body inflates
//! to, in every framing the route answers: unary Connect (JSON and binary) with
//! `Content-Encoding: gzip`, and gRPC with a compressed envelope.

use std::io::Write;

use super::*;

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

/// A `ListPlugins` request in proto3 JSON padded with whitespace to `size` bytes: a
/// valid message however large, as an attacker would send it.
fn padded_json(size: usize) -> Vec<u8> {
    let mut body = br#"{"query": "cert""#.to_vec();
    body.resize(size - 1, b' ');
    body.push(b'}');
    body
}

/// The same in binary protobuf: `query` and an unknown field of `size` bytes, which a
/// decoder must skip.
fn padded_proto(size: usize) -> Vec<u8> {
    let mut body = pb::ListPluginsRequest {
        query: "cert".into(),
        ..Default::default()
    }
    .encode_to_vec();
    // Field 1000, length-delimited: tag (1000 << 3 | 2) as a varint, then the length.
    body.extend_from_slice(&[0xc2, 0x3e]);
    let mut n = size;
    while n >= 0x80 {
        body.push((n as u8) | 0x80);
        n >>= 7;
    }
    body.push(n as u8);
    body.resize(body.len() + size, b'x');
    body
}

async fn unary(state: &AppState, content_type: &str, body: Vec<u8>) -> Reply {
    send(
        state,
        Request::post(format!("{BASE}/ListPlugins"))
            .header(header::CONTENT_TYPE, content_type)
            .header(header::CONTENT_ENCODING, "gzip")
            .body(Body::from(gzip(&body)))
            .unwrap(),
    )
    .await
}

/// A gRPC call with one gzip-compressed envelope: the `grpc-status` (from the headers
/// of a trailers-only answer, or the trailers) and the response message.
async fn grpc(state: &AppState, message: &[u8]) -> (String, Vec<u8>) {
    let compressed = gzip(message);
    let mut framed = vec![1u8];
    framed.extend_from_slice(&(compressed.len() as u32).to_be_bytes());
    framed.extend_from_slice(&compressed);
    let req = Request::post(format!("{BASE}/ListPlugins"))
        .header(header::CONTENT_TYPE, "application/grpc")
        .header("grpc-encoding", "gzip")
        .header("te", "trailers")
        .body(Body::from(framed))
        .unwrap();
    let res = app(state.clone()).oneshot(req).await.unwrap();
    let headers = res.headers().clone();
    let collected = res.into_body().collect().await.unwrap();
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let status = trailers
        .get("grpc-status")
        .or_else(|| headers.get("grpc-status"))
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, collected.to_bytes().to_vec())
}

#[tokio::test]
async fn the_limit_applies_to_the_decompressed_message() {
    let state = common::state().await;
    let big = 1_900_000;
    // A few kilobytes on the wire, far under the limit, inflating to 1.9 MB.
    assert!(gzip(&padded_json(big)).len() < 64 * 1024);

    let r = unary(&state, "application/json", padded_json(big)).await;
    assert_eq!(r.json()["code"], "resource_exhausted", "{}", r.body);
    let r = unary(&state, "application/proto", padded_proto(big)).await;
    assert_eq!(r.json()["code"], "resource_exhausted", "{}", r.body);
    let (status, _) = grpc(&state, &padded_proto(big)).await;
    assert_eq!(status, "8", "gRPC RESOURCE_EXHAUSTED");

    // Compressed requests of a normal size are served.
    let r = unary(&state, "application/json", padded_json(1000)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    assert_eq!(names(&r.json()), ["cert-manager"]);
    let r = unary(&state, "application/proto", padded_proto(1000)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let (status, body) = grpc(&state, &padded_proto(1000)).await;
    assert_eq!(status, "0", "{}", String::from_utf8_lossy(&body));
    // One uncompressed envelope: flag, length, the response message.
    assert_eq!(body[0], 0);
    let listing = pb::ListPluginsResponse::decode_from_slice(&body[5..]).unwrap();
    assert_eq!(listing.plugins[0].name, "cert-manager");
}
