//! Unit tests of `h1`.

use super::*;

fn head(text: &str) -> Parsed {
    parse(text.as_bytes(), 1000)
}

#[test]
fn takes_a_keep_alive_post_to_mcp() {
    let text = "POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\nX-Request-Id: abc\r\nContent-Length: 2\r\n\r\n{}";
    let Parsed::Head(h) = head(text) else {
        panic!("not taken")
    };
    assert_eq!(h.len, text.len() - 2);
    assert_eq!(h.body_len, 2);
    assert!(!h.close);
    assert_eq!(&text[h.authorization.unwrap()], "Bearer k");
    assert_eq!(&text[h.content_type.unwrap()], "application/json");
    assert_eq!(&text[h.request_id.unwrap()], "abc");
    let Parsed::Head(h) =
        head("POST /mcp HTTP/1.1\r\nHost: x\r\nconnection: Close\r\ncontent-length: 0\r\n\r\n")
    else {
        panic!("not taken")
    };
    assert!(h.close);
}

#[test]
fn a_head_is_partial_until_its_blank_line() {
    for text in [
        "",
        "POST /mcp",
        "POST /mcp HTTP/1.1\r\nContent-Length: 2\r\n",
    ] {
        assert!(matches!(head(text), Parsed::Partial), "{text:?}");
    }
}

#[test]
fn leaves_everything_else_to_hyper() {
    for text in [
        "GET /mcp HTTP/1.1\r\n\r\n",
        "POST /other HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        "POST /mcp?x=1 HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        "POST /mcp HTTP/1.0\r\nContent-Length: 0\r\n\r\n",
        "POST /mcp HTTP/1.1\r\n\r\n",
        "POST /mcp HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST /mcp HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
        "POST /mcp HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n",
        "POST /mcp HTTP/1.1\r\nContent-Length: +2\r\n\r\n",
        "POST /mcp HTTP/1.1\r\nContent-Length: 2, 2\r\n\r\n",
        "POST /mcp HTTP/1.1\r\nContent-Length: 0x2\r\n\r\n",
        "POST /mcp HTTP/1.1\r\nContent-Length: 1001\r\n\r\n",
        "POST /mcp HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
        "POST /mcp HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n",
        "POST /mcp HTTP/1.1\r\nContent-Length: 2\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n",
        "POST /mcp HTTP/1.1\r\nContent-Length: 2\r\nConnection: keep-alive, te\r\n\r\n",
        "POST /mcp HTTP/1.1\r\nBad Header\r\n\r\n",
        // No Host, or two: hyper's path answers 400.
        "POST /mcp HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        "POST /mcp HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 0\r\n\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    ] {
        assert!(matches!(head(text), Parsed::Other), "{text:?}");
    }
}

#[test]
fn a_known_name_is_told_in_any_case_and_by_no_other_token() {
    let tchars = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    for known in [
        &b"content-length"[..],
        b"mcp-",
        b"x-request-id",
        b"host",
        b"a",
    ] {
        assert!(lower_is(known, known));
        assert!(lower_is(&known.to_ascii_uppercase(), known));
        assert!(!lower_is(&known[1..], known));
        for at in 0..known.len() {
            for &c in tchars {
                let mut name = known.to_vec();
                name[at] = c;
                assert_eq!(lower_is(&name, known), c.eq_ignore_ascii_case(&known[at]));
            }
        }
    }
}

#[test]
fn every_header_this_path_reads_or_refuses_is_told_in_any_case() {
    let with = |header: &str| {
        head(&format!(
            "POST /mcp HTTP/1.1\r\nHost: x\r\n{header}\r\nContent-Length: 0\r\n\r\n"
        ))
    };
    for name in [
        "Origin",
        "EXPECT",
        "upgrade",
        "Traceparent",
        "TRACESTATE",
        "baggage",
        "Mcp-Param-Region",
        "mcp-other",
        "MCP-Sessions-Id",
    ] {
        assert!(
            matches!(with(&format!("{name}: v")), Parsed::Other),
            "{name}"
        );
    }
    for (name, read) in [
        ("MCP-PROTOCOL-VERSION", 0),
        ("mcp-method", 1),
        ("Mcp-Name", 2),
        ("mcp-SESSION-id", 3),
    ] {
        let Parsed::Head(h) = with(&format!("{name}: v")) else {
            panic!("{name} not taken")
        };
        let slots = [h.mcp_version, h.mcp_method, h.mcp_name, h.mcp_session];
        for (i, slot) in slots.iter().enumerate() {
            assert_eq!(slot.is_some(), i == read, "{name}");
        }
        let twice = with(&format!("{name}: v\r\n{name}: w"));
        assert!(matches!(twice, Parsed::Other), "{name} twice");
    }
    // Names of a known length that are none of the known ones are read by no one.
    for name in [
        "Hosts",
        "Accept",
        "X-Request-Ix",
        "Content-Lengtx",
        "User-Agent",
    ] {
        assert!(
            matches!(with(&format!("{name}: v")), Parsed::Head(_)),
            "{name}"
        );
    }
    let Parsed::Head(h) = with("AUTHORIZATION: Bearer k\r\nx-REQUEST-id: r") else {
        panic!("not taken")
    };
    assert!(h.authorization.is_some() && h.request_id.is_some());
}

#[tokio::test]
async fn a_large_request_leaves_no_large_buffer_behind() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (server, _) = listener.accept().await.unwrap();
    let mut conn = Conn::new(server, CancellationToken::new());
    let body = vec![b' '; 1 << 20];
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let writer = tokio::spawn(async move {
        client.write_all(head.as_bytes()).await.unwrap();
        client.write_all(&body).await.unwrap();
        client
    });
    let Next::Request(head) = conn.read_head(Duration::from_secs(5), 2 << 20).await else {
        panic!("not taken");
    };
    conn.arm(Duration::from_secs(5));
    while conn.buffered().len() < head.len + head.body_len {
        assert!(matches!(conn.read_more(false).await, Filled::More));
    }
    assert!(conn.capacity() >= 1 << 20);
    conn.consume(head.len + head.body_len);
    assert!(conn.capacity() <= KEEP_BUFFER, "{}", conn.capacity());
    drop(writer.await.unwrap());
}

#[test]
fn too_many_headers_go_to_hyper() {
    let mut text = String::from("POST /mcp HTTP/1.1\r\nContent-Length: 0\r\n");
    for i in 0..MAX_HEADERS {
        text.push_str(&format!("X-{i}: v\r\n"));
    }
    text.push_str("\r\n");
    assert!(matches!(head(&text), Parsed::Other));
}

proptest::proptest! {
    /// Whatever arrives, parsing never panics, and a head it takes points
    /// inside what was read.
    #[test]
    fn any_bytes_are_parsed_safely(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
        if let Parsed::Head(h) = parse(&bytes, 100) {
            proptest::prop_assert!(h.len <= bytes.len() && h.body_len <= 100);
            for r in [h.authorization, h.content_type, h.request_id].into_iter().flatten() {
                proptest::prop_assert!(r.end <= h.len);
            }
        }
    }

    /// Every head read a piece at a time is partial until its last byte.
    #[test]
    fn a_head_is_taken_only_when_whole(
        key in "[A-Za-z0-9]{1,20}",
        id in "[!-~]{1,10}",
        length in 0usize..1000,
        close in proptest::prelude::any::<bool>(),
    ) {
        let text = format!(
            "POST /mcp HTTP/1.1\r\nhost: g\r\nauthorization: Bearer {key}\r\nx-request-id: {id}\r\ncontent-type: application/json\r\n{}content-length: {length}\r\n\r\n",
            if close { "connection: close\r\n" } else { "" }
        );
        for end in 0..text.len() {
            proptest::prop_assert!(matches!(parse(&text.as_bytes()[..end], 1000), Parsed::Partial));
        }
        let Parsed::Head(h) = parse(text.as_bytes(), 1000) else {
            return Err(proptest::test_runner::TestCaseError::fail("not taken"));
        };
        proptest::prop_assert_eq!((h.len, h.body_len, h.close), (text.len(), length, close));
        let bearer = format!("Bearer {key}");
        proptest::prop_assert_eq!(&text[h.authorization.unwrap()], bearer.as_str());
        proptest::prop_assert_eq!(&text[h.request_id.unwrap()], id.as_str());
    }
}

#[test]
fn dates_are_http_dates() {
    let mut out = Vec::new();
    http_date(&mut out);
    let text = String::from_utf8(out).unwrap();
    assert!(httpdate::parse_http_date(&text).is_ok(), "{text}");
}
