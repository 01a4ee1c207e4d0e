//! Search over a tenant's tools: Okapi BM25 (k1 1.2, b 0.75, idf
//! `ln(1 + (N - df + 0.5) / (df + 0.5))`) over one document per tool, its
//! name's terms three times, its title's twice, its description's and its
//! input schema's top-level property names' once.
//!
//! Terms: the text split at camelCase and at every character that is not a
//! letter or digit, lower-cased, NLTK's English stop words left out
//! (`stop-words`), each stemmed by Snowball's English stemmer
//! (`rust-stemmers`). The index is built once per listing and read by
//! every query: a query costs its terms' postings, never a pass over the
//! documents' text.

use std::collections::HashMap;
use std::sync::OnceLock;

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// A tool as it is searched: what its listing shows.
pub struct Document<'a> {
    pub name: &'a str,
    pub title: Option<&'a str>,
    pub description: Option<&'a str>,
    pub properties: Vec<&'a str>,
}

/// The postings of every term, and each document's length.
#[derive(Default)]
pub struct Index {
    /// Term → (document, frequency in it), documents ascending.
    postings: HashMap<String, Vec<(u32, u32)>, foldhash::fast::RandomState>,
    lengths: Vec<u32>,
    average: f64,
}

impl Index {
    /// The index of `documents`, numbered in their order.
    pub fn build<'a>(documents: impl IntoIterator<Item = Document<'a>>) -> Index {
        let mut index = Index::default();
        let mut total = 0u64;
        for (n, doc) in documents.into_iter().enumerate() {
            let mut counts: HashMap<String, u32> = HashMap::new();
            let mut add = |text: &str, weight: u32| {
                for term in terms(text) {
                    *counts.entry(term).or_default() += weight;
                }
            };
            add(doc.name, 3);
            if let Some(title) = doc.title {
                add(title, 2);
            }
            if let Some(description) = doc.description {
                add(description, 1);
            }
            for property in doc.properties {
                add(property, 1);
            }
            let length: u32 = counts.values().sum();
            total += u64::from(length);
            index.lengths.push(length);
            let n = u32::try_from(n).unwrap_or(u32::MAX);
            for (term, tf) in counts {
                index.postings.entry(term).or_default().push((n, tf));
            }
        }
        let docs = index.lengths.len().max(1);
        index.average = (total as f64 / docs as f64).max(1.0);
        index
    }

    /// Every document whose score for `query` is above 0, as (document,
    /// score), the score rounded to 4 decimals; unordered.
    pub fn scores(&self, query: &str) -> Vec<(usize, f64)> {
        let mut query_terms = terms(query);
        query_terms.sort_unstable();
        query_terms.dedup();
        let n = self.lengths.len() as f64;
        let mut scores: HashMap<u32, f64> = HashMap::new();
        for term in &query_terms {
            let Some(postings) = self.postings.get(term) else {
                continue;
            };
            let df = postings.len() as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            for &(doc, tf) in postings {
                let tf = f64::from(tf);
                let dl = f64::from(self.lengths[doc as usize]);
                let norm = tf + K1 * (1.0 - B + B * dl / self.average);
                *scores.entry(doc).or_default() += idf * tf * (K1 + 1.0) / norm;
            }
        }
        scores
            .into_iter()
            .map(|(doc, score)| (doc as usize, (score * 10_000.0).round() / 10_000.0))
            .filter(|(_, score)| *score > 0.0)
            .collect()
    }
}

/// NLTK's English stop words (those the tokenizer can meet: letters alone).
fn stop_words() -> &'static std::collections::HashSet<&'static str> {
    static WORDS: OnceLock<std::collections::HashSet<&'static str>> = OnceLock::new();
    WORDS.get_or_init(|| {
        stop_words::lookup("en")
            .unwrap_or_default()
            .iter()
            .copied()
            .collect()
    })
}

fn stemmer() -> &'static rust_stemmers::Stemmer {
    static STEMMER: OnceLock<rust_stemmers::Stemmer> = OnceLock::new();
    STEMMER.get_or_init(|| rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English))
}

/// The terms of `text`, in order.
pub fn terms(text: &str) -> Vec<String> {
    let stop = stop_words();
    let mut out = Vec::new();
    for word in words(text) {
        let lower = word.to_lowercase();
        if stop.contains(lower.as_str()) {
            continue;
        }
        out.push(stemmer().stem(&lower).into_owned());
    }
    out
}

/// `text` split at every character that is not a letter or digit, and at
/// camelCase: a lower-case letter or digit followed by an upper-case one
/// (`getUser`), and the last of a run of capitals followed by a lower-case
/// letter (`HTTPServer`: `HTTP`, `Server`).
fn words(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for run in text.split(|c: char| !c.is_alphanumeric()) {
        let chars: Vec<(usize, char)> = run.char_indices().collect();
        let mut start = 0;
        for i in 1..chars.len() {
            let (at, c) = chars[i];
            let prev = chars[i - 1].1;
            let next_lower = chars.get(i + 1).is_some_and(|(_, n)| n.is_lowercase());
            let split = c.is_uppercase()
                && (prev.is_lowercase()
                    || prev.is_ascii_digit()
                    || (prev.is_uppercase() && next_lower));
            if split {
                out.push(&run[start..at]);
                start = at;
            }
        }
        if start < run.len() {
            out.push(&run[start..]);
        }
    }
    out.retain(|w| !w.is_empty());
    out
}

#[cfg(test)]
mod tests;
