//! The judge's weights, written by `agentmesh-bench bus --tune` from
//! the tuning part of judge/labelled/ (1666 pairs). Do not edit:
//! a test checks they are what `tune::tune` computes.

/// One weight per feature, in `features::NAMES` order.
pub const WEIGHTS: [f64; super::features::COUNT] = [
    // cos
    7.575190515291468,
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
    1.3394985606372398,
    // org_mismatch
    -3.3923488012422323,
    // v_eq
    0.0,
    // v_below_cue
    1.8084608379621938,
    // v_below
    0.0,
    // v_above
    -0.9637444186342486,
    // empty
    -0.8153277230537254,
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
    1.518990707071704,
    // eco_mismatch
    0.0,
    // profile_desc
    0.0,
    // tfidf
    8.598166263668336,
    // tfidf_goal
    0.0,
    // rare_shared
    0.0,
    // shared_name
    0.0,
];

/// The intercept.
pub const BIAS: f64 = -1.2657421877466217;

/// The thresholds of strict, balanced and loose: out of fold on the
/// tuning part's teams, precision 0.95, recall 0.9, recall 0.97.
pub const THRESHOLDS: [f64; 3] = [0.9843700736798564, 0.4182361567185861, 0.33730715936747346];

/// The agent stage's first stage: out of fold, recall 0.98.
pub const FIRST_STAGE: f64 = 0.3041766879076607;
