//! The judge's weights, written by `agentmesh-bench bus --tune` from
//! the tuning part of node/tests/judge/ (198 pairs). Do not edit:
//! a test checks they are what `tune::tune` computes.

/// One weight per feature, in `features::NAMES` order.
pub const WEIGHTS: [f64; super::features::COUNT] = [
    // cos
    0.9940672938888673,
    // concepts
    0.7730028288817793,
    // direct
    0.10258798196037386,
    // dep
    1.1620436406311898,
    // desc
    -0.27232701195591225,
    // carve_exempt
    -0.576952505240049,
    // carve_affected
    0.16860243964787172,
    // org_match
    0.7724898892161663,
    // org_mismatch
    -1.952648634579295,
    // v_eq
    -0.08355287519393399,
    // v_below_cue
    0.08673593710883341,
    // v_below
    -0.27525082828402975,
    // v_above
    -0.8156049909045459,
    // empty
    1.1037952739750674,
    // subject
    1.8074708225590639,
    // subject_exempt
    -0.8170373405870376,
    // subject_above
    -0.767318795570946,
    // subject_eq
    0.15124426429923743,
    // subject_below
    -0.1110975055841453,
    // subject_cos
    0.44986338903868145,
    // no_subject
    -1.5103684270165934,
];

/// The intercept.
pub const BIAS: f64 = -1.0518275781768216;

/// The thresholds of strict, balanced and loose: out-of-fold recall
/// [0.75, 0.9, 0.97] on the tuning part.
pub const THRESHOLDS: [f64; 3] = [0.5842342564086259, 0.44061317617826445, 0.2172797172457101];
