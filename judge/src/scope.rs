//! The organisation a broadcast is scoped to ("Acme only: …") and the one
//! a mailbox's profile names: the `org_match` and `org_mismatch` features.

use std::sync::LazyLock;

use regex::Regex;

use super::text::{DATA, pattern};

/// Words that open an announcement rather than name an organisation
/// ("Heads up:", "URGENT:", "Hey team:", "Outage:"), compared without case.
const GENERIC: &[&str] = &[
    "security",
    "heads",
    "heads-up",
    "reminder",
    "fyi",
    "psa",
    "note",
    "nb",
    "update",
    "updates",
    "breaking",
    "warning",
    "code",
    "from",
    "for",
    "anyone",
    "everyone",
    "all",
    "team",
    "release",
    "important",
    "urgent",
    "notice",
    "action",
    "advisory",
    "deprecation",
    "hey",
    "hi",
    "hello",
    "folks",
    "outage",
    "incident",
    "maintenance",
    "next",
    "this",
    "status",
    "alert",
    "info",
    "question",
    "done",
    "fixed",
    "summary",
    "digest",
    "weekly",
    "daily",
    "change",
    "changes",
    "new",
    "ps",
    "todo",
    "help",
    "attention",
    "announcement",
    "news",
    "tip",
    "context",
    "background",
    "plan",
    "decision",
    "proposal",
    "request",
    "ask",
    "bug",
    "fix",
    "cve",
];

/// Programming languages, runtimes and systems, which scope no
/// organisation ("Java:", "Go heads-up:"), compared without case.
const LANGUAGE: &[&str] = &[
    "go",
    "golang",
    "java",
    "rust",
    "python",
    "node",
    "nodejs",
    "ruby",
    "perl",
    "kotlin",
    "swift",
    "scala",
    "erlang",
    "elixir",
    "haskell",
    "typescript",
    "javascript",
    "dart",
    "lua",
    "julia",
    "deno",
    "bun",
    "php",
    "debian",
    "ubuntu",
    "linux",
    "windows",
    "macos",
    "postgres",
    "postgresql",
];

/// Days and months, which date a broadcast rather than scope it
/// ("Friday:"), compared without case.
const WHEN: &[&str] = &[
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
    "today",
    "tomorrow",
    "tonight",
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// Verbs that make the words before a colon a sentence, not a label
/// ("Karma is deprecated upstream:"), compared without case.
const VERB: &[&str] = &[
    "is",
    "are",
    "was",
    "were",
    "has",
    "have",
    "had",
    "will",
    "gets",
    "got",
    "can",
    "must",
    "should",
    "deprecated",
    "released",
    "broke",
    "breaks",
    "moves",
    "moved",
];

static SCOPE: LazyLock<Regex> = LazyLock::new(|| pattern(r"^([^:.]{1,40}):"));
static ORG_WORD: LazyLock<Regex> = LazyLock::new(|| pattern(r"^[A-Z][A-Za-z]+$"));
static PROFILE_ORG: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"^\s*(?:Client:\s*)?([A-Z][A-Za-z]+(?: [A-Z][A-Za-z]+)?)\."));

/// Whether `list` holds `word`, without case.
fn listed(list: &[&str], word: &str) -> bool {
    list.iter().any(|l| l.eq_ignore_ascii_case(word))
}

/// The organisation a broadcast is scoped to, if any: a capitalised first
/// word before a colon that is no package, no language, no day and no
/// announcement word, before no sentence, and that either says so ("Acme
/// only: …") or comes back after the colon ("Brightwell platform: …
/// Brightwell's shared CI image …"). A bare label ("Payments: the v1 API
/// goes on Monday") scopes nothing: it names a team as often as an
/// organisation, and a scope drops the broadcast for every mailbox whose
/// profile doesn't name it.
pub(super) fn scope(broadcast: &str) -> Option<&str> {
    let pre = SCOPE.captures(broadcast)?.get(1)?.as_str();
    let words: Vec<&str> = pre.split_whitespace().collect();
    let w = *words.first()?;
    let only = words.get(1).is_some_and(|o| o.eq_ignore_ascii_case("only"));
    // A package's name is a subject, not an organisation ("Tokio: …"),
    // unless the broadcast says "only" ("Acme only:", Acme being also a
    // Python package).
    let sentence = words.iter().any(|v| listed(VERB, v));
    if !ORG_WORD.is_match(w)
        || sentence
        || [GENERIC, LANGUAGE, WHEN].iter().any(|l| listed(l, w))
        || (DATA.packages.contains_key(&w.to_lowercase()) && !only)
    {
        return None;
    }
    // Named again after the colon ("… all Brightwell pipelines").
    let rest = &broadcast[pre.len() + 1..];
    (only || names_word(rest, w)).then_some(w)
}

/// Whether `text` has `word` as a whole word (what `\bword\b` matches).
fn names_word(text: &str, word: &str) -> bool {
    let is_word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    text.match_indices(word).any(|(i, _)| {
        !is_word(text[..i].chars().next_back()) && !is_word(text[i + word.len()..].chars().next())
    })
}

/// (match, mismatch) between a broadcast's scope and the profile's
/// organisation (its first sentence, "Client: Acme." or "Fernhill.").
pub(super) fn organisation(scope: Option<&str>, profile: &str, stated: &str) -> (f64, f64) {
    let Some(w) = scope else {
        return (0.0, 0.0);
    };
    let org = PROFILE_ORG
        .captures(profile)
        .and_then(|c| c.get(1))
        .map(|m| m.as_str());
    if org.is_some_and(|o| o.split_whitespace().any(|p| p == w)) {
        return (1.0, 0.0);
    }
    // A profile that opens without "Client: Acme." names its
    // organisation in its first sentence ("Marlow Books back-office
    // (stock, refunds, …).", "Python bindings for Cinder: …").
    let end = profile
        .char_indices()
        .find(|&(i, c)| c == '.' && profile[i + 1..].starts_with(char::is_whitespace))
        .map_or(profile.len(), |(i, _)| i);
    let first = &profile[..end];
    if org.is_none() && names_word(first, w) {
        return (1.0, 0.0);
    }
    if names_word(stated, w) {
        (0.5, 0.0)
    } else if profile.trim().is_empty() {
        (0.0, 0.0)
    } else {
        (0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_organisation_named_again_scopes_a_broadcast() {
        assert_eq!(
            scope("Brightwell platform: all Brightwell pipelines ban tracing 0.1.42."),
            Some("Brightwell")
        );
        assert_eq!(scope("Acme only: the proxy moves."), Some("Acme"));
        // A bare label scopes nothing: it names a team as often as an
        // organisation ("Payments: …" is for the storefront too).
        assert_eq!(scope("Wavecrest: our Airflow moves."), None);
        assert_eq!(scope("Payments: the v1 API goes on Monday."), None);
        // Announcement words, days and languages scope nothing, in any
        // case, even named again.
        for b in [
            "URGENT: urgent fix.",
            "Hey team: Hey, freeze.",
            "Outage: Outage on the edge.",
            "Friday: no deploys on Friday.",
            "JAVA only: Java 17.",
        ] {
            assert_eq!(scope(b), None, "{b}");
        }
        assert_eq!(scope("Friday: tokio 1.54 is out."), None);
        assert_eq!(scope("Heads up: Acme's proxy moves."), None);
        // A language or a sentence before the colon scopes nothing.
        assert_eq!(
            scope("Java: openjdk-17 fixes eight CVEs; Java 17 JREs."),
            None
        );
        assert_eq!(
            scope("Karma is deprecated upstream: Karma gets no fixes."),
            None
        );
    }
}
