//! Terminal helpers: errors, prompts, spinners, tables, and the client
//! connection every command opens the same way.

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use agentmesh_node::api::{Who, WhoKind};
use agentmesh_node::client::Client;
use agentmesh_node::home::Home;
use indicatif::{ProgressBar, ProgressStyle};

/// Prints an error the way every command does, and gives the exit code.
pub fn fail(e: &anyhow::Error) -> ExitCode {
    eprintln!("error: {e:#}");
    ExitCode::FAILURE
}

/// A runtime for one command.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Who this command is: a human, named after the login user.
pub fn who() -> Who {
    let name = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "human".into());
    Who {
        kind: WhoKind::Human,
        name,
        session_id: None,
        task: None,
    }
}

/// Attaches to the daemon of `home`.
pub async fn client(home: &Home) -> anyhow::Result<Client> {
    Ok(Client::connect(home, who()).await?)
}

/// Whether a person is at this terminal: standard input and output are both
/// terminals.
pub fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// Asks a question and reads one line (without its newline).
pub fn prompt(question: &str) -> anyhow::Result<String> {
    print!("{question}");
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

/// A PeerId shortened for tables: `12D3…` and its last six characters.
pub fn short_peer(peer: &str) -> String {
    if peer.len() > 12 {
        format!("{}…{}", &peer[..4], &peer[peer.len() - 6..])
    } else {
        peer.to_owned()
    }
}

/// Prints rows as a table with a header, columns padded to fit.
pub fn table(header: &[&str], rows: &[Vec<String>]) {
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
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.iter().map(|h| (*h).to_owned()).collect());
    for row in rows {
        line(row.clone());
    }
}

/// Prints `value` as pretty JSON.
pub fn json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Text from the mesh, fit for a terminal: control characters (escape
/// sequences, carriage returns, bells) become `?`, so a message can't move
/// the cursor, rewrite what is on screen or retitle the window.
pub fn clean(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}
