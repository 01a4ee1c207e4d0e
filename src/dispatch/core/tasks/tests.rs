//! Unit tests of `tasks`.

use super::*;
use crate::config::KeyDigest;
use crate::seal::Sealer;

#[test]
fn a_task_id_opens_only_for_its_tenant_and_unaltered() {
    let sealer = Sealer::new(&KeyDigest::of(b"secret"));
    let task = TaskRef {
        upstream: "every.thing".into(),
        incarnation: "9c1e".into(),
        id: "0f3a.b/c".into(),
        tool: "mcp://tool/simulate-research-query".into(),
        replica: String::new(),
    };
    let sealed = seal(&sealer, "acme", &task);
    assert_eq!(open(&sealer, "acme", &sealed), Some(task.clone()));
    // Another replica with the same secret opens it too.
    let replica = Sealer::new(&KeyDigest::of(b"secret"));
    assert_eq!(open(&replica, "acme", &sealed), Some(task.clone()));
    assert_eq!(open(&sealer, "globex", &sealed), None);
    assert_eq!(
        open(&Sealer::new(&KeyDigest::of(b"other")), "acme", &sealed),
        None
    );
    // Any part changed, swapped or added: not a task.
    let parts: Vec<&str> = sealed.split('.').collect();
    let other = seal(
        &sealer,
        "acme",
        &TaskRef {
            id: "another".into(),
            ..task.clone()
        },
    );
    let other_parts: Vec<&str> = other.split('.').collect();
    for i in 0..5 {
        let mut mixed = parts.clone();
        mixed[i] = other_parts[i];
        if mixed != parts {
            assert_eq!(open(&sealer, "acme", &mixed.join(".")), None, "{i}");
        }
    }
    assert_eq!(open(&sealer, "acme", &format!("{sealed}.x")), None);
    // Another incarnation of the same upstream numbering the same id:
    // not this task.
    let reborn = TaskRef {
        incarnation: "77ab".into(),
        ..task.clone()
    };
    assert_ne!(seal(&sealer, "acme", &reborn), sealed);
    let swapped = sealed.replace(&B64.encode("9c1e"), &B64.encode("77ab"));
    assert_eq!(open(&sealer, "acme", &swapped), None);
    // The replica that created it is sealed in too.
    let homed = TaskRef {
        replica: "replica-1".into(),
        ..task.clone()
    };
    let at_home = seal(&sealer, "acme", &homed);
    assert_eq!(open(&sealer, "acme", &at_home), Some(homed.clone()));
    let moved = format!("{sealed}.{}", B64.encode("replica-2"));
    assert_eq!(open(&sealer, "acme", &moved), None);
    let elsewhere = at_home.replace(&B64.encode("replica-1"), &B64.encode("replica-2"));
    assert_eq!(open(&sealer, "acme", &elsewhere), None);
    assert_eq!(open(&sealer, "acme", &format!("{sealed}.")), None);
    assert_eq!(open(&sealer, "acme", "not-a-task"), None);
    assert_eq!(open(&sealer, "acme", ""), None);
}

#[test]
fn the_book_is_bounded_per_tenant_and_forgets_what_expired() {
    let book = TaskBook::default();
    let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
    let up: Arc<str> = "up".into();
    let task = |id: &str| TaskRef {
        upstream: "up".into(),
        incarnation: "i1".into(),
        id: id.into(),
        tool: "t".into(),
        replica: String::new(),
    };
    for i in 0..REMEMBERED_PER_TENANT + 5 {
        book.remember(&a, &up, &task(&i.to_string()));
    }
    book.remember(&b, &up, &task("b-1"));
    let key = |id: &str| ("i1".to_owned(), id.to_owned());
    let of_a = book.of("a");
    assert_eq!(of_a[&up].len(), REMEMBERED_PER_TENANT);
    assert!(!of_a[&up].contains_key(&key("0")) && of_a[&up].contains_key(&key("5")));
    assert_eq!(book.of("b")[&up].len(), 1);
    book.keep_only("a", "up", &HashSet::from([key("7")]));
    assert_eq!(
        book.of("a")[&up],
        HashMap::from([(key("7"), "t".to_owned())])
    );
    assert_eq!(book.of("b")[&up].len(), 1);
    // A status names its incarnation: another's same id is nobody's.
    assert_eq!(book.creators("up", "i1", "b-1").len(), 1);
    assert!(book.creators("up", "i2", "b-1").is_empty());
}

#[test]
fn an_upstream_error_names_the_sealed_id() {
    let raw: &RawValue =
        serde_json::from_str(r#"{"code":-32602,"message":"Task not found: abc123"}"#).unwrap();
    let sealed = sealed_in(&Json::from(raw).to_buf(), "abc123", "T.x.y.z");
    assert_eq!(
        sealed.get(),
        r#"{"code":-32602,"message":"Task not found: T.x.y.z"}"#
    );
}
