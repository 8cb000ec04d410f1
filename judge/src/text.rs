//! The judge's reading of text: words, packages and their versions,
//! concepts, and the committed data they are looked up in.
//!
//! The data files beside this one are committed (see `build_data.py`):
//! nothing is fetched or computed from the machine at run time.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::LazyLock;

use regex::Regex;

const STOP: &str = include_str!("../data/stop.txt");
const DF: &str = include_str!("../data/df.tsv");
const LEXICON: &str = include_str!("../data/lexicon.tsv");
const KNOWN: &str = include_str!("../data/known.tsv");
const THESAURUS: &str = include_str!("../data/thesaurus.txt");
const AMBIGUOUS: &str = include_str!("../data/ambiguous.txt");

/// One package the judge knows: what it depends on and what it is.
#[derive(Debug, Default)]
pub struct Package {
    /// Its direct dependencies.
    pub deps: Vec<String>,
    /// Its one-line description.
    pub desc: String,
    /// Its ecosystem (`rust`, `python`, `node`), if known: given in
    /// lexicon.tsv, else the one most of its dependencies are of.
    pub eco: Option<&'static str>,
}

/// Everything the judge looks words up in, parsed once.
#[derive(Debug)]
pub struct Data {
    stop: HashSet<&'static str>,
    df: HashMap<&'static str, u32>,
    docs: u32,
    /// Packages by lowercase name (`_` written `-`).
    pub packages: HashMap<String, Package>,
    /// How many packages depend on each package (a hub like `serde` says
    /// little about who uses a package that depends on it).
    pub dependents: HashMap<String, u32>,
    ambiguous: HashSet<String>,
    concepts: HashMap<&'static str, u32>,
    /// The first words of the thesaurus's phrases (`regular` of
    /// `regular-expressions`), and of their first two words.
    phrase_starts: HashSet<&'static str>,
}

/// The parsed data.
pub static DATA: LazyLock<Data> = LazyLock::new(Data::load);

fn data_lines(text: &'static str) -> impl Iterator<Item = &'static str> {
    text.lines()
        .map(str::trim_end)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

impl Data {
    fn load() -> Data {
        let stop = STOP.split_whitespace().collect();
        let mut lines = DF.lines();
        let docs = lines
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("df.tsv starts with the number of documents");
        // df.tsv's words are stemmed without the final `-e` rule: folded
        // here, a word's count is the larger of its two forms'.
        let mut df: HashMap<&'static str, u32> = HashMap::new();
        for l in lines {
            let Some((w, n)) = l.split_once('\t') else {
                continue;
            };
            let Ok(n) = n.trim().parse() else { continue };
            let e = df.entry(final_e(w)).or_insert(0);
            *e = (*e).max(n);
        }
        let mut packages: HashMap<String, Package> = HashMap::new();
        for line in data_lines(LEXICON) {
            let mut f = line.splitn(4, '\t');
            let (Some(name), Some(eco), deps, desc) = (f.next(), f.next(), f.next(), f.next())
            else {
                continue;
            };
            let e = packages.entry(name.to_string()).or_default();
            e.eco = Some(eco);
            e.deps.extend(split_deps(deps.unwrap_or("")));
            e.desc = desc.unwrap_or("").to_string();
        }
        for line in data_lines(KNOWN) {
            let mut f = line.splitn(3, '\t');
            let (Some(name), deps, desc) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            let e = packages.entry(name.to_string()).or_default();
            for d in split_deps(deps.unwrap_or("")) {
                if !e.deps.contains(&d) {
                    e.deps.push(d);
                }
            }
            if e.desc.is_empty() {
                e.desc = desc.unwrap_or("").to_string();
            }
        }
        for p in packages.values_mut() {
            p.deps.sort();
            p.deps.dedup();
        }
        let inferred: Vec<(String, &'static str)> = packages
            .iter()
            .filter(|(_, p)| p.eco.is_none())
            .filter_map(|(name, p)| {
                let mut count: BTreeMap<&'static str, usize> = BTreeMap::new();
                for d in &p.deps {
                    if let Some(e) = packages.get(d).and_then(|q| q.eco) {
                        *count.entry(e).or_default() += 1;
                    }
                }
                let best = count.into_iter().max_by_key(|(_, n)| *n)?;
                Some((name.clone(), best.0))
            })
            .collect();
        for (name, eco) in inferred {
            if let Some(p) = packages.get_mut(&name) {
                p.eco = Some(eco);
            }
        }
        let mut dependents: HashMap<String, u32> = HashMap::new();
        for p in packages.values() {
            for d in &p.deps {
                *dependents.entry(d.clone()).or_default() += 1;
            }
        }
        // A package named like an ordinary word ("which", "requests",
        // "acme") is a package only with a version or written as code: the
        // hand-made list, and every name in more than one description in
        // 200 of Debian's (its word is that common), and the stop words.
        let common = docs / 200;
        let ambiguous: HashSet<String> = data_lines(AMBIGUOUS)
            .flat_map(str::split_whitespace)
            .chain(STOP.split_whitespace())
            .map(str::to_string)
            .chain(
                packages
                    .keys()
                    .filter(|name| {
                        let w = name.to_lowercase();
                        df.get(stem(&w))
                            .or_else(|| df.get(w.as_str()))
                            .copied()
                            .unwrap_or(0)
                            > common
                    })
                    .cloned(),
            )
            .collect();
        let mut concepts = HashMap::new();
        let mut phrase_starts = HashSet::new();
        for (i, line) in data_lines(THESAURUS).enumerate() {
            for term in line.split_whitespace() {
                concepts.insert(term, i as u32);
                for (end, _) in term.match_indices('-') {
                    phrase_starts.insert(&term[..end]);
                }
            }
        }
        Data {
            stop,
            df,
            docs,
            packages,
            dependents,
            ambiguous,
            concepts,
            phrase_starts,
        }
    }

    /// How rare a word is in the packages' own texts: rare words say more.
    pub fn idf(&self, word: &str) -> f64 {
        let df = self.df.get(word).copied().unwrap_or(0) as f64;
        ((self.docs as f64 + 1.0) / (df + 1.0)).ln() + 1.0
    }

    /// The sum of [`Data::idf`] over words.
    pub fn weight<'a>(&self, words: impl IntoIterator<Item = &'a String>) -> f64 {
        words.into_iter().map(|w| self.idf(w)).sum()
    }
}

/// A pattern of the judge's own (tested: they all compile).
pub(super) fn pattern(p: &str) -> Regex {
    Regex::new(p).expect("the judge's patterns are valid")
}

fn split_deps(deps: &str) -> impl Iterator<Item = String> + '_ {
    deps.split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(str::to_string)
}

/// A light stemmer: `-ing`, `-ed`, `-es`, `-s` off words long enough,
/// then a final `-e` (so `service` and `services`, `deserialize` and
/// `deserialized` are one word).
pub fn stem(w: &str) -> &str {
    let mut s = w;
    for suf in ["ing", "ed", "es", "s"] {
        if w.len() > suf.len() + 3 && w.ends_with(suf) {
            s = &w[..w.len() - suf.len()];
            break;
        }
    }
    final_e(s)
}

/// `s` without a final `e` if it is long enough.
fn final_e(s: &str) -> &str {
    match s.strip_suffix('e') {
        Some(r) if r.len() > 3 => r,
        _ => s,
    }
}

static WORD: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"[a-z0-9][a-z0-9_.+/\-']*[a-z0-9+]|[a-z0-9]"));
static NUMERIC: LazyLock<Regex> = LazyLock::new(|| pattern(r"^[0-9.]+$"));
static VERSIONISH: LazyLock<Regex> = LazyLock::new(|| pattern(r"^[0-9.x]+$"));
static PART_SPLIT: LazyLock<Regex> = LazyLock::new(|| pattern(r"[-_/.']"));

/// The content words of a text, stemmed, with compounds (`hyper-util`)
/// both whole and in parts; stop words and version numbers left out.
pub fn words(text: &str) -> Vec<String> {
    let data = &*DATA;
    let lower = text.to_lowercase();
    let mut out = Vec::new();
    for m in WORD.find_iter(&lower) {
        let tok = m.as_str().replace("'s", "");
        let numeric = NUMERIC.is_match(&tok);
        let parts: Vec<&str> = if numeric {
            vec![tok.as_str()]
        } else {
            PART_SPLIT.split(&tok).collect()
        };
        for p in &parts {
            if p.is_empty() || data.stop.contains(p) || VERSIONISH.is_match(p) {
                continue;
            }
            out.push(stem(p).to_string());
        }
        if parts.len() > 1 && !numeric {
            out.push(tok.clone());
        }
    }
    out
}

/// [`words`] as a set, ordered, so sums over it are the same every run.
pub fn word_set(text: &str) -> BTreeSet<String> {
    words(text).into_iter().collect()
}

static PKG_TOKEN: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"[A-Za-z0-9][A-Za-z0-9_.+/-]*[A-Za-z0-9+]|[A-Za-z0-9]"));
static PKG_VERSION: LazyLock<Regex> = LazyLock::new(|| pattern(r"^v?\d+(\.\d+)*(\.x)?$"));

/// The packages a text names, in the order it first names them. A name
/// that is also an ordinary word counts only with a version after it or
/// written as code.
pub fn packages(text: &str) -> Vec<String> {
    let data = &*DATA;
    let toks: Vec<_> = PKG_TOKEN.find_iter(text).collect();
    let mut found: Vec<String> = Vec::new();
    for (i, m) in toks.iter().enumerate() {
        let t = m
            .as_str()
            .to_lowercase()
            .replace('_', "-")
            .trim_end_matches('.')
            .to_string();
        let mut cands = vec![t.clone()];
        if let Some(rest) = t.strip_prefix("rust-") {
            cands.push(rest.to_string());
        }
        for c in cands {
            if !data.packages.contains_key(&c) {
                continue;
            }
            // A version after it, or after a comparison (`requests >= 2.30`).
            let versioned = toks.get(i + 1).is_some_and(|next| {
                PKG_VERSION.is_match(next.as_str().trim_end_matches('.'))
                    && text[m.end()..next.start()]
                        .trim()
                        .chars()
                        .all(|c| "<>=^~".contains(c))
            });
            let code = text[m.end()..].starts_with("::") || text[..m.start()].ends_with('`');
            if data.ambiguous.contains(c.as_str()) && !versioned && !code {
                break;
            }
            if !found.contains(&c) {
                found.push(c);
            }
            break;
        }
    }
    found
}

/// The packages `pkg` depends on, directly (1) or through one more (2).
pub fn dependencies(pkg: &str) -> HashMap<String, u32> {
    let data = &*DATA;
    let mut out = HashMap::new();
    let mut frontier = vec![pkg.to_string()];
    for depth in 1..=2 {
        let mut next = Vec::new();
        for p in &frontier {
            if let Some(pk) = data.packages.get(p) {
                for q in &pk.deps {
                    if !out.contains_key(q) {
                        out.insert(q.clone(), depth);
                        next.push(q.clone());
                    }
                }
            }
        }
        frontier = next;
    }
    out
}

static CONCEPT_TOKEN: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"[a-z0-9][a-z0-9_.+/\-]*[a-z0-9+]|[a-z0-9]"));

/// The thesaurus's concepts a text names (`regular expressions` and
/// `regex` are one).
pub fn concepts(text: &str) -> BTreeSet<u32> {
    let data = &*DATA;
    let lower = text.to_lowercase();
    let toks: Vec<&str> = CONCEPT_TOKEN
        .find_iter(&lower)
        .map(|m| m.as_str())
        .collect();
    let mut out = BTreeSet::new();
    for (i, tok) in toks.iter().enumerate() {
        let mut cands = vec![tok.to_string(), stem(tok).to_string()];
        // A compound's parts (`GHSA-5hq8-qhww-jm7q` is a GHSA).
        if tok.contains(['-', '_', '/']) {
            cands.extend(PART_SPLIT.split(tok).map(|p| stem(p).to_string()));
        }
        if let Some(n1) = toks.get(i + 1)
            && data.phrase_starts.contains(tok)
        {
            let two = format!("{tok}-{n1}");
            if let Some(n2) = toks.get(i + 2)
                && data.phrase_starts.contains(two.as_str())
            {
                cands.push(format!("{two}-{n2}"));
            }
            cands.push(two);
        }
        for c in cands {
            if let Some(id) = data.concepts.get(c.as_str()) {
                out.insert(*id);
            }
        }
    }
    out
}

/// The ecosystems a text says it works in: the languages it names and
/// those of the packages it names.
pub fn ecosystems(text: &str, packages: &[String]) -> BTreeSet<&'static str> {
    let data = &*DATA;
    let mut out: BTreeSet<&'static str> = packages
        .iter()
        .filter_map(|p| data.packages.get(p).and_then(|p| p.eco))
        .collect();
    for w in WORD.find_iter(&text.to_lowercase()) {
        if let Some(e) = language(w.as_str()) {
            out.insert(e);
        }
    }
    out
}

/// The ecosystem a language's name means.
fn language(word: &str) -> Option<&'static str> {
    Some(match word {
        "rust" | "cargo" | "crate" | "crates" | "rustc" => "rust",
        "python" | "cpython" | "pip" | "pypi" => "python",
        "node" | "node.js" | "nodejs" | "npm" | "typescript" | "javascript" => "node",
        _ => return None,
    })
}

/// Runtimes and their other names, which take versions like packages.
fn runtime(word: &str) -> Option<&'static str> {
    Some(match word {
        "rust" | "msrv" | "toolchain" | "compiler" => "rust",
        "python" | "cpython" => "python",
        "node" | "node.js" | "nodejs" => "node",
        "npm" => "npm",
        "postgres" | "postgresql" => "postgres",
        _ => return None,
    })
}

/// Whether a versions key is a runtime's (`rust`, `python`, …).
pub fn is_runtime(name: &str) -> bool {
    runtime(name) == Some(name)
}

const FILL: &[&str] = &[
    "pinned", "to", "the", "on", "at", "version", "v", "line", "frozen", "is", "lts", "release",
    "releases", "least", ">=", ">", "<=", "<", "^", "~", "=", "from", "and", "moves", "moving",
    "or", "newer", "older", "later", "earlier", "before", "below", "prior",
];

static VER_TOKEN: LazyLock<Regex> = LazyLock::new(|| {
    pattern(r"[A-Za-z][A-Za-z0-9_.+-]*[A-Za-z0-9+]|[A-Za-z]|\d+(?:\.\d+)*(?:\.x)?\+?|[<>=^~]+")
});
static VER_NUMBER: LazyLock<Regex> = LazyLock::new(|| pattern(r"^\d+(?:\.\d+)*(?:\.x)?\+?$"));
static VER_PLAIN: LazyLock<Regex> = LazyLock::new(|| pattern(r"^\d+(?:\.\d+)*$"));
static VER_DOTTED: LazyLock<Regex> = LazyLock::new(|| pattern(r"^\d+(?:\.\d+)+(?:\.x)?$"));

/// A version as numbers (`1.47.x` is `[1, 47]`).
pub type Version = Vec<u64>;

fn parse_version(s: &str) -> Option<Version> {
    let s = s.trim_end_matches('+').replace(".x", "");
    s.split('.')
        .filter(|p| !p.is_empty())
        .map(|p| p.parse().ok())
        .collect()
}

/// The versions a text gives each package or runtime it names (`tokio
/// 1.53`, `Rust 1.86`, `h2 0.4.16 through 0.4.20`, `sled before 0.34.4`).
/// A protocol's version (`HTTP/2`) is none of a package's; a dotted
/// version standing alone (`Fixed in 0.34.4`) is the last name's in its
/// sentence, or else the last package's named before it.
pub fn versions(text: &str) -> BTreeMap<String, Vec<Version>> {
    versions_cued(text).0
}

/// Words that put a version as a line below which something holds
/// (`before 0.34.4`, `< 2.13`, `1.80 or older`).
const BELOW_CUE: &[&str] = &[
    "before", "below", "prior", "older", "earlier", "until", "<", "<=", "lower",
];

/// [`versions`], and the names whose version the text gives as a line
/// below which something holds.
pub fn versions_cued(text: &str) -> (BTreeMap<String, Vec<Version>>, BTreeSet<String>) {
    let data = &*DATA;
    let mut cued = BTreeSet::new();
    let cue = |w: &str| BELOW_CUE.contains(&w.to_lowercase().as_str());
    let toks: Vec<(usize, usize, &str)> = VER_TOKEN
        .find_iter(text)
        .map(|m| (m.start(), m.end(), m.as_str()))
        .collect();
    let mut out: BTreeMap<String, Vec<Version>> = BTreeMap::new();
    let mut used = vec![false; toks.len()];
    // (token index, name) of every name, in order.
    let mut names: Vec<(usize, String)> = Vec::new();
    for (i, &(_, end, t)) in toks.iter().enumerate() {
        let mut k = t.to_lowercase().replace('_', "-");
        k = k.trim_end_matches('.').to_string();
        if let Some(rest) = k.strip_prefix("rust-")
            && data.packages.contains_key(rest)
        {
            k = rest.to_string();
        }
        let name = match runtime(&k) {
            Some(r) => r.to_string(),
            None if data.packages.contains_key(&k) => k,
            None => continue,
        };
        // A name that is also a word names a package only with its
        // version right after it (`regex 1.13`, `requests >= 2.30`).
        let word = data.ambiguous.contains(name.as_str());
        if !word {
            names.push((i, name.clone()));
        }
        if text[end..].starts_with('/') {
            // `HTTP/2`: the protocol's version, not the crate's.
            continue;
        }
        let mut j = i + 1;
        let mut skipped = 0;
        while j < toks.len() && skipped < 4 {
            let w = toks[j].2;
            if VER_NUMBER.is_match(w) {
                // A number too large to be a version names none.
                if let Some(v) = parse_version(w) {
                    let after = |k: usize| toks.get(j + k).map_or("", |t| t.2);
                    if toks[i + 1..j].iter().any(|t| cue(t.2))
                        && !toks[i + 1..j].iter().any(|t| VER_NUMBER.is_match(t.2))
                        || ["or", "and"].contains(&after(1).to_lowercase().as_str())
                            && cue(after(2))
                    {
                        cued.insert(name.clone());
                    }
                    used[j] = true;
                    let list = out.entry(name.clone()).or_default();
                    list.push(v);
                    if j + 2 < toks.len()
                        && ["through", "to", "and", "or", "-"]
                            .contains(&toks[j + 1].2.to_lowercase().as_str())
                        && VER_PLAIN.is_match(toks[j + 2].2)
                        && let Some(v2) = parse_version(toks[j + 2].2)
                    {
                        used[j + 2] = true;
                        list.push(v2);
                    }
                }
                break;
            }
            if FILL.contains(&w.to_lowercase().as_str())
                && (!word || w.chars().all(|c| "<>=^~".contains(c)))
            {
                j += 1;
                skipped += 1;
                continue;
            }
            break;
        }
    }
    let ends = sentence_ends(text);
    for (j, &(start, _, w)) in toks.iter().enumerate() {
        if used[j] || !VER_DOTTED.is_match(w) || text[..start].ends_with(['/', '-', '.']) {
            continue;
        }
        // Right after a word the judge does not know (`jiter 0.14`), it
        // is that word's.
        if j > 0
            && text[toks[j - 1].1..start].trim().is_empty()
            && !data.stop.contains(toks[j - 1].2.to_lowercase().as_str())
        {
            continue;
        }
        let Some(v) = parse_version(w) else { continue };
        let sentence = ends[..ends.partition_point(|&e| e < start)]
            .last()
            .copied()
            .unwrap_or(0);
        let before = &names[..names.partition_point(|(i, _)| *i < j)];
        let owner = before
            .iter()
            .rev()
            .find(|(i, _)| toks[*i].0 >= sentence)
            .or_else(|| before.iter().rev().find(|(_, n)| runtime(n).is_none()))
            .map(|(_, n)| n.clone());
        if let Some(n) = owner {
            if j > 0 && cue(toks[j - 1].2) {
                cued.insert(n.clone());
            }
            out.entry(n).or_default().push(v);
        }
    }
    (out, cued)
}

/// Where sentences start, in order: at the space after a `.`, `;`, `!`
/// or `?` (a version's dots are no end).
fn sentence_ends(text: &str) -> Vec<usize> {
    let b = text.as_bytes();
    (1..b.len())
        .filter(|&i| b[i].is_ascii_whitespace() && matches!(b[i - 1], b'.' | b';' | b'!' | b'?'))
        .collect()
}

/// Compares versions on the parts both give (`1.54` equals `1.54.1`).
pub fn compare(a: &[u64], b: &[u64]) -> std::cmp::Ordering {
    let n = a.len().min(b.len());
    a[..n].cmp(&b[..n])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_compounds_stem_and_drop_versions() {
        assert_eq!(
            words("hyper-util 0.1.21 validates CONNECT responses"),
            [
                "hyper",
                "util",
                "hyper-util",
                "validat",
                "connect",
                "respons"
            ]
        );
        assert_eq!(words("Acme's regexes"), ["acme", "regex"]);
    }

    #[test]
    fn packages_need_a_version_when_the_name_is_a_word() {
        assert_eq!(
            packages("tokio 1.53 and which, with regex 1.13"),
            ["tokio", "regex"]
        );
        assert_eq!(packages("reqwest 0.11 on tokio"), ["reqwest", "tokio"]);
    }

    #[test]
    fn versions_follow_their_names() {
        let v =
            versions("Rust 1.86, tokio pinned to the 1.47.x LTS line, h2 0.4.16 through 0.4.20");
        assert_eq!(v["rust"], [vec![1, 86]]);
        assert_eq!(v["tokio"], [vec![1, 47]]);
        assert_eq!(v["h2"], [vec![0, 4, 16], vec![0, 4, 20]]);
        assert_eq!(compare(&[1, 54], &[1, 54, 1]), std::cmp::Ordering::Equal);
    }

    #[test]
    fn a_version_alone_is_its_packages_and_a_protocols_is_none() {
        let (v, before) =
            versions_cued("h2 before 0.3.26: a reset flood (jiter 0.14 too). Fixed in 0.3.26.");
        assert_eq!(v["h2"], [vec![0, 3, 26], vec![0, 3, 26]]);
        assert!(before.contains("h2"));
        let v = versions("serves HTTP/2 and HTTP/1.1; http 1.5 enforces the URI length");
        assert_eq!(v["http"], [vec![1, 5]]);
        let (_, before) = versions_cued("tokio 1.53 deprecates set_linger");
        assert!(before.is_empty());
        assert_eq!(packages("requests >= 2.30.0"), ["requests"]);
        // An ordinary word without a version is no package.
        assert!(!packages("requests to the server").contains(&"requests".to_string()));
    }

    #[test]
    fn stems_fold_a_final_e_and_compounds_name_concepts() {
        assert_eq!(stem("services"), stem("service"));
        assert_eq!(stem("deserialized"), stem("deserialize"));
        assert_eq!(concepts("GHSA-5hq8-qhww-jm7q"), concepts("an advisory"));
        let d = &*DATA;
        assert_eq!(d.idf("service"), d.idf("services"));
    }

    #[test]
    fn ecosystems_come_from_languages_and_packages() {
        let e = ecosystems("Python 3.11 workers", &[]);
        assert_eq!(e.into_iter().collect::<Vec<_>>(), ["python"]);
        let e = ecosystems("an API", &["axum".to_string()]);
        assert_eq!(e.into_iter().collect::<Vec<_>>(), ["rust"]);
    }

    #[test]
    fn concepts_join_synonyms() {
        assert_eq!(concepts("regular expressions"), concepts("a regex"));
        assert!(!concepts("HTTP/2 from browsers").is_empty());
    }

    #[test]
    fn data_loads_and_links_packages() {
        let d = &*DATA;
        assert!(d.packages.len() > 500);
        assert!(dependencies("jinja2").contains_key("markupsafe"));
        assert!(d.idf("tokio") < d.idf("x25519mlkem768"));
    }
}
