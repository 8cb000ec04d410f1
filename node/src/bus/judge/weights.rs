//! The judge's weights, written by `agentmesh-bench bus --tune` from
//! the tuning part of node/tests/judge/ (198 pairs). Do not edit:
//! a test checks they are what `tune::tune` computes.

/// One weight per feature, in `features::NAMES` order.
pub const WEIGHTS: [f64; super::features::COUNT] = [
    // cos
    0.756004404928598,
    // concepts
    0.502798512155705,
    // direct
    -0.015718966547906013,
    // dep
    1.2455609203197422,
    // desc
    -0.3917083730915801,
    // carve_exempt
    -0.7995179312750498,
    // carve_affected
    0.8711131252786755,
    // org_match
    0.7130759664223972,
    // org_mismatch
    -1.8613311168152473,
    // v_eq
    -0.019094519639035364,
    // v_below_cue
    0.022236593402132347,
    // v_below
    -0.6723657100813437,
    // v_above
    -1.484864779113475,
    // empty
    1.0761560445898595,
    // subject
    1.6806029629408246,
    // subject_exempt
    -1.0044651197742838,
    // subject_above
    -1.041822216876586,
    // subject_eq
    0.3551540079744386,
    // subject_below
    0.267307605138451,
    // subject_cos
    0.34088685950675196,
    // no_subject
    -1.3265975595752242,
    // cos_sentence
    1.0953227672116994,
    // concept_package
    0.3798808885579012,
    // eco_mismatch
    -1.2929263174671781,
];

/// The intercept.
pub const BIAS: f64 = -1.141907369643289;

/// The thresholds of strict, balanced and loose: out-of-fold recall
/// [0.75, 0.9, 0.97] on the tuning part.
pub const THRESHOLDS: [f64; 3] = [0.5833149887380864, 0.44423987081919414, 0.24844439406739807];
