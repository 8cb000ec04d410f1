#!/bin/sh
# agentmesh's installer: downloads the release archive for this machine,
# checks it against the release's SHA256SUMS, and installs `agentmesh` and
# `agentmesh-relay` into ~/.local/bin (or PREFIX/bin). Nothing is replaced
# unless the checksum matches and the new agentmesh runs here; each binary
# is renamed into place, so a binary in use is never half written; the
# temporary folder is removed on every way out.
#
#   curl -fsSL https://github.com/agentmesh/agentmesh/releases/latest/download/install.sh | sh
#   sh install.sh [--base URL] [--prefix DIR] [--no-setup]
#
# The whole script is one function called on its last line, so a download
# cut short runs nothing.

set -eu

usage() {
  cat <<'USAGE'
agentmesh's installer: the release archive for this machine, checked
against the release's SHA256SUMS, installed into ~/.local/bin.

  sh install.sh [--base URL] [--prefix DIR] [--no-setup]

--base URL     where the archives and SHA256SUMS are (also
               $AGENTMESH_INSTALL_BASE); default the latest release
--prefix DIR   install into DIR/bin; default ~/.local
--no-setup     do not offer to run `agentmesh setup` afterwards

Exit codes: 0 installed; 1 a download, a checksum or the install failed;
2 a usage error or a platform without a release archive.
USAGE
}

say() { printf '%s\n' "$*"; }
fail() { code=$1; shift; printf 'agentmesh install: %s\n' "$*" >&2; exit "$code"; }

main() {
  base=${AGENTMESH_INSTALL_BASE:-https://github.com/agentmesh/agentmesh/releases/latest/download}
  prefix=${HOME:?HOME is not set}/.local
  offer_setup=yes

  while [ $# -gt 0 ]; do
    case $1 in
      --base) [ $# -ge 2 ] || fail 2 "--base needs a URL"; base=$2; shift 2 ;;
      --base=*) base=${1#--base=}; shift ;;
      --prefix) [ $# -ge 2 ] || fail 2 "--prefix needs a folder"; prefix=$2; shift 2 ;;
      --prefix=*) prefix=${1#--prefix=}; shift ;;
      --no-setup) offer_setup=no; shift ;;
      -h|--help) usage; exit 0 ;;
      *) fail 2 "unknown option $1 (try --help)" ;;
    esac
  done
  base=${base%/}
  case $prefix in
    "~") prefix=$HOME ;;
    "~/"*) prefix=$HOME/${prefix#"~/"} ;;
  esac

  # The release's name for this machine.
  case $(uname -s) in
    Linux) os=unknown-linux-gnu ;;
    Darwin) os=apple-darwin ;;
    *) fail 2 "no release archive for $(uname -s); build from source: cargo install --locked --path cli" ;;
  esac
  case $(uname -m) in
    x86_64|amd64) arch=x86_64 ;;
    aarch64|arm64) arch=aarch64 ;;
    *) fail 2 "no release archive for $(uname -m); build from source: cargo install --locked --path cli" ;;
  esac
  archive=agentmesh-$arch-$os.tar.gz

  if command -v curl >/dev/null 2>&1; then
    # An https base is never redirected to plain http.
    case $base in
      https:*) fetch() { curl --proto '=https' --proto-redir '=https' -fsSL -o "$2" "$1"; } ;;
      *) fetch() { curl -fsSL -o "$2" "$1"; } ;;
    esac
  elif command -v wget >/dev/null 2>&1; then
    fetch() { wget -q -O "$2" "$1"; }
  else
    fail 1 "neither curl nor wget is installed; install one of them and run this again"
  fi
  if command -v sha256sum >/dev/null 2>&1; then
    sha256() { sha256sum "$1" | cut -d ' ' -f 1; }
  elif command -v shasum >/dev/null 2>&1; then
    sha256() { shasum -a 256 "$1" | cut -d ' ' -f 1; }
  else
    fail 1 "neither sha256sum nor shasum is installed, so the download can't be checked"
  fi

  # Everything downloaded goes here, and goes on every way out.
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/agentmesh-install.XXXXXX")
  bin=$prefix/bin
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 129' HUP
  trap 'exit 143' TERM

  say "Downloading $base/$archive"
  fetch "$base/SHA256SUMS" "$tmp/SHA256SUMS" || fail 1 "could not download $base/SHA256SUMS; nothing was installed"
  fetch "$base/$archive" "$tmp/$archive" || fail 1 "could not download $base/$archive; nothing was installed"

  want=$(awk -v f="$archive" '$2 == f || $2 == "*" f { print $1; exit }' "$tmp/SHA256SUMS")
  [ -n "$want" ] || fail 1 "SHA256SUMS has no line for $archive; nothing was installed"
  got=$(sha256 "$tmp/$archive")
  [ "$got" = "$want" ] || fail 1 "$archive does not match SHA256SUMS (expected $want, got $got): refusing it; nothing was installed"
  say "Checked $archive against SHA256SUMS"

  mkdir "$tmp/x"
  tar -xzf "$tmp/$archive" -C "$tmp/x" || fail 1 "could not unpack $archive; nothing was installed"
  for b in agentmesh agentmesh-relay; do
    [ -f "$tmp/x/$b" ] || fail 1 "$archive has no $b; nothing was installed"
  done

  mkdir -p "$bin" || fail 1 "could not create $bin; nothing was installed"
  # Copied beside their places, run, then renamed over them: an installed
  # agentmesh is only replaced by one that runs here, a running copy keeps
  # its file, and nobody ever sees half a binary.
  for b in agentmesh agentmesh-relay; do
    cp "$tmp/x/$b" "$bin/.$b.install.$$" || fail 1 "could not write into $bin; nothing was installed"
    chmod 755 "$bin/.$b.install.$$"
  done
  version=$("$bin/.agentmesh.install.$$" --version 2>/dev/null) \
    || fail 1 "the archive's agentmesh does not run on this machine (too old a C library?); nothing was installed; build from source: cargo install --locked --path cli"
  for b in agentmesh agentmesh-relay; do
    mv -f "$bin/.$b.install.$$" "$bin/$b" || fail 1 "could not install $bin/$b"
  done
  say "Installed $version: $bin/agentmesh and $bin/agentmesh-relay"

  case ":${PATH:-}:" in
    *":$bin:"*) ;;
    *) say "$bin is not on your PATH: add it, e.g. echo 'export PATH=\"$bin:\$PATH\"' >> ~/.profile" ;;
  esac

  # Asked at the terminal, even when this script came through a pipe
  # (`curl … | sh`), and only there.
  if [ "$offer_setup" = yes ] && [ -t 1 ] && (: </dev/tty) 2>/dev/null; then
    printf 'Set up the coding agents on this machine now (agentmesh setup)? [y/N] '
    read -r answer </dev/tty || answer=
    case $answer in
      y|Y|yes|Yes) "$bin/agentmesh" setup </dev/tty ;;
      *) say "Later: agentmesh setup" ;;
    esac
  else
    say "Next: agentmesh setup (connects Claude Code and Codex), then agentmesh up"
  fi
}

cleanup() {
  rm -rf "$tmp"
  rm -f "$bin/.agentmesh.install.$$" "$bin/.agentmesh-relay.install.$$"
}

main "$@"
