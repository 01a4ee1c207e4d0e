//! Unit tests of `session`.

use super::*;

#[test]
fn a_session_holds_under_its_token_until_ended() {
    let sessions = Sessions::new();
    let token = KeyDigest::of(b"admin");
    let (cookie, opened) = sessions.open(&token, Duration::from_secs(60));
    let checked = sessions.check(&token, &cookie).unwrap();
    assert_eq!(checked.id, opened.id);
    assert_eq!(checked.csrf, opened.csrf);
    assert_eq!(opened.short().len(), 8);
    assert!(!cookie.contains("admin"));
    // Another replica with the same token accepts it; another token does not.
    assert!(Sessions::new().check(&token, &cookie).is_some());
    assert!(sessions.check(&KeyDigest::of(b"other"), &cookie).is_none());
    let forged = cookie.replacen(&opened.id, "AAAAAAAAAAAAAAAAAAAAAA", 1);
    assert!(sessions.check(&token, &forged).is_none());
    sessions.end(&cookie);
    assert!(sessions.check(&token, &cookie).is_none());
    let (expired, _) = sessions.open(&token, Duration::ZERO);
    assert!(sessions.check(&token, &expired).is_none());
}
