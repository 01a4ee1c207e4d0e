//! What replicas keep in a real redis-server cannot be bent by an outage or
//! a client: a tenant's `max_concurrency` held by two replicas stays what it
//! is after a store that hangs while borrowed calls end, after a store that
//! loses its data while they run or is away for a moment, and from the first
//! call of replicas that start together; and what a client makes a replica
//! publish is only what another replica can deliver.

use std::time::Duration;

use serde_json::json;

use crate::support::*;

const SECRET: &str = "0123456789abcdef0123456789abcdef";

/// Two gateways sharing `redis`, tenant a (key ka) at `max_concurrency: 4`.
async fn two(redis: &Redis) -> Vec<Gateway> {
    let yaml = json!({
        "gateway": {
            "id": "gw",
            "session_secret": SECRET,
            "store": {"url": redis.url(), "when_down": "local", "timeout_ms": 100},
        },
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {"a": {"api_keys": ["ka"], "upstreams": ["s"], "max_concurrency": 4}},
    })
    .to_string();
    let mut gws = Vec::new();
    for _ in 0..2 {
        gws.push(Gateway::start(&yaml).await);
    }
    for gw in &gws {
        gw.wait_ready(&["s"]).await;
        until(|| async { metric(&gw.metrics().await, "mcp_gateway_store_replicas") == Some(2.0) })
            .await;
    }
    gws
}

/// `n` calls of `ms` at once, alternating replicas: their HTTP statuses.
async fn at_once(gws: &[Gateway], n: usize, ms: u64) -> Vec<u16> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "mcp/executeTool",
        "params": {"id": "mcp://gw/s/s/tools/sleep", "arguments": {"ms": ms}}})
    .to_string();
    let calls = (0..n).map(|i| {
        let (gw, body) = (&gws[i % gws.len()], body.clone());
        async move {
            gw.post_raw(Some("ka"), Some("application/json"), body)
                .await
                .0
        }
    });
    within(futures_util::future::join_all(calls)).await
}

/// Whether, within a few seconds, `n` calls at once all run.
async fn all_run(gws: &[Gateway], n: usize) -> bool {
    for _ in 0..50 {
        if at_once(gws, n, 300).await.iter().all(|s| *s == 200) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

async fn store_up(gws: &[Gateway], up: f64) {
    for gw in gws {
        until(|| async { metric(&gw.metrics().await, "mcp_gateway_store_up") == Some(up) }).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_given_back_while_the_store_hangs_come_back_when_it_answers() {
    let mut redis = Redis::start();
    let gws = two(&redis).await;
    assert!(all_run(&gws, 4).await, "four run at first");
    // Four calls hold every slot, borrowed ones among them; the store hangs
    // before they end, so their give-backs cannot reach it.
    let running = {
        let gws = &gws;
        async move { at_once(gws, 4, 1500).await }
    };
    let hang = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        redis.pause();
        store_up(&gws, 0.0).await;
    };
    let (statuses, ()) = tokio::join!(running, hang);
    assert_eq!(statuses, vec![200; 4]);
    redis.resume();
    store_up(&gws, 1.0).await;
    // What the store counted of the ended calls is set right: four run again.
    assert!(all_run(&gws, 4).await, "the tenant's limit shrank for good");
    redis.kill();
    for gw in gws {
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_loses_its_data_grows_no_limit() {
    let redis = Redis::start();
    let gws = two(&redis).await;
    // Settled (each replica has counted the other for as long as a replica
    // counts as alive, some 5 to 6 s, later under load): both take their
    // own shares too, so four run at once.
    assert!(all_run(&gws, 4).await, "four run once settled");
    let running = {
        let gws = &gws;
        async move { at_once(gws, 4, 1500).await }
    };
    let flush = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        redis.flush_all();
    };
    let (statuses, ()) = tokio::join!(running, flush);
    assert_eq!(statuses, vec![200; 4]);
    // Once the replicas have said again what they hold (every second),
    // eight at once: four run, never more.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for _ in 0..3 {
        let statuses = at_once(&gws, 8, 800).await;
        let ran = statuses.iter().filter(|s| **s == 200).count();
        assert_eq!(ran, 4, "{statuses:?}");
    }
    for gw in gws {
        gw.stop().await;
    }
}

/// A store that misses a beat (a slow answer, a pause of a moment) leaves
/// the replicas' count of each other whole: once it answers again, each
/// takes its own share as before, and the tenant's whole limit runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_away_for_a_moment_leaves_the_limit_whole() {
    let mut redis = Redis::start();
    let gws = two(&redis).await;
    assert!(all_run(&gws, 4).await, "four run once settled");
    redis.pause();
    store_up(&gws, 0.0).await;
    redis.resume();
    store_up(&gws, 1.0).await;
    let statuses = at_once(&gws, 4, 800).await;
    assert_eq!(statuses, vec![200; 4]);
    redis.kill();
    for gw in gws {
        gw.stop().await;
    }
}

/// Replicas that start together take no share of a limit as their own
/// before they have seen each other: three of them admit `max_concurrency`,
/// not three times it, from their first call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_that_start_together_admit_the_limit_once() {
    let redis = Redis::start();
    let yaml = json!({
        "gateway": {
            "id": "gw",
            "session_secret": SECRET,
            "store": {"url": redis.url(), "when_down": "local", "timeout_ms": 2000},
        },
        "upstreams": {
            // Shared: one process serves the calls, so its start costs the
            // first calls nothing beside the gateways'.
            "s": StdioUpstream::new("s", &[]).with("shared", true).value(),
        },
        "tenants": {"a": {"api_keys": ["ka"], "upstreams": ["s"], "max_concurrency": 4}},
    })
    .to_string();
    let (a, b, c) = tokio::join!(
        Gateway::start(&yaml),
        Gateway::start(&yaml),
        Gateway::start(&yaml)
    );
    let gws = vec![a, b, c];
    for gw in &gws {
        gw.wait_ready(&["s"]).await;
    }
    let statuses = at_once(&gws, 12, 1500).await;
    let ran = statuses.iter().filter(|s| **s == 200).count();
    assert_eq!(ran, 4, "{statuses:?}");
    for gw in gws {
        gw.stop().await;
    }
}

/// Messages the store's change channel carries within `wait`.
fn published_within(url: &str, wait: Duration, ready: std::sync::mpsc::Sender<()>) -> usize {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_connection().unwrap();
    let mut pubsub = conn.as_pubsub();
    pubsub.subscribe("mcp-gateway:changes").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    ready.send(()).unwrap();
    let deadline = std::time::Instant::now() + wait;
    let mut heard = 0;
    while std::time::Instant::now() < deadline {
        if pubsub.get_message().is_ok() {
            heard += 1;
        }
    }
    heard
}

/// What a client makes the gateway pass to the other replicas is only what
/// can be delivered there: answers under ids no replica sent its session,
/// and cancellations naming ids no call can have, never reach the store's
/// channel, however large or many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_nobody_waits_for_are_never_published() {
    let redis = Redis::start();
    let gws = two(&redis).await;
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "t", "version": "1"}}});
    let response = session_request(&gws[0], reqwest::Method::POST, "ka", None, Some(init)).await;
    let session = response.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let (ready, listening) = std::sync::mpsc::channel();
    let url = redis.url();
    let listener =
        std::thread::spawn(move || published_within(&url, Duration::from_secs(4), ready));
    listening.recv().unwrap();
    let big = "x".repeat(256 << 10);
    let sent = Some((session.as_str(), Some("2025-11-25")));
    for n in 0..40 {
        let forged = [
            format!("mcp-gateway-{n}"),
            format!("mcp-gateway-99999999999-{n:032x}-AAAAAAAAAAAAAAAAAAAAAA"),
        ];
        for id in forged {
            let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"big": big}});
            let r = session_request(&gws[0], reqwest::Method::POST, "ka", sent, Some(answer)).await;
            assert_eq!(r.status(), 202);
        }
    }
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": big, "reason": "x"}});
    let r = session_request(&gws[0], reqwest::Method::POST, "ka", sent, Some(cancel)).await;
    assert_eq!(r.status(), 202);
    assert_eq!(listener.join().unwrap(), 0, "published to the store");
    let strays = metric(&gws[0].metrics().await, "mcp_gateway_stray_answers_total");
    assert_eq!(strays, Some(81.0));
    for gw in gws {
        gw.stop().await;
    }
}
