//! How well a judge does on labelled pairs: `agentmesh judge --eval`,
//! the held-out test, tuning's own figures. Pure arithmetic on (p,
//! relevant) pairs.

use serde::{Deserialize, Serialize};

use crate::{Input, Preset, Status};

/// One line of an `--eval` file: a pair and its label. Keys other than
/// these (`id`, `reason`, `source`, …) are ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct LabelledPair {
    /// The broadcast's text.
    pub broadcast: String,
    /// Who sent it, if known.
    #[serde(default)]
    pub sender: Option<String>,
    /// The mailbox's profile.
    #[serde(default)]
    pub profile: String,
    /// Its goal.
    #[serde(default)]
    pub goal: String,
    /// Its status.
    pub status: Status,
    /// Its `not_for_me` notes, oldest first.
    #[serde(default)]
    pub notes: Option<Vec<String>>,
    /// Whether the mailbox's session must change or decide something
    /// because of the broadcast.
    pub relevant: Option<bool>,
}

impl LabelledPair {
    /// The judge's input for the pair.
    pub fn input(&self) -> Input {
        Input {
            broadcast: self.broadcast.clone(),
            sender: self.sender.clone(),
            profile: self.profile.clone(),
            goal: self.goal.clone(),
            status: self.status,
            notes: self.notes.clone().unwrap_or_default(),
            mailbox: None,
        }
    }
}

/// Reads an `--eval` file: one labelled pair a line (blank lines
/// skipped). An error names the line and what is wrong with it.
pub fn parse_pairs(text: &str) -> Result<Vec<(LabelledPair, bool)>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let pair: LabelledPair =
            serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        let Some(relevant) = pair.relevant else {
            return Err(format!(
                "line {}: no \"relevant\": every pair needs \"relevant\": true or false",
                i + 1
            ));
        };
        out.push((pair, relevant));
    }
    if out.is_empty() {
        return Err("no pairs: give one JSON object a line".into());
    }
    Ok(out)
}

/// What a threshold does on labelled pairs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PresetFigures {
    /// The probability a pair must reach to be delivered.
    pub threshold: f64,
    /// Delivered relevant / delivered (`null` when nothing is delivered).
    pub precision: Option<f64>,
    /// Delivered relevant / relevant (`null` when nothing is relevant).
    pub recall: Option<f64>,
    /// Pairs delivered.
    pub delivered: usize,
}

/// The three presets' figures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Presets {
    /// At `strict`.
    pub strict: PresetFigures,
    /// At `balanced`.
    pub balanced: PresetFigures,
    /// At `loose`.
    pub loose: PresetFigures,
}

/// `agentmesh judge --eval --json`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// Pairs judged.
    pub pairs: usize,
    /// Relevant pairs among them.
    pub relevant: usize,
    /// The probability that a relevant pair scores above an irrelevant
    /// one (ties count half); `null` without both kinds.
    pub auc: Option<f64>,
    /// Each preset's figures.
    pub presets: Presets,
    /// The best precision at a threshold that delivers at least 90% of
    /// the relevant pairs; `null` without relevant pairs.
    pub precision_at_90_recall: Option<f64>,
}

/// The figures of one threshold.
pub fn at_threshold(scored: &[(f64, bool)], threshold: f64) -> PresetFigures {
    let relevant = scored.iter().filter(|(_, r)| *r).count();
    let delivered: Vec<bool> = scored
        .iter()
        .filter(|(p, _)| *p >= threshold)
        .map(|(_, r)| *r)
        .collect();
    let hits = delivered.iter().filter(|r| **r).count();
    PresetFigures {
        threshold,
        precision: (!delivered.is_empty()).then(|| hits as f64 / delivered.len() as f64),
        recall: (relevant > 0).then(|| hits as f64 / relevant as f64),
        delivered: delivered.len(),
    }
}

/// The area under the ROC curve: how often a relevant pair outranks an
/// irrelevant one (ties half).
pub fn auc(scored: &[(f64, bool)]) -> Option<f64> {
    let mut sorted: Vec<(f64, bool)> = scored.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let pos = sorted.iter().filter(|(_, r)| *r).count();
    let neg = sorted.len() - pos;
    if pos == 0 || neg == 0 {
        return None;
    }
    // Mann-Whitney U with midranks for ties.
    let mut rank_sum = 0.0;
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j < sorted.len() && sorted[j].0 == sorted[i].0 {
            j += 1;
        }
        let midrank = (i + j + 1) as f64 / 2.0;
        rank_sum += midrank * sorted[i..j].iter().filter(|(_, r)| *r).count() as f64;
        i = j;
    }
    let u = rank_sum - (pos * (pos + 1)) as f64 / 2.0;
    Some(u / (pos * neg) as f64)
}

/// The highest threshold that still delivers `recall` of the relevant
/// pairs (infinite when none is relevant: deliver nothing).
pub fn threshold_for_recall(scored: &[(f64, bool)], recall: f64) -> f64 {
    let mut rel: Vec<f64> = scored.iter().filter(|(_, r)| *r).map(|(p, _)| *p).collect();
    rel.sort_by(|a, b| b.total_cmp(a));
    if rel.is_empty() {
        return f64::INFINITY;
    }
    let need = ((recall * rel.len() as f64 - 1e-9).ceil() as usize).clamp(1, rel.len());
    rel[need - 1]
}

/// The lowest threshold whose precision is at least `precision` (so the
/// most is delivered at that precision); the highest score when none is.
pub fn threshold_for_precision(scored: &[(f64, bool)], precision: f64) -> f64 {
    let mut sorted: Vec<(f64, bool)> = scored.to_vec();
    sorted.sort_by(|a, b| b.0.total_cmp(&a.0));
    let (mut hits, mut best) = (0usize, sorted.first().map_or(f64::INFINITY, |s| s.0));
    let mut i = 0;
    while i < sorted.len() {
        let t = sorted[i].0;
        while i < sorted.len() && sorted[i].0 == t {
            hits += usize::from(sorted[i].1);
            i += 1;
        }
        if hits as f64 / i as f64 >= precision {
            best = t;
        }
    }
    best
}

/// Every figure of `--eval` for scored pairs and the presets' thresholds.
pub fn evaluate(scored: &[(f64, bool)], thresholds: [f64; 3]) -> Evaluation {
    let relevant = scored.iter().filter(|(_, r)| *r).count();
    Evaluation {
        pairs: scored.len(),
        relevant,
        auc: auc(scored),
        presets: Presets {
            strict: at_threshold(scored, thresholds[0]),
            balanced: at_threshold(scored, thresholds[1]),
            loose: at_threshold(scored, thresholds[2]),
        },
        precision_at_90_recall: (relevant > 0)
            .then(|| at_threshold(scored, threshold_for_recall(scored, 0.9)).precision)
            .flatten(),
    }
}

/// The built-in judge's thresholds, strict to loose.
pub fn builtin_thresholds() -> [f64; 3] {
    Preset::ALL.map(Preset::threshold)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auc_counts_pairs_ranked_right_and_ties_half() {
        assert_eq!(auc(&[(0.9, true), (0.1, false)]), Some(1.0));
        assert_eq!(auc(&[(0.1, true), (0.9, false)]), Some(0.0));
        assert_eq!(auc(&[(0.5, true), (0.5, false)]), Some(0.5));
        let s = [(0.9, true), (0.8, false), (0.7, true), (0.2, false)];
        assert_eq!(auc(&s), Some(0.75));
        assert_eq!(auc(&[(0.9, true)]), None);
    }

    #[test]
    fn thresholds_reach_their_recall_and_precision() {
        let s = [
            (0.9, true),
            (0.8, true),
            (0.7, false),
            (0.6, true),
            (0.5, false),
            (0.4, true),
        ];
        assert_eq!(threshold_for_recall(&s, 0.5), 0.8);
        assert_eq!(threshold_for_recall(&s, 0.75), 0.6);
        assert_eq!(threshold_for_recall(&s, 1.0), 0.4);
        assert_eq!(threshold_for_precision(&s, 1.0), 0.8);
        assert_eq!(threshold_for_precision(&s, 0.75), 0.6);
        let f = at_threshold(&s, 0.6);
        assert_eq!(
            (f.delivered, f.precision, f.recall),
            (4, Some(0.75), Some(0.75))
        );
        let e = evaluate(&s, [0.8, 0.6, 0.4]);
        assert_eq!((e.pairs, e.relevant), (6, 4));
        assert_eq!(e.precision_at_90_recall, Some(4.0 / 6.0));
        assert_eq!(at_threshold(&s, 2.0).precision, None);
    }

    #[test]
    fn a_line_without_its_label_is_named() {
        let ok = r#"{"broadcast":"b","profile":"p","goal":"","status":"idle","relevant":true,"id":"x","source":"s"}"#;
        let missing = r#"{"broadcast":"b","profile":"p","goal":"","status":"idle"}"#;
        assert_eq!(parse_pairs(ok).unwrap().len(), 1);
        let err = parse_pairs(&format!("{ok}\n\n{missing}\n")).unwrap_err();
        assert!(err.starts_with("line 3: no \"relevant\""), "{err}");
        assert!(parse_pairs("{").unwrap_err().starts_with("line 1:"));
    }
}
