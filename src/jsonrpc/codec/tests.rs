//! Unit tests of `codec`.

use super::*;
use proptest::prelude::*;

fn decode_all(codec: &mut ContentLengthCodec, input: &[u8]) -> Result<Vec<Bytes>, CodecError> {
    let mut buf = BytesMut::from(input);
    let mut out = Vec::new();
    while let Some(f) = codec.decode(&mut buf)? {
        out.push(f);
    }
    Ok(out)
}

#[test]
fn encodes_exact_byte_length() {
    let body =
        r#"{"jsonrpc":"2.0","method":"initialize","params":{"clientCapabilities":{}},"id":1}"#;
    let mut dst = BytesMut::new();
    encode_into(body.as_bytes(), &mut dst);
    // The spec's example says 104; the body is 81 bytes and the rule wins.
    assert_eq!(
        &dst[..],
        format!("Content-Length: 81\r\n\r\n{body}").as_bytes()
    );
    let utf8 = "{\"s\":\"é\"}";
    assert_eq!(
        frame(utf8.as_bytes())[..18].to_vec(),
        b"Content-Length: 10".to_vec()
    );
}

#[test]
fn two_frames_in_one_read() {
    let mut input = frame(b"{\"a\":1}");
    input.extend(frame(b"[]"));
    let frames = decode_all(&mut ContentLengthCodec::new(64), &input).unwrap();
    assert_eq!(
        frames,
        vec![Bytes::from_static(b"{\"a\":1}"), Bytes::from_static(b"[]")]
    );
}

#[test]
fn one_byte_feeds() {
    let mut input = frame(b"{\"hello\":\"world\"}");
    input.extend(frame(b"{}"));
    let mut codec = ContentLengthCodec::new(64);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for b in input {
        buf.put_u8(b);
        while let Some(f) = codec.decode(&mut buf).unwrap() {
            out.push(f);
        }
    }
    assert_eq!(out.len(), 2);
    assert_eq!(&out[0][..], b"{\"hello\":\"world\"}");
}

#[test]
fn tolerant_headers() {
    let input = b"content-length:   2 \nX-Other: y\ncontent-type: application/vscode-jsonrpc; charset=utf-8\n\n{}\r\n\r\nContent-Length: 0\r\n\r\n";
    let frames = decode_all(&mut ContentLengthCodec::new(64), input).unwrap();
    assert_eq!(frames, vec![Bytes::from_static(b"{}"), Bytes::new()]);
}

#[test]
fn conflicting_lengths_are_an_error_and_equal_ones_are_not() {
    for resync in [false, true] {
        let codec = || {
            let c = ContentLengthCodec::new(64);
            if resync { c.resynchronizing(1024) } else { c }
        };
        let err = decode_all(
            &mut codec(),
            b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}x",
        );
        assert!(
            matches!(err, Err(CodecError::ConflictingContentLength)),
            "{err:?}"
        );
        let frames = decode_all(
            &mut codec(),
            b"Content-Length: 2\r\ncontent-length: 2\r\n\r\n{}",
        )
        .unwrap();
        assert_eq!(frames, vec![Bytes::from_static(b"{}")]);
    }
}

#[test]
fn oversize_length_fails_before_allocating() {
    let mut codec = ContentLengthCodec::new(1024);
    let mut buf = BytesMut::from(&b"Content-Length: 99999999999999999999999\r\n\r\n"[..]);
    let err = codec.decode(&mut buf).unwrap_err();
    assert!(matches!(err, CodecError::FrameTooLarge { limit: 1024, .. }));
    assert!(buf.capacity() < 4096, "allocated {}", buf.capacity());
    let err = decode_all(
        &mut ContentLengthCodec::new(1024),
        b"Content-Length: 1025\r\n\r\n",
    );
    assert!(matches!(
        err,
        Err(CodecError::FrameTooLarge { length: 1025, .. })
    ));
}

#[test]
fn bounded_header_section() {
    let mut codec = ContentLengthCodec::new(1024).with_max_header_bytes(64);
    let endless = vec![b'a'; 65];
    assert!(matches!(
        decode_all(&mut codec, &endless),
        Err(CodecError::HeaderTooLarge { limit: 64 })
    ));
    let mut codec = ContentLengthCodec::new(1024).with_max_header_bytes(64);
    let long = format!("X: {}\r\nContent-Length: 2\r\n\r\n{{}}", "b".repeat(80));
    assert!(matches!(
        decode_all(&mut codec, long.as_bytes()),
        Err(CodecError::HeaderTooLarge { .. })
    ));
}

#[test]
fn garbage_is_a_typed_error() {
    type Case = (&'static [u8], fn(&CodecError) -> bool);
    let cases: [Case; 5] = [
        (b"hello world\r\n\r\n", |e| {
            matches!(e, CodecError::MalformedHeader)
        }),
        (b"Content-Type: application/json\r\n\r\n", |e| {
            matches!(e, CodecError::MissingContentLength)
        }),
        (b"Content-Length: -1\r\n\r\n", |e| {
            matches!(e, CodecError::InvalidContentLength)
        }),
        (b"Content-Length: 1e3\r\n\r\n", |e| {
            matches!(e, CodecError::InvalidContentLength)
        }),
        (
            b"Content-Length: 2\r\nContent-Type: text/html\r\n\r\n{}",
            |e| matches!(e, CodecError::UnsupportedContentType),
        ),
    ];
    for (input, check) in cases {
        let err = decode_all(&mut ContentLengthCodec::new(64), input).unwrap_err();
        assert!(check(&err), "{:?}: {err:?}", String::from_utf8_lossy(input));
    }
}

#[test]
fn resynchronizes_after_stray_prints() {
    let mut input = b"a stray print\n".to_vec();
    input.extend(frame(b"{\"a\":1}"));
    input.extend(b"no newline here, then");
    input.extend(frame(b"[]"));
    input.extend(b"two\nlines\n\n");
    input.extend(frame(b"{}"));
    let mut codec = ContentLengthCodec::new(64).resynchronizing(1024);
    let frames = decode_all(&mut codec, &input).unwrap();
    assert_eq!(
        frames,
        vec![
            Bytes::from_static(b"{\"a\":1}"),
            Bytes::from_static(b"[]"),
            Bytes::from_static(b"{}")
        ]
    );
    assert_eq!(codec.take_skipped(), 3);
    // Without resync the same input is an error.
    assert!(decode_all(&mut ContentLengthCodec::new(64), &input).is_err());
}

#[test]
fn resync_is_bounded() {
    let garbage = "garbage line\n".repeat(100);
    let mut codec = ContentLengthCodec::new(64)
        .resynchronizing(512)
        .with_max_header_bytes(128);
    let err = decode_all(&mut codec, garbage.as_bytes()).unwrap_err();
    assert!(
        matches!(err, CodecError::TooMuchGarbage { limit: 512 }),
        "{err:?}"
    );
    // An endless line stays fatal, and an oversize length too.
    let mut codec = ContentLengthCodec::new(64)
        .resynchronizing(1 << 20)
        .with_max_header_bytes(128);
    assert!(matches!(
        decode_all(&mut codec, &[b'x'; 200]),
        Err(CodecError::HeaderTooLarge { .. })
    ));
    let mut codec = ContentLengthCodec::new(64).resynchronizing(1 << 20);
    assert!(matches!(
        decode_all(&mut codec, b"Content-Length: 65\r\n\r\n"),
        Err(CodecError::FrameTooLarge { .. })
    ));
}

#[test]
fn partial_body_waits() {
    let mut codec = ContentLengthCodec::new(64);
    let mut buf = BytesMut::from(&b"Content-Length: 4\r\n\r\n{}"[..]);
    assert!(codec.decode(&mut buf).unwrap().is_none());
    buf.put_slice(b"[]");
    assert_eq!(&codec.decode(&mut buf).unwrap().unwrap()[..], b"{}[]");
}

proptest! {
    #[test]
    fn roundtrip_under_any_split(bodies in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 1..8),
                                 splits in proptest::collection::vec(1usize..50, 1..40)) {
        let mut wire = BytesMut::new();
        for b in &bodies { encode_into(b, &mut wire); }
        let mut codec = ContentLengthCodec::new(256);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut rest = &wire[..];
        let mut i = 0;
        while !rest.is_empty() {
            let n = splits[i % splits.len()].min(rest.len());
            buf.put_slice(&rest[..n]);
            rest = &rest[n..];
            i += 1;
            while let Some(f) = codec.decode(&mut buf).unwrap() { out.push(f.to_vec()); }
        }
        prop_assert_eq!(out, bodies);
    }

    #[test]
    fn how_bytes_arrive_never_changes_what_is_decoded(
        parts in proptest::collection::vec(prop_oneof![
            Just(b"Content-Length: 3\r\n\r\n".to_vec()),
            Just(b"\r\n".to_vec()),
            Just(b"X-A: b\n".to_vec()),
            // Padding headers of every length, so sections end right at the limit.
            "[a]{0,40}".prop_map(|p| format!("X-P: {p}\r\n").into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..40),
        ], 0..30)
    ) {
        let input: Vec<u8> = parts.concat();
        let mut whole = Vec::new();
        let mut codec = ContentLengthCodec::new(64).with_max_header_bytes(48);
        let mut buf = BytesMut::from(&input[..]);
        while let Ok(Some(f)) = codec.decode(&mut buf) { whole.push(f); }
        let mut split = Vec::new();
        let mut codec = ContentLengthCodec::new(64).with_max_header_bytes(48);
        let mut buf = BytesMut::new();
        'feed: for &b in &input {
            buf.put_u8(b);
            loop {
                match codec.decode(&mut buf) {
                    Ok(Some(f)) => split.push(f),
                    Ok(None) => break,
                    Err(_) => break 'feed,
                }
            }
        }
        prop_assert_eq!(split, whole);
    }

    #[test]
    fn garbage_never_panics_nor_overallocates(input in proptest::collection::vec(any::<u8>(), 0..600), resync in any::<bool>()) {
        let mut codec = ContentLengthCodec::new(128).with_max_header_bytes(256);
        if resync {
            codec = codec.resynchronizing(300);
        }
        let mut buf = BytesMut::from(&input[..]);
        while let Ok(Some(f)) = codec.decode(&mut buf) {
            prop_assert!(f.len() <= 128);
        }
        prop_assert!(buf.capacity() <= 1024);
    }
}
