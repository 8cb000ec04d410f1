//! The judge's weights, written by `agentmesh-bench bus --tune` from
//! the tuning part of judge/labelled/ (1666 pairs). Do not edit:
//! a test checks they are what `tune::tune` computes.

/// One weight per feature, in `features::NAMES` order.
pub const WEIGHTS: [f64; super::features::COUNT] = [
    // cos
    7.188058201314289,
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
    1.0438454626022422,
    // org_mismatch
    -3.6867654598934245,
    // v_eq
    0.0,
    // v_below_cue
    1.8019128993909277,
    // v_below
    0.0,
    // v_above
    -0.9397509219387544,
    // empty
    -0.8721867368233699,
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
    1.4938376031500389,
    // eco_mismatch
    0.0,
    // profile_desc
    0.0,
    // tfidf
    8.139550087654747,
    // tfidf_goal
    0.0,
    // rare_shared
    0.0,
    // shared_name
    0.0,
];

/// The intercept.
pub const BIAS: f64 = -1.1517454816603863;

/// The thresholds of strict, balanced and loose: out of fold on the
/// tuning part's teams, precision 0.95, recall 0.9, recall 0.97.
pub const THRESHOLDS: [f64; 3] = [0.9796154731828963, 0.4280191552668186, 0.34827620935658427];

/// The agent stage's first stage: out of fold, recall 0.98.
pub const FIRST_STAGE: f64 = 0.3273185639286553;
