//! `agentmesh backup export FILE [--with-mail]` and `agentmesh backup
//! import FILE`: this machine in one encrypted file, and back (the work is
//! agentmesh_node::backup's).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agentmesh_node::api::ops;
use agentmesh_node::api::{BackupMade as Made, Passphrase};
use agentmesh_node::backup::{PASSPHRASE_ENV, Restored};
use agentmesh_node::home::Home;

use crate::term;

/// `agentmesh backup`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum BackupCommand {
    /// Write this machine (its key, team, config, mailboxes, profiles,
    /// wake settings, members' addresses, relays) to FILE, encrypted with a
    /// passphrase (asked twice, or $AGENTMESH_PASSPHRASE). Works with the
    /// daemon running or stopped.
    Export {
        /// The file to write (replaced if it exists).
        file: PathBuf,
        /// Put the mail in too: inbox, outbox, held mail, the audit log,
        /// what this machine carries for others (with the daemon stopped:
        /// `agentmesh down` first).
        #[arg(long)]
        with_mail: bool,
    },
    /// Make this home the machine FILE holds (a new or empty home: give one
    /// with --home). Its team finds it at its new address once it starts.
    Import {
        /// The backup `backup export` wrote.
        file: PathBuf,
    },
}

/// `agentmesh backup export|import`.
pub fn run(home: &Home, command: BackupCommand, json: bool) -> anyhow::Result<ExitCode> {
    match command {
        BackupCommand::Export { file, with_mail } => export(home, &file, with_mail, json),
        BackupCommand::Import { file } => import(home, &file, json),
    }
}

/// The passphrase: `$AGENTMESH_PASSPHRASE`, else typed at the terminal
/// (twice when making a backup).
fn passphrase(twice: bool) -> anyhow::Result<Passphrase> {
    if let Some(p) = std::env::var_os(PASSPHRASE_ENV) {
        let p = p.into_string().map_err(|_| {
            term::cli_error(
                "bad_passphrase",
                format!("${PASSPHRASE_ENV} is not UTF-8; give a passphrase in UTF-8"),
            )
        })?;
        return Ok(Passphrase::new(p)?);
    }
    if !std::io::stdin().is_terminal() {
        return Err(term::cli_error(
            "passphrase_needed",
            format!(
                "a backup needs a passphrase, and nobody is at a terminal to type one; set ${PASSPHRASE_ENV}"
            ),
        ));
    }
    let first = rpassword::prompt_password("Passphrase: ")?;
    let p = Passphrase::new(first.clone())?;
    if twice && rpassword::prompt_password("The same passphrase again: ")? != first {
        return Err(term::cli_error(
            "passphrase_mismatch",
            "the two passphrases differ; nothing was written: run it again",
        ));
    }
    Ok(p)
}

fn export(home: &Home, file: &Path, with_mail: bool, json: bool) -> anyhow::Result<ExitCode> {
    let file = std::path::absolute(file)?;
    let rt = term::runtime()?;
    // Said before a passphrase is asked for: with the mail, only a
    // stopped daemon will do.
    if with_mail && rt.block_on(term::client(home)).is_ok() {
        return Err(agentmesh_node::backup::BackupError::MailWhileRunning.into());
    }
    let passphrase = passphrase(true)?;
    let spinner = (!json && std::io::stderr().is_terminal())
        .then(|| term::spinner("Encrypting the backup (scrypt takes a second)…"));
    let op = ops::BackupExport {
        file: file.clone(),
        passphrase: passphrase.clone(),
        with_mail,
    };
    let running = rt.block_on(async {
        let mut c = term::client(home).await?;
        anyhow::Ok(c.call(op).await?)
    });
    let made: Made = match running {
        Ok(made) => made,
        // No daemon holds the store: this command reads it.
        Err(e) if term::not_running(&e).is_some() => {
            agentmesh_node::daemon::backup_stopped(home, &file, &passphrase, with_mail)?
        }
        Err(e) => return Err(e),
    };
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    if json {
        term::json(&made)?;
        return Ok(ExitCode::SUCCESS);
    }
    crate::say!(
        "Wrote {} ({}): {}{}, {}.",
        made.file.display(),
        size(made.bytes),
        made.name,
        made.team
            .as_deref()
            .map(|t| format!(" of team {t}"))
            .unwrap_or_default(),
        if made.with_mail {
            format!(
                "{} with its mail",
                term::count(made.entries as usize, "record")
            )
        } else {
            format!(
                "{}; its mail is not in it (--with-mail adds it)",
                term::count(made.entries as usize, "record")
            )
        }
    );
    crate::say!(
        "It holds this machine's key: keep it, and its passphrase, where only you can read them."
    );
    crate::say!(
        "To restore it: `agentmesh --home NEW_HOME backup import {}` on the new machine. Then never start this copy again: two running copies of one machine split its mail.",
        made.file.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn import(home: &Home, file: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let passphrase = passphrase(false)?;
    let spinner = (!json && std::io::stderr().is_terminal())
        .then(|| term::spinner("Decrypting the backup (scrypt takes a second)…"));
    let restored: Restored = agentmesh_node::daemon::restore_backup(home, file, &passphrase)?;
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    if json {
        term::json(&restored)?;
        return Ok(ExitCode::SUCCESS);
    }
    crate::say!(
        "Restored {}{} into {}, from a backup made {}: {}{}.",
        restored.name,
        restored
            .team
            .as_deref()
            .map(|t| format!(" of team {t}"))
            .unwrap_or_default(),
        restored.home.display(),
        restored.made_at,
        term::count(restored.entries as usize, "record"),
        if restored.with_mail {
            " with its mail"
        } else {
            ", no mail"
        }
    );
    crate::say!(
        "Start it with `agentmesh up` (or `agentmesh service install`): it tells its team its new addresses as it connects."
    );
    crate::say!(
        "Stop the machine the backup came from for good, if it still runs: two running copies of one machine split its mail."
    );
    Ok(ExitCode::SUCCESS)
}

/// A file size for people.
fn size(bytes: u64) -> String {
    match bytes {
        b if b < 10 * 1024 => format!("{b} bytes"),
        b if b < 10 * 1024 * 1024 => format!("{} KiB", b / 1024),
        b => format!("{} MiB", b / (1024 * 1024)),
    }
}
