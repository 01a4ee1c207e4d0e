//! Unit tests of `writer`.

use super::*;

#[test]
fn lines_beyond_the_cap_are_dropped_and_counted_and_the_rest_kept_in_order() {
    let sink = Sink::new(10);
    sink.push(b"one\n");
    sink.push(b"two\n");
    sink.push(b"three\n"); // 8 + 6 > 10
    assert_eq!(sink.dropped.load(Ordering::Relaxed), 1);
    let mut out = Vec::new();
    sink.write_out(&mut out);
    assert_eq!(out, b"one\ntwo\n");
    sink.push(b"three\n");
    sink.write_out(&mut out);
    assert_eq!(out, b"one\ntwo\nthree\n", "room again once written");
    assert_eq!(sink.dropped.load(Ordering::Relaxed), 1);
}

#[test]
fn the_writer_is_woken_by_the_first_line() {
    static SINK: Sink = Sink::new(1 << 10);
    let writer = std::thread::spawn(|| {
        SINK.wait();
        let mut out = Vec::new();
        SINK.write_out(&mut out);
        out
    });
    std::thread::sleep(Duration::from_millis(20));
    SINK.push(b"line\n");
    assert_eq!(writer.join().unwrap(), b"line\n");
}
