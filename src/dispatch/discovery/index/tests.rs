//! Unit tests of `index`.

use super::*;

#[test]
fn words_split_at_case_and_punctuation() {
    assert_eq!(
        words("getUserById HTTPServer list_open-orders__v2"),
        [
            "get", "User", "By", "Id", "HTTP", "Server", "list", "open", "orders", "v2"
        ]
    );
}

#[test]
fn stop_words_are_nltks_not_isos() {
    assert_eq!(
        terms("the open orders of a user"),
        ["open", "order", "user"]
    );
}

#[test]
fn the_name_outweighs_the_description() {
    let docs = [
        Document {
            name: "send_message",
            title: None,
            description: Some("Posts to a channel"),
            properties: vec!["channel", "text"],
        },
        Document {
            name: "list_channels",
            title: None,
            description: Some("Lists channels; to send a message, use send_message"),
            properties: vec![],
        },
    ];
    let index = Index::build(docs);
    let mut scores = index.scores("send a message");
    scores.sort_by(|a, b| b.1.total_cmp(&a.1));
    assert_eq!(scores[0].0, 0, "{scores:?}");
    assert!(
        index.scores("the of").is_empty(),
        "stop words alone find nothing"
    );
}
