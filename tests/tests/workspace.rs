//! Facts about the workspace itself that users and later issues rely on.

#![allow(clippy::unwrap_used)] // a test that cannot unwrap has failed

/// libp2p signs with ed25519-dalek through libp2p-identity; the protocol
/// signs envelopes and blocks with ed25519-dalek directly. They must be one
/// copy, so a machine's key means the same thing to both.
#[test]
fn one_copy_of_the_signature_code() {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock"))
        .expect("Cargo.lock is committed at the workspace root");
    // (curve25519-dalek has two copies: snow, inside libp2p-noise, keeps its
    // own for the Noise handshake; it never touches machine keys.)
    for crate_name in ["ed25519-dalek", "libp2p-identity"] {
        let copies = lock
            .lines()
            .filter(|l| *l == format!("name = \"{crate_name}\""))
            .count();
        assert_eq!(
            copies, 1,
            "Cargo.lock holds {copies} versions of {crate_name}"
        );
    }
}

/// `cargo build --release --workspace --bins` (how scripts and the
/// benchmarks build) must give no binary the test clock: in the feature
/// resolution of a build without dev-dependencies, agentmesh-node has no
/// `test-clock`. Before the fix the tests crate asked for it as a normal
/// dependency, and feature unification put it into `agentmesh`.
#[test]
fn no_user_build_has_the_test_clock() {
    let first = features_of(&["--workspace"], "agentmesh-node");
    assert!(
        !first.contains("test-clock"),
        "a user build would have the test clock: {first}"
    );
}

/// The daemon's source, file by file: (path under node/src, text without
/// its unit tests). Files that are only tests are left out.
fn node_sources() -> Vec<(String, String)> {
    sources("node/src")
}

/// Every source file under `dir` (from the workspace root), as
/// [`node_sources`] gives them.
fn sources(dir: &str) -> Vec<(String, String)> {
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(dir);
    let root = root.as_path();
    let mut files = vec![];
    walk(root, &mut files);
    files.sort();
    files
        .into_iter()
        .filter(|p| {
            !matches!(
                p.file_name().unwrap().to_str(),
                Some("tests.rs" | "testing.rs")
            )
        })
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let code = match text.find("#[cfg(test)]\nmod tests") {
                Some(i) => text[..i].to_owned(),
                None => text,
            };
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            (rel, code)
        })
        .collect()
}

/// What `cargo install agentmesh` builds has no tuning code of the judge:
/// only agentmesh-bench (and the tests) turn the `tuning` feature on. (A
/// build of the whole workspace compiles it, for agentmesh-bench; the
/// daemon calls none of it.)
#[test]
fn the_installed_binary_has_no_judge_tuning() {
    let first = features_of(&["--package", "agentmesh"], "agentmesh-judge");
    assert!(!first.contains("tuning"), "agentmesh would tune: {first}");
}

/// `package` and the features it is built with, as `cargo tree` resolves
/// them for `scope` without dev-dependencies (a user's build).
fn features_of(scope: &[&str], package: &str) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .arg("tree")
        .args(scope)
        .args([
            "--edges",
            "normal,build",
            "--invert",
            package,
            "--format",
            "{p} {f}",
            "--locked",
            "--offline",
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8(out.stdout).unwrap();
    let first = tree.lines().next().unwrap_or_default().to_owned();
    assert!(first.starts_with(package), "{tree}");
    first
}

/// node/src/lib.rs's guide names every module of the daemon.
#[test]
fn the_module_guide_lists_every_module() {
    let lib = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../node/src/lib.rs"))
        .unwrap();
    let guide: String = lib.lines().filter(|l| l.starts_with("//!")).collect();
    let modules: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod ")?.strip_suffix(';'))
        .collect();
    assert!(modules.len() > 10, "{modules:?}");
    for m in modules {
        assert!(
            guide.contains(&format!("[`{m}`]")),
            "node/src/lib.rs's guide does not name [`{m}`]"
        );
    }
}

/// No two top-level modules of the daemon depend on each other, directly
/// or through others, and the network never names the mail actor: events
/// flow out of an actor, they don't reach into another's handle.
#[test]
fn the_daemons_modules_depend_one_way() {
    let lib = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../node/src/lib.rs"))
        .unwrap();
    let modules: Vec<String> = lib
        .lines()
        .filter_map(|l| {
            l.strip_prefix("pub mod ")?
                .strip_suffix(';')
                .map(str::to_owned)
        })
        .collect();
    assert!(modules.len() > 10, "{modules:?}");
    let mut deps: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for (path, code) in node_sources() {
        let module = path.split(['/', '.']).next().unwrap().to_owned();
        if !modules.contains(&module) {
            continue;
        }
        let code: String = code
            .lines()
            .map(|l| l.split("//").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n");
        let entry = deps.entry(module.clone()).or_default();
        for (i, _) in code.match_indices("crate::") {
            let name: String = code[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if modules.contains(&name) && name != module {
                entry.insert(name);
            }
        }
    }
    assert!(
        !deps["net"].contains("mail"),
        "net names mail: {:?}",
        deps["net"]
    );
    for start in &modules {
        let mut seen = std::collections::BTreeSet::new();
        let mut stack = vec![start.clone()];
        while let Some(m) = stack.pop() {
            for d in deps.get(&m).into_iter().flatten() {
                assert!(
                    d != start,
                    "{start} depends on itself through {m}: {deps:?}"
                );
                if seen.insert(d.clone()) {
                    stack.push(d.clone());
                }
            }
        }
    }
}

/// The local API answers typed views (node/src/api): no op's answer is
/// JSON built by hand, which clients could only read by string keys.
#[test]
fn the_local_api_answers_typed_views_not_json_built_by_hand() {
    for (path, code) in node_sources() {
        // The test modules inside a file (tests.rs files and `mod tests`
        // blocks) build JSON to feed what they test.
        if path.ends_with("tests.rs") || path.contains("/tests/") {
            continue;
        }
        let code = code.split("#[cfg(test)]").next().unwrap_or_default();
        assert!(
            !code.contains("json!("),
            "node/src/{path} builds an answer with json!; give it a view type in node/src/api"
        );
    }
}

/// The CLI and the MCP server read the daemon's answers as the view
/// types of node/src/api, never as untyped JSON read by string keys. What
/// may hold a `serde_json::Value`: editing an agent's own JSON config
/// (`setup/`), and the JSON the CLI itself prints.
#[test]
fn the_cli_reads_the_daemon_as_types_not_untyped_json() {
    let files = sources("cli/src");
    assert!(files.iter().any(|(p, _)| p == "agents/mcp.rs"), "{files:?}");
    for (path, code) in files {
        if path.starts_with("setup/") {
            continue;
        }
        assert!(
            !code.contains("call::<serde_json::Value>") && !code.contains("Value = c"),
            "cli/src/{path} reads a daemon answer as serde_json::Value; read its view type"
        );
        let reads = code.matches("serde_json::Value").count();
        let allowed = match path.as_str() {
            // A string in an MCP result's `meta`, and the one line `watch`
            // prints of its own state.
            "agents/mcp/link.rs" | "watch.rs" => 1,
            _ => 0,
        };
        assert!(
            reads <= allowed,
            "cli/src/{path} holds serde_json::Value {reads} times (at most {allowed}): read the daemon's answers as the view types of node/src/api"
        );
    }
}

/// The docs a newcomer reads must not say a feature the README lists is
/// missing: a sentence that says something "is not built yet" outlives
/// the feature's landing unless something reads it. Every Markdown file
/// at the root and in docs/ (the changelog aside: it is history) is read
/// whole.
#[test]
fn the_docs_do_not_say_a_built_feature_is_missing() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let mut files: Vec<std::path::PathBuf> = vec![format!("{root}/README.md").into()];
    for entry in std::fs::read_dir(format!("{root}/docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    assert!(files.len() > 5, "the docs were not found: {files:?}");
    // What says a feature is absent, and what the carrier made untrue.
    let missing = [
        "not built yet",
        "not yet built",
        "is not built",
        "isn't built",
        "not implemented yet",
        "must be online at the same time",
    ];
    let mut found = vec![];
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        // Lines wrap: a phrase may span two.
        let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
        for phrase in missing {
            if flat.to_lowercase().contains(phrase) {
                found.push(format!("{}: {phrase:?}", path.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "docs that say a feature is missing: {found:#?}"
    );
}

/// Every fuzz target is in docs/fuzzing.md's tables and has a committed
/// corpus with inputs in it, so a campaign starts where the last one
/// stopped and a new decoder's target is not left out of the campaigns.
#[test]
fn every_fuzz_target_is_documented_and_has_a_corpus() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let docs = std::fs::read_to_string(format!("{root}/docs/fuzzing.md")).unwrap();
    let mut seen = 0;
    for krate in ["protocol/fuzz", "fuzz"] {
        let manifest = std::fs::read_to_string(format!("{root}/{krate}/Cargo.toml")).unwrap();
        let manifest: toml::Table = manifest.parse().unwrap();
        let bins = manifest["bin"].as_array().unwrap();
        for bin in bins {
            let name = bin["name"].as_str().unwrap();
            let path = bin["path"].as_str().unwrap();
            assert!(
                std::path::Path::new(&format!("{root}/{krate}/{path}")).is_file(),
                "{krate}: target {name}'s file {path} is missing"
            );
            assert!(
                docs.contains(&format!("| `{name}` |")),
                "docs/fuzzing.md has no row for {krate}'s target {name}"
            );
            let corpus = format!("{root}/{krate}/corpus/{name}");
            let inputs = std::fs::read_dir(&corpus).map_or(0, |d| d.count());
            assert!(
                inputs > 0,
                "{corpus} is empty or missing: run a campaign (docs/fuzzing.md) and commit its corpus"
            );
            seen += 1;
        }
    }
    assert!(seen >= 15, "only {seen} fuzz targets found");
}
