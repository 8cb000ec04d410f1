//! `install.sh` (issue 38, point 3), run by dash (a POSIX shell, Debian's
//! `sh`) against a release made here: an archive of this build's
//! binaries and its SHA256SUMS, served on loopback by Python's
//! `http.server`. A checked archive is installed; a tampered one, or one
//! SHA256SUMS does not name, is refused with nothing installed; the
//! installer's temporary folder is gone either way.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use agentmesh_tests::bin;
use agentmesh_tests::natlab::relay_bin;
use sha2::{Digest, Sha256};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../install.sh")
}

/// The archive's name for this machine, as the release workflow names it.
fn archive_name() -> String {
    format!(
        "agentmesh-{}-unknown-linux-gnu.tar.gz",
        std::env::consts::ARCH
    )
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Python's file server on a loopback port, serving `dir`; killed on drop.
struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &Path) -> Option<Server> {
    let python = match Command::new("python3").arg("--version").output() {
        Ok(out) if out.status.success() => "python3",
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true and no python3: .ci/run installs Debian's python3"
            );
            eprintln!("skipping: no python3 here to serve the release");
            return None;
        }
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(python)
        .args(["-m", "http.server", "--bind", "127.0.0.1"])
        .arg(port.to_string())
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server {
        child,
        base: format!("http://127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the file server did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(server)
}

/// The release's archive at `archive`: both binaries of `stage` at its
/// top, as the release workflow packs them.
fn pack(archive: &Path, stage: &Path) {
    let tar = Command::new("tar")
        .args(["--use-compress-program=gzip -1", "-cf"])
        .arg(archive)
        .arg("-C")
        .arg(stage)
        .args(["agentmesh", "agentmesh-relay"])
        .status()
        .unwrap();
    assert!(tar.success());
}

/// Installs from `base` into `prefix`, not offering `setup`.
fn install_from(dir: &Path, base: &str, prefix: &Path) -> Output {
    install(
        dir,
        &[
            "--base",
            base,
            "--prefix",
            prefix.to_str().unwrap(),
            "--no-setup",
        ],
        &[],
    )
}

/// Runs the installer with `args`, its HOME and TMPDIR in `dir`.
fn install(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    std::fs::create_dir_all(dir.join("home")).unwrap();
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    let mut c = Command::new("dash");
    c.arg(script())
        .args(args)
        .env("HOME", dir.join("home"))
        .env("TMPDIR", dir.join("tmp"))
        .env_remove("AGENTMESH_INSTALL_BASE")
        .stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn the_installer_installs_a_checked_archive_and_refuses_a_tampered_one() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site");
    let stage = dir.path().join("stage");
    std::fs::create_dir_all(&site).unwrap();
    std::fs::create_dir_all(&stage).unwrap();
    // The release: both binaries at the archive's top, and SHA256SUMS
    // naming it among another platform's.
    std::fs::copy(bin(), stage.join("agentmesh")).unwrap();
    std::fs::copy(relay_bin(), stage.join("agentmesh-relay")).unwrap();
    let archive = site.join(archive_name());
    pack(&archive, &stage);
    let good = std::fs::read(&archive).unwrap();
    let sums = format!(
        "{}  agentmesh-riscv64-unknown-linux-gnu.tar.gz\n{}  {}\n",
        "0".repeat(64),
        sha256_hex(&good),
        archive_name()
    );
    std::fs::write(site.join("SHA256SUMS"), &sums).unwrap();
    let Some(server) = serve(&site) else {
        return;
    };

    // Installed, checked: the very binaries, executable, nothing left
    // beside them or in the temporary folder.
    let ok = dir.path().join("ok");
    let prefix = ok.join("a prefix with spaces");
    let out = install_from(&ok, &server.base, &prefix);
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("Checked {} against SHA256SUMS", archive_name())),
        "{text}"
    );
    assert!(text.contains("Installed agentmesh 0.1.0"), "{text}");
    assert!(text.contains("Next: agentmesh setup"), "{text}");
    let installed = prefix.join("bin");
    assert_eq!(entries(&installed), ["agentmesh", "agentmesh-relay"]);
    for (name, original) in [("agentmesh", bin()), ("agentmesh-relay", relay_bin())] {
        let path = installed.join(name);
        assert!(
            std::fs::read(&path).unwrap() == std::fs::read(&original).unwrap(),
            "{name} is not the archived binary"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755, "{name}");
    }
    assert_eq!(entries(&ok.join("tmp")), Vec::<String>::new());

    // An archive whose agentmesh does not run here replaces nothing.
    let broken = dir.path().join("broken-stage");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("agentmesh"), "#!/bin/sh\nexit 1\n").unwrap();
    std::fs::copy(relay_bin(), broken.join("agentmesh-relay")).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        let exec = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(broken.join("agentmesh"), exec).unwrap();
    }
    pack(&archive, &broken);
    let not_running = std::fs::read(&archive).unwrap();
    std::fs::write(
        site.join("SHA256SUMS"),
        format!("{}  {}\n", sha256_hex(&not_running), archive_name()),
    )
    .unwrap();
    let out = install_from(&ok, &server.base, &prefix);
    let text = said(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("does not run on this machine"), "{text}");
    assert_eq!(entries(&installed), ["agentmesh", "agentmesh-relay"]);
    assert!(
        std::fs::read(installed.join("agentmesh")).unwrap() == std::fs::read(bin()).unwrap(),
        "the installed agentmesh was replaced by one that does not run"
    );
    assert_eq!(entries(&ok.join("tmp")), Vec::<String>::new());
    std::fs::write(&archive, &good).unwrap();
    std::fs::write(site.join("SHA256SUMS"), &sums).unwrap();

    // Tampered with after SHA256SUMS was made: refused, nothing written,
    // nothing left.
    let mut bad = good.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0x01;
    std::fs::write(&archive, &bad).unwrap();
    let tampered = dir.path().join("tampered");
    let prefix = tampered.join("prefix");
    let out = install_from(&tampered, &server.base, &prefix);
    let text = said(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("does not match SHA256SUMS"), "{text}");
    assert!(text.contains("nothing was installed"), "{text}");
    assert_eq!(entries(&prefix), Vec::<String>::new());
    assert_eq!(entries(&tampered.join("tmp")), Vec::<String>::new());

    // An archive SHA256SUMS does not name is refused too; the base can
    // come from AGENTMESH_INSTALL_BASE.
    std::fs::write(&archive, &good).unwrap();
    std::fs::write(
        site.join("SHA256SUMS"),
        sums.lines().next().unwrap().to_owned() + "\n",
    )
    .unwrap();
    let unnamed = dir.path().join("unnamed");
    let prefix = unnamed.join("prefix");
    let out = install(
        &unnamed,
        &["--prefix", prefix.to_str().unwrap(), "--no-setup"],
        &[("AGENTMESH_INSTALL_BASE", &server.base)],
    );
    let text = said(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("SHA256SUMS has no line for {}", archive_name())),
        "{text}"
    );
    assert_eq!(entries(&prefix), Vec::<String>::new());
    assert_eq!(entries(&unnamed.join("tmp")), Vec::<String>::new());
}

#[test]
fn the_installer_says_what_it_takes_and_refuses_what_it_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let out = install(dir.path(), &["--frobnicate"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(said(&out).contains("unknown option --frobnicate"));
    let out = install(dir.path(), &["--help"], &[]);
    assert!(out.status.success());
    for flag in [
        "--base URL",
        "--prefix DIR",
        "--no-setup",
        "AGENTMESH_INSTALL_BASE",
    ] {
        assert!(said(&out).contains(flag), "--help lacks {flag}");
    }
    // Nothing to download from: a clear failure, nothing left behind.
    let out = install(
        dir.path(),
        &[
            "--base",
            "http://127.0.0.1:9",
            "--prefix",
            dir.path().join("p").to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    assert!(said(&out).contains("could not download"), "{}", said(&out));
    assert_eq!(entries(&dir.path().join("tmp")), Vec::<String>::new());
}
