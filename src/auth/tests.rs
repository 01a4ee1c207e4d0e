use super::*;

/// The issuer's keys in a file, with these key ids (P-256 keys).
fn jwks(kids: &[&str]) -> String {
    let keys: Vec<String> = kids
        .iter()
        .map(|kid| format!(r#"{{"kty":"EC","crv":"P-256","kid":"{kid}","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"}}"#))
        .collect();
    format!(r#"{{"keys":[{}]}}"#, keys.join(","))
}

#[tokio::test(start_paused = true)]
async fn keys_are_fetched_soon_while_there_are_none_then_on_their_schedule() {
    crate::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("jwks.json");
    let issuer = Issuer::new(
        IssuerSpec {
            issuer: "https://idp.test".into(),
            audiences: vec!["gw".into()],
            keys: KeySource::File(path.clone()),
            tenant: TenantFrom::Fixed("t".into()),
            tenants: Vec::new(),
            leeway: Duration::ZERO,
            refresh: Duration::from_secs(3600),
        },
        reqwest::Client::new(),
    );
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(keep_fresh(issuer.clone(), stop.clone()));
    let second = Duration::from_secs(1);
    // No keys yet (no file): tried again MIN_REFETCH later, not before.
    tokio::time::sleep(second).await;
    assert_eq!(issuer.key_count(), 0);
    std::fs::write(&path, jwks(&["a"])).unwrap();
    tokio::time::sleep(MIN_REFETCH - 2 * second).await;
    assert_eq!(issuer.key_count(), 0);
    tokio::time::sleep(2 * second).await;
    assert_eq!(issuer.key_count(), 1);
    // With keys, a rotation is read at the next refresh, not before.
    std::fs::write(&path, jwks(&["a", "b"])).unwrap();
    tokio::time::sleep(Duration::from_secs(3600) - 2 * second).await;
    assert_eq!(issuer.key_count(), 1);
    tokio::time::sleep(2 * second).await;
    assert_eq!(issuer.key_count(), 2);
    // A file gone keeps the cached keys in force.
    std::fs::remove_file(&path).unwrap();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(issuer.key_count(), 2);
    stop.cancel();
}

#[test]
fn only_three_base64url_parts_are_a_jwt() {
    assert!(looks_like_jwt("eyJh.eyJi.c2ln"));
    assert!(
        looks_like_jwt("eyJh.eyJi."),
        "an unsigned token is still refused, as a JWT"
    );
    assert!(!looks_like_jwt("demo-key"));
    assert!(!looks_like_jwt("a.b"));
    assert!(!looks_like_jwt("a.b.c.d"));
    assert!(!looks_like_jwt("a b.c.d"));
    assert!(!looks_like_jwt(".b.c"));
}

#[test]
fn keys_verify_only_the_algorithm_they_are_for() {
    let jwks = br#"{"keys":[
        {"kty":"oct","k":"c2VjcmV0","kid":"hmac"},
        {"kty":"EC","crv":"P-256","kid":"ec","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
        {"kty":"EC","crv":"P-256","kid":"ec-as-rsa","alg":"RS256","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
        {"kty":"OKP","crv":"Ed25519","kid":"ed","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
        {"kty":"EC","crv":"P-256","kid":"enc","use":"enc","x":"f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU","y":"x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"},
        {"kty":"weird"}
    ]}"#;
    let keys = parse_jwks(jwks).unwrap();
    let got: Vec<(Option<&str>, Algorithm)> =
        keys.iter().map(|k| (k.kid.as_deref(), k.alg)).collect();
    assert_eq!(
        got,
        [
            (Some("ec"), Algorithm::ES256),
            (Some("ed"), Algorithm::EdDSA)
        ]
    );
    assert!(parse_jwks(b"{}").is_err());
    assert!(parse_jwks(b"not json").is_err());
}
