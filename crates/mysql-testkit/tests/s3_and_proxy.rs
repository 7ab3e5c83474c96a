//! The S3 side of the harness: moto round trips, and the fault proxy seen by a plain HTTP
//! client and by a signing S3 client (boto3).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bulwark_mysql_testkit::{Fault, FaultMode, FaultProxy, S3Server};

/// One HTTP/1.1 request over a fresh connection; returns the status code and the body. The
/// proxy closes every connection after one response, so reading to EOF ends the body.
fn http(endpoint: &str, method: &str, path: &str, body: &[u8]) -> std::io::Result<(u16, String)> {
    let addr = endpoint.trim_start_matches("http://");
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )?;
    stream.write_all(body)?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line in {text:?}")))?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

#[test]
fn s3_bucket_put_list_get_delete_round_trip() {
    let s3 = S3Server::start().expect("start moto (run scripts/install-test-deps.sh)");
    s3.create_bucket("harbor-archive").unwrap();
    let blob: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    s3.put_object("harbor-archive", "runs/2024/seg-000001", &blob)
        .unwrap();
    s3.put_object("harbor-archive", "runs/2024/manifest.json", b"{\"v\":1}")
        .unwrap();
    s3.put_object("harbor-archive", "other/äöü key", b"x")
        .unwrap();
    assert_eq!(
        s3.list_keys("harbor-archive", "runs/").unwrap(),
        vec![
            ("runs/2024/manifest.json".to_string(), 7),
            ("runs/2024/seg-000001".to_string(), 70_000)
        ]
    );
    assert_eq!(
        s3.list_keys("harbor-archive", "other/").unwrap()[0].0,
        "other/äöü key"
    );
    assert_eq!(
        s3.get_object("harbor-archive", "runs/2024/seg-000001")
            .unwrap(),
        blob
    );

    s3.flip_byte("harbor-archive", "runs/2024/seg-000001", 10)
        .unwrap();
    let tampered = s3
        .get_object("harbor-archive", "runs/2024/seg-000001")
        .unwrap();
    assert_eq!(tampered[10], blob[10] ^ 0xff);
    assert_eq!(tampered[11..], blob[11..]);
    s3.truncate_object("harbor-archive", "runs/2024/manifest.json", 3)
        .unwrap();
    assert_eq!(
        s3.get_object("harbor-archive", "runs/2024/manifest.json")
            .unwrap(),
        b"{\"v"
    );
    s3.delete_object("harbor-archive", "runs/2024/seg-000001")
        .unwrap();
    assert_eq!(s3.list_keys("harbor-archive", "runs/").unwrap().len(), 1);

    let env = s3.env();
    assert!(env.contains(&("AWS_ENDPOINT_URL".to_string(), s3.endpoint())));
    assert!(env.iter().any(|(k, _)| k == "AWS_SECRET_ACCESS_KEY"));
}

#[test]
fn fault_proxy_injects_and_passes_through() {
    let s3 = S3Server::start().expect("start moto (run scripts/install-test-deps.sh)");
    let proxy = FaultProxy::start(&format!("127.0.0.1:{}", s3.port())).unwrap();
    let endpoint = proxy.endpoint();

    // Pass-through, plain client: moto answers an (unsigned) ListBuckets.
    let (status, body) = http(&endpoint, "GET", "/", b"").unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("ListAllMyBucketsResult"), "{body}");

    // Every second request gets a canned S3 500.
    proxy.set_mode(FaultMode::EveryNth {
        n: 2,
        fault: Fault::Status500,
    });
    let statuses: Vec<u16> = (0..4)
        .map(|_| http(&endpoint, "GET", "/", b"").unwrap().0)
        .collect();
    assert_eq!(statuses, [200, 500, 200, 500]);
    let (status, body) = http(&endpoint, "PUT", "/mud-flats", b"").unwrap();
    assert_eq!(status, 200, "{body}"); // 5th: forwarded, moto creates the bucket
    let (status, body) = http(&endpoint, "PUT", "/mud-flats/k", b"read and discarded").unwrap();
    assert_eq!(status, 500);
    assert!(body.contains("<Code>InternalError</Code>"), "{body}");
    assert_eq!(proxy.injected(), 3);
    assert_eq!(proxy.forwarded(), 4);

    // A dropped connection yields no response at all.
    proxy.set_mode(FaultMode::All(Fault::DropConnection));
    assert!(http(&endpoint, "GET", "/", b"").is_err());

    // A signing client (boto3: Expect: 100-continue on PUT, checksums) through the proxy.
    proxy.set_mode(FaultMode::PassThrough);
    let via = s3.client_via(&endpoint).unwrap();
    via.create_bucket("tidal-flats").unwrap();
    let blob: Vec<u8> = (0..300_000u32).map(|i| (i * 7919 % 251) as u8).collect();
    via.put_object("tidal-flats", "seg/1", &blob).unwrap();
    assert_eq!(via.get_object("tidal-flats", "seg/1").unwrap(), blob);
    assert_eq!(s3.get_object("tidal-flats", "seg/1").unwrap(), blob);

    // Faults seen by the signing client: a transient 500, then a reset mid-download.
    proxy.set_mode(FaultMode::FirstN {
        n: 1,
        fault: Fault::Status500,
    });
    let err = via.put_object("tidal-flats", "seg/2", b"abc").unwrap_err();
    assert!(format!("{err:#}").contains("InternalError"), "{err:#}");
    via.put_object("tidal-flats", "seg/2", b"abc").unwrap();
    proxy.set_mode(FaultMode::All(Fault::ResetMidResponse));
    assert!(via.get_object("tidal-flats", "seg/1").is_err());
    proxy.set_mode(FaultMode::PassThrough);
    assert_eq!(
        s3.list_keys("tidal-flats", "seg/").unwrap(),
        vec![("seg/1".to_string(), 300_000), ("seg/2".to_string(), 3)]
    );
    let log = proxy.requests();
    assert!(
        log.iter()
            .any(|l| l.starts_with("PUT /tidal-flats/seg/2") && l.ends_with("Status500")),
        "{log:#?}"
    );
}
