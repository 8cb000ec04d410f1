//! The judge on the held-out part of the labelled set (node/tests/judge/),
//! which tuning never saw: precision and recall at each preset, through
//! the same code path the daemon and `agentmesh judge` use.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use agentmesh_node::bus::Preset;
use agentmesh_node::bus::judge::tune::{self, Score};

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
