use opentelemetry::trace::{SpanContext, TraceId};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};

use super::*;

#[test]
fn a_value_is_cut_between_characters_to_the_limit() {
    // The default limit: the process sets no other in unit tests.
    assert_eq!(bounded("short"), "short");
    let long = "é".repeat(ATTRIBUTE_VALUE_LIMIT + 10);
    let cut = bounded(&long);
    assert_eq!(cut.chars().count(), ATTRIBUTE_VALUE_LIMIT);
    assert!(long.starts_with(&cut));
}

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |k| vars.get(k).cloned()
}

#[test]
fn the_environment_wins_over_the_file_and_nothing_is_exported_without_an_endpoint() {
    let file = TracesFile {
        endpoint: Some("http://file:4318".into()),
        service_name: Some("from-file".into()),
        headers: vec![("x-a".into(), "1".into())],
        ..TracesFile::default()
    };
    assert_eq!(settings(&TracesFile::default(), env(&[])), Ok(None));
    let s = settings(&file, env(&[])).unwrap().unwrap();
    assert_eq!(s.endpoint, "http://file:4318/v1/traces");
    assert_eq!(s.protocol, Protocol::HttpProtobuf);
    assert_eq!(s.service_name, "from-file");
    assert_eq!(s.sampler, SamplerSpec::ParentBased(Root::AlwaysOn));
    let s = settings(
        &file,
        env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_SERVICE_NAME", "gw-1"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "x-a=2,authorization=Bearer%20t",
            ),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test"),
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ]),
    )
    .unwrap()
    .unwrap();
    assert_eq!(s.endpoint, "http://env:4317");
    assert_eq!(s.protocol, Protocol::Grpc);
    assert_eq!(s.service_name, "gw-1");
    assert_eq!(
        s.headers,
        [
            ("x-a".to_owned(), "2".to_owned()),
            ("authorization".into(), "Bearer t".into())
        ]
    );
    assert_eq!(
        s.resource,
        [("deployment.environment".to_owned(), "test".to_owned())]
    );
    assert_eq!(s.sampler, SamplerSpec::ParentBased(Root::Ratio(0.25)));
    let own = settings(
        &file,
        env(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:4318/custom")]),
    )
    .unwrap()
    .unwrap();
    assert_eq!(own.endpoint, "http://t:4318/custom");
    assert_eq!(
        settings(&file, env(&[("OTEL_TRACES_EXPORTER", "none")])),
        Ok(None)
    );
    for bad in [
        ("OTEL_TRACES_EXPORTER", "zipkin"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ("OTEL_TRACES_SAMPLER", "sometimes"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
    ] {
        assert!(settings(&file, env(&[bad])).is_err(), "{bad:?}");
    }
    assert!(
        settings(
            &file,
            env(&[
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "2")
            ])
        )
        .is_err()
    );
}

#[test]
fn sampling_is_decided_as_the_sdk_decides_it() {
    use opentelemetry::trace::{TraceFlags, TraceState};
    use opentelemetry_sdk::trace::ShouldSample as _;
    let sdk = |spec: SamplerSpec, parent: &SpanContext, trace: TraceId| {
        // A root comes with no span at all.
        let cx = if parent.is_valid() {
            Context::new().with_remote_span_context(parent.clone())
        } else {
            Context::new()
        };
        let decided =
            spec.sampler()
                .should_sample(Some(&cx), trace, "request", &SpanKind::Server, &[], &[]);
        decided.decision == opentelemetry_sdk::trace::SamplingDecision::RecordAndSample
    };
    let parent = |flags: u8| {
        SpanContext::new(
            RandomIdGenerator::default().new_trace_id(),
            RandomIdGenerator::default().new_span_id(),
            TraceFlags::new(flags),
            true,
            TraceState::from_key_value([("k", "v")]).unwrap(),
        )
    };
    let specs = [
        SamplerSpec::AlwaysOn,
        SamplerSpec::AlwaysOff,
        SamplerSpec::Ratio(0.3),
        SamplerSpec::ParentBased(Root::AlwaysOn),
        SamplerSpec::ParentBased(Root::AlwaysOff),
        SamplerSpec::ParentBased(Root::Ratio(0.3)),
    ];
    let mut sampled = 0;
    for _ in 0..200 {
        for spec in specs {
            for p in [parent(1), parent(0), SpanContext::empty_context()] {
                NEXT_TRACE.with(|next| next.set(None));
                let own = unsampled_by(spec, &p);
                // The trace the decision was made on: the parent's, or the
                // root's that the SDK's next span takes.
                let trace = match own {
                    Some(own) => own,
                    None if p.is_valid() => p.trace_id(),
                    None => NEXT_TRACE
                        .with(std::cell::Cell::get)
                        .unwrap_or_else(|| RandomIdGenerator::default().new_trace_id()),
                };
                assert_eq!(own.is_none(), sdk(spec, &p, trace), "{spec:?} {p:?}");
                if let Some(own) = own {
                    let own = child(&p, own);
                    assert!(!own.is_sampled() && own.is_valid());
                    assert_ne!(own.span_id(), p.span_id());
                    if p.is_valid() {
                        assert_eq!(own.trace_id(), p.trace_id());
                        assert_eq!(own.trace_state().header(), "k=v");
                    }
                } else {
                    sampled += 1;
                }
            }
        }
    }
    // Ratios decided both ways over the 200 rounds.
    assert!(sampled > 200 * 4 && sampled < 200 * 10, "{sampled}");
}

#[test]
fn context_comes_from_meta_before_headers_and_goes_out_as_it_came_when_off() {
    let meta_parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let header_parent = "00-11111111111111111111111111111111-2222222222222222-01";
    let header = |k: &str| (k == "traceparent").then_some(header_parent);
    let from_meta = incoming([Some(meta_parent.into()), Some("k=v".into()), None], header).unwrap();
    let sc = from_meta.span().span_context().clone();
    assert_eq!(
        sc.trace_id().to_string(),
        "0af7651916cd43dd8448eb211c80319c"
    );
    assert_eq!(sc.span_id().to_string(), "b7ad6b7169203331");
    assert!(sc.is_remote() && sc.is_sampled());
    let out = {
        let _in = from_meta.clone().attach();
        client("tools/call", Some("echo"), "up").unwrap()
    };
    assert_eq!(
        out.fields().collect::<Vec<_>>(),
        [
            ("traceparent", meta_parent.as_bytes()),
            ("tracestate", b"k=v".as_slice())
        ]
    );
    let mut head = Vec::new();
    out.write_head(|b| head.extend_from_slice(b));
    assert_eq!(
        String::from_utf8(head.clone()).unwrap(),
        format!("traceparent: {meta_parent}\r\ntracestate: k=v\r\n")
    );
    assert_eq!(head.len(), out.head_len());
    let from_header = incoming([None, None, None], header).unwrap();
    assert_eq!(
        from_header.span().span_context().trace_id().to_string(),
        "11111111111111111111111111111111"
    );
    // Nothing came, tracing is off: nothing to do.
    assert!(incoming([None, None, None], |_| None).is_none());
}
