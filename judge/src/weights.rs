//! The judge's weights, written by `agentmesh-bench bus --tune` from
//! the tuning part of judge/labelled/ (1438 pairs). Do not edit:
//! a test checks they are what `tune::tune` computes.

/// One weight per feature, in `features::NAMES` order.
pub const WEIGHTS: [f64; super::features::COUNT] = [
    // cos
    7.024507134950448,
    // concepts
    0.0,
    // direct
    0.0,
    // dep
    0.0,
    // desc
    0.0,
    // carve_exempt
    0.0,
    // carve_affected
    0.0,
    // org_match
    1.9790189792260962,
    // org_mismatch
    -2.0382572642673957,
    // v_eq
    0.0,
    // v_below_cue
    1.198504462502324,
    // v_below
    0.0,
    // v_above
    -0.9467215902794209,
    // empty
    -0.7236331369015666,
    // subject
    0.0,
    // subject_exempt
    0.0,
    // subject_above
    0.0,
    // subject_eq
    0.0,
    // subject_below
    0.0,
    // subject_cos
    0.0,
    // no_subject
    0.0,
    // cos_sentence
    0.0,
    // concept_package
    1.2179497083588229,
    // eco_mismatch
    0.0,
    // profile_desc
    0.0,
    // tfidf
    8.06621791333044,
    // tfidf_goal
    0.0,
    // rare_shared
    0.0,
    // shared_name
    0.0,
];

/// The intercept.
pub const BIAS: f64 = -1.2787815159177747;

/// The thresholds of strict, balanced and loose: out of fold on the
/// tuning part's teams, precision 0.95, recall 0.9, recall 0.97.
pub const THRESHOLDS: [f64; 3] = [0.9829204094070731, 0.41796110992466007, 0.32626862899753356];
