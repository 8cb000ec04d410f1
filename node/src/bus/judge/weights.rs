//! The judge's weights, written by `agentmesh-bench bus --tune` from
//! the tuning part of node/tests/judge/ (198 pairs). Do not edit:
//! a test checks they are what `tune::tune` computes.

/// One weight per feature, in `features::NAMES` order.
pub const WEIGHTS: [f64; super::features::COUNT] = [
    // cos
    1.050556145566081,
    // concepts
    0.7535385784645672,
    // direct
    0.015838043709582684,
    // dep
    1.1777265513992694,
    // desc
    -0.24760855015932154,
    // carve_exempt
    -0.5903831683711693,
    // carve_affected
    0.17838039047184862,
    // org_match
    0.41337335669162,
    // org_mismatch
    -1.8041141548727024,
    // v_eq
    -0.07212439072102339,
    // v_below_cue
    0.10672021495168271,
    // v_below
    -0.3643905301639986,
    // v_above
    -0.8264256638199785,
    // empty
    1.0922959600680775,
    // subject
    1.8038361104013285,
    // subject_exempt
    -0.8262686009401281,
    // subject_above
    -0.7571175591194148,
    // subject_eq
    0.181596597591104,
    // subject_below
    -0.07236291034832759,
    // subject_cos
    0.4964685499127387,
    // no_subject
    -1.5156767276243632,
];

/// The intercept.
pub const BIAS: f64 = -1.0259991223692242;

/// The thresholds of strict, balanced and loose: out-of-fold recall
/// [0.75, 0.9, 0.97] on the tuning part.
pub const THRESHOLDS: [f64; 3] = [0.5754376205988558, 0.443275531296927, 0.22284186010094456];
