//! What the judge measures of one (broadcast, mailbox) pair: each a
//! number, most between 0 and 1, weighed by the tuned model.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::LazyLock;

use regex::Regex;

use super::scope::{organisation, scope};
use super::text::{self, DATA, pattern};

/// The measured features, in the order of the model's weights.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Features {
    /// IDF-weighted word overlap of broadcast and profile+goal.
    pub cos: f64,
    /// Shared thesaurus concepts (0, 1/3, 2/3, 1).
    pub concepts: f64,
    /// The profile names a package the broadcast is about (1 for the
    /// first one the broadcast names, 0.6 for the others).
    pub direct: f64,
    /// A package the broadcast is about is a dependency of one the
    /// profile names, weighed down by depth and by how many depend on it.
    pub dep: f64,
    /// The description of a package the broadcast is about matches the
    /// profile's words.
    pub desc: f64,
    /// The broadcast exempts someone, and the profile matches the exempt
    /// part more than the affected part.
    pub carve_exempt: f64,
    /// The broadcast exempts someone, and the profile matches the affected
    /// part more.
    pub carve_affected: f64,
    /// The broadcast is scoped to the profile's organisation (0.5: the
    /// profile names it).
    pub org_match: f64,
    /// The broadcast is scoped to an organisation the profile is not of.
    pub org_mismatch: f64,
    /// A version the profile gives equals one the broadcast gives.
    pub v_eq: f64,
    /// The profile's version is below all the broadcast gives, and the
    /// broadcast says "before", "older", ….
    pub v_below_cue: f64,
    /// Below, without such a word.
    pub v_below: f64,
    /// The profile's version is above all the broadcast gives.
    pub v_above: f64,
    /// The mailbox has no profile (judged on its goal alone).
    pub empty: f64,
    /// The strongest evidence that the broadcast's subject is the
    /// profile's: max of direct, 2×dep, desc, concepts.
    pub subject: f64,
    /// subject × carve_exempt.
    pub subject_exempt: f64,
    /// subject × v_above.
    pub subject_above: f64,
    /// subject × v_eq.
    pub subject_eq: f64,
    /// subject × (v_below + v_below_cue).
    pub subject_below: f64,
    /// subject × cos.
    pub subject_cos: f64,
    /// No evidence of a shared subject at all.
    pub no_subject: f64,
    /// The best [`Features::cos`] of any one sentence of the profile or
    /// the goal (a profile says what it does one sentence at a time).
    pub cos_sentence: f64,
    /// A package the broadcast is about is a term of a thesaurus concept
    /// the profile names ("our own regexes" for `regex`; 0.6 for a package
    /// it names after the first).
    pub concept_package: f64,
    /// The broadcast's packages are of ecosystems (Rust, Python, Node)
    /// none of which the profile works in.
    pub eco_mismatch: f64,
    /// The description of a package the profile names matches the
    /// broadcast's words (tonic, "gRPC over HTTP/2", for an HTTP/2 fix).
    pub profile_desc: f64,
    /// TF-IDF cosine of the broadcast with the profile and goal (IDF from
    /// Debian's package descriptions).
    pub tfidf: f64,
    /// TF-IDF cosine of the broadcast with the goal alone.
    pub tfidf_goal: f64,
    /// The rarity of the rarest word both share, over the rarest a word
    /// can be (0–1).
    pub rare_shared: f64,
    /// They share a named thing: a compound (`/v1/orders`, `hyper-util`)
    /// or a word with a digit (`log4j`, `v2`).
    pub shared_name: f64,
}

/// How many features there are.
pub const COUNT: usize = 29;

/// Their names, in order (for the tuning output and the benchmark).
pub const NAMES: [&str; COUNT] = [
    "cos",
    "concepts",
    "direct",
    "dep",
    "desc",
    "carve_exempt",
    "carve_affected",
    "org_match",
    "org_mismatch",
    "v_eq",
    "v_below_cue",
    "v_below",
    "v_above",
    "empty",
    "subject",
    "subject_exempt",
    "subject_above",
    "subject_eq",
    "subject_below",
    "subject_cos",
    "no_subject",
    "cos_sentence",
    "concept_package",
    "eco_mismatch",
    "profile_desc",
    "tfidf",
    "tfidf_goal",
    "rare_shared",
    "shared_name",
];

impl Features {
    /// As the model reads them.
    pub fn to_array(&self) -> [f64; COUNT] {
        [
            self.cos,
            self.concepts,
            self.direct,
            self.dep,
            self.desc,
            self.carve_exempt,
            self.carve_affected,
            self.org_match,
            self.org_mismatch,
            self.v_eq,
            self.v_below_cue,
            self.v_below,
            self.v_above,
            self.empty,
            self.subject,
            self.subject_exempt,
            self.subject_above,
            self.subject_eq,
            self.subject_below,
            self.subject_cos,
            self.no_subject,
            self.cos_sentence,
            self.concept_package,
            self.eco_mismatch,
            self.profile_desc,
            self.tfidf,
            self.tfidf_goal,
            self.rare_shared,
            self.shared_name,
        ]
    }

    /// Measures a broadcast's text against a mailbox's profile and goal
    /// (analysing the broadcast for this pair alone).
    pub fn of(broadcast: &str, profile: &str, goal: &str) -> Features {
        Features::measure(&Broadcast::analyse(broadcast), profile, goal)
    }

    /// Measures an analysed broadcast against a mailbox's profile and goal.
    pub fn measure(b: &Broadcast, profile: &str, goal: &str) -> Features {
        let data = &*DATA;
        let profile = bounded(profile, MAX_PROFILE_READ);
        let goal = bounded(goal, MAX_PROFILE_READ);
        let stated = format!("{profile} {goal}");
        let prof = drop_negated(&format!("{profile} \n {goal}"));
        let pw = text::word_set(&prof);
        let shared = data.weight(b.words.intersection(&pw));
        let cos = shared / (b.weight * data.weight(&pw).max(20.0)).sqrt().max(1e-9);
        let cos_of = |t: &str| {
            let w = text::word_set(t);
            data.weight(b.words.intersection(&w))
                / (b.weight * data.weight(&w).max(10.0)).sqrt().max(1e-9)
        };
        let cos_sentence = SENTENCE.split(&prof).map(cos_of).fold(0.0, f64::max);
        let ptf = TermFrequencies::of(&prof);
        let tfidf = b.tf.cosine(&ptf);
        let tfidf_goal = b.tf.cosine(&TermFrequencies::of(goal));
        let most = data.idf("");
        let rare_shared = b
            .words
            .intersection(&pw)
            .map(|w| data.idf(w))
            .fold(0.0, f64::max)
            / most;
        let shared_name =
            if b.words.intersection(&pw).any(|w| {
                w.contains(['-', '/', '.', '_']) || w.contains(|c: char| c.is_ascii_digit())
            }) {
                1.0
            } else {
                0.0
            };

        let pc = text::concepts(&prof);
        let concepts = b.concepts.intersection(&pc).count().min(3) as f64 / 3.0;

        let pp = text::packages(&prof);
        let pe = text::ecosystems(&prof, &pp);
        let mut pdeps: HashMap<String, u32> = HashMap::new();
        for p in &pp {
            for (q, d) in text::dependencies(p) {
                let e = pdeps.entry(q).or_insert(d);
                *e = (*e).min(d);
            }
        }
        let (mut direct, mut dep, mut desc) = (0.0f64, 0.0f64, 0.0f64);
        let mut concept_package = 0.0f64;
        for (i, p) in b.packages.iter().enumerate() {
            let pos = if i == 0 { 1.0 } else { 0.6 };
            if p.concepts.iter().any(|c| pc.contains(c)) {
                concept_package = concept_package.max(pos);
            }
            if pp.contains(&p.name) {
                direct = direct.max(pos);
            } else if let Some(d) = pdeps.get(&p.name) {
                // A part of the profile's package the profile names
                // (`libp2p-gossipsub` under libp2p, "with gossipsub").
                let part = p.name.contains('-')
                    && p.name.split('-').any(|w| {
                        pw.contains(w) && data.idf(w) >= RARE && !pp.iter().any(|q| q.contains(w))
                    });
                let v = if part { 0.5 } else { p.specific / *d as f64 };
                dep = dep.max(pos * v);
            }
            if !p.desc.is_empty() {
                let hit: f64 = p
                    .desc
                    .iter()
                    .filter(|w| pw.contains(*w))
                    .map(|w| data.idf(w))
                    .sum();
                desc = desc.max(pos * hit / (p.desc_weight + 1.0));
            }
        }

        let (carve_exempt, carve_affected) = match &b.carve {
            None => (0.0, 0.0),
            Some((exempt, affected)) => {
                let e: f64 = exempt
                    .iter()
                    .filter(|w| pw.contains(*w))
                    .map(|w| data.idf(w))
                    .sum();
                let a: f64 = affected
                    .iter()
                    .filter(|w| pw.contains(*w))
                    .map(|w| data.idf(w))
                    .sum();
                (if e > a { 1.0 } else { 0.0 }, if a > e { 1.0 } else { 0.0 })
            }
        };
        let (org_match, org_mismatch) = organisation(b.scope.as_deref(), profile, &stated);
        let v = versions(b, &stated);
        let subject = direct
            .max((2.0 * dep).min(1.0))
            .max(desc)
            .max(concepts)
            .max(concept_package);
        Features {
            cos,
            concepts,
            direct,
            dep,
            desc,
            carve_exempt,
            carve_affected,
            org_match,
            org_mismatch,
            v_eq: v.eq,
            v_below_cue: v.below_cue,
            v_below: v.below,
            v_above: v.above,
            empty: if profile.trim().is_empty() { 1.0 } else { 0.0 },
            subject,
            subject_exempt: subject * carve_exempt,
            subject_above: subject * v.above,
            subject_eq: subject * v.eq,
            subject_below: subject * (v.below + v.below_cue),
            subject_cos: subject * cos,
            no_subject: if subject == 0.0 { 1.0 } else { 0.0 },
            cos_sentence,
            concept_package,
            profile_desc: pp
                .iter()
                .filter(|p| !b.packages.iter().any(|n| n.name == **p))
                .map(|p| {
                    let d = text::word_set(&data.packages[p].desc);
                    data.weight(d.intersection(&b.words)) / (data.weight(&d) + 1.0)
                })
                .fold(0.0, f64::max),
            tfidf,
            tfidf_goal,
            rare_shared,
            shared_name,
            eco_mismatch: if !b.ecosystems.is_empty()
                && !pe.is_empty()
                && b.ecosystems.is_disjoint(&pe)
            {
                1.0
            } else {
                0.0
            },
        }
    }
}

/// The rarity (IDF) of a word in fewer than about one in twenty of the
/// packages' texts: what a description or a package name's part must
/// reach to say something of its own.
const RARE: f64 = 4.0;

/// How much of a broadcast the judge reads: its first 16 KiB (what a
/// broadcast is about is said at its start; a 64 KiB one would cost 20 ms
/// a mailbox).
pub const MAX_BROADCAST_READ: usize = 16 * 1024;

/// How much of a profile, a goal or a note the judge reads (a profile is
/// at most 1 KiB, a goal 256 bytes; `agentmesh judge` takes any).
pub const MAX_PROFILE_READ: usize = 2 * 1024;

/// `text` cut to at most `max` bytes, on a character boundary.
pub fn bounded(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// One package a broadcast names, with what the judge needs of it.
#[derive(Debug, Clone)]
pub struct Named {
    name: String,
    /// 1 / (1 + ln(1 + packages depending on it)).
    specific: f64,
    /// Its description's words that the broadcast does not use itself.
    desc: Vec<String>,
    desc_weight: f64,
    /// The thesaurus's concepts its name is a term of.
    concepts: BTreeSet<u32>,
}

/// A text's words with their TF-IDF weights (sublinear term frequency,
/// IDF from [`text::Data::idf`]) and the vector's length.
#[derive(Debug, Clone, Default)]
pub struct TermFrequencies {
    weights: BTreeMap<String, f64>,
    norm: f64,
}

impl TermFrequencies {
    /// Of a text.
    pub fn of(text: &str) -> TermFrequencies {
        let data = &*DATA;
        let mut tf: BTreeMap<String, f64> = BTreeMap::new();
        for w in text::words(text) {
            *tf.entry(w).or_default() += 1.0;
        }
        let weights: BTreeMap<String, f64> = tf
            .into_iter()
            .map(|(w, n)| {
                let x = (1.0 + f64::ln(n)) * data.idf(&w);
                (w, x)
            })
            .collect();
        let norm = weights.values().map(|x| x * x).sum::<f64>().sqrt();
        TermFrequencies { weights, norm }
    }

    /// The cosine of two texts' vectors (0 when either is empty).
    pub fn cosine(&self, other: &TermFrequencies) -> f64 {
        if self.norm == 0.0 || other.norm == 0.0 {
            return 0.0;
        }
        let (small, large) = if self.weights.len() <= other.weights.len() {
            (self, other)
        } else {
            (other, self)
        };
        let dot: f64 = small
            .weights
            .iter()
            .filter_map(|(w, x)| large.weights.get(w).map(|y| x * y))
            .sum();
        dot / (self.norm * other.norm)
    }
}

/// A broadcast, read once for all the mailboxes it is judged for.
#[derive(Debug, Clone)]
pub struct Broadcast {
    words: BTreeSet<String>,
    tf: TermFrequencies,
    weight: f64,
    concepts: BTreeSet<u32>,
    packages: Vec<Named>,
    /// The words only its exempt part uses, and only its affected part.
    carve: Option<(BTreeSet<String>, BTreeSet<String>)>,
    scope: Option<String>,
    versions: BTreeMap<String, Vec<text::Version>>,
    /// The names whose version it gives as a line below which something
    /// holds (`sled before 0.34.4`).
    before: BTreeSet<String>,
    /// The ecosystems of the packages it names.
    ecosystems: BTreeSet<&'static str>,
}

impl Broadcast {
    /// Reads a broadcast's first [`MAX_BROADCAST_READ`] bytes.
    pub fn analyse(text: &str) -> Broadcast {
        let data = &*DATA;
        let text = bounded(text, MAX_BROADCAST_READ);
        let words = text::word_set(text);
        let names = text::packages(text);
        let (versions, before) = text::versions_cued(text);
        let packages = names
            .iter()
            .cloned()
            .map(|name| {
                let hub = data.dependents.get(&name).copied().unwrap_or(0) as f64;
                let desc: Vec<String> = text::word_set(&data.packages[&name].desc)
                    .into_iter()
                    .filter(|w| !words.contains(w) && data.idf(w) >= RARE)
                    .collect();
                Named {
                    concepts: text::concepts(&name),
                    specific: 1.0 / (1.0 + hub.ln_1p()),
                    desc_weight: data.weight(&desc),
                    desc,
                    name,
                }
            })
            .collect();
        Broadcast {
            tf: TermFrequencies::of(text),
            weight: data.weight(&words),
            concepts: text::concepts(text),
            packages,
            carve: carve(text, &names),
            ecosystems: names
                .iter()
                .filter_map(|p| data.packages.get(p).and_then(|p| p.eco))
                .collect(),
            scope: scope(text).map(str::to_owned),
            versions: versions
                .into_iter()
                .map(|(name, vs)| (name, specific(vs)))
                .collect(),
            before,
            words,
        }
    }
}

/// How much of a broadcast a `not_for_me` note covers (0–1): the rarity
/// weight of the words they share over that of the broadcast's (or the
/// note's, if larger) words. A note holding the broadcast it was about
/// covers a near-identical one almost whole; a few words of reason ("not
/// for me: tokio timer") cover only the part of a broadcast they name.
pub fn likeness(b: &Broadcast, note: &str) -> f64 {
    let data = &*DATA;
    let n = text::word_set(bounded(note, MAX_PROFILE_READ));
    let shared = data.weight(b.words.intersection(&n));
    let norm = (b.weight * b.weight.max(data.weight(&n))).sqrt();
    if norm == 0.0 { 0.0 } else { shared / norm }
}

static SENTENCE: LazyLock<Regex> = LazyLock::new(|| pattern(r"[.;!?]\s+|\n"));

static NEGATED: LazyLock<Regex> = LazyLock::new(|| {
    pattern(r"(?i)\b(?:no|not|never|without|nothing|none of)\s+((?:[\w./+-]+(?:,?\s+|$)){1,3})")
});

/// Drops what a profile says it does not do ("no sampling", "No Rust").
fn drop_negated(text: &str) -> String {
    NEGATED.replace_all(text, " ").into_owned()
}

static EXEMPT: LazyLock<Regex> = LazyLock::new(|| {
    pattern(
        r"(?i)(?:[^.;:]|[.:]\S)*\b(need no|needs no|no action|nothing to do|untouched|unaffected|not affected|not exposed|is fine|are fine|won't notice|isn't|aren't|never need|nobody else|no change|not hit|exempt)\b(?:[^.;]|\.\S)*",
    )
});

static CONDITION_DENIED: LazyLock<Regex> = LazyLock::new(|| {
    pattern(r"(?i)\b(?:never|not|don't|doesn't|do not|does not|no longer)\b[^,;]*")
});

/// A carve-out ("Linux and macOS builds are untouched"): the words only
/// its exempt part uses, and those only the rest uses; `None` without one.
fn carve(broadcast: &str, packages: &[String]) -> Option<(BTreeSet<String>, BTreeSet<String>)> {
    let mut exempt = String::new();
    // What a clause's condition denies names who is affected: "if your
    // code never sets a linger timeout, there is nothing to do".
    let mut denied = String::new();
    for c in EXEMPT.captures_iter(broadcast) {
        let (Some(all), Some(marker)) = (c.get(0), c.get(1)) else {
            continue;
        };
        let condition = &broadcast[all.start()..marker.start()];
        match CONDITION_DENIED.find(condition) {
            Some(d) => {
                exempt.push_str(&condition[..d.start()]);
                denied.push_str(d.as_str());
                denied.push(' ');
            }
            None => exempt.push_str(condition),
        }
        exempt.push(' ');
        exempt.push_str(&broadcast[marker.start()..all.end()]);
        exempt.push(' ');
    }
    if exempt.is_empty() {
        return None;
    }
    let affected = format!("{} {denied}", EXEMPT.replace_all(broadcast, " "));
    // The packages it is about say who uses them, not who is exempt.
    let named: BTreeSet<String> = packages.iter().flat_map(|p| text::word_set(p)).collect();
    let ew: BTreeSet<String> = text::word_set(&exempt)
        .difference(&named)
        .cloned()
        .collect();
    let aw: BTreeSet<String> = text::word_set(&affected)
        .difference(&named)
        .cloned()
        .collect();
    Some((
        ew.difference(&aw).cloned().collect(),
        aw.difference(&ew).cloned().collect(),
    ))
}

struct VersionFeatures {
    eq: f64,
    below_cue: f64,
    below: f64,
    above: f64,
}

/// A package's versions without those that only name a family of the
/// others ("Express 4 below 4.21.2": the 4 says which line, 4.21.2 is
/// the version; 4.19.2 sits below it, not on it).
fn specific(vs: Vec<text::Version>) -> Vec<text::Version> {
    let family = |v: &text::Version| {
        vs.iter()
            .any(|w| w.len() > v.len() && w.starts_with(v.as_slice()))
    };
    let keep: Vec<bool> = vs.iter().map(|v| !family(v)).collect();
    vs.iter()
        .zip(keep)
        .filter(|(_, k)| *k)
        .map(|(v, _)| v.clone())
        .collect()
}

/// How the versions the profile gives sit against the broadcast's.
fn versions(b: &Broadcast, stated: &str) -> VersionFeatures {
    let bv = &b.versions;
    let pv: BTreeMap<String, Vec<text::Version>> = text::versions(stated)
        .into_iter()
        .map(|(name, vs)| (name, specific(vs)))
        .collect();
    // A package's versions say more than a runtime's: the runtime's are
    // read only when no package's compare.
    let packages: Vec<&String> = bv
        .keys()
        .filter(|p| pv.contains_key(*p) && !text::is_runtime(p))
        .collect();
    let (mut eq, mut below_cue, mut below, mut above) = (0.0, 0.0, 0.0, 0.0);
    for (p, vs) in bv {
        let Some(mine) = pv.get(p) else { continue };
        if !packages.is_empty() && text::is_runtime(p) {
            continue;
        }
        for v in mine {
            let c: Vec<_> = vs.iter().map(|w| text::compare(v, w)).collect();
            if c.contains(&std::cmp::Ordering::Equal) {
                eq = 1.0;
            } else if c.iter().all(|o| o.is_lt()) {
                if b.before.contains(p) {
                    below_cue = 1.0;
                } else {
                    below = 1.0;
                }
            } else if c.iter().all(|o| o.is_gt()) {
                above = 1.0;
            }
        }
    }
    VersionFeatures {
        eq,
        below_cue,
        below,
        above,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denied_condition_names_the_affected() {
        let b = "tokio 1.53 deprecates set_linger. If your code never sets a linger timeout on its sockets, there is nothing to do.";
        let (exempt, affected) = carve(b, &["tokio".to_string()]).expect("a carve-out");
        assert!(affected.contains("linger") && affected.contains("socket"));
        assert!(!exempt.contains("linger") && !affected.contains("tokio"));
        let f = Features::of(b, "Sets SO_LINGER to zero on upstream sockets.", "");
        assert_eq!((f.carve_affected, f.carve_exempt), (1.0, 0.0));
        // A version's dots end no clause.
        let b = "h2 0.4.20 closes DoS holes; services that only speak HTTP/1.1 are not exposed.";
        let (exempt, _) = carve(b, &["h2".to_string()]).expect("a carve-out");
        assert!(exempt.contains("speak"), "{exempt:?}");
    }

    #[test]
    fn another_organisations_mailbox_is_a_mismatch() {
        let b = "Tidepool Travel repos: every Tidepool repo moves to Node 20.";
        let org = |profile: &str, goal: &str| {
            let f = Features::of(b, profile, goal);
            (f.org_match, f.org_mismatch)
        };
        // Named in the profile's first sentence, without "Client: …".
        assert_eq!(
            org("Tidepool Travel booking site. React 18.", ""),
            (1.0, 0.0)
        );
        assert_eq!(
            org("Kitewright Studio CI. Runs every client's runners.", ""),
            (0.0, 1.0)
        );
        // Named later: half a match. No profile: nothing known.
        assert_eq!(
            org("Kitewright CI.", "Moving Tidepool's jobs to Node 20."),
            (0.5, 0.0)
        );
        assert_eq!(org("", "Speeding up the import."), (0.0, 0.0));
        // A first sentence ends at a line's end too.
        assert_eq!(
            org("Kitewright CI.\nMoves Tidepool's jobs to Node 20.", ""),
            (0.5, 0.0)
        );
    }

    #[test]
    fn a_family_version_is_not_the_version() {
        // "Express 4 below 4.21.2": 4.19.2 sits below the fix, not on it.
        let b = "Express 4 below 4.21.2 is vulnerable; bump every Express 4 service to 4.21.2.";
        let f = Features::of(b, "BFF on Express 4.19.2 and helmet 7.1.", "");
        assert_eq!((f.v_eq, f.v_below_cue + f.v_below), (0.0, 1.0));
        let f = Features::of(b, "BFF on Express 4.21.2.", "");
        assert_eq!(f.v_eq, 1.0);
        // A family named alone is still compared.
        let f = Features::of(
            "Express 4 reaches its end of life.",
            "BFF on Express 4.19.2.",
            "",
        );
        assert_eq!(f.v_eq, 1.0);
    }

    #[test]
    fn another_ecosystem_is_a_mismatch() {
        let b = "tokio 1.44.2 fixes a broadcast channel race.";
        assert_eq!(
            Features::of(b, "Python 3.10 workers, pandas.", "").eco_mismatch,
            1.0
        );
        assert_eq!(
            Features::of(b, "Rust service on tokio.", "").eco_mismatch,
            0.0
        );
    }
}
