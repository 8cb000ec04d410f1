//! `agentmesh-relay`: parses its arguments and runs the relay library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use agentmesh_relay::{Config, VERSION};
use clap::{Parser, Subcommand, ValueEnum};
use libp2p::Multiaddr;

/// The agentmesh relay: circuit relay v2, a Kademlia bootstrap node and an
/// AutoNAT server, for machines that can't reach each other directly.
/// Logs go to stderr.
#[derive(Debug, Parser)]
#[command(name = "agentmesh-relay", version = VERSION)]
struct Cli {
    /// The key file; created (mode 0600) if missing.
    #[arg(long, value_name = "PATH", default_value = "relay.key")]
    identity: PathBuf,
    /// A multiaddr to listen on (repeat for several). Default: TCP and
    /// QUIC on port 4001, every IPv4 interface.
    #[arg(long, value_name = "MULTIADDR")]
    listen: Vec<Multiaddr>,
    /// An address to announce, as dialed from outside (repeat for
    /// several); loopback and private addresses are accepted.
    #[arg(long, value_name = "MULTIADDR")]
    external_addr: Vec<Multiaddr>,
    /// The log's format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Only these peers may reserve (repeat for several). Default: anyone
    /// (any standard circuit relay v2 client).
    #[arg(long, value_name = "PEER_ID")]
    allow: Vec<libp2p::PeerId>,
    /// Reservations at once, from everyone.
    #[arg(long, value_name = "N", default_value_t = defaults().max_reservations)]
    max_reservations: usize,
    /// Reservations at once, per peer.
    #[arg(long, value_name = "N", default_value_t = defaults().max_reservations_per_peer)]
    max_reservations_per_peer: usize,
    /// How long a reservation lasts before it must be renewed, e.g. 1h.
    #[arg(
        long,
        value_name = "DURATION",
        default_value_t = humantime::Duration::from(defaults().reservation_duration)
    )]
    reservation_duration: humantime::Duration,
    /// Circuits at once, from everyone.
    #[arg(long, value_name = "N", default_value_t = defaults().max_circuits)]
    max_circuits: usize,
    /// Circuits at once, per peer.
    #[arg(long, value_name = "N", default_value_t = defaults().max_circuits_per_peer)]
    max_circuits_per_peer: usize,
    /// How long one circuit may stay open, e.g. 2m.
    #[arg(
        long,
        value_name = "DURATION",
        default_value_t = humantime::Duration::from(defaults().max_circuit_duration)
    )]
    max_circuit_duration: humantime::Duration,
    /// Bytes one circuit may carry (both ways together).
    #[arg(long, value_name = "BYTES", default_value_t = defaults().max_circuit_bytes)]
    max_circuit_bytes: u64,
    /// Reservations one peer may ask for per minute.
    #[arg(long, value_name = "N", default_value_t = defaults().reservations_per_peer_per_minute)]
    reservations_per_peer_per_minute: std::num::NonZeroU32,
    /// Reservations one IP address may ask for per minute.
    #[arg(long, value_name = "N", default_value_t = defaults().reservations_per_ip_per_minute)]
    reservations_per_ip_per_minute: std::num::NonZeroU32,
    /// Inbound connections at once (handshakes included) from one IP
    /// address (for IPv6: one /64).
    #[arg(long, value_name = "N", default_value_t = agentmesh_relay::CONNECTIONS_PER_IP)]
    max_connections_per_ip: usize,
    /// Reservations at once from one IP address (for IPv6: one /64).
    #[arg(long, value_name = "N", default_value_t = agentmesh_relay::RESERVATIONS_PER_IP)]
    max_reservations_per_ip: usize,
    /// Circuits at once from one IP address (for IPv6: one /64).
    #[arg(long, value_name = "N", default_value_t = agentmesh_relay::CIRCUITS_PER_IP)]
    max_circuits_per_ip: usize,
    /// How long a circuit may carry no byte, either way, before it is
    /// closed, e.g. 30s.
    #[arg(
        long,
        value_name = "DURATION",
        default_value_t = humantime::Duration::from(defaults().circuit_idle_timeout)
    )]
    circuit_idle_timeout: humantime::Duration,
    /// Serve Prometheus metrics on GET http://ADDR/metrics; with no ADDR,
    /// 127.0.0.1:9091. Off without this flag. Keep it on loopback or
    /// behind a firewall.
    #[arg(
        long,
        value_name = "ADDR",
        num_args = 0..=1,
        default_missing_value = agentmesh_relay::metrics::DEFAULT_ADDR
    )]
    metrics: Option<SocketAddr>,
    #[command(subcommand)]
    command: Option<Command>,
}

/// The relay's limits as the library sets them: what `--help` shows as
/// each flag's default, so the two never disagree.
fn defaults() -> Config {
    Config::new(PathBuf::new())
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the relay's PeerId (creating its key if needed), and nothing
    /// else on stdout.
    PeerId,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,libp2p_kad=error"));
    // Colour only for a person at a terminal: a journal or a log file
    // gets plain text.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Json => logs.json().init(),
        LogFormat::Text => logs.init(),
    }
    if let Some(Command::PeerId) = cli.command {
        return match agentmesh_relay::load_or_create_identity(&cli.identity) {
            Ok(key) => {
                println!("{}", key.public().to_peer_id());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let mut config = Config::new(cli.identity);
    config.listen = if cli.listen.is_empty() {
        ["/ip4/0.0.0.0/tcp/4001", "/ip4/0.0.0.0/udp/4001/quic-v1"]
            .iter()
            .filter_map(|a| a.parse().ok())
            .collect()
    } else {
        cli.listen
    };
    config.external = cli.external_addr;
    config.allow = cli.allow;
    config.metrics = cli.metrics;
    config.max_connections_per_ip = cli.max_connections_per_ip;
    config.max_reservations_per_ip = cli.max_reservations_per_ip;
    config.max_circuits_per_ip = cli.max_circuits_per_ip;
    config.circuit_idle_timeout = cli.circuit_idle_timeout.into();
    config.max_reservations = cli.max_reservations;
    config.max_reservations_per_peer = cli.max_reservations_per_peer;
    config.reservation_duration = cli.reservation_duration.into();
    config.max_circuits = cli.max_circuits;
    config.max_circuits_per_peer = cli.max_circuits_per_peer;
    config.max_circuit_duration = cli.max_circuit_duration.into();
    config.max_circuit_bytes = cli.max_circuit_bytes;
    config.reservations_per_peer_per_minute = cli.reservations_per_peer_per_minute;
    config.reservations_per_ip_per_minute = cli.reservations_per_ip_per_minute;
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(agentmesh_relay::run(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(args: &[&str]) -> Result<Option<SocketAddr>, clap::Error> {
        Cli::try_parse_from(std::iter::once("agentmesh-relay").chain(args.iter().copied()))
            .map(|cli| cli.metrics)
    }

    #[test]
    fn the_per_ip_caps_default_to_the_documented_values() {
        let cli = Cli::try_parse_from(["agentmesh-relay"]).unwrap();
        assert_eq!(cli.max_connections_per_ip, 64);
        assert_eq!(cli.max_reservations_per_ip, 8);
        assert_eq!(cli.max_circuits_per_ip, 4);
        assert_eq!(
            *cli.circuit_idle_timeout,
            agentmesh_relay::CIRCUIT_IDLE_TIMEOUT
        );
        let cli = Cli::try_parse_from(["agentmesh-relay", "--circuit-idle-timeout", "2s"]).unwrap();
        assert_eq!(*cli.circuit_idle_timeout, std::time::Duration::from_secs(2));
    }

    #[test]
    fn every_limit_defaults_to_the_librarys_value() {
        let cli = Cli::try_parse_from(["agentmesh-relay"]).unwrap();
        let lib = defaults();
        assert_eq!(cli.max_reservations, lib.max_reservations);
        assert_eq!(cli.max_reservations_per_peer, lib.max_reservations_per_peer);
        assert_eq!(*cli.reservation_duration, lib.reservation_duration);
        assert_eq!(cli.max_circuits, lib.max_circuits);
        assert_eq!(cli.max_circuits_per_peer, lib.max_circuits_per_peer);
        assert_eq!(*cli.max_circuit_duration, lib.max_circuit_duration);
        assert_eq!(cli.max_circuit_bytes, lib.max_circuit_bytes);
        assert_eq!(
            cli.reservations_per_peer_per_minute,
            lib.reservations_per_peer_per_minute
        );
        assert_eq!(
            cli.reservations_per_ip_per_minute,
            lib.reservations_per_ip_per_minute
        );
    }

    #[test]
    fn metrics_is_off_without_the_flag_and_on_loopback_9091_without_an_address() {
        assert_eq!(metrics(&[]).unwrap(), None);
        let default: SocketAddr = "127.0.0.1:9091".parse().unwrap();
        assert_eq!(metrics(&["--metrics"]).unwrap(), Some(default));
        // A flag after it is not taken for its value.
        assert_eq!(
            metrics(&["--metrics", "--log-format", "json"]).unwrap(),
            Some(default)
        );
        assert_eq!(
            metrics(&["--metrics", "0.0.0.0:9091"]).unwrap(),
            Some("0.0.0.0:9091".parse().unwrap())
        );
        assert_eq!(
            metrics(&["--metrics=127.0.0.1:0"]).unwrap(),
            Some("127.0.0.1:0".parse().unwrap())
        );
        assert!(metrics(&["--metrics", "localhost"]).is_err());
    }
}
