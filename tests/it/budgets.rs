//! Output budgets: a result over its tenant's budget is cut to fit, marked,
//! and kept whole in pages the tenant (and nobody else) reads as resources.
//! Both faces, in front of the demo MCP v1.0 upstream (a structured value)
//! and server-everything (content blocks), with the official Python SDK's
//! client, which checks a cut value against the listed outputSchema.

use serde_json::{Value, json};

use crate::support::*;

const ECHO: &str = "mcp://gw/s/s/tools/echo:v1";
const MARK: &str = "dev.mcp-gateway/truncated";

fn config(output: Value) -> String {
    json!({
        "gateway": {"id": "gw"},
        "upstreams": {"s": stdio_upstream("s", &[]), "ev": everything_stdio()},
        "tenants": {
            "a": {
                "api_keys": ["ka"],
                "upstreams": ["s", "ev"],
                "tools": {
                    "output": output,
                    "overrides": {"mcp://gw/s/s/tools/add:v1": {"output": {"max_bytes": 100000}}},
                },
            },
            "b": tenant("kb", &["s", "ev"]),
        },
    })
    .to_string()
}

/// Lines of text, `n` bytes in all.
fn long_text(n: usize) -> String {
    let mut text = String::new();
    let mut i = 0;
    while text.len() < n {
        text.push_str(&format!("line {i:05} of the long answer\n"));
        i += 1;
    }
    text.truncate(n);
    text
}

/// Every page a mark names, read by `key` over plain HTTP (no session):
/// their texts, in order, and their media type.
async fn pages(gw: &Gateway, key: &str, mark: &Value) -> (String, String) {
    let (uri, n) = (
        mark["uri"].as_str().unwrap(),
        mark["pages"].as_u64().unwrap(),
    );
    let mut whole = String::new();
    let mut mime = String::new();
    for k in 1..=n {
        let r = gw
            .rpc(key, "resources/read", json!({"uri": format!("{uri}/{k}")}))
            .await;
        let content = &r["result"]["contents"][0];
        assert_eq!(content["uri"], format!("{uri}/{k}"), "{r}");
        whole.push_str(content["text"].as_str().unwrap());
        mime = content["mimeType"].as_str().unwrap().to_owned();
    }
    (whole, mime)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_over_budget_are_cut_and_kept_whole_in_the_tenants_pages() {
    let gw = Gateway::start(&config(json!({"max_bytes": 400, "page_bytes": 1024}))).await;
    gw.wait_ready(&["s", "ev"]).await;
    let long = long_text(3000);

    // MCP v1.0: the value cut (its string shortened), the mark in `_meta`.
    let r = gw.execute("ka", ECHO, json!({"text": long})).await;
    let kept = r["result"]["output"]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"));
    assert!(long.starts_with(kept) && kept.len() < long.len(), "{r}");
    let mark = &r["result"]["_meta"][MARK];
    assert!(mark["keptBytes"].as_u64().unwrap() <= 400, "{mark}");
    assert_eq!(mark["keptBytes"], json!({"text": kept}).to_string().len());
    assert!(mark["expiresAt"].as_str().unwrap().ends_with('Z'), "{mark}");
    let uri = mark["uri"].as_str().unwrap();
    assert!(uri.starts_with("mcp://gw/~spill/") && uri.len() == "mcp://gw/~spill/".len() + 32);
    let (whole, mime) = pages(&gw, "ka", mark).await;
    assert_eq!(mime, "application/json");
    assert_eq!(mark["totalBytes"], whole.len());
    assert_eq!(mark["pages"], whole.len().div_ceil(1024));
    let whole: Value = serde_json::from_str(&whole).unwrap();
    assert_eq!(whole["structuredContent"]["text"], long);
    assert_eq!(
        whole["content"][0]["text"],
        json!({"text": long}).to_string()
    );

    // The pages are the tenant's: unknown to another, and past the last.
    let first = json!({"uri": format!("{uri}/1")});
    let other = gw.rpc("kb", "resources/read", first).await;
    assert_eq!(other["error"]["code"], -32002, "{other}");
    let past = json!({"uri": format!("{uri}/{}", mark["pages"].as_u64().unwrap() + 1)});
    assert_eq!(
        gw.rpc("ka", "resources/read", past).await["error"]["code"],
        -32002
    );

    // Within budget, a result passes as it came; an override's budget wins.
    let small = gw.execute("ka", ECHO, json!({"text": "hi"})).await;
    assert_eq!(small["result"], json!({"output": {"text": "hi"}}));
    let b = gw.execute("kb", ECHO, json!({"text": long})).await;
    assert_eq!(b["result"]["output"]["text"], long, "b has no budget");

    let metrics = gw.metrics().await;
    let truncated = r#"mcp_gateway_results_truncated_total{tenant="a"}"#;
    assert_eq!(metric(&metrics, truncated), Some(1.0));
    assert!(metric(&metrics, r#"mcp_gateway_spill_bytes{tenant="a"}"#).unwrap() > 3000.0);
    gw.stop().await;
}

/// The official face, with the Python SDK's client: content blocks
/// (server-everything's echo has no outputSchema) cut at a line break, a
/// note, a link per page, pages of text; and a cut value the SDK checks
/// against the listed schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_face_cuts_blocks_and_values_as_its_clients_expect() {
    let gw = Gateway::start(&config(json!({"max_bytes": 400, "page_bytes": 1024}))).await;
    gw.wait_ready(&["s", "ev"]).await;
    let long = long_text(3000);
    // Content blocks (server-everything's echo has no outputSchema): the
    // text cut at a line break, a note, a link per page; pages are text.
    let listed = gw.rpc("ka", "tools/list", json!({})).await;
    let echo = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["_meta"]["dev.mcp-gateway/mcpId"] == ECHO)
        .unwrap_or_else(|| panic!("{listed}"))
        .clone();
    let steps = json!([
        {"op": "call", "name": "ev__echo", "arguments": {"message": long}},
        {"op": "call", "name": echo["name"], "arguments": {"text": long}},
    ]);
    let (_, answers) = sdk_client(&gw, "ka", "legacy", steps).await;
    let schema = &echo["outputSchema"];
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["anyOf"][1]["required"], json!([MARK]), "{schema}");
    let blocks = &answers[0];
    let content = blocks["content"]
        .as_array()
        .unwrap_or_else(|| panic!("{blocks}"));
    let text = content[0]["text"].as_str().unwrap();
    assert!(format!("Echo: {long}").starts_with(text), "{text}");
    assert!(text.ends_with('\n'), "cut at a line break: {text:?}");
    assert!(
        content[1]["text"]
            .as_str()
            .unwrap()
            .starts_with("[truncated]")
    );
    let mark = &blocks["_meta"][MARK];
    let n = mark["pages"].as_u64().unwrap() as usize;
    assert_eq!(content.len(), 2 + n, "{blocks}");
    assert_eq!(content[2]["type"], "resource_link");
    assert_eq!(content[2]["name"], format!("page 1 of {n}"));
    assert_eq!(
        content[2]["uri"],
        format!("{}/1", mark["uri"].as_str().unwrap())
    );
    let kept_json = json!([{"type": "text", "text": text}]).to_string();
    assert_eq!(mark["keptBytes"], kept_json.len());
    let (whole, mime) = pages(&gw, "ka", mark).await;
    assert_eq!(
        (whole, mime.as_str()),
        (format!("Echo: {long}"), "text/plain")
    );
    // The SDK took the cut value as the listed schema allows.
    let value = &answers[1];
    assert!(value.get("error").is_none(), "{value}");
    let cut = value["structuredContent"]["text"].as_str().unwrap();
    assert!(long.starts_with(cut));
    assert_eq!(
        value["content"][0]["text"],
        json!({"text": cut}).to_string()
    );
    assert!(
        value["content"][1]["text"]
            .as_str()
            .unwrap()
            .starts_with("[truncated]")
    );

    gw.stop().await;
}

/// A value that cannot be cut and still satisfy its schema is the stub; a
/// result over the whole spill quota is cut with nothing kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stub_stands_for_a_value_that_cannot_be_cut_and_the_quota_bounds_pages() {
    let gw = Gateway::start(&config(json!({"max_tokens": 2, "spill_quota_bytes": 2000}))).await;
    gw.wait_ready(&["s"]).await;
    // 8 bytes: not even {"text":""} fits; the stub instead.
    let r = gw
        .execute("ka", ECHO, json!({"text": long_text(100)}))
        .await;
    let output = &r["result"]["output"];
    assert_eq!(output.as_object().unwrap().len(), 1, "{r}");
    assert_eq!(output[MARK], r["result"]["_meta"][MARK]);
    assert_eq!(output[MARK]["keptBytes"], 0);
    assert_eq!(output[MARK]["pages"], 1);
    // Over the quota of 2000 bytes: nothing kept, no pages to read.
    let r = gw
        .execute("ka", ECHO, json!({"text": long_text(3000)}))
        .await;
    let mark = &r["result"]["_meta"][MARK];
    assert_eq!(mark["pages"], 0, "{r}");
    assert!(mark.get("uri").is_none());
    gw.stop().await;
}

#[test]
fn check_refuses_zero_budgets_and_small_pages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    let yaml = Doc::parse(&config(
        json!({"max_bytes": 0, "page_bytes": 512, "spill_ttl_ms": 0}),
    ))
    .set(
        "tenants.a.tools.overrides.mcp://gw/s/s/tools/add:v1.output",
        json!({"max_tokens": 0}),
    )
    .set("gateway.limits", json!({"max_spill_bytes": 0}))
    .yaml();
    std::fs::write(&path, yaml).unwrap();
    let said = check_refused(&path);
    for path in [
        "tenants.a.tools.output.max_bytes",
        "tenants.a.tools.output.page_bytes",
        "tenants.a.tools.output.spill_ttl_ms",
        "tenants.a.tools.overrides.mcp://gw/s/s/tools/add:v1.output.max_tokens",
        "gateway.limits.max_spill_bytes",
    ] {
        assert!(said.contains(path), "{path} not in: {said}");
    }
}

/// With a store, pages are the store's: cut on one replica, read on
/// another; and the cut call's audit line says it was cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_store_any_replica_reads_the_pages() {
    let redis = Redis::start();
    let yaml = json!({
        "gateway": {"id": "gw", "store": {"url": redis.url()}},
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {
            "a": {
                "api_keys": ["ka"],
                "upstreams": ["s"],
                "tools": {"output": {"max_bytes": 300, "page_bytes": 1024}},
            },
            "b": tenant("kb", &["s"]),
        },
    })
    .to_string();
    let (one, two) = (Gateway::start(&yaml).await, Gateway::start(&yaml).await);
    for gw in [&one, &two] {
        gw.wait_ready(&["s"]).await;
        until(|| async { metric(&gw.metrics().await, "mcp_gateway_store_up") == Some(1.0) }).await;
    }
    let long = long_text(5000);
    let r = one.execute("ka", ECHO, json!({"text": long})).await;
    let mark = &r["result"]["_meta"][MARK];
    let (whole, _) = pages(&two, "ka", mark).await;
    let whole: Value = serde_json::from_str(&whole).unwrap();
    assert_eq!(whole["structuredContent"]["text"], long);
    let first = json!({"uri": format!("{}/1", mark["uri"].as_str().unwrap())});
    assert_eq!(
        two.rpc("kb", "resources/read", first).await["error"]["code"],
        -32002
    );
    let held = metric(
        &one.metrics().await,
        r#"mcp_gateway_spill_bytes{tenant="a"}"#,
    );
    assert_eq!(held, Some(whole.to_string().len() as f64));
    for gw in [one, two] {
        gw.stop().await;
    }
}

#[test]
fn a_cut_calls_audit_line_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gw.yaml");
    std::fs::write(&path, config(json!({"max_bytes": 300}))).unwrap();
    let mut p = Process::spawn(&["serve", "--config", path.to_str().unwrap()]);
    let agent = p.addr("agent listener bound");
    p.wait_log("ready", |v| {
        v["message"] == "upstream ready" && v["upstream"] == "s"
    });
    let gw = Gateway::at(&agent);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        gw.execute("ka", ECHO, json!({"text": "short"})).await;
        gw.execute("ka", ECHO, json!({"text": long_text(2000)}))
            .await;
    });
    p.wait_log("the cut call's line", |v| {
        v["message"] == "tool call" && v["truncated"] == true
    });
    let calls: Vec<&Value> = p
        .seen()
        .iter()
        .filter(|v| v["message"] == "tool call")
        .collect();
    assert_eq!(calls.len(), 2);
    assert!(calls[0].get("truncated").is_none(), "{}", calls[0]);
    assert!(p.terminate().success());
}

/// server-everything's shapes, through the official Python SDK's client:
/// links kept among the blocks are the gateway's (the pages' links too), an
/// image that does not fit ends what is kept, and a structured value is cut
/// while it still satisfies its schema, else the stub stands in for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everythings_links_images_and_structured_content_are_cut_as_the_contract_says() {
    let structured = "mcp://gw/ev/tool/get-structured-content";
    let yaml = json!({
        "gateway": {"id": "gw"},
        "upstreams": {"ev": everything_stdio()},
        "tenants": {
            "a": {
                "api_keys": ["ka"],
                "upstreams": ["ev"],
                "tools": {
                    "output": {"max_bytes": 300},
                    "overrides": {structured: {"output": {"max_bytes": 50}}},
                },
            },
            "c": {
                "api_keys": ["kc"],
                "upstreams": ["ev"],
                "tools": {"overrides": {structured: {"output": {"max_bytes": 40}}}},
            },
        },
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["ev"]).await;
    let steps = json!([
        {"op": "call", "name": "ev__get-resource-links", "arguments": {"count": 10}},
        {"op": "call", "name": "ev__get-tiny-image", "arguments": {}},
        {"op": "call", "name": "ev__get-structured-content", "arguments": {"location": "Chicago"}},
    ]);
    let (_, answers) = sdk_client(&gw, "ka", "legacy", steps).await;

    let links = answers[0]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", answers[0]));
    let mark = &answers[0]["_meta"][MARK];
    let n = mark["pages"].as_u64().unwrap() as usize;
    let kept = &links[..links.len() - 1 - n];
    assert!(kept.len() >= 2 && kept.len() < 11, "{links:?}");
    for link in kept.iter().filter(|b| b["type"] == "resource_link") {
        let uri = link["uri"].as_str().unwrap();
        assert!(
            uri.starts_with("mcp://gw/ev/"),
            "the upstream's link is the gateway's: {uri}"
        );
    }
    for page in &links[links.len() - n..] {
        assert!(
            page["uri"]
                .as_str()
                .unwrap()
                .starts_with("mcp://gw/~spill/"),
            "{page}"
        );
    }
    let (whole, mime) = pages(&gw, "ka", mark).await;
    assert_eq!(mime, "application/json");
    let whole: Value = serde_json::from_str(&whole).unwrap();
    assert_eq!(
        whole["content"].as_array().unwrap().len(),
        11,
        "all ten links and the text"
    );

    let image = answers[1]["content"].as_array().unwrap();
    assert_eq!(image[0]["text"], "Here's the image you requested:");
    assert!(
        image[1]["text"]
            .as_str()
            .unwrap()
            .starts_with("[truncated]"),
        "{image:?}"
    );
    assert!(image.iter().all(|b| b["type"] != "image"));
    let (whole, _) = pages(&gw, "ka", &answers[1]["_meta"][MARK]).await;
    let whole: Value = serde_json::from_str(&whole).unwrap();
    assert_eq!(whole["content"][1]["type"], "image");

    let weather = &answers[2];
    assert!(
        weather.get("error").is_none() && weather["isError"] != true,
        "{weather}"
    );
    assert_eq!(weather["structuredContent"]["temperature"], 36);
    let conditions = weather["structuredContent"]["conditions"].as_str().unwrap();
    assert!("Light rain / drizzle".starts_with(conditions) && conditions.len() < 20);

    // For c, 40 bytes: not even the value's members fit; the stub, which
    // the SDK accepts as the listed schema allows.
    let steps = json!([{"op": "call", "name": "ev__get-structured-content", "arguments": {"location": "Chicago"}}]);
    let (_, answers) = sdk_client(&gw, "kc", "legacy", steps).await;
    let stub = &answers[0]["structuredContent"];
    assert_eq!(stub.as_object().map(|o| o.len()), Some(1), "{}", answers[0]);
    assert_eq!(stub[MARK]["keptBytes"], 0);
    assert_eq!(stub[MARK]["pages"], 1);
    gw.stop().await;
}

/// A 5 MB result, cut within its budget, read back byte for byte from its
/// pages; pages are gone after their TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_five_megabyte_result_reads_back_whole_and_its_pages_expire() {
    let yaml = json!({
        "gateway": {"id": "gw", "limits": {"max_body_bytes": 8388608}},
        "upstreams": {"s": stdio_upstream("s", &[])},
        "tenants": {
            "a": {
                "api_keys": ["ka"],
                "upstreams": ["s"],
                "tools": {
                    "output": {"max_bytes": 65536, "page_bytes": 1048576, "spill_ttl_ms": 3000},
                },
            },
        },
    })
    .to_string();
    let gw = Gateway::start(&yaml).await;
    gw.wait_ready(&["s"]).await;
    let long = long_text(5 << 20);
    let r = gw.execute("ka", ECHO, json!({"text": long})).await;
    let mark = r["result"]["_meta"][MARK].clone();
    let kept = r["result"]["output"]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{mark}"));
    assert!(json!({"text": kept}).to_string().len() <= 65536);
    assert!(long.starts_with(kept));
    let (whole, _) = pages(&gw, "ka", &mark).await;
    assert_eq!(whole.len(), mark["totalBytes"].as_u64().unwrap() as usize);
    let whole: Value = serde_json::from_str(&whole).unwrap();
    assert!(
        whole["structuredContent"]["text"] == long.as_str(),
        "byte for byte"
    );
    // After the TTL: unknown.
    let first = json!({"uri": format!("{}/1", mark["uri"].as_str().unwrap())});
    until(|| async {
        gw.rpc("ka", "resources/read", first.clone()).await["error"]["code"] == -32002
    })
    .await;
    gw.stop().await;
}
