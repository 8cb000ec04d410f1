//! Terminal helpers: errors, prompts, spinners, tables, and the client
//! connection every command opens the same way.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use agentmesh_node::api::{Who, WhoKind};
use agentmesh_node::client::Client;
use agentmesh_node::home::Home;
use indicatif::{ProgressBar, ProgressStyle};

/// An error of the command line itself, with a stable code for `--json`.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CliError {
    /// The stable code.
    pub code: &'static str,
    /// What went wrong and what to do.
    pub message: String,
}

/// A [`CliError`] as an `anyhow::Error`.
pub fn cli_error(code: &'static str, message: impl Into<String>) -> anyhow::Error {
    CliError {
        code,
        message: message.into(),
    }
    .into()
}

/// What a person (and an agent's session) is told once `agentmesh down`
/// stopped the daemon: agent sessions start none until `agentmesh up`.
pub const STOPPED_BY_DOWN: &str =
    "the daemon was stopped with `agentmesh down`; run `agentmesh up`";

/// No daemon answers on a home's socket: why, as far as the home says (a
/// person's `agentmesh down`, or it never started or went away), what to
/// do, and a configuration problem that would keep `agentmesh up` from
/// starting it.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct NotRunning {
    /// `agentmesh down` stopped it (its record is in the home).
    pub stopped_by_down: bool,
    /// What to say.
    pub message: String,
}

impl NotRunning {
    /// Why the daemon of `home`, whose socket `socket` nobody answers, is
    /// not running.
    pub fn of(home: &Home, socket: &std::path::Path) -> NotRunning {
        let stopped_by_down = home.stopped_by_down().is_some();
        let mut message = if stopped_by_down {
            format!("agentmesh is not running: {STOPPED_BY_DOWN}")
        } else {
            format!(
                "the agentmesh daemon is not running (nothing is listening on {}); start it with `agentmesh up`",
                socket.display()
            )
        };
        if let Err(e) = agentmesh_node::config::Config::load_settings(&home.config_file()) {
            message.push_str(&format!(
                "; but it can't start until its configuration is fixed: {e}"
            ));
        }
        NotRunning {
            stopped_by_down,
            message,
        }
    }

    /// `status --json`'s code for it: `stopped_by_down` or `not_running`.
    pub fn code(&self) -> &'static str {
        if self.stopped_by_down {
            "stopped_by_down"
        } else {
            "not_running"
        }
    }
}

/// The [`NotRunning`] `e` is, if it is one.
pub fn not_running(e: &anyhow::Error) -> Option<&NotRunning> {
    e.downcast_ref::<NotRunning>()
}

/// The stable code of an error, for `--json`.
pub fn error_code(e: &anyhow::Error) -> String {
    use agentmesh_node::client::ClientError;
    use agentmesh_node::daemon::DaemonError;
    for cause in e.chain() {
        if let Some(c) = cause.downcast_ref::<CliError>() {
            return c.code.to_owned();
        }
        // Every command keeps the code it always gave; `status` gives
        // [`NotRunning::code`].
        if cause.downcast_ref::<NotRunning>().is_some() {
            return "daemon_not_running".into();
        }
        if let Some(b) = cause.downcast_ref::<agentmesh_node::backup::BackupError>() {
            return b.code().to_string();
        }
        if let Some(a) = cause.downcast_ref::<agentmesh_node::api::ApiError>() {
            return a.code.to_string();
        }
        if let Some(c) = cause.downcast_ref::<ClientError>() {
            return match c {
                ClientError::NotRunning { .. } => "daemon_not_running".into(),
                ClientError::Api(api) => api.code.to_string(),
                ClientError::Protocol(_) => "protocol".into(),
                _ => "daemon_connection".into(),
            };
        }
        if let Some(d) = cause.downcast_ref::<DaemonError>() {
            return match d {
                DaemonError::AlreadyRunning { .. } => "already_running",
                DaemonError::PortInUse { .. } => "port_in_use",
                DaemonError::Home(_) => "bad_home",
                DaemonError::Config(_) => "bad_config",
                _ => "daemon_failed",
            }
            .into();
        }
        if cause
            .downcast_ref::<agentmesh_node::home::HomeError>()
            .is_some()
        {
            return "bad_home".into();
        }
        if let Some(c) = cause.downcast_ref::<agentmesh_node::config::ConfigError>() {
            use agentmesh_node::config::ConfigError;
            return match c {
                ConfigError::UnknownKey { .. } => "unknown_key",
                ConfigError::BadValue { .. } => "bad_value",
                _ => "bad_config",
            }
            .into();
        }
        if cause
            .downcast_ref::<agentmesh_protocol::ticket::TicketError>()
            .is_some()
        {
            return "bad_ticket".into();
        }
        if cause
            .downcast_ref::<agentmesh_protocol::names::NameError>()
            .is_some()
        {
            return "bad_name".into();
        }
    }
    "error".into()
}

/// Prints an error the way every command does, and gives the exit code:
/// `error: …` for people; with `--json`, one JSON object as the last line.
pub fn fail(e: &anyhow::Error, json: bool) -> ExitCode {
    if json {
        let line = serde_json::json!({ "code": error_code(e), "message": format!("{e:#}") });
        eprintln!("{line}");
    } else {
        // Errors can quote what a peer said (a refusal's reason).
        eprintln!("error: {}", clean_lines(&format!("{e:#}")));
    }
    ExitCode::FAILURE
}

/// A command line clap refused (or `--help`, `--version`).
pub fn usage_error(e: clap::Error, json: bool) -> ExitCode {
    use clap::error::ErrorKind;
    let is_error = !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
        && e.kind() != ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand;
    if json && is_error {
        let message = e.render().to_string();
        let message = message
            .trim()
            .trim_start_matches("error: ")
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned();
        let line = serde_json::json!({ "code": "usage", "message": format!("{message}; see `agentmesh --help`") });
        eprintln!("{line}");
        return ExitCode::from(2);
    }
    let _ = e.print();
    if is_error {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

/// When an RFC 3339 time is, for people: `3 min ago`, `in 2 h`.
pub fn ago(rfc3339: &str) -> String {
    match humantime::parse_rfc3339(rfc3339) {
        Ok(t) => {
            let ms = t
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            agentmesh_protocol::time::relative(
                agentmesh_protocol::Timestamp::from_unix_millis(ms),
                agentmesh_node::clock::now(),
            )
        }
        Err(_) => rfc3339.to_owned(),
    }
}

/// Why a message is held, for people: the reason's code (`other_owner`,
/// which `--json` keeps) as words. A code this build does not know is
/// shown as it is.
pub fn held_words(code: &str) -> String {
    agentmesh_node::api::HeldReason::parse(code)
        .map_or_else(|| code.to_owned(), |r| r.words().to_owned())
}

/// A refusal as the outbox records it (`bravo refused it (no_mailbox):
/// there is no mailbox …`), for people: the sentence after the code says
/// it, so the code (which `--json` keeps) is left out.
pub fn refusal_words(reason: &str) -> String {
    const AT: &str = " refused it (";
    if let Some(start) = reason.find(AT)
        && let Some(len) = reason[start + AT.len()..].find("): ")
    {
        let code = &reason[start + AT.len()..start + AT.len() + len];
        if !code.is_empty() && code.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            let rest = &reason[start + AT.len() + len + 3..];
            return format!("{} refused it: {rest}", &reason[..start]);
        }
    }
    reason.to_owned()
}

/// An audit entry's detail for people: a hold's reason (`held:
/// other_owner …`) in words, as `held` shows it.
pub fn held_detail_words(detail: &str) -> String {
    let Some(rest) = detail.strip_prefix("held: ") else {
        return detail.to_owned();
    };
    let code: String = rest
        .chars()
        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
        .collect();
    match agentmesh_node::api::HeldReason::parse(&code) {
        Some(_) => format!("held: {}{}", held_words(&code), &rest[code.len()..]),
        None => detail.to_owned(),
    }
}

/// `n` of `thing` in English, with the verb that goes with it: `1
/// message waits`, `2 messages wait`.
pub fn count_with(n: usize, thing: &str, one: &str, many: &str) -> String {
    let n = n as u64;
    format!(
        "{} {}",
        agentmesh_protocol::time::count(n, thing),
        if n == 1 { one } else { many }
    )
}

/// Asks a person to confirm `question` (y/N); `yes` (`--yes`) confirms
/// without asking. With no terminal to ask at (a script, an agent) and no
/// `--yes`, it refuses, naming `what` would have been done: these are
/// acts with no way back.
pub fn confirm(question: &str, what: &str, yes: bool) -> anyhow::Result<bool> {
    if yes {
        return Ok(true);
    }
    if !interactive() {
        return Err(cli_error(
            "not_interactive",
            format!(
                "{what} has no way back, so it asks a person first; run it at an interactive terminal, or add --yes to say yes in advance"
            ),
        ));
    }
    let answer = prompt(&format!("{question} [y/N] "))?;
    Ok(matches!(answer.to_lowercase().as_str(), "y" | "yes"))
}

/// The person at this terminal, as the web page names them too
/// ([`agentmesh_node::home::login_name`]).
pub fn login_name() -> String {
    agentmesh_node::home::login_name()
}

/// A runtime for one command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Who this command is: a human, named after the login user.
pub fn who() -> Who {
    // A wake run's commands are its agent's, never its person's.
    if let Some(run) =
        std::env::var_os(agentmesh_node::agents::run::RUN_MARKER).filter(|v| !v.is_empty())
    {
        return Who {
            kind: WhoKind::Agent,
            name: agentmesh_node::agents::run::RUN_WHO.into(),
            session_id: Some(run.to_string_lossy().into_owned()),
            task: None,
        };
    }
    Who {
        kind: WhoKind::Human,
        name: login_name(),
        session_id: None,
        task: None,
    }
}

/// Attaches to the daemon of `home`; none running is a [`NotRunning`],
/// saying why.
pub async fn client(home: &Home) -> anyhow::Result<Client> {
    match Client::connect(home, who()).await {
        Ok(c) => {
            // The machine this command talks to: what an address on it
            // (`pipeline@`) is printed with.
            let _ = MACHINE.set(c.name.clone());
            Ok(c)
        }
        Err(agentmesh_node::client::ClientError::NotRunning { socket }) => {
            Err(NotRunning::of(home, &socket).into())
        }
        Err(e) => Err(e.into()),
    }
}

/// The name of the machine whose daemon this command reached, once it did.
static MACHINE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The machine's name when it was learnt without its daemon (read from
/// its store).
pub fn set_machine(name: String) {
    let _ = MACHINE.set(name);
}

/// `mailbox@` (a mailbox of this machine, `None` the owner's) with this
/// machine's name, once the daemon told it.
pub fn here(mailbox: Option<&str>) -> String {
    format!(
        "{}@{}",
        mailbox.unwrap_or_default(),
        MACHINE.get().map(String::as_str).unwrap_or_default()
    )
}

/// Whether a person is at this terminal: standard input and output are both
/// terminals.
pub fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// Asks a question and reads one line (without its newline).
pub fn prompt(question: &str) -> anyhow::Result<String> {
    // A question can name what another machine said (a joiner's name).
    print!("{}", clean_lines(question));
    std::io::stdout().flush()?;
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line)? == 0 {
        anyhow::bail!("standard input closed before an answer was given");
    }
    Ok(line.trim().to_owned())
}

/// A spinner with `message`, ticking until dropped or finished.
pub fn spinner(message: &str) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(message.to_owned());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// A bar counting `len` steps (on stderr, hidden when it is not a
/// terminal).
pub fn progress(len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} pairs judged")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// A PeerId shortened for tables: `12D3…` and its last six characters.
pub fn short_peer(peer: &str) -> String {
    if peer.len() > 12 {
        format!("{}…{}", &peer[..4], &peer[peer.len() - 6..])
    } else {
        peer.to_owned()
    }
}

/// Prints rows as a table with a header, columns padded to fit; every
/// cell [`clean`]ed (cells hold names and addresses peers gave).
pub fn table(header: &[&str], rows: &[Vec<String>]) {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| clean(c)).collect())
        .collect();
    let rows = &rows;
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        out(format_args!("{}", padded.join("  ").trim_end()));
    };
    line(header.iter().map(|h| (*h).to_owned()).collect());
    for row in rows {
        line(row.clone());
    }
}

/// Prints `value` as pretty JSON.
pub fn json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    out(format_args!("{}", serde_json::to_string_pretty(value)?));
    Ok(())
}

/// Text from the mesh, fit for a terminal: control characters (escape
/// sequences, carriage returns, bells) and invisible formatting characters
/// (right-to-left overrides, zero-width characters, which can reorder what
/// a line shows, such as `[held: from another person's machine]`) become `?`, so a message
/// can't move the cursor, rewrite what is on screen, retitle the window or
/// disguise itself. Tabs stay tabs: code is full of them.
pub fn clean(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c == '\t' {
                c
            } else if c.is_control() || agentmesh_protocol::names::is_invisible_format(c) {
                '?'
            } else {
                c
            }
        })
        .collect()
}

/// `n` and `noun`, plural unless one: `1 member`, `2 members`.
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// [`clean`], keeping line breaks: for whole lines of output whose
/// remote parts are one line each (names, addresses, owners).
pub fn clean_lines(text: &str) -> String {
    text.split('\n').map(clean).collect::<Vec<_>>().join("\n")
}

/// Writes `text` and a line break to standard output (see [`out_raw`]).
pub fn out(text: std::fmt::Arguments<'_>) {
    out_raw(&format!("{text}\n"));
}

/// Writes `text` to standard output as it is. A reader that went away
/// (`agentmesh peers | head -c 1`) ends the command as a closed pipe ends
/// other tools: quietly, exit code 141 (128 + SIGPIPE), never a panic;
/// another failure to write says so and exits 1.
pub fn out_raw(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        eprintln!("error: cannot write the output: {e}");
        std::process::exit(1);
    }
}

/// `println!` through [`out`]: a closed pipe ends the command quietly.
// Exported for `crate::outln!` paths; not the library's API.
#[doc(hidden)]
#[macro_export]
macro_rules! outln {
    () => { $crate::term::out(format_args!("")) };
    ($($arg:tt)*) => { $crate::term::out(format_args!($($arg)*)) };
}

/// `println!` for text output: the line is [`clean_lines`]d, so no string
/// from the mesh printed in it (an address, a name, a reason) can act on
/// the terminal. JSON output is printed as it is: serde_json escapes
/// control characters. Through [`out`].
// Exported for `crate::say!` paths; not the library's API.
#[doc(hidden)]
#[macro_export]
macro_rules! say {
    () => { $crate::outln!() };
    ($($arg:tt)*) => {
        $crate::outln!("{}", $crate::term::clean_lines(&format!($($arg)*)))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_of_a_thing_is_not_plural() {
        assert_eq!(count(1, "member"), "1 member");
        assert_eq!(count(0, "member"), "0 members");
        assert_eq!(count(3, "peer"), "3 peers");
    }

    #[test]
    fn codes_in_text_output_become_words() {
        assert_eq!(
            refusal_words("bravo refused it (no_mailbox): there is no mailbox x on bravo"),
            "bravo refused it: there is no mailbox x on bravo"
        );
        assert_eq!(refusal_words("last attempt: busy"), "last attempt: busy");
        assert_eq!(
            held_detail_words("held: other_owner (it was held by pause)"),
            "held: from another person's machine (it was held by pause)"
        );
        assert_eq!(held_detail_words("held: someday"), "held: someday");
        assert_eq!(held_detail_words("tell delivered"), "tell delivered");
    }

    #[test]
    fn control_and_invisible_characters_are_shown_as_question_marks() {
        assert_eq!(clean("a\x1b[2Jb\rc\u{7}"), "a?[2Jb?c?");
        // A right-to-left override would make "[held: other_owner]" read
        // backwards after it.
        assert_eq!(clean("bob\u{202E}]renwo_rehto"), "bob?]renwo_rehto");
        assert_eq!(clean("zero\u{200B}width\u{FEFF}"), "zero?width?");
        assert_eq!(clean("fn main() {\n\tgo();\n}"), "fn main() {?\tgo();?}");
        assert_eq!(clean("naïve café ✓"), "naïve café ✓");
        assert_eq!(
            clean_lines("peer /dns4/a\x1b]52;c;aGk=\x07b/tcp/1\nnext"),
            "peer /dns4/a?]52;c;aGk=?b/tcp/1\nnext"
        );
    }
}
