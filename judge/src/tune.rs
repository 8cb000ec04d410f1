//! Tuning the judge on the labelled set's tuning part, and scoring it on
//! any part: what `agentmesh-bench bus --tune` writes into `weights.rs`,
//! what the held-out test and the benchmark measure.
//!
//! The model is logistic regression (L2, C = 1, classes weighed to
//! balance) fitted by Newton's method, so the same data always gives the
//! same weights. The presets' thresholds are chosen on out-of-fold
//! probabilities (5 folds by broadcast, within the tuning part), so they
//! are what an unseen broadcast would get, not what the fitted pairs got:
//! strict at 75% recall, balanced at 90%, loose at 97%.

use std::collections::HashSet;
use std::fmt::Write as _;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::features::{COUNT, Features, NAMES};
use crate::{Preset, Status};

/// One labelled pair of `judge/labelled/labelled.jsonl`.
#[derive(Debug, Clone, Deserialize)]
pub struct Labelled {
    /// Its id (`p001`…).
    pub id: String,
    /// The broadcast.
    pub broadcast: String,
    /// Its sender.
    pub sender: String,
    /// The receiving mailbox's profile.
    pub profile: String,
    /// Its goal.
    pub goal: String,
    /// Its status.
    pub status: Status,
    /// Whether its person would want the broadcast.
    pub relevant: bool,
    /// Which hard case it is.
    pub kind: String,
}

impl Labelled {
    /// The judge's input for this pair.
    pub fn input(&self) -> super::Input {
        super::Input {
            broadcast: self.broadcast.clone(),
            sender: Some(self.sender.clone()),
            profile: self.profile.clone(),
            goal: self.goal.clone(),
            status: self.status,
            notes: vec![],
            mailbox: None,
        }
    }
}

/// `judge/labelled/split.json`.
#[derive(Debug, Clone, Deserialize)]
pub struct Split {
    /// The seed the split was drawn with.
    pub seed: u64,
    /// The ids of the tuning part.
    pub tuning: Vec<String>,
    /// The ids of the held-out part.
    pub held_out: Vec<String>,
}

/// Parses `labelled.jsonl`.
pub fn parse_labelled(text: &str) -> Result<Vec<Labelled>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

/// The pairs of `all` whose ids are in `ids`, in file order.
pub fn part<'a>(all: &'a [Labelled], ids: &[String]) -> Vec<&'a Labelled> {
    let ids: HashSet<&str> = ids.iter().map(String::as_str).collect();
    all.iter().filter(|l| ids.contains(l.id.as_str())).collect()
}

/// A fitted model: weights, bias, and the presets' thresholds.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// One weight per feature.
    pub weights: [f64; COUNT],
    /// The intercept.
    pub bias: f64,
    /// strict, balanced, loose.
    pub thresholds: [f64; 3],
    /// Out-of-fold precision on the tuning part at each threshold (what
    /// tuning can know of how the model does on pairs it did not see).
    pub out_of_fold_precision: [f64; 3],
}

fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

/// Fits logistic regression (L2 on the weights, not the bias; C = 1;
/// balanced class weights) by Newton's method.
fn fit(x: &[[f64; COUNT]], y: &[bool]) -> ([f64; COUNT], f64) {
    const C: f64 = 1.0;
    let n = x.len() as f64;
    let pos = y.iter().filter(|b| **b).count() as f64;
    let weight = |b: bool| {
        if b {
            n / (2.0 * pos)
        } else {
            n / (2.0 * (n - pos))
        }
    };
    let d = COUNT + 1;
    let mut theta = vec![0.0; d];
    for _ in 0..100 {
        let mut g = vec![0.0; d];
        let mut h = vec![vec![0.0; d]; d];
        for j in 0..COUNT {
            g[j] = theta[j];
            h[j][j] = 1.0;
        }
        for (xi, &yi) in x.iter().zip(y) {
            let row: Vec<f64> = xi.iter().copied().chain([1.0]).collect();
            let z: f64 = row.iter().zip(&theta).map(|(a, b)| a * b).sum();
            let p = sigmoid(z);
            let s = C * weight(yi);
            let r = p - if yi { 1.0 } else { 0.0 };
            for a in 0..d {
                g[a] += s * r * row[a];
                for b in 0..d {
                    h[a][b] += s * p * (1.0 - p) * row[a] * row[b];
                }
            }
        }
        let step = solve(h, g);
        let size: f64 = step.iter().map(|s| s * s).sum::<f64>().sqrt();
        for (t, s) in theta.iter_mut().zip(&step) {
            *t -= s;
        }
        if size < 1e-12 {
            break;
        }
    }
    let mut w = [0.0; COUNT];
    w.copy_from_slice(&theta[..COUNT]);
    (w, theta[COUNT])
}

/// Solves `a · x = b` by Gaussian elimination with partial pivoting (`a`
/// is symmetric positive definite here: the L2 term sees to it).
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Vec<f64> {
    let n = b.len();
    for col in 0..n {
        let piv = (col..n)
            .max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))
            .unwrap_or(col);
        a.swap(col, piv);
        b.swap(col, piv);
        let (top, rest) = a.split_at_mut(col + 1);
        let pivot = &top[col];
        for (k, row) in rest.iter_mut().enumerate() {
            let f = row[col] / pivot[col];
            for (x, p) in row[col..].iter_mut().zip(&pivot[col..]) {
                *x -= f * p;
            }
            b[col + 1 + k] -= f * b[col];
        }
    }
    let mut x = vec![0.0; n];
    for r in (0..n).rev() {
        let s: f64 = (r + 1..n).map(|c| a[r][c] * x[c]).sum();
        x[r] = (b[r] - s) / a[r][r];
    }
    x
}

fn features(rows: &[&Labelled]) -> Vec<[f64; COUNT]> {
    rows.iter()
        .map(|l| Features::of(&l.broadcast, &l.profile, &l.goal).to_array())
        .collect()
}

/// The recall each preset is set at, strict to loose.
pub const PRESET_RECALL: [f64; 3] = [0.75, 0.90, 0.97];

/// The highest threshold at which `probs` reach `recall` of the relevant.
fn threshold_at(probs: &[f64], y: &[bool], recall: f64) -> f64 {
    let mut rel: Vec<f64> = probs
        .iter()
        .zip(y)
        .filter(|(_, r)| **r)
        .map(|(p, _)| *p)
        .collect();
    rel.sort_by(|a, b| b.total_cmp(a));
    if rel.is_empty() {
        // Nothing relevant to recall: deliver nothing.
        return f64::INFINITY;
    }
    let need = ((recall * rel.len() as f64).ceil() as usize).clamp(1, rel.len());
    rel[need - 1]
}

/// Which of the five folds a broadcast is in.
fn fold(broadcast: &str) -> usize {
    Sha256::digest(broadcast.as_bytes())[0] as usize % 5
}

/// Out-of-fold probabilities on `tuning`: each pair scored by a model
/// fitted on the folds (by broadcast) it is not in.
pub fn out_of_fold(tuning: &[&Labelled]) -> Vec<f64> {
    let x = features(tuning);
    let y: Vec<bool> = tuning.iter().map(|l| l.relevant).collect();
    let mut oof = vec![0.0; x.len()];
    for k in 0..5 {
        let train: Vec<usize> = (0..x.len())
            .filter(|&i| fold(&tuning[i].broadcast) != k)
            .collect();
        let (w, b) = fit(
            &train.iter().map(|&i| x[i]).collect::<Vec<_>>(),
            &train.iter().map(|&i| y[i]).collect::<Vec<_>>(),
        );
        for i in (0..x.len()).filter(|&i| fold(&tuning[i].broadcast) == k) {
            oof[i] = sigmoid(b + x[i].iter().zip(w).map(|(a, c)| a * c).sum::<f64>());
        }
    }
    oof
}

/// Tunes the model on `tuning`.
pub fn tune(tuning: &[&Labelled]) -> Model {
    let x = features(tuning);
    let y: Vec<bool> = tuning.iter().map(|l| l.relevant).collect();
    let (weights, bias) = fit(&x, &y);
    let oof = out_of_fold(tuning);
    let thresholds = PRESET_RECALL.map(|r| threshold_at(&oof, &y, r));
    let out_of_fold_precision = thresholds.map(|t| {
        let delivered: Vec<bool> = oof
            .iter()
            .zip(&y)
            .filter(|(p, _)| **p >= t)
            .map(|(_, r)| *r)
            .collect();
        delivered.iter().filter(|r| **r).count() as f64 / delivered.len().max(1) as f64
    });
    Model {
        weights,
        bias,
        thresholds,
        out_of_fold_precision,
    }
}

/// `weights.rs` for a model.
pub fn render(model: &Model, tuning_pairs: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "//! The judge's weights, written by `agentmesh-bench bus --tune` from\n\
         //! the tuning part of judge/labelled/ ({tuning_pairs} pairs). Do not edit:\n\
         //! a test checks they are what `tune::tune` computes.\n"
    );
    let _ = writeln!(s, "/// One weight per feature, in `features::NAMES` order.");
    let _ = writeln!(s, "pub const WEIGHTS: [f64; super::features::COUNT] = [");
    for (w, n) in model.weights.iter().zip(NAMES) {
        let _ = writeln!(s, "    // {n}\n    {w:?},");
    }
    let _ = writeln!(s, "];\n");
    let _ = writeln!(s, "/// The intercept.");
    let _ = writeln!(s, "pub const BIAS: f64 = {:?};\n", model.bias);
    let _ = writeln!(
        s,
        "/// The thresholds of strict, balanced and loose: out-of-fold recall\n/// {:?} on the tuning part.",
        PRESET_RECALL
    );
    let _ = writeln!(
        s,
        "pub const THRESHOLDS: [f64; 3] = [{:?}, {:?}, {:?}];",
        model.thresholds[0], model.thresholds[1], model.thresholds[2]
    );
    s
}

/// Precision and recall of the built-in judge at one preset.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Score {
    /// The preset.
    pub preset: Preset,
    /// Pairs judged.
    pub pairs: usize,
    /// Relevant pairs among them.
    pub relevant: usize,
    /// Delivered and relevant.
    pub true_positives: usize,
    /// Delivered but not relevant.
    pub false_positives: usize,
    /// Delivered relevant / delivered (1 when none delivered).
    pub precision: f64,
    /// Delivered relevant / relevant.
    pub recall: f64,
}

/// Scores the built-in judge (the daemon's code path) on `rows`.
pub fn score(rows: &[&Labelled], preset: Preset) -> Score {
    let mut tp = 0;
    let mut fp = 0;
    let relevant = rows.iter().filter(|l| l.relevant).count();
    for l in rows {
        let j = super::judge(&l.input(), preset);
        if j.deliver {
            if l.relevant {
                tp += 1;
            } else {
                fp += 1;
            }
        }
    }
    Score {
        preset,
        pairs: rows.len(),
        relevant,
        true_positives: tp,
        false_positives: fp,
        precision: if tp + fp == 0 {
            1.0
        } else {
            tp as f64 / (tp + fp) as f64
        },
        recall: if relevant == 0 {
            1.0
        } else {
            tp as f64 / relevant as f64
        },
    }
}

/// The labelled set and its split, as committed (for tests and the
/// benchmark, which run from the workspace).
pub fn committed() -> (Vec<Labelled>, Split) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/labelled");
    let labelled = std::fs::read_to_string(format!("{dir}/labelled.jsonl"))
        .expect("judge/labelled/labelled.jsonl is committed");
    let split = std::fs::read_to_string(format!("{dir}/split.json"))
        .expect("judge/labelled/split.json is committed");
    (
        parse_labelled(&labelled).expect("labelled.jsonl parses"),
        serde_json::from_str(&split).expect("split.json parses"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newton_fits_a_separable_line_and_solve_solves() {
        let x = solve(vec![vec![4.0, 1.0], vec![1.0, 3.0]], vec![1.0, 2.0]);
        assert!((x[0] - 1.0 / 11.0).abs() < 1e-12 && (x[1] - 7.0 / 11.0).abs() < 1e-12);
        let mut xs = Vec::new();
        let mut ys = Vec::new();
        for i in 0..40 {
            let mut f = [0.0; COUNT];
            f[0] = i as f64 / 40.0;
            xs.push(f);
            ys.push(i >= 20);
        }
        let (w, b) = fit(&xs, &ys);
        assert!(w[0] > 0.0);
        assert!(sigmoid(b + w[0] * 0.9) > 0.5 && sigmoid(b + w[0] * 0.1) < 0.5);
    }

    /// The committed weights are what tuning on the tuning part computes:
    /// nothing of the held-out part went into them (`agentmesh-bench bus
    /// --tune` writes them).
    #[test]
    fn the_committed_weights_are_tuned_on_the_tuning_part_only() {
        let (all, split) = committed();
        let tuning = part(&all, &split.tuning);
        assert_eq!(tuning.len(), split.tuning.len());
        let model = tune(&tuning);
        let rendered = render(&model, tuning.len());
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
        let same = model
            .weights
            .iter()
            .zip(super::super::weights::WEIGHTS)
            .all(|(a, b)| close(*a, b))
            && close(model.bias, super::super::weights::BIAS)
            && model
                .thresholds
                .iter()
                .zip(super::super::weights::THRESHOLDS)
                .all(|(a, b)| close(*a, b));
        assert!(
            same,
            "weights.rs is not what tuning computes: run `agentmesh-bench bus --tune`; it would be\n{rendered}"
        );
    }

    #[test]
    fn threshold_at_reaches_the_recall() {
        let p = [0.9, 0.8, 0.7, 0.6, 0.1];
        let y = [true, false, true, true, true];
        assert_eq!(threshold_at(&p, &y, 0.5), 0.7);
        assert_eq!(threshold_at(&p, &y, 1.0), 0.1);
    }
}
