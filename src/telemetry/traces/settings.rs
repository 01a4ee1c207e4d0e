//! What the traces are: the config file's `telemetry.traces` under the
//! standard `OTEL_*` variables, the sampler, the exporter's protocol.

use std::time::Duration;

use opentelemetry_sdk::trace::Sampler;

use super::*;

/// What the config file says (`telemetry.traces`); the environment overrides it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TracesFile {
    /// The collector: a base URL (`http://collector:4318`) as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` takes it.
    pub endpoint: Option<String>,
    /// `grpc` or `http/protobuf`.
    pub protocol: Option<String>,
    pub headers: Vec<(String, String)>,
    pub service_name: Option<String>,
    pub sampler: Option<String>,
    pub sampler_arg: Option<String>,
}

/// The OTLP protocols the exporter speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    HttpProtobuf,
}

/// Where and how spans are exported, once the environment and the file are read.
#[derive(Debug, Clone, PartialEq)]
pub struct TracesSettings {
    /// The full URL spans are sent to (HTTP: ending in `/v1/traces`).
    pub endpoint: String,
    pub protocol: Protocol,
    pub headers: Vec<(String, String)>,
    pub service_name: String,
    pub resource: Vec<(String, String)>,
    pub sampler: SamplerSpec,
    pub timeout: Duration,
    /// Characters an attribute value (and a span's name) keeps at most
    /// (`OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT`, else
    /// `OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`, else 1024).
    pub attribute_value_limit: usize,
}

/// A sampler as `OTEL_TRACES_SAMPLER` names them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SamplerSpec {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
    ParentBased(Root),
}

/// The root sampler of a parent-based one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Root {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
}

impl SamplerSpec {
    fn parse(name: &str, arg: Option<&str>) -> Result<SamplerSpec, String> {
        let ratio = || -> Result<f64, String> {
            match arg {
                None => Ok(1.0),
                Some(a) => a
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|r| (0.0..=1.0).contains(r))
                    .ok_or_else(|| {
                        format!("the sampler's argument {a:?} is not a ratio from 0 to 1")
                    }),
            }
        };
        Ok(match name.trim() {
            "always_on" => SamplerSpec::AlwaysOn,
            "always_off" => SamplerSpec::AlwaysOff,
            "traceidratio" => SamplerSpec::Ratio(ratio()?),
            "parentbased_always_on" => SamplerSpec::ParentBased(Root::AlwaysOn),
            "parentbased_always_off" => SamplerSpec::ParentBased(Root::AlwaysOff),
            "parentbased_traceidratio" => SamplerSpec::ParentBased(Root::Ratio(ratio()?)),
            other => return Err(format!("unknown sampler {other:?}")),
        })
    }

    pub(super) fn sampler(self) -> Sampler {
        let root = |r: Root| match r {
            Root::AlwaysOn => Sampler::AlwaysOn,
            Root::AlwaysOff => Sampler::AlwaysOff,
            Root::Ratio(r) => Sampler::TraceIdRatioBased(r),
        };
        match self {
            SamplerSpec::AlwaysOn => Sampler::AlwaysOn,
            SamplerSpec::AlwaysOff => Sampler::AlwaysOff,
            SamplerSpec::Ratio(r) => Sampler::TraceIdRatioBased(r),
            SamplerSpec::ParentBased(r) => Sampler::ParentBased(Box::new(root(r))),
        }
    }
}

/// `k=v,k2=v2` (values percent-encoded), as `OTEL_EXPORTER_OTLP_HEADERS`
/// and `OTEL_RESOURCE_ATTRIBUTES` write them.
pub(super) fn pairs(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            let v = percent_encoding::percent_decode_str(v.trim())
                .decode_utf8()
                .ok()?;
            Some((k.trim().to_owned(), v.into_owned())).filter(|(k, _)| !k.is_empty())
        })
        .collect()
}

/// The settings the environment (`env`) and the file give; `None` when
/// nothing names an endpoint or `OTEL_TRACES_EXPORTER` is `none`. The
/// environment wins over the file, key by key.
pub fn settings(
    file: &TracesFile,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<TracesSettings>, String> {
    let env = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    if let Some(exporter) = env("OTEL_TRACES_EXPORTER") {
        match exporter.trim() {
            "none" => return Ok(None),
            "otlp" => {}
            other => {
                return Err(format!(
                    "OTEL_TRACES_EXPORTER={other:?}: only otlp and none are supported"
                ));
            }
        }
    }
    let protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .or_else(|| file.protocol.clone());
    let protocol = match protocol.as_deref().map(str::trim) {
        None | Some("http/protobuf") => Protocol::HttpProtobuf,
        Some("grpc") => Protocol::Grpc,
        Some(other) => {
            return Err(format!(
                "the OTLP protocol {other:?} is not supported (grpc, http/protobuf)"
            ));
        }
    };
    // A signal's own endpoint is used as it is; a base gets the signal's path over HTTP.
    let base = |url: String| match protocol {
        Protocol::Grpc => url,
        Protocol::HttpProtobuf => format!("{}/v1/traces", url.trim_end_matches('/')),
    };
    let endpoint = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT").map(base))
        .or_else(|| file.endpoint.clone().map(base));
    let Some(endpoint) = endpoint else {
        return Ok(None);
    };
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        return Err("the OTLP endpoint must be an http:// or https:// URL".into());
    }
    let mut headers = file.headers.clone();
    for var in [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    ] {
        for (k, v) in env(var).as_deref().map(pairs).unwrap_or_default() {
            headers.retain(|(have, _)| !have.eq_ignore_ascii_case(&k));
            headers.push((k, v));
        }
    }
    let sampler = env("OTEL_TRACES_SAMPLER").or_else(|| file.sampler.clone());
    let arg = env("OTEL_TRACES_SAMPLER_ARG").or_else(|| file.sampler_arg.clone());
    let sampler = match sampler {
        Some(name) => SamplerSpec::parse(&name, arg.as_deref())?,
        None => SamplerSpec::ParentBased(Root::AlwaysOn),
    };
    let timeout = env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
        .or_else(|| env("OTEL_EXPORTER_OTLP_TIMEOUT"))
        .and_then(|ms| ms.trim().parse::<u64>().ok())
        .map_or(EXPORT_TIMEOUT, Duration::from_millis);
    let attribute_value_limit = env("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT")
        .or_else(|| env("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"))
        .and_then(|n| n.trim().parse::<usize>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(ATTRIBUTE_VALUE_LIMIT);
    Ok(Some(TracesSettings {
        endpoint,
        protocol,
        headers,
        service_name: env("OTEL_SERVICE_NAME")
            .or_else(|| file.service_name.clone())
            .unwrap_or_else(|| "mcp-gateway".into()),
        resource: env("OTEL_RESOURCE_ATTRIBUTES")
            .as_deref()
            .map(pairs)
            .unwrap_or_default(),
        sampler,
        timeout,
        attribute_value_limit,
    }))
}
