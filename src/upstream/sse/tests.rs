//! Unit tests of `sse`.

use super::*;

#[test]
fn events_are_read_as_they_arrive() {
    let mut events = EventBuffer::default();
    events.push(&Bytes::from_static(b"event: message\ndata: {\"a\":"));
    assert!(events.take_data().is_empty());
    events.push(&Bytes::from_static(
        b"1}\n\n: comment\n\nid: 7\r\ndata:[1,\r\ndata: 2]\r\n\r\ndata: x",
    ));
    assert_eq!(
        events.take_data(),
        vec![b"{\"a\":1}".to_vec(), b"[1,\n2]".to_vec()]
    );
    assert!(events.take_data().is_empty());
    events.push(&Bytes::from_static(b"\n\n"));
    assert_eq!(events.take_data(), vec![b"x".to_vec()]);
    assert_eq!(events.resume.last_id.as_deref(), Some("7"));
}

#[test]
fn a_stream_says_where_to_resume() {
    let mut events = EventBuffer::default();
    // A priming event: an id and a retry, no data.
    events.push(&Bytes::from_static(
        b"id: s1-0\nretry: 250\ndata\n\nid: s1-1\nretry: soon\n\n",
    ));
    assert_eq!(events.take_data(), vec![Vec::<u8>::new()]);
    assert_eq!(
        events.resume,
        Resume {
            last_id: Some("s1-1".into()),
            retry: Some(Duration::from_millis(250)),
        }
    );
    // An id with a NUL is ignored, as the SSE rules say.
    events.push(&Bytes::from_static(b"id: a\0b\ndata: y\n\n"));
    events.take_data();
    assert_eq!(events.resume.last_id.as_deref(), Some("s1-1"));
}
