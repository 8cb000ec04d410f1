//! The judge's weights, written by `agentmesh-bench bus --tune` from
//! the tuning part of judge/labelled/ (198 pairs). Do not edit:
//! a test checks they are what `tune::tune` computes.

/// One weight per feature, in `features::NAMES` order.
pub const WEIGHTS: [f64; super::features::COUNT] = [
    // cos
    0.762922335476693,
    // concepts
    0.547071475145426,
    // direct
    0.0319695004418118,
    // dep
    1.3726076084931298,
    // desc
    -0.35876948507329925,
    // carve_exempt
    -1.0698440761240586,
    // carve_affected
    0.8412328238622421,
    // org_match
    0.7367900646547179,
    // org_mismatch
    -1.9184223740189228,
    // v_eq
    -0.10543329982559665,
    // v_below_cue
    0.5952285154963798,
    // v_below
    -0.7680829210988271,
    // v_above
    -1.463444915610416,
    // empty
    1.3051415158344286,
    // subject
    1.9428730281612623,
    // subject_exempt
    -0.7858507853657474,
    // subject_above
    -1.047773755302906,
    // subject_eq
    0.19872726756148393,
    // subject_below
    0.39254571441074176,
    // subject_cos
    0.39110084354603525,
    // no_subject
    -1.368529517794109,
    // cos_sentence
    1.1049417619828166,
    // concept_package
    0.17266479093474216,
    // eco_mismatch
    -1.3408327989062714,
    // profile_desc
    0.16109920697984828,
];

/// The intercept.
pub const BIAS: f64 = -1.3798105159878709;

/// The thresholds of strict, balanced and loose: out-of-fold recall
/// [0.75, 0.9, 0.97] on the tuning part.
pub const THRESHOLDS: [f64; 3] = [0.6448364901660087, 0.5287355481122809, 0.3680074758360045];
