//! `agentmesh service install | uninstall | status | start | stop`: the
//! daemon started at login, and again after a failure, by the user's own
//! service manager.
//!
//! ```text
//!  systemd (Linux): $XDG_CONFIG_HOME/systemd/user/agentmesh.service
//!                   (default ~/.config/…), `systemctl --user …`
//!  launchd (macOS): ~/Library/LaunchAgents/dev.agentmesh.daemon.plist,
//!                   `launchctl bootstrap|bootout gui/UID …`
//!  both run `agentmesh [--home DIR] daemon`, this very binary, at login
//!  and restart it when it fails (not when it stops cleanly: `down`,
//!  SIGTERM)
//! ```
//!
//! Where no user manager answers (a container, a CI machine, an SSH
//! session without one), `install` writes the file, exits 0, and says the
//! command that enables it; `status` reads what the files say (a unit is
//! enabled when its link in `default.target.wants/` exists) and says what
//! it cannot know. One unit per user: a unit that runs another home is
//! not replaced (uninstall it first).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use agentmesh_node::home::Home;
use serde::Serialize;

use crate::term;

mod files;

pub use files::{ALREADY_RUNNING_EXIT, Manager};
use files::{
    LABEL, UNIT, check_command, command, home_of, path, plist_text, unit_text, wants_link,
    write_atomically, written_command,
};

/// `agentmesh service`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum ServiceCommand {
    /// Write the user service that runs `agentmesh daemon` at login and
    /// restarts it when it fails, enable it, and start it now.
    Install {
        /// Write and enable it, but start nothing now.
        #[arg(long)]
        no_start: bool,
        #[command(flatten)]
        manager: ManagerArg,
    },
    /// Stop the service, disable it, and remove its file.
    Uninstall {
        #[command(flatten)]
        manager: ManagerArg,
    },
    /// Whether the service is installed, enabled and running.
    Status {
        #[command(flatten)]
        manager: ManagerArg,
    },
    /// Start the service now, and at every login.
    Start {
        #[command(flatten)]
        manager: ManagerArg,
    },
    /// Stop the service now, and keep it from starting at login (until
    /// `service start`).
    Stop {
        #[command(flatten)]
        manager: ManagerArg,
    },
}

/// `--manager`: which service manager's file to write.
#[derive(Debug, clap::Args)]
pub struct ManagerArg {
    /// The service manager. Default: the platform's (systemd on Linux,
    /// launchd on macOS).
    #[arg(long, value_enum)]
    manager: Option<Manager>,
}

impl ManagerArg {
    /// The one asked for, else the platform's.
    fn chosen(&self) -> Manager {
        self.manager.unwrap_or_else(Manager::platform)
    }
}

/// A step a subcommand took, as `done` lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Step {
    /// The file was written.
    Written,
    /// It starts at login.
    Enabled,
    /// The manager started it.
    Started,
    /// The manager restarted it, running a changed file.
    Restarted,
    /// The manager stopped it.
    Stopped,
    /// It no longer starts at login.
    Disabled,
    /// The file was removed.
    Removed,
}

/// What `service status` (and every other subcommand, after its work)
/// reports. `null` where it can't be known: no manager answered.
#[derive(Debug, Serialize)]
pub struct ServiceView {
    /// The manager the file is for.
    pub manager: Manager,
    /// The service's file.
    pub path: PathBuf,
    /// Whether the file exists.
    pub installed: bool,
    /// Whether it starts at login.
    pub enabled: Option<bool>,
    /// Whether the manager runs it now.
    pub active: Option<bool>,
    /// Whether the manager answered.
    pub manager_answers: bool,
    /// The command it runs, as written in its file.
    pub command: Option<Vec<String>>,
    /// What was done, in order (`written`, `enabled`, `started`,
    /// `restarted`, `stopped`, `disabled`, `removed`); empty for
    /// `status`.
    pub done: Vec<Step>,
    /// The command that finishes the job where no manager answered.
    pub next: Option<String>,
}

/// `agentmesh service …`.
pub fn run(
    home: &Home,
    agent_home: Option<&Path>,
    command: ServiceCommand,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let view = match command {
        ServiceCommand::Install { no_start, manager } => {
            install(home, agent_home, manager.chosen(), no_start)?
        }
        ServiceCommand::Uninstall { manager } => uninstall(manager.chosen())?,
        ServiceCommand::Status { manager } => status(manager.chosen(), vec![])?,
        ServiceCommand::Start { manager } => start_stop(home, manager.chosen(), true)?,
        ServiceCommand::Stop { manager } => start_stop(home, manager.chosen(), false)?,
    };
    if json {
        term::json(&view)?;
    } else {
        print(&view);
    }
    Ok(ExitCode::SUCCESS)
}

fn print(view: &ServiceView) {
    let manager = view.manager;
    let what = manager.name();
    let path = view.path.display();
    for step in &view.done {
        match step {
            Step::Written => crate::say!("Wrote the {what} {path}."),
            Step::Enabled => {
                crate::say!("Enabled it: it starts `agentmesh daemon` at every login.")
            }
            Step::Started => crate::say!("Started it."),
            Step::Restarted => crate::say!("Restarted it: it runs what the new unit says."),
            Step::Stopped => crate::say!("Stopped it."),
            Step::Disabled => crate::say!("Disabled it: it no longer starts at login."),
            Step::Removed => crate::say!("Removed {path}."),
        }
    }
    if !view.installed {
        if view.done.is_empty() {
            crate::say!(
                "No {what} is installed ({path}); `agentmesh service install` writes one that starts the daemon at login."
            );
        }
        return;
    }
    if let Some(command) = &view.command {
        crate::say!("It runs: {}", command.join(" "));
    }
    let yes_no_unknown = |v: Option<bool>, yes: &str, no: &str, unknown: &str| match v {
        Some(true) => yes.to_owned(),
        Some(false) => no.to_owned(),
        None => unknown.to_owned(),
    };
    crate::say!(
        "Installed: {path}; {}; {}.",
        yes_no_unknown(
            view.enabled,
            "starts at login",
            "does not start at login",
            "whether it starts at login is unknown"
        ),
        yes_no_unknown(
            view.active,
            "running now",
            "not running now",
            "whether it runs now is unknown (no service manager answered)"
        )
    );
    match (&view.next, view.manager_answers) {
        (Some(next), false) => crate::say!(
            "No {} answered here (a container or a machine without a login session?); {next}",
            manager.manager_name()
        ),
        (Some(next), true) => crate::say!("{next}"),
        (None, _) => {}
    }
}

// ---------------------------------------------------------------------------
// The managers

/// Runs a manager's command; whether it succeeded (false when it is not
/// installed or does not answer), and what it printed.
fn manage(program: &str, args: &[&str]) -> (bool, String) {
    match Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) => (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
                + String::from_utf8_lossy(&out.stderr).trim(),
        ),
        Err(e) => (false, e.to_string()),
    }
}

fn gui_domain() -> String {
    format!("gui/{}", rustix::process::getuid().as_raw())
}

/// Whether the user's manager answers here.
fn answers(manager: Manager) -> bool {
    match manager {
        Manager::Systemd => manage("systemctl", &["--user", "show-environment"]).0,
        Manager::Launchd => manage("launchctl", &["print", &gui_domain()]).0,
    }
}

/// The command that enables and starts the written file, for a person to
/// run where a manager answers.
fn enable_hint(manager: Manager, path: &Path) -> String {
    match manager {
        Manager::Systemd => "in a login session, run `systemctl --user daemon-reload && systemctl --user enable --now agentmesh` (and `loginctl enable-linger $USER` to start it at boot)".to_owned(),
        Manager::Launchd => format!(
            "in a login session, run `launchctl bootstrap gui/$(id -u) {}`",
            path.display()
        ),
    }
}

fn failed(manager: Manager, what: &str, output: &str) -> anyhow::Error {
    let look = match manager {
        Manager::Systemd => {
            "`systemctl --user status agentmesh` and `journalctl --user -u agentmesh` say more"
                .to_owned()
        }
        Manager::Launchd => format!("`launchctl print {}/{LABEL}` says more", gui_domain()),
    };
    term::cli_error(
        "service_manager_failed",
        format!("the service manager refused to {what}: {output}; {look}"),
    )
}

/// The pid of the daemon running on `home`, if one answers.
fn running_daemon(home: &Home) -> Option<u32> {
    let rt = term::runtime().ok()?;
    rt.block_on(async {
        let mut c = term::client(home).await.ok()?;
        c.status().await.ok().map(|s| s.pid)
    })
}

fn target(manager: Manager) -> String {
    match manager {
        Manager::Systemd => UNIT.to_owned(),
        Manager::Launchd => format!("{}/{LABEL}", gui_domain()),
    }
}

/// launchd: the agent allowed to load at login, then loaded (which
/// starts it: `RunAtLoad`). One already loaded is booted out first, as
/// `bootstrap` refuses a loaded agent.
fn launchd_load(path: &Path) -> (bool, String) {
    let _ = manage("launchctl", &["enable", &target(Manager::Launchd)]);
    let _ = manage("launchctl", &["bootout", &target(Manager::Launchd)]);
    manage(
        "launchctl",
        &["bootstrap", &gui_domain(), &path.to_string_lossy()],
    )
}

fn install(
    home: &Home,
    agent_home: Option<&Path>,
    manager: Manager,
    no_start: bool,
) -> anyhow::Result<ServiceView> {
    let path = path(manager)?;
    let command = command(agent_home)?;
    check_command(&command)?;
    if let Some(old) = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| written_command(manager, &t))
        && home_of(&old) != home_of(&command)
    {
        let theirs = home_of(&old).unwrap_or("the default home");
        return Err(term::cli_error(
            "service_other_home",
            format!(
                "{} already runs the daemon of {theirs}; one service per user: `agentmesh service uninstall` first (it stops that daemon), then install again",
                path.display()
            ),
        ));
    }
    let text = match manager {
        Manager::Systemd => unit_text(&command),
        Manager::Launchd => plist_text(&command, &home.root().join("daemon.log")),
    };
    let changed = std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str());
    let service_active = status(manager, vec![])?.active == Some(true);
    write_atomically(&path, &text)?;
    let mut done = vec![Step::Written];
    if !answers(manager) {
        let mut view = status(manager, done)?;
        view.next = Some(enable_hint(manager, &path));
        return Ok(view);
    }
    // A daemon started by `up` or an agent session holds the home: the
    // service's would exit at once. It starts at the next login instead.
    let running = if service_active {
        None
    } else {
        running_daemon(home)
    };
    let start_now = !no_start && running.is_none();
    match manager {
        Manager::Systemd => {
            let (ok, out) = manage("systemctl", &["--user", "daemon-reload"]);
            if !ok {
                return Err(failed(manager, "reload its units", &out));
            }
            let mut args = vec!["--user", "enable"];
            if start_now {
                args.push("--now");
            }
            args.push(UNIT);
            let (ok, out) = manage("systemctl", &args);
            if !ok {
                return Err(failed(manager, "enable agentmesh.service", &out));
            }
            done.push(Step::Enabled);
            if start_now && service_active && changed {
                // The unit running an older file runs the new one.
                let (ok, out) = manage("systemctl", &["--user", "try-restart", UNIT]);
                if !ok {
                    return Err(failed(manager, "restart agentmesh.service", &out));
                }
                done.push(Step::Restarted);
            } else if start_now && !service_active {
                done.push(Step::Started);
            }
        }
        Manager::Launchd => {
            // Loading starts it (RunAtLoad); not loaded, it loads at the
            // next login.
            if start_now {
                let (ok, out) = launchd_load(&path);
                if !ok {
                    return Err(failed(manager, "load the agent", &out));
                }
                done.extend([Step::Enabled, Step::Started]);
            } else {
                let _ = manage("launchctl", &["enable", &target(manager)]);
                done.push(Step::Enabled);
            }
        }
    }
    let mut view = status(manager, done)?;
    if let (false, Some(pid)) = (no_start, running) {
        view.next = Some(format!(
            "not started now: a daemon already runs on this home (pid {pid}, started by `agentmesh up` or an agent session); the service starts it at your next login, or now: `agentmesh down && agentmesh service start`"
        ));
    }
    Ok(view)
}

fn uninstall(manager: Manager) -> anyhow::Result<ServiceView> {
    let path = path(manager)?;
    let mut done = vec![];
    if !path.exists() {
        return status(manager, done);
    }
    if answers(manager) {
        match manager {
            Manager::Systemd => {
                let (ok, out) = manage("systemctl", &["--user", "disable", "--now", UNIT]);
                if !ok {
                    return Err(failed(manager, "disable agentmesh.service", &out));
                }
                done.extend([Step::Stopped, Step::Disabled]);
            }
            Manager::Launchd => {
                // An agent not loaded can't be booted out: nothing runs it.
                if manage("launchctl", &["bootout", &target(manager)]).0 {
                    done.push(Step::Stopped);
                }
            }
        }
    } else if let Some(link) = wants_link(&path).filter(|l| l.symlink_metadata().is_ok()) {
        // What `systemctl disable` removes, so no login starts a unit
        // that is gone.
        std::fs::remove_file(&link)
            .map_err(|e| anyhow::anyhow!("could not remove {}: {e}", link.display()))?;
        done.push(Step::Disabled);
    }
    std::fs::remove_file(&path)
        .map_err(|e| anyhow::anyhow!("could not remove {}: {e}", path.display()))?;
    done.push(Step::Removed);
    if manager == Manager::Systemd && answers(manager) {
        let _ = manage("systemctl", &["--user", "daemon-reload"]);
    }
    status(manager, done)
}

fn start_stop(home: &Home, manager: Manager, start: bool) -> anyhow::Result<ServiceView> {
    let path = path(manager)?;
    if !path.exists() {
        return Err(term::cli_error(
            "service_not_installed",
            format!(
                "no {} is installed ({}); `agentmesh service install` writes one",
                manager.name(),
                path.display()
            ),
        ));
    }
    if !answers(manager) {
        return Err(term::cli_error(
            "no_service_manager",
            format!(
                "no {} answered here, so nothing can be {}; {}",
                manager.manager_name(),
                if start { "started" } else { "stopped" },
                if start {
                    enable_hint(manager, &path)
                } else {
                    "`agentmesh down` stops the daemon, and `agentmesh service uninstall` removes the file".to_owned()
                }
            ),
        ));
    }
    if start
        && let Some(pid) = running_daemon(home)
        && status(manager, vec![])?.active != Some(true)
    {
        return Err(term::cli_error(
            "already_running",
            format!(
                "a daemon already runs on this home (pid {pid}, started by `agentmesh up` or an agent session), so the service's would exit at once; `agentmesh down` first, then `agentmesh service start`"
            ),
        ));
    }
    let (ok, out) = match (manager, start) {
        (Manager::Systemd, true) => manage("systemctl", &["--user", "enable", "--now", UNIT]),
        (Manager::Systemd, false) => manage("systemctl", &["--user", "disable", "--now", UNIT]),
        (Manager::Launchd, true) => launchd_load(&path),
        (Manager::Launchd, false) => {
            // Kept from loading at the next login, then stopped.
            let _ = manage("launchctl", &["disable", &target(manager)]);
            let _ = manage("launchctl", &["bootout", &target(manager)]);
            (true, String::new())
        }
    };
    if !ok {
        return Err(failed(
            manager,
            if start { "start it" } else { "stop it" },
            &out,
        ));
    }
    let done = if start {
        vec![Step::Enabled, Step::Started]
    } else {
        vec![Step::Stopped, Step::Disabled]
    };
    status(manager, done)
}

/// What the files (and the manager, if it answers) say now.
pub fn status(manager: Manager, done: Vec<Step>) -> anyhow::Result<ServiceView> {
    let path = path(manager)?;
    let text = std::fs::read_to_string(&path).ok();
    let installed = text.is_some();
    let command = text.as_deref().and_then(|t| written_command(manager, t));
    let manager_answers = answers(manager);
    let (enabled, active) = match (manager, installed, manager_answers) {
        (_, false, _) => (Some(false), Some(false)),
        (Manager::Systemd, true, true) => (
            // `enabled-runtime` does not outlive a reboot.
            Some(manage("systemctl", &["--user", "is-enabled", UNIT]).1 == "enabled"),
            Some(manage("systemctl", &["--user", "is-active", UNIT]).0),
        ),
        (Manager::Systemd, true, false) => (
            Some(wants_link(&path).is_some_and(|l| l.symlink_metadata().is_ok())),
            None,
        ),
        (Manager::Launchd, true, true) => {
            // An installed agent loads at login unless it was disabled.
            let (_, disabled) = manage("launchctl", &["print-disabled", &gui_domain()]);
            let off = disabled.lines().any(|l| {
                l.contains(&format!("\"{LABEL}\""))
                    && (l.contains("=> disabled") || l.contains("=> true"))
            });
            let (loaded, printed) = manage("launchctl", &["print", &target(manager)]);
            (
                Some(!off),
                Some(loaded && printed.contains("state = running")),
            )
        }
        (Manager::Launchd, true, false) => (None, None),
    };
    Ok(ServiceView {
        manager,
        path,
        installed,
        enabled,
        active,
        manager_answers,
        command,
        done,
        next: None,
    })
}

/// For `down` on `home`: whether an installed service will start this
/// home's daemon again at login (`None`: no service installed for it).
pub fn starts_at_login(agent_home: Option<&Path>) -> Option<(Manager, Option<bool>)> {
    let manager = Manager::platform();
    let view = status(manager, vec![]).ok()?;
    let ours = view
        .command
        .as_deref()
        .is_some_and(|c| home_of(c).map(Path::new) == agent_home);
    (view.installed && ours).then_some((manager, view.enabled))
}
