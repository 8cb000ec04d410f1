//! `agentmesh-bench smoke`: messaging, the MCP send and the judge, briefly
//! (about ten seconds in all), each figure beside a floor measured in the
//! same run on the same machine, as a ratio. A ratio holds from one
//! machine to another where a raw figure does not, so CI can compare it
//! with the one recorded in docs/benchmarks.md and fail on a regression
//! (`--against`): the MCP send once fell 20× without a test seeing it.
//!
//! | ratio | figure | floor |
//! |---|---|---|
//! | `messaging_ratio` | messages a second between two daemons, many senders | seal+sign, verify+open of the same message on one core |
//! | `mcp_ratio` | sequential `send_message` calls a second through `agentmesh mcp` | the same send, waiting for its first answer, through the local API |
//! | `bus_ratio` | the judge's (broadcast, mailbox) pairs a second on the held-out teams | the crypto floor |

use std::time::{Duration, Instant};

use agentmesh_judge::{self as judge, Input, tune};
use agentmesh_node::api::Preset;
use agentmesh_node::api::{WhoKind, ops};
use serde::{Deserialize, Serialize};

use crate::bench_messaging::{Observer, crypto_floor, pair, text_1k, throughput};
use crate::{ApiClient, who};

/// Messages in the throughput phase.
const MESSAGES: usize = 8192;
/// Sequential sends through the local API, and through MCP.
const SENDS: usize = 400;
/// How long a send waits for its first answer (as the MCP server's do).
const FIRST_ANSWER_WAIT_MS: u64 = 2000;

/// The smoke run's figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Figures {
    /// The whole run, seconds.
    pub seconds: f64,
    /// Seal+sign then verify+open of a 1 KiB message, per second, one core.
    pub crypto_floor_per_s: f64,
    /// Messages a second, two daemons on loopback.
    pub messaging_per_s: f64,
    /// `messaging_per_s / crypto_floor_per_s`.
    pub messaging_ratio: f64,
    /// Sequential sends a second through the local API, each answered at
    /// its first answer.
    pub api_sends_per_s: f64,
    /// Sequential `send_message` calls a second through `agentmesh mcp`,
    /// each result carrying its first answer.
    pub mcp_sends_per_s: f64,
    /// `mcp_sends_per_s / api_sends_per_s`.
    pub mcp_ratio: f64,
    /// The judge's pairs a second (balanced, held-out teams).
    pub judge_pairs_per_s: f64,
    /// `judge_pairs_per_s / crypto_floor_per_s`.
    pub bus_ratio: f64,
}

impl Figures {
    /// Each ratio by its name.
    pub fn ratios(&self) -> [(&'static str, f64); 3] {
        [
            ("messaging_ratio", self.messaging_ratio),
            ("mcp_ratio", self.mcp_ratio),
            ("bus_ratio", self.bus_ratio),
        ]
    }
}

/// Runs it.
pub fn run() -> Figures {
    let start = Instant::now();
    let crypto_floor_per_s = crypto_floor();
    let judge_pairs_per_s = judge_pairs_per_s();

    let (a, b) = pair();
    let observer = Observer::start(&b);
    // One untimed round first: connections and caches warm.
    let _ = throughput(&a, &observer, 256);
    let (messaging_per_s, _) = throughput(&a, &observer, MESSAGES);
    let api_sends_per_s = api_sends_per_s(&a);
    drop((a, b));

    let mcp_sends_per_s = crate::bench_mcp::two_daemons(SENDS).sends_per_s;
    Figures {
        seconds: start.elapsed().as_secs_f64(),
        crypto_floor_per_s,
        messaging_per_s,
        messaging_ratio: messaging_per_s / crypto_floor_per_s,
        api_sends_per_s,
        mcp_sends_per_s,
        mcp_ratio: mcp_sends_per_s / api_sends_per_s,
        judge_pairs_per_s,
        bus_ratio: judge_pairs_per_s / crypto_floor_per_s,
    }
}

/// Sequential sends from one client of `a` to the receiver, each answered
/// at its first answer (the receiver's `delivered`).
fn api_sends_per_s(a: &crate::Node) -> f64 {
    let mut c = ApiClient::attach(a, who(WhoKind::Agent, "sequential"), None);
    let send = |c: &mut ApiClient, i: usize| {
        let v = c
            .call(ops::Send {
                to: "@receiver".into(),
                text: text_1k(i),
                ask: false,
                reply_to: None,
                from_mailbox: None,
                wait_first_answer_ms: Some(FIRST_ANSWER_WAIT_MS),
            })
            .expect("send accepted");
        assert!(!v["first"].is_null(), "a first answer: {v}");
    };
    send(&mut c, 0);
    let start = Instant::now();
    for i in 0..SENDS {
        send(&mut c, i + 1);
    }
    SENDS as f64 / start.elapsed().as_secs_f64()
}

/// The judge's pairs a second over the held-out teams, once round.
fn judge_pairs_per_s() -> f64 {
    let (all, split) = tune::committed();
    let held = tune::part(&all, &split.held_out);
    let inputs: Vec<Input> = held.iter().map(|l| l.input()).collect();
    // The first judgment parses the tables: untimed.
    let _ = judge::judge(&inputs[0], Preset::Balanced);
    let start = Instant::now();
    let mut n = 0;
    while start.elapsed() < Duration::from_secs(1) || n < inputs.len() {
        for i in &inputs {
            std::hint::black_box(judge::judge(std::hint::black_box(i), Preset::Balanced));
        }
        n += inputs.len();
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// The ratios recorded in `doc` (docs/benchmarks.md): its line
/// `smoke ratios: messaging_ratio 0.50, mcp_ratio 0.90, bus_ratio 1.20`.
pub fn recorded(doc: &str) -> Result<Vec<(String, f64)>, String> {
    let line = doc
        .lines()
        .find_map(|l| l.trim().trim_matches('`').strip_prefix("smoke ratios: "))
        .ok_or("no line `smoke ratios: NAME VALUE, ...` in it")?;
    line.split(',')
        .map(|pair| {
            let (name, value) = pair
                .trim()
                .split_once(' ')
                .ok_or(format!("{pair:?} is not NAME VALUE"))?;
            let value: f64 = value.trim().parse().map_err(|e| format!("{pair:?}: {e}"))?;
            Ok((name.to_owned(), value))
        })
        .collect()
}

/// Each ratio under half of the one recorded, in words; empty when none
/// is. A ratio recorded but not measured (or measured but not recorded)
/// is a failure too: the comparison must see what it guards.
pub fn regressions(f: &Figures, recorded: &[(String, f64)]) -> Vec<String> {
    let mut out = vec![];
    for (name, now) in f.ratios() {
        match recorded.iter().find(|(n, _)| n == name) {
            None => out.push(format!("{name} is not recorded in docs/benchmarks.md")),
            Some((_, was)) if now < was / 2.0 => out.push(format!(
                "{name} is {now:.3}, under half of the {was:.3} recorded in docs/benchmarks.md"
            )),
            Some(_) => {}
        }
    }
    for (name, _) in recorded {
        if !f.ratios().iter().any(|(n, _)| n == name) {
            out.push(format!("{name} is recorded but not measured"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(m: f64, c: f64, b: f64) -> Figures {
        Figures {
            seconds: 1.0,
            crypto_floor_per_s: 1.0,
            messaging_per_s: m,
            messaging_ratio: m,
            api_sends_per_s: 1.0,
            mcp_sends_per_s: c,
            mcp_ratio: c,
            judge_pairs_per_s: b,
            bus_ratio: b,
        }
    }

    #[test]
    fn a_ratio_under_half_of_the_recorded_one_fails() {
        let doc = "text\n\n`smoke ratios: messaging_ratio 0.50, mcp_ratio 0.90, bus_ratio 1.20`\n";
        let r = recorded(doc).unwrap();
        assert_eq!(r.len(), 3);
        assert!(regressions(&figures(0.3, 0.5, 0.7), &r).is_empty());
        let slow = regressions(&figures(0.3, 0.04, 0.7), &r);
        assert_eq!(slow.len(), 1, "{slow:?}");
        assert!(slow[0].starts_with("mcp_ratio is 0.040"), "{slow:?}");
        let missing = recorded("smoke ratios: messaging_ratio 0.5").unwrap();
        assert_eq!(regressions(&figures(1.0, 1.0, 1.0), &missing).len(), 2);
        assert!(recorded("no line").is_err());
        assert!(recorded("smoke ratios: messaging_ratio x").is_err());
    }
}
