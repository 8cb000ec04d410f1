//! `agentmesh ui`: opens the daemon's local web page in the browser, or
//! prints its address (with the secret that signs a browser in).

use std::process::ExitCode;

use agentmesh_node::api::{Op, UiView};
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
        .block_on(async { Ok::<_, anyhow::Error>(term::client(home).await?.call(Op::Ui).await?) })
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
    let opened = !no_open && has_display() && open(&url);
    if json {
        term::json(&UiOutput {
            url,
            address,
            port,
            opened,
            fell_back: view.fell_back,
        })?;
    } else if opened {
        eprintln!("Opened {address} in your browser.");
    } else {
        if !no_open {
            eprintln!("No browser to open here; open this address on this machine:");
        }
        // The URL alone on stdout, for scripts; it holds the page's secret.
        println!("{url}");
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

/// Asks the desktop to open `url`; whether it said it did.
fn open(url: &str) -> bool {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
