//! `agentmesh-relay`: parses its arguments and runs the relay library.
#![forbid(unsafe_code)] // the workspace only denies it: the daemon's allocator setting (cli) is the one exception

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agentmesh_relay::reload::Setting;
use agentmesh_relay::{Config, VERSION};
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use libp2p::Multiaddr;
use serde::Serialize;

mod file;

/// The agentmesh relay: circuit relay v2, a Kademlia bootstrap node and an
/// AutoNAT server, for machines that can't reach each other directly.
/// Logs go to stderr.
#[derive(Debug, Parser)]
#[command(name = "agentmesh-relay", version = VERSION)]
struct Cli {
    /// Settings from a TOML file: each flag is a key, its name in snake
    /// case (`max_reservations = 10000`; a flag that repeats takes an
    /// array). A flag given here wins over its key. SIGHUP reads the file
    /// again (docs/relay.md says what that changes).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
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
    /// Connections at once, in and out, from everyone (each reservation
    /// holds one).
    #[arg(long, value_name = "N", default_value_t = defaults().max_connections)]
    max_connections: u32,
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
    /// The config file.
    #[command(subcommand)]
    Config(ConfigCommand),
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Check a config file without starting anything: every key known,
    /// every value valid; prints the settings it gives and which of them
    /// SIGHUP applies (the others are fixed when the relay starts).
    Check {
        /// The file.
        file: PathBuf,
        /// Print the result (or the error) as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `config check --json`'s answer.
#[derive(Debug, Serialize)]
struct Checked {
    file: String,
    valid: bool,
    settings: Vec<CheckedSetting>,
}

#[derive(Debug, Serialize)]
struct CheckedSetting {
    key: &'static str,
    value: String,
    /// Whether the file sets it (or it is the default).
    set_in_file: bool,
    /// Whether SIGHUP applies it; `false`: fixed when the relay starts.
    reloadable: bool,
}

/// An error as `--json` prints it.
#[derive(Debug, Serialize)]
struct JsonError {
    code: &'static str,
    message: String,
}

/// The command line (`raw`, parsed as `matches`), with the config file's
/// settings it does not give itself.
fn settled(raw: &[OsString], matches: &ArgMatches) -> Result<Cli, String> {
    let cli = Cli::from_arg_matches(matches).map_err(|e| e.to_string())?;
    let Some(path) = cli.config.clone() else {
        return Ok(cli);
    };
    let cmd = Cli::command();
    let settings = file::read(&path, &cmd).map_err(|e| e.to_string())?;
    let program = raw
        .first()
        .cloned()
        .unwrap_or_else(|| "agentmesh-relay".into());
    let argv = file::merged(
        program,
        settings,
        &file::given(matches),
        raw.iter().skip(1).cloned(),
    );
    Cli::try_parse_from(argv).map_err(|e| file::invalid(&path, &cmd, &e).to_string())
}

/// The relay's settings from the parsed command line.
fn config_of(cli: &Cli) -> Config {
    let mut config = Config::new(cli.identity.clone());
    config.listen = if cli.listen.is_empty() {
        ["/ip4/0.0.0.0/tcp/4001", "/ip4/0.0.0.0/udp/4001/quic-v1"]
            .iter()
            .filter_map(|a| a.parse().ok())
            .collect()
    } else {
        cli.listen.clone()
    };
    config.external.clone_from(&cli.external_addr);
    config.allow.clone_from(&cli.allow);
    config.metrics = cli.metrics;
    config.max_connections = cli.max_connections;
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
    config
}

/// `agentmesh-relay config check FILE`: the file alone, as the relay would
/// read it with no flags.
fn check(path: &Path, json: bool) -> ExitCode {
    let cmd = Cli::command();
    let parsed = file::read(path, &cmd).and_then(|settings| {
        let set: Vec<String> = settings.iter().map(|s| s.id.clone()).collect();
        let argv = file::merged(
            "agentmesh-relay".into(),
            settings,
            &Default::default(),
            std::iter::empty(),
        );
        Cli::try_parse_from(argv)
            .map(|cli| (cli, set))
            .map_err(|e| file::invalid(path, &cmd, &e))
    });
    let (cli, set) = match parsed {
        Ok(p) => p,
        Err(e) => {
            if json {
                let e = JsonError {
                    code: "invalid_config",
                    message: e.to_string(),
                };
                println!("{}", serde_json::to_string(&e).unwrap_or_default());
            } else {
                eprintln!("error: {e}");
            }
            return ExitCode::FAILURE;
        }
    };
    let settings: Vec<CheckedSetting> = agentmesh_relay::reload::settings(&config_of(&cli))
        .into_iter()
        .map(
            |Setting {
                 key,
                 value,
                 reloadable,
             }| CheckedSetting {
                key,
                value,
                set_in_file: set.iter().any(|id| id == key),
                reloadable,
            },
        )
        .collect();
    if json {
        let checked = Checked {
            file: path.display().to_string(),
            valid: true,
            settings,
        };
        println!("{}", serde_json::to_string(&checked).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    println!("{}: valid", path.display());
    for s in &settings {
        println!(
            "  {} = {}{}  ({})",
            s.key,
            s.value,
            if s.set_in_file { "" } else { " (default)" },
            if s.reloadable {
                "applied on SIGHUP"
            } else {
                "fixed at start: a change needs a restart"
            }
        );
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let raw: Vec<OsString> = std::env::args_os().collect();
    let matches = Cli::command().get_matches_from(&raw);
    let cli = match settled(&raw, &matches) {
        Ok(cli) => cli,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
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
    match &cli.command {
        Some(Command::PeerId) => {
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
        Some(Command::Config(ConfigCommand::Check { file, json })) => return check(file, *json),
        None => {}
    }
    let config = config_of(&cli);
    // SIGHUP parses the same command line again, reading the file anew.
    let reload: Option<agentmesh_relay::Reload> = cli.config.as_ref().map(|_| {
        Box::new(move || {
            let matches = Cli::command()
                .try_get_matches_from(&raw)
                .map_err(|e| e.to_string())?;
            settled(&raw, &matches).map(|cli| config_of(&cli))
        }) as agentmesh_relay::Reload
    });
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
    match rt.block_on(agentmesh_relay::run(config, reload)) {
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

    /// The command line `args` with `--config` naming a file holding
    /// `text`, settled.
    fn with_file(text: &str, args: &[&str]) -> Result<Cli, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay.toml");
        std::fs::write(&path, text).unwrap();
        let mut raw: Vec<OsString> = vec!["agentmesh-relay".into(), "--config".into(), path.into()];
        raw.extend(args.iter().map(OsString::from));
        let matches = Cli::command().try_get_matches_from(&raw).unwrap();
        settled(&raw, &matches)
    }

    #[test]
    fn every_flag_is_a_key_and_every_key_a_setting_config_check_shows() {
        let mut keys = file::keys(&Cli::command());
        keys.retain(|k| k != "log_format");
        let settings: Vec<String> = agentmesh_relay::reload::settings(&defaults())
            .iter()
            .map(|s| s.key.to_owned())
            .collect();
        assert_eq!(keys, settings);
    }

    #[test]
    fn the_file_sets_what_the_flags_do_not_and_a_flag_replaces_its_key() {
        let file = r#"
max_reservations = 10000
listen = ["/ip4/127.0.0.1/tcp/4001", "/ip4/127.0.0.1/udp/4001/quic-v1"]
external_addr = "/ip4/203.0.113.7/tcp/4001"
circuit_idle_timeout = "90s"
metrics = true
"#;
        let cli = with_file(file, &[]).unwrap();
        assert_eq!(cli.max_reservations, 10_000);
        assert_eq!(cli.listen.len(), 2);
        assert_eq!(cli.external_addr.len(), 1);
        assert_eq!(
            *cli.circuit_idle_timeout,
            std::time::Duration::from_secs(90)
        );
        assert_eq!(cli.metrics, Some("127.0.0.1:9091".parse().unwrap()));
        let cli = with_file(
            file,
            &[
                "--max-reservations",
                "5",
                "--listen",
                "/ip4/127.0.0.1/tcp/9",
            ],
        )
        .unwrap();
        assert_eq!(cli.max_reservations, 5);
        assert_eq!(
            cli.listen,
            vec!["/ip4/127.0.0.1/tcp/9".parse::<Multiaddr>().unwrap()]
        );
        // What the flags don't give still comes from the file.
        assert_eq!(
            *cli.circuit_idle_timeout,
            std::time::Duration::from_secs(90)
        );
        assert_eq!(with_file("metrics = false", &[]).unwrap().metrics, None);
        // A value that looks like a flag is a value.
        let e = with_file("identity = \"--help\"", &[]).unwrap();
        assert_eq!(e.identity, PathBuf::from("--help"));
    }

    #[test]
    fn a_bad_file_names_the_key() {
        let e = with_file("max_reservations = -1", &[]).unwrap_err();
        assert!(
            e.contains("`max_reservations`") && !e.contains("--max"),
            "{e}"
        );
        let e = with_file("listen = [\"nonsense\"]", &[]).unwrap_err();
        assert!(e.contains("`listen`"), "{e}");
        let e = with_file("config = \"other.toml\"", &[]).unwrap_err();
        assert!(e.contains("unknown key `config`"), "{e}");
        let e = with_file("metrics = [true]", &[]).unwrap_err();
        assert!(e.contains("`metrics`"), "{e}");
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
        assert_eq!(cli.max_connections, lib.max_connections);
        assert_eq!(cli.max_reservations_per_peer, lib.max_reservations_per_peer);
        assert_eq!(*cli.reservation_duration, lib.reservation_duration);
        assert_eq!(cli.max_circuits, lib.max_circuits);
        assert_eq!(cli.max_circuits_per_peer, lib.max_circuits_per_peer);
        assert_eq!(*cli.max_circuit_duration, lib.max_circuit_duration);
        // Chat-like circuits last half an hour by default (issue 37), not
        // libp2p's 2 minutes and 128 KiB.
        assert!(*cli.max_circuit_duration >= std::time::Duration::from_secs(30 * 60));
        assert!(cli.max_circuit_bytes >= 1024 * 1024);
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
