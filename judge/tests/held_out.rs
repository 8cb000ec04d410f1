//! The judge on the held-out part of the labelled set (judge/labelled/),
//! which tuning never saw: precision and recall at each preset, through
//! the same code path the daemon and `agentmesh judge` use.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use agentmesh_judge::Preset;
use agentmesh_judge::tune::{self, Score};

fn held_out_scores() -> Vec<Score> {
    let (all, split) = tune::committed();
    let held = tune::part(&all, &split.held_out);
    assert_eq!(
        held.len(),
        split.held_out.len(),
        "every held-out id is in labelled.jsonl"
    );
    Preset::ALL.map(|p| tune::score(&held, p)).to_vec()
}

#[test]
fn held_out_precision_and_recall_per_preset() {
    let scores = held_out_scores();
    for s in &scores {
        println!(
            "{:8} precision {:.1}% recall {:.1}% ({} of {} relevant delivered, {} irrelevant delivered, {} pairs)",
            s.preset.as_str(),
            100.0 * s.precision,
            100.0 * s.recall,
            s.true_positives,
            s.relevant,
            s.false_positives,
            s.pairs
        );
    }
    let [strict, balanced, loose] = [scores[0], scores[1], scores[2]];
    // The figures docs/agents.md and docs/benchmarks.md give: a change to
    // the judge that moves them updates both.
    let counts = |s: Score| (s.true_positives, s.false_positives);
    assert_eq!(
        [counts(strict), counts(balanced), counts(loose)],
        [(26, 13), (34, 19), (38, 28)],
        "the held-out figures moved: update docs/agents.md, docs/benchmarks.md and this test"
    );
    // Stricter presets deliver less.
    assert!(
        strict.true_positives + strict.false_positives
            <= balanced.true_positives + balanced.false_positives
    );
    assert!(
        balanced.true_positives + balanced.false_positives
            <= loose.true_positives + loose.false_positives
    );
}

/// Issue 19's bar for done: balanced at 90% recall or more with 70%
/// precision or more on the held-out part.
#[test]
#[ignore = "not met yet: balanced is at 64.2% precision and 69.4% recall on the held-out part (CHANGELOG, issue 19); run with --ignored to see"]
fn balanced_meets_the_bar() {
    let balanced = held_out_scores()[1];
    assert!(
        balanced.recall >= 0.90 && balanced.precision >= 0.70,
        "balanced: precision {:.1}%, recall {:.1}%",
        100.0 * balanced.precision,
        100.0 * balanced.recall
    );
}
