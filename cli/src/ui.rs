//! `agentmesh ui`: opens the daemon's local web page in the browser, or
//! prints its address (with the secret that signs a browser in).
//!
//! The secret is on no command line: every user of the machine can read
//! every process's (`/proc/*/cmdline`), and one that reads it first signs
//! in as this person. The browser is given a file instead, one only this
//! user can read, that sends it on to the address (as Jupyter does).

use std::process::ExitCode;

use agentmesh_node::api::{UiView, ops};
use agentmesh_node::home::Home;

use crate::term;

/// What `agentmesh ui --json` prints.
#[derive(Debug, serde::Serialize)]
struct UiOutput {
    /// The URL that signs a browser in (`…/?secret=…`).
    url: String,
    /// The page's address.
    address: String,
    /// Its port on 127.0.0.1.
    port: u16,
    /// Whether a browser was asked to open it.
    opened: bool,
    /// The configured port was taken; the page is on another.
    fell_back: bool,
}

/// `agentmesh ui [--no-open]`.
pub fn run(home: &Home, no_open: bool, json: bool) -> anyhow::Result<ExitCode> {
    let rt = term::runtime()?;
    let view: UiView = rt
        .block_on(async { Ok::<_, anyhow::Error>(term::client(home).await?.call(ops::Ui).await?) })
        .map_err(|e| match term::not_running(&e) {
            Some(n) => term::cli_error(n.code(), n.message.clone()),
            None => e,
        })?;
    let (Some(url), Some(address), Some(port)) = (view.url, view.address, view.port) else {
        return Err(term::cli_error(
            "ui_off",
            "this daemon serves no web page: `[ui] enabled` is false, or it could not listen on 127.0.0.1 (its log says why). Turn it on with `agentmesh config set ui.enabled true`, then `agentmesh down` and `agentmesh up`",
        ));
    };
    if view.fell_back {
        eprintln!(
            "port {} was taken (another agentmesh daemon on this machine?), so the page is on port {port}",
            view.configured_port
        );
    }
    let opened = !no_open && has_display() && open(home, &url);
    if json {
        term::json(&UiOutput {
            url,
            address,
            port,
            opened,
            fell_back: view.fell_back,
        })?;
    } else if opened {
        eprintln!(
            "Opened {address} in your browser. If it shows an error instead (a browser confined by snap or flatpak can't read the sign-in file in {}), run `agentmesh ui --no-open` and open the address it prints.",
            home.run_dir().display()
        );
    } else {
        if !no_open {
            eprintln!("No browser to open here; open this address on this machine:");
        }
        // The URL alone on stdout, for scripts; it holds the page's secret.
        crate::outln!("{url}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether a browser could show a window here.
fn has_display() -> bool {
    cfg!(target_os = "macos")
        || ["DISPLAY", "WAYLAND_DISPLAY"]
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// How long a sign-in file is kept: its ticket is good for ten minutes,
/// and once (files older than this are removed by the next `ui`).
const SIGN_IN_FILE_KEPT: std::time::Duration = std::time::Duration::from_secs(600);

/// Asks the desktop to open the page signed in at `url`, through a
/// sign-in file ([`sign_in_file`]) so the address is on no command line;
/// whether it said it did.
fn open(home: &Home, url: &str) -> bool {
    let file = match sign_in_file(home, url) {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "cannot write the page's sign-in file in {}: {e}",
                home.run_dir().display()
            );
            return false;
        }
    };
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let opened = std::process::Command::new(opener)
        .arg(&file)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !opened {
        // Nothing will read it: the address is printed instead.
        let _ = std::fs::remove_file(&file);
    }
    opened
}

/// A page that sends the browser on to `url`, in a new file of the home's
/// private `run/` folder that only this user can read (mode 0600); its
/// path. Sign-in files past [`SIGN_IN_FILE_KEPT`] go first.
fn sign_in_file(home: &Home, url: &str) -> std::io::Result<std::path::PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // The daemon that answered made it, for its socket.
    let dir = home.run_dir();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for e in entries.flatten() {
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > SIGN_IN_FILE_KEPT);
            let ours = e
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("ui-sign-in-") && n.ends_with(".html"));
            if ours && old {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let mut name = [0u8; 8];
    rand::Rng::fill_bytes(&mut rand::rng(), &mut name);
    let path = dir.join(format!(
        "ui-sign-in-{}.html",
        data_encoding::HEXLOWER.encode(&name)
    ));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    let url = agentmesh_node::agents::framing::escape(url);
    write!(
        f,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><meta name=\"referrer\" content=\"no-referrer\"><meta http-equiv=\"refresh\" content=\"0;url={url}\"><title>agentmesh</title></head>\n<body><p>Opening the agentmesh page… <a href=\"{url}\">Open it</a> if nothing happens.</p></body></html>\n"
    )?;
    Ok(path)
}
